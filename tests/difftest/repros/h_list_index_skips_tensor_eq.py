# Status: FIXED (passes at this commit; see issue 18's notes for the fix).
# Class H: list.index() on a list holding a tensor: eager compares the searched value with each
# element (`tensor == 1` is a tensor, whose truth value is ambiguous: RuntimeError); under
# fastdyn the call returns an index without comparing, and the frame runs on.
import torch
from _common import observe


def f(x):
    l = [x * 2, 'ccc', 1]
    i = l.index(l[-1])
    return x + i


observe(f, lambda k: (torch.ones(2, 2) * k,), lambda r, args, earlier: f"returned {r.tolist()}" if r is not None else "")
