"""A MobileNet-v2 inverted residual block: a 1x1 expansion, BatchNorm + ReLU6, a depthwise 3x3 convolution
(groups = channels), BatchNorm + ReLU6, a 1x1 projection, BatchNorm and the residual add. Capture joins the
expansion's BatchNorm + ReLU6, the depthwise convolution and its BatchNorm + ReLU6 into one chain of five
calls (a depthwise convolution is memory-bound: a window in the generator's IR), which tests/py/test_chains.py
optimizes on the cpu backend and installs inside torch.compile: five eager kernels become one. The ReLU6 is
torchvision's, nn.ReLU6(inplace=True) (aten::hardtanh_): inside a chain each call is its functional overload."""

import torch

BATCH, CHANNELS, EXPAND, SIDE = 2, 8, 4, 12


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        wide = CHANNELS * EXPAND
        self.expand = torch.nn.Conv2d(CHANNELS, wide, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(wide)
        self.dw = torch.nn.Conv2d(wide, wide, 3, padding=1, groups=wide, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(wide)
        self.project = torch.nn.Conv2d(wide, CHANNELS, 1, bias=False)
        self.act = torch.nn.ReLU6(inplace=True)
        self.bn3 = torch.nn.BatchNorm2d(CHANNELS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.bn1(self.expand(x)))
        y = self.act(self.bn2(self.dw(y)))
        return x + self.bn3(self.project(y))


def build() -> Net:
    torch.manual_seed(0)
    net = Net().eval()
    for m in net.modules():  # running statistics and affine parameters away from the identity
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.5, 0.5)
    return net


if __name__ == "__main__":
    model = build()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(BATCH, CHANNELS, SIDE, SIDE))
