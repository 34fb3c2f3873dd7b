"""Twin of libtorch's cpp/dcgan (pytorch/examples cpp/dcgan/dcgan.cpp), for the port in
examples/pytorch/cpp_dcgan: DCGANGenerator (noise 100)
and the Sequential discriminator, both Adam lr 2e-4 betas (0.5, 0.5), binary cross
entropy, batch norm in training mode; 2 steps of 2 images of 1x28x28. The twin draws the
real labels (uniform in [0.8, 1)) and the noise. Losses: d_loss, g_loss per step. The
state dict is that of a holder with "generator" and "discriminator". Writes cpp_dcgan.safetensors."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import twin_steps as ts

kNoiseSize = 100


class DCGANGenerator(nn.Module):
    def __init__(self, kNoiseSize):
        super().__init__()
        self.conv1 = nn.ConvTranspose2d(kNoiseSize, 256, 4, bias=False)
        self.conv2 = nn.ConvTranspose2d(256, 128, 3, stride=2, padding=1, bias=False)
        self.conv3 = nn.ConvTranspose2d(128, 64, 4, stride=2, padding=1, bias=False)
        self.conv4 = nn.ConvTranspose2d(64, 1, 4, stride=2, padding=1, bias=False)
        self.batch_norm1 = nn.BatchNorm2d(256)
        self.batch_norm2 = nn.BatchNorm2d(128)
        self.batch_norm3 = nn.BatchNorm2d(64)

    def forward(self, x):
        x = torch.relu(self.batch_norm1(self.conv1(x)))
        x = torch.relu(self.batch_norm2(self.conv2(x)))
        x = torch.relu(self.batch_norm3(self.conv3(x)))
        return torch.tanh(self.conv4(x))


def create_discriminator():
    return nn.Sequential(
        nn.Conv2d(1, 64, 4, stride=2, padding=1, bias=False),
        nn.LeakyReLU(0.2),
        nn.Conv2d(64, 128, 4, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(128),
        nn.LeakyReLU(0.2),
        nn.Conv2d(128, 256, 4, stride=2, padding=1, bias=False),
        nn.BatchNorm2d(256),
        nn.LeakyReLU(0.2),
        nn.Conv2d(256, 1, 3, stride=1, padding=0, bias=False),
        nn.Sigmoid())


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.generator = DCGANGenerator(kNoiseSize)
        self.discriminator = create_discriminator()


ts.setup()
config = dict(lr=2e-4, beta1=0.5, beta2=0.5, noise_size=kNoiseSize)
holder = Holder()
spec = ts.hash_init(holder)
holder.train()
generator, discriminator = holder.generator, holder.discriminator
generator_optimizer = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.5))
discriminator_optimizer = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.5))
tensors, losses = [], []
for step in range(2):
    real_images = torch.rand(2, 1, 28, 28) * 2 - 1
    real_labels = torch.empty(2).uniform_(0.8, 1.0)
    noise = torch.randn(2, kNoiseSize, 1, 1)
    tensors += [(f"step{step}.real_images", real_images), (f"step{step}.real_labels", real_labels), (f"step{step}.noise", noise)]
    discriminator.zero_grad()
    real_output = discriminator(real_images).reshape(real_labels.size())
    d_loss_real = F.binary_cross_entropy(real_output, real_labels)
    d_loss_real.backward()
    fake_images = generator(noise)
    fake_labels = torch.zeros(2)
    fake_output = discriminator(fake_images.detach()).reshape(fake_labels.size())
    d_loss_fake = F.binary_cross_entropy(fake_output, fake_labels)
    d_loss_fake.backward()
    d_loss = d_loss_real + d_loss_fake
    discriminator_optimizer.step()
    generator.zero_grad()
    fake_labels.fill_(1)
    fake_output = discriminator(fake_images).reshape(fake_labels.size())
    g_loss = F.binary_cross_entropy(fake_output, fake_labels)
    g_loss.backward()
    generator_optimizer.step()
    losses += [d_loss.item(), g_loss.item()]
ts.write("cpp_dcgan", holder, spec, tensors, losses, config)
