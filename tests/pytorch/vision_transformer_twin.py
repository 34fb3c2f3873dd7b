"""Twin of examples/pytorch/vision_transformer (pytorch/examples' vision_transformer/main.py,
last version before its removal, e8a38cc^): ViT at a reduced size (8x8 images of 1 channel,
patches of 4, latent 16, 2 heads, 2 encoders, batch 4, dropout 0 as dropout's masks cannot
match), Adam lr 1e-2 with weight decay 3e-2, cross entropy; 3 steps. Writes
vision_transformer.safetensors."""
import argparse
import torch
import torch.nn as nn
import twin_steps as ts


class PatchExtractor(nn.Module):
    def __init__(self, patch_size=16):
        super().__init__()
        self.patch_size = patch_size

    def forward(self, input_data):
        batch_size, channels, height, width = input_data.size()
        num_patches_h = height // self.patch_size
        num_patches_w = width // self.patch_size
        num_patches = num_patches_h * num_patches_w
        patches = input_data.unfold(2, self.patch_size, self.patch_size). \
            unfold(3, self.patch_size, self.patch_size). \
            permute(0, 2, 3, 1, 4, 5). \
            contiguous(). \
            view(batch_size, num_patches, -1)
        return patches


class InputEmbedding(nn.Module):
    def __init__(self, args):
        super(InputEmbedding, self).__init__()
        self.patch_size = args.patch_size
        self.n_channels = args.n_channels
        self.latent_size = args.latent_size
        self.batch_size = args.batch_size
        self.input_size = self.patch_size * self.patch_size * self.n_channels
        self.LinearProjection = nn.Linear(self.input_size, self.latent_size)
        self.class_token = nn.Parameter(torch.randn(self.batch_size, 1, self.latent_size))
        self.pos_embedding = nn.Parameter(torch.randn(self.batch_size, 1, self.latent_size))

    def forward(self, input_data):
        patchify = PatchExtractor(patch_size=self.patch_size)
        patches = patchify(input_data)
        linear_projection = self.LinearProjection(patches)
        b, n, _ = linear_projection.shape
        linear_projection = torch.cat((self.class_token, linear_projection), dim=1)
        pos_embed = self.pos_embedding[:, :n + 1, :]
        linear_projection += pos_embed
        return linear_projection


class EncoderBlock(nn.Module):
    def __init__(self, args):
        super(EncoderBlock, self).__init__()
        self.latent_size = args.latent_size
        self.num_heads = args.num_heads
        self.dropout = args.dropout
        self.norm = nn.LayerNorm(self.latent_size)
        self.attention = nn.MultiheadAttention(self.latent_size, self.num_heads, dropout=self.dropout)
        self.enc_MLP = nn.Sequential(
            nn.Linear(self.latent_size, self.latent_size * 4),
            nn.GELU(),
            nn.Dropout(self.dropout),
            nn.Linear(self.latent_size * 4, self.latent_size),
            nn.Dropout(self.dropout)
        )

    def forward(self, emb_patches):
        first_norm = self.norm(emb_patches)
        attention_out = self.attention(first_norm, first_norm, first_norm)[0]
        first_added = attention_out + emb_patches
        second_norm = self.norm(first_added)
        mlp_out = self.enc_MLP(second_norm)
        output = mlp_out + first_added
        return output


class ViT(nn.Module):
    def __init__(self, args):
        super(ViT, self).__init__()
        self.num_encoders = args.num_encoders
        self.latent_size = args.latent_size
        self.num_classes = args.num_classes
        self.dropout = args.dropout
        self.embedding = InputEmbedding(args)
        self.encoders = nn.ModuleList([EncoderBlock(args) for _ in range(self.num_encoders)])
        self.MLPHead = nn.Sequential(
            nn.LayerNorm(self.latent_size),
            nn.Linear(self.latent_size, self.latent_size),
            nn.Linear(self.latent_size, self.num_classes),
        )

    def forward(self, test_input):
        enc_output = self.embedding(test_input)
        for enc_layer in self.encoders:
            enc_output = enc_layer(enc_output)
        class_token_embed = enc_output[:, 0]
        return self.MLPHead(class_token_embed)


ts.setup()
config = dict(patch_size=4, latent_size=16, n_channels=1, num_heads=2, num_encoders=2, dropout=0.0,
              num_classes=10, batch_size=4, img_size=8, lr=1e-2, weight_decay=3e-2)
args = argparse.Namespace(**config)
model = ViT(args)
spec = ts.hash_init(model)
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
criterion = nn.CrossEntropyLoss()
tensors, losses = [], []
for step in range(3):
    images = torch.rand(args.batch_size, args.n_channels, args.img_size, args.img_size)
    labels = torch.randint(0, args.num_classes, (args.batch_size,))
    tensors += [(f"step{step}.images", images), (f"step{step}.labels", labels)]
    optimizer.zero_grad()
    loss = criterion(model(images), labels)
    losses.append(loss.item())
    loss.backward()
    optimizer.step()
ts.write("vision_transformer", model, spec, tensors, losses, config)
