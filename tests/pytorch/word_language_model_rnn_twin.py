"""Twin of pytorch/examples' word_language_model RNNModel (model.py) with main.py's training
step, for the port in examples/pytorch/word_language_model (test_word_language_model.cpp):
LSTM, ntoken 20, ninp = nhid = 8, 2 layers, tied weights (decoder.weight is
encoder.weight), dropout 0 (its masks cannot match); sequences of 5 tokens, batch 3, the
hidden state carried (repackaged) from step to step; 3 steps of clip_grad_norm_ 0.25 and p -= lr * grad, lr 20.
Writes word_language_model_rnn.safetensors."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import twin_steps as ts


class RNNModel(nn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


ts.setup()
config = dict(model="LSTM", ntoken=20, ninp=8, nhid=8, nlayers=2, dropout=0.0, tied=True, lr=20.0, clip=0.25, batch_size=3)
model = RNNModel(config["model"], config["ntoken"], config["ninp"], config["nhid"], config["nlayers"], config["dropout"], config["tied"])
spec = ts.hash_init(model)
model.train()
criterion = nn.NLLLoss()
lr = config["lr"]
hidden = model.init_hidden(config["batch_size"])
tensors, losses = [], []
for step in range(3):
    data = torch.randint(0, config["ntoken"], (5, config["batch_size"]))
    targets = torch.randint(0, config["ntoken"], (5 * config["batch_size"],))
    tensors += [(f"step{step}.data", data), (f"step{step}.targets", targets)]
    model.zero_grad()
    hidden = repackage_hidden(hidden)
    output, hidden = model(data, hidden)
    loss = criterion(output, targets)
    losses.append(loss.item())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), config["clip"])
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
ts.write("word_language_model_rnn", model, spec, tensors, losses, config)
