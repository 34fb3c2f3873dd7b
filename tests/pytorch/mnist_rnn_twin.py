"""Twin of pytorch/examples' mnist_rnn/main.py, for the port in examples/pytorch/mnist_rnn
(test_mnist.cpp): Net (LSTM 28 -> 64 batch_first, BatchNorm1d in training mode,
Dropout2d, two Linear), Adadelta lr 0.1 with StepLR(1, 0.7) stepped after each step (the
original: per epoch), nll_loss; 3 steps of 4 images. Dropout2d runs in eval mode (its
masks cannot match). Writes mnist_rnn.safetensors."""
import torch
import torch.nn as nn
import torch.nn.functional as F
import twin_steps as ts


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=64, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(64)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        input = input.reshape(-1, 28, 28)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        output = F.log_softmax(output, dim=1)
        return output


ts.setup()
config = dict(lr=0.1, gamma=0.7)
model = Net()
spec = ts.hash_init(model)
model.train()
ts.dropout_eval(model)
optimizer = torch.optim.Adadelta(model.parameters(), lr=config["lr"])
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=config["gamma"])
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
ts.write("mnist_rnn", model, spec, tensors, losses, config)
