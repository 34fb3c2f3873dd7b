"""Twin of libtorch's cpp/mnist (pytorch/examples cpp/mnist/mnist.cpp), for the port in
examples/pytorch/cpp_mnist: Net (conv 5x5 x2, Dropout2d,
dropout 0.5 by is_training()), SGD lr 0.01 momentum 0.5, nll_loss; 3 steps of 4 images. The
whole model runs in eval mode (its only mode-dependent parts are the two dropouts, whose
masks cannot match). Writes cpp_mnist.safetensors."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import twin_steps as ts


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, p=0.5, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


ts.setup()
config = dict(lr=0.01, momentum=0.5)
model = Net()
spec = ts.hash_init(model)
model.eval()
optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=config["momentum"])
tensors, losses = [], []
for step in range(3):
    data = (torch.rand(4, 1, 28, 28) - 0.1307) / 0.3081
    targets = torch.randint(0, 10, (4,))
    tensors += [(f"step{step}.data", data), (f"step{step}.targets", targets)]
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(output, targets)
    losses.append(loss.item())
    loss.backward()
    optimizer.step()
ts.write("cpp_mnist", model, spec, tensors, losses, config)
