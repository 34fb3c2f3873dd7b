"""Twin of examples/pytorch/word_language_model's TransformerModel (pytorch/examples'
word_language_model/model.py and main.py's training step): ntoken 20, ninp 8, nhead 2,
nhid 16, nlayers 2; sequences of 5 tokens, batch 3; 3 steps of main.py's step
(clip_grad_norm_ 0.25, then p -= lr * grad with lr 20). Dropout modules and the attention's
dropout run in eval mode (their masks cannot match). The positional encoding is computed in
float32 as the original, so ember's sin and cos (within an ulp of PyTorch's, not equal)
would differ by 1e-7: the twin writes its pe buffer ("buffer.pos_encoder.pe") and the test
starts from it. Writes word_language_model_transformer.safetensors."""
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import twin_steps as ts


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
        self.model_type = 'Transformer'
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None

        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


ts.setup()
config = dict(ntoken=20, ninp=8, nhead=2, nhid=16, nlayers=2, dropout=0.2, lr=20.0, clip=0.25)
model = TransformerModel(config["ntoken"], config["ninp"], config["nhead"], config["nhid"], config["nlayers"], config["dropout"])
spec = ts.hash_init(model)
pe = model.pos_encoder.pe.clone()
model.train()
for m in model.modules():
    if isinstance(m, (nn.Dropout, nn.MultiheadAttention)):
        m.eval()
criterion = nn.NLLLoss()
lr = config["lr"]
tensors, losses = [("buffer.pos_encoder.pe", pe)], []
for step in range(3):
    data = torch.randint(0, config["ntoken"], (5, 3))
    targets = torch.randint(0, config["ntoken"], (15,))
    tensors += [(f"step{step}.data", data), (f"step{step}.targets", targets)]
    model.zero_grad()
    output = model(data)
    output = output.view(-1, config["ntoken"])
    loss = criterion(output, targets)
    losses.append(loss.item())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config["clip"])
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
ts.write("word_language_model_transformer", model, spec, tensors, losses, config)
