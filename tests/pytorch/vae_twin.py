"""Twin of examples/pytorch/vae (pytorch/examples' vae/main.py): VAE, Adam lr 1e-3, BCE +
KLD summed; 3 steps of 4 images. The reparameterization's noise is drawn here and written
(eps per step): the test's VAE takes it instead of drawing its own. Writes vae.safetensors."""
import torch
from torch import nn
from torch.nn import functional as F
import twin_steps as ts


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()

        self.fc1 = nn.Linear(784, 400)
        self.fc21 = nn.Linear(400, 20)
        self.fc22 = nn.Linear(400, 20)
        self.fc3 = nn.Linear(20, 400)
        self.fc4 = nn.Linear(400, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        eps = torch.randn_like(std)
        return mu + eps*std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


class RecordedNoise(VAE):
    """The original's reparameterize with the noise drawn by the twin (kept in self.eps)."""
    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5*logvar)
        return mu + self.eps*std


ts.setup()
model = RecordedNoise()
spec = ts.hash_init(model)
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
tensors, losses = [], []
for step in range(3):
    data = torch.rand(4, 1, 28, 28)
    model.eps = torch.randn(4, 20)
    tensors += [(f"step{step}.data", data), (f"step{step}.eps", model.eps)]
    optimizer.zero_grad()
    recon_batch, mu, logvar = model(data)
    loss = loss_function(recon_batch, data, mu, logvar)
    losses.append(loss.item())
    loss.backward()
    optimizer.step()
ts.write("vae", model, spec, tensors, losses, {"lr": 1e-3})
