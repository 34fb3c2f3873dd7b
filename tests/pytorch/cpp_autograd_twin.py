"""Twin of examples/pytorch/cpp_autograd (libtorch's cpp/autograd): the gradient penalty on
Linear(4, 3) (create_graph=True, as the original's comment intends) trained 3 SGD steps
(lr 0.1) on the combined loss, input.grad recorded per step; and the custom functions
LinearFunction and MulConstant's gradients. Writes cpp_autograd.safetensors."""
import torch
import twin_steps as ts


class LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, bias=None):
        ctx.save_for_backward(input, weight, bias)
        output = input.mm(weight.t())
        if bias is not None:
            output += bias.unsqueeze(0).expand_as(output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, bias = ctx.saved_tensors
        grad_bias = grad_output.sum(0) if bias is not None else None
        return grad_output.mm(weight), grad_output.t().mm(input), grad_bias


class MulConstant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, constant):
        ctx.constant = constant
        return tensor * constant

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output * ctx.constant, None


ts.setup()
model = torch.nn.Linear(4, 3)
spec = ts.hash_init(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
tensors, losses = [], []
for step in range(3):
    input = torch.randn(3, 4).requires_grad_(True)
    target = torch.randn(3, 3)
    optimizer.zero_grad()
    output = model(input)
    loss = torch.nn.MSELoss()(output, target)
    grad_output = torch.ones_like(output)
    gradient = torch.autograd.grad([output], [input], [grad_output], create_graph=True)[0]
    gradient_penalty = torch.pow((gradient.norm(2, dim=1) - 1), 2).mean()
    combined_loss = loss + gradient_penalty
    losses.append(combined_loss.item())
    combined_loss.backward()
    optimizer.step()
    tensors += [(f"step{step}.input", input), (f"step{step}.target", target), (f"step{step}.input_grad", input.grad)]

x, weight, bias = torch.randn(2, 3).requires_grad_(), torch.randn(4, 3).requires_grad_(), torch.randn(4).requires_grad_()
LinearFunction.apply(x, weight, bias).pow(2).sum().backward()
c = torch.randn(2).requires_grad_()
MulConstant.apply(c, 5.5).pow(2).sum().backward()
tensors += [("linear.x", x), ("linear.weight", weight), ("linear.bias", bias), ("linear.x_grad", x.grad),
            ("linear.weight_grad", weight.grad), ("linear.bias_grad", bias.grad), ("mul.x", c), ("mul.x_grad", c.grad)]
ts.write("cpp_autograd", model, spec, tensors, losses, {"lr": 0.1})
