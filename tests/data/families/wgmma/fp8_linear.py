"""An fp8 linear as float8 training and inference libraries write it: the activation quantized on the fly
to float8_e4m3fn with a per-tensor scale, the weight stored in fp8 with its own, and torch._scaled_mm writing
bfloat16 (tests/py/test_family_wgmma.py captures it on the CPU and proves the _scaled_mm problem with both
GEMM families)."""

import torch

ROWS, IN, OUT = 48, 96, 80
E4M3_MAX = 448.0


class Fp8Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        w = torch.randn(OUT, IN) / IN ** 0.5
        scale = w.abs().amax() / E4M3_MAX
        self.register_buffer("weight", (w / scale).to(torch.float8_e4m3fn))
        self.register_buffer("weight_scale", scale.float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = x.abs().amax().float().clamp(min=1e-12) / E4M3_MAX
        xq = (x / scale).to(torch.float8_e4m3fn)
        return torch._scaled_mm(xq, self.weight.t(), scale_a=scale, scale_b=self.weight_scale,
                                out_dtype=torch.bfloat16)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Fp8Linear()
    with torch.no_grad():
        y = model(torch.randn(ROWS, IN, dtype=torch.bfloat16))
    print(tuple(y.shape), y.dtype)
