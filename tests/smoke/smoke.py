"""A 10-second end-to-end check of the core path (used on the accelerator machine too)."""
import sys
import torch
import fastdyn


def f(x, y):
    return (x + y) * 2 - 1, x.shape[0]


fj = fastdyn.jit(f)
x, y = torch.randn(4, 3), torch.randn(4, 3)
for _ in range(3):
    got = fj(x, y)
want = f(x, y)
assert torch.equal(got[0], want[0]) and got[1] == want[1], (got, want)
s = fastdyn.stats()
assert s["frames_compiled"] == 1 and s["cache_hits"] == 2, s
print("smoke ok", sys.version.split()[0], torch.__version__, s)
