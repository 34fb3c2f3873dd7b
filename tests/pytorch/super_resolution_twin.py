"""Twin of pytorch/examples' super_resolution (model.py's Net, main.py's step), for the port
in examples/pytorch/super_resolution: upscale factor 3,
Adam lr 0.01, MSELoss; 3 steps of 2 images of 1x8x8 -> 1x24x24. Writes super_resolution.safetensors."""
import torch
import torch.nn as nn
import torch.nn.init as init
import twin_steps as ts


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 64, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(64, 64, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(64, 32, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(32, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv2.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv3.weight, init.calculate_gain('relu'))
        init.orthogonal_(self.conv4.weight)


ts.setup()
config = dict(upscale_factor=3, lr=0.01)
model = Net(upscale_factor=config["upscale_factor"])
spec = ts.hash_init(model)
criterion = nn.MSELoss()
optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
tensors, losses = [], []
for step in range(3):
    input = torch.rand(2, 1, 8, 8)
    target = torch.rand(2, 1, 24, 24)
    tensors += [(f"step{step}.input", input), (f"step{step}.target", target)]
    optimizer.zero_grad()
    loss = criterion(model(input), target)
    losses.append(loss.item())
    loss.backward()
    optimizer.step()
ts.write("super_resolution", model, spec, tensors, losses, config)
