"""Twin of pytorch/examples' dcgan/main.py, for the port in examples/pytorch/dcgan:
Generator and Discriminator at nz 16, ngf = ndf = 8, nc 1
(64x64 images), Adam lr 2e-4 betas (0.5, 0.999), BCELoss, batch norm in training mode;
2 steps of 2 images. Losses: errD, errG per step. The state dict is that of a holder with
"netG" and "netD". Writes dcgan.safetensors."""
import torch
import torch.nn as nn
import twin_steps as ts

nz, ngf, ndf, nc = 16, 8, 8, 1


class Generator(nn.Module):
    def __init__(self, ngpu):
        super(Generator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh()
        )

    def forward(self, input):
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super(Discriminator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        output = self.main(input)
        return output.view(-1, 1).squeeze(1)


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.netG = Generator(1)
        self.netD = Discriminator(1)


ts.setup()
config = dict(nz=nz, ngf=ngf, ndf=ndf, nc=nc, lr=2e-4, beta1=0.5)
holder = Holder()
spec = ts.hash_init(holder)
holder.train()
netG, netD = holder.netG, holder.netD
criterion = nn.BCELoss()
real_label, fake_label = 1, 0
optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
tensors, losses = [], []
for step in range(2):
    real_cpu = torch.rand(2, nc, 64, 64) * 2 - 1
    noise = torch.randn(2, nz, 1, 1)
    tensors += [(f"step{step}.real", real_cpu), (f"step{step}.noise", noise)]
    netD.zero_grad()
    batch_size = real_cpu.size(0)
    label = torch.full((batch_size,), real_label, dtype=real_cpu.dtype)
    output = netD(real_cpu)
    errD_real = criterion(output, label)
    errD_real.backward()
    fake = netG(noise)
    label.fill_(fake_label)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    errD = errD_real + errD_fake
    optimizerD.step()
    netG.zero_grad()
    label.fill_(real_label)
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    optimizerG.step()
    losses += [errD.item(), errG.item()]
ts.write("dcgan", holder, spec, tensors, losses, config)
