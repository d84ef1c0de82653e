"""A DenseNet-style block as torchvision writes it: every layer reads the cat of all earlier feature maps through
batch norm and ReLU, and the block's output is the cat of 25 (DenseNet-121's third block joins 25 maps). Each
cat -> batch_norm -> relu is one chain whose inputs are the maps joined and the norm's four tensors."""

import torch
from torch import nn

LAYERS, C0, GROWTH = 24, 8, 4


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norms = nn.ModuleList(nn.BatchNorm2d(C0 + i * GROWTH) for i in range(LAYERS + 1))
        self.convs = nn.ModuleList(nn.Conv2d(C0 + i * GROWTH, GROWTH, 1, bias=False) for i in range(LAYERS))
        for n in self.norms:  # running statistics away from 0 and 1, as a trained model's
            n.running_mean.uniform_(-0.5, 0.5)
            n.running_var.uniform_(0.5, 2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for norm, conv in zip(self.norms, self.convs):
            feats.append(conv(torch.relu(norm(torch.cat(feats, 1)))))
        return torch.relu(self.norms[-1](torch.cat(feats, 1)))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Block().eval()
    with torch.inference_mode():
        for _ in range(2):
            model(torch.randn(2, C0, 6, 6))
