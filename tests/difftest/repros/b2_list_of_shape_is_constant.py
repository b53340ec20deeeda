# Status: FIXED (passes at this commit; see issue 18's notes for the fix).
# Class B (variant): `list(x.shape)` is baked into the compiled code as a constant list; the
# program's `del l[0]` mutates the shared constant, so a later call sees a shorter list (here:
# IndexError on the third call where eager never fails).
import torch
from _common import observe


def f(x):
    l = list(x.shape)
    del l[0]
    return x + len(l), l


observe(f, lambda k: (torch.ones(2, 2) * k,), lambda r, args, earlier: f"l={r[1]}" if r is not None else "")
