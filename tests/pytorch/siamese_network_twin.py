"""Twin of examples/pytorch/siamese_network (pytorch/examples' siamese_network/main.py):
SiameseNetwork on torchvision's ResNet-18, pairs of 4 images of 1x28x28 (pixels in [0, 255]
as the original's), batch norm in training mode, Adadelta lr 1.0 with StepLR(1, 0.7)
stepped after each step (the original: per epoch), BCELoss; 2 steps. Writes
siamese_network.safetensors."""
import torch
import torch.nn as nn
import twin_steps as ts
import torchvision_resnet


class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        self.resnet = torchvision_resnet.resnet18()
        self.resnet.conv1 = nn.Conv2d(1, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)
        self.fc_in_features = self.resnet.fc.in_features
        self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))
        self.fc = nn.Sequential(
            nn.Linear(self.fc_in_features * 2, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, 1),
        )
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        output = output.view(output.size()[0], -1)
        return output

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output = torch.cat((output1, output2), 1)
        output = self.fc(output)
        output = self.sigmoid(output)
        return output


ts.setup()
config = dict(lr=1.0, gamma=0.7)
model = SiameseNetwork()
spec = ts.hash_init(model)
model.train()
optimizer = torch.optim.Adadelta(model.parameters(), lr=config["lr"])
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=config["gamma"])
criterion = nn.BCELoss()
tensors, losses = [], []
for step in range(2):
    images_1 = torch.floor(torch.rand(4, 1, 28, 28) * 256)
    images_2 = torch.floor(torch.rand(4, 1, 28, 28) * 256)
    targets = torch.tensor([1.0, 0.0, 1.0, 0.0])
    tensors += [(f"step{step}.images_1", images_1), (f"step{step}.images_2", images_2), (f"step{step}.targets", targets)]
    optimizer.zero_grad()
    outputs = model(images_1, images_2).squeeze()
    loss = criterion(outputs, targets)
    losses.append(loss.item())
    loss.backward()
    optimizer.step()
    scheduler.step()
ts.write("siamese_network", model, spec, tensors, losses, config)
