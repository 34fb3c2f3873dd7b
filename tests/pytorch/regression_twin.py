"""Twin of examples/pytorch/regression (libtorch's cpp/regression): Linear(4, 1) on the
polynomial features, SGD lr 0.1, smooth L1, 4 steps of 32 points. Writes regression.safetensors."""
import torch
import twin_steps as ts

POLY_DEGREE = 4


def make_features(x):
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x, W_target, b_target):
    return x.mm(W_target) + b_target.item()


ts.setup()
W_target = torch.randn(POLY_DEGREE, 1) * 5
b_target = torch.randn(1) * 5
fc = torch.nn.Linear(W_target.size(0), 1)
spec = ts.hash_init(fc)
optim = torch.optim.SGD(fc.parameters(), lr=0.1)
tensors, losses = [("W_target", W_target), ("b_target", b_target)], []
for step in range(4):
    random = torch.randn(32)
    tensors.append((f"step{step}.random", random))
    batch_x = make_features(random)
    batch_y = f(batch_x, W_target, b_target)
    optim.zero_grad()
    output = torch.nn.functional.smooth_l1_loss(fc(batch_x), batch_y)
    losses.append(output.item())
    output.backward()
    optim.step()
ts.write("regression", fc, spec, tensors, losses, {"lr": 0.1})
