# Status: FIXED in the working-tree build of 08:57 (failed up to the 08:15 build).
# Class G: `del name` of a local that is unbound raises UnboundLocalError in eager; under fastdyn
# the compiled frame runs on and returns normally.
import torch
from _common import observe


def f(x):
    if x.shape[0] > 100:
        t = x
    del t
    return x + 1


observe(f, lambda k: (torch.ones(2) * k,), lambda r, args, earlier: f"returned {r.tolist()}" if r is not None else "")
