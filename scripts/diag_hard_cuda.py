"""Device diagnostic: which constants eager's CUDA hardsigmoid/hardswish backward kernels use in float64."""
import torch
import torch.nn.functional as F
x = (torch.randn(4096, dtype=torch.float64, device="cuda") * 4).requires_grad_()
g = torch.randn(4096, dtype=torch.float64, device="cuda")
(gs,) = torch.autograd.grad(F.hardsigmoid(x), x, g)
(gw,) = torch.autograd.grad(F.hardswish(x), x, g)
xd, m = x.detach(), (x.detach() > -3) & (x.detach() < 3)
f6, f3 = float(torch.tensor(1 / 6, dtype=torch.float32)), float(torch.tensor(1 / 3, dtype=torch.float32))
for name, c in {"g/6": torch.where(m, g / 6, 0), "g*(1/6)": torch.where(m, g * (1 / 6), 0), "g*f(1/6)": torch.where(m, g * f6, 0)}.items():
    print("hardsigmoid", name, (gs - c).abs().max().item())
mid = {"x/3+.5": xd / 3 + 0.5, "x*(1/3)+.5": xd * (1 / 3) + 0.5, "x*f(1/3)+.5": xd * f3 + 0.5}
for name, v in mid.items():
    c = torch.where(xd < -3, 0.0, torch.where(xd <= 3, g * v, g))
    print("hardswish", name, (gw - c).abs().max().item())
