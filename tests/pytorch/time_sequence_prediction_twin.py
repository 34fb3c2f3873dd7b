"""Twin of pytorch/examples' time_sequence_prediction (train.py's Sequence of two LSTMCells
and a Linear, float64 as the original), for the port in examples/pytorch/
time_sequence_prediction (test_time_sequence_prediction.cpp): LBFGS lr 0.8 (its default 20
iterations per step), MSELoss, 1 step on 3 sine waves of 8 points (generate_sine_wave.py's
formula with T = 20, shifts drawn here); then a prediction 5 points into the future.
Losses: every closure evaluation, in order. Writes time_sequence_prediction.safetensors."""
import numpy as np
import torch
import torch.nn as nn
import twin_steps as ts


class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


ts.setup()
np.random.seed(0)
T, L, N = 20, 9, 3
x = np.empty((N, L), 'int64')
x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
data = np.sin(x / 1.0 / T).astype('float64')
input = torch.from_numpy(data[:, :-1])
target = torch.from_numpy(data[:, 1:])
config = dict(lr=0.8, future=5)
seq = Sequence()
seq.double()
spec = ts.hash_init(seq)
criterion = nn.MSELoss()
optimizer = torch.optim.LBFGS(seq.parameters(), lr=config["lr"])
losses = []
for i in range(1):
    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        losses.append(loss.item())
        loss.backward()
        return loss
    optimizer.step(closure)
with torch.no_grad():
    pred = seq(input, future=config["future"])
ts.write("time_sequence_prediction", seq, spec, [("input", input), ("target", target), ("pred", pred)], losses, config)
