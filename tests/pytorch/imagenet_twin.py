"""Twin of examples/pytorch/imagenet (pytorch/examples' imagenet/main.py, --arch resnet18):
torchvision's ResNet-18 with 10 classes at full width on 4 images of 3x32x32 (the input is
reduced, the model is not), batch norm in training mode, SGD lr 0.1 momentum 0.9 weight
decay 1e-4, cross entropy; 2 steps. Writes imagenet.safetensors."""
import torch
import torch.nn as nn
import twin_steps as ts
from torchvision_resnet import resnet18

ts.setup()
config = dict(num_classes=10, lr=0.1, momentum=0.9, weight_decay=1e-4)
model = resnet18(num_classes=config["num_classes"])
spec = ts.hash_init(model)
model.train()
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), config["lr"], momentum=config["momentum"], weight_decay=config["weight_decay"])
tensors, losses = [], []
for step in range(2):
    images = torch.randn(4, 3, 32, 32)
    target = torch.randint(0, config["num_classes"], (4,))
    tensors += [(f"step{step}.images", images), (f"step{step}.target", target)]
    output = model(images)
    loss = criterion(output, target)
    losses.append(loss.item())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
ts.write("imagenet", model, spec, tensors, losses, config)
