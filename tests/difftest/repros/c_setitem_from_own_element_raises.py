# Status: FIXED at d8ece0e (a 0-dim value of another shape is written with fill_, as eager does).
# Class C: item assignment from an element of the same tensor (`x[0] = x[0, 0]`: eager copies
# the 0-dim value into row 0) raises RuntimeError "unsupported operation: some elements of the
# input tensor and the written-to tensor refer to a single memory location" under fastdyn, and x
# is left unmodified. Same for a local (`t = y.relu(); t[0] = t[0, 0]`) and `x[:, 0] += x[0, 0]`.
import torch
from _common import observe


def f(x):
    x[0] = x[0, 0]
    return x


observe(f, lambda k: (torch.arange(4.).reshape(2, 2) + k,), lambda r, args, earlier: f"x after={args[0].tolist()}")
