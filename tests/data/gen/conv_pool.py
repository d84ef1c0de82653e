"""A ResNet-style stem and a DenseNet-style transition as torchvision writes them: a convolution, ReLU, 3x3/2 max
pooling, then a 1x1 convolution and 2x2 average pooling. Each pool is one problem (aten::max_pool2d,
aten::avg_pool2d) that a convolution writes."""

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.trans = nn.Conv2d(8, 8, 1, bias=False)
        self.down = nn.AvgPool2d(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.trans(self.pool(torch.relu(self.stem(x)))))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Net().eval()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(2, 3, 16, 16))
