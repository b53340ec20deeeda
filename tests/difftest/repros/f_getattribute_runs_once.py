# Status: FIXED in the working-tree build of 08:57 (failed up to the 08:15 build).
# Class F: a class with its own __getattribute__ (logging every access): eager runs it for each
# attribute read (2 reads of p.n below), fastdyn only once per call: the read after the
# attribute store `p.n = ...` is answered from the trace without running __getattribute__.
import torch
from _common import observe

ACCESS = []


class Spy:
    def __init__(self, n):
        self.n = n

    def __getattribute__(self, name):
        ACCESS.append(name)
        return object.__getattribute__(self, name)


def f(x):
    p = Spy(2)
    p.n = p.n + 1
    return x * p.n


def show(r, args, earlier):
    s = f"result={r.tolist()} __getattribute__ calls={list(ACCESS)}"
    ACCESS.clear()
    return s


observe(f, lambda k: (torch.ones(2) * k,), show)
