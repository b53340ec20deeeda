# Status: FIXED: passes with the working-tree builds from 08:11 on (failed with the 07:06 build).
# Class A (lifetime variant): the object a compiled frame built and returned stays alive after
# the caller dropped it: the cache entry holds it (eager frees it at once).
import gc
import weakref

import torch
import fastdyn


class Box:
    def __init__(self, v):
        self.v = v


def f(x):
    o = Box(x * 2)
    return o, x + 1


runs = {}
for mode in ("eager", "fastdyn"):
    fastdyn.reset()
    freed = []
    for k in range(3):
        if mode == "fastdyn":
            fastdyn.enable()
        try:
            o, _ = f(torch.ones(2) * k)
        finally:
            fastdyn.disable()
        ref = weakref.ref(o)
        del o
        gc.collect()
        freed.append(ref() is None)
    runs[mode] = freed
    print(f"{mode:8s} returned object freed after the caller dropped it: {freed}")
print("same" if runs["eager"] == runs["fastdyn"] else "MISMATCH")
