"""Twin of examples/pytorch/mnist (pytorch/examples' mnist/main.py): Net, Adadelta lr 1.0,
StepLR(step_size=1, gamma=0.7) stepped after every step (the original steps it per epoch),
nll_loss; 3 steps of 4 images. Dropout runs in eval mode (ts.dropout_eval). Writes mnist.safetensors."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import twin_steps as ts


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


ts.setup()
model = Net()
spec = ts.hash_init(model)
model.train()
ts.dropout_eval(model)
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
tensors, losses = [], []
for step in range(3):
    data = (torch.rand(4, 1, 28, 28) - 0.1307) / 0.3081
    target = torch.randint(0, 10, (4,))
    tensors += [(f"step{step}.data", data), (f"step{step}.target", target)]
    optimizer.zero_grad()
    output = model(data)
    loss = F.nll_loss(output, target)
    losses.append(loss.item())
    loss.backward()
    optimizer.step()
    scheduler.step()
ts.write("mnist", model, spec, tensors, losses, {"lr": 1.0, "gamma": 0.7})
