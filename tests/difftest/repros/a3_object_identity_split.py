# Status: FIXED: passes with the working-tree builds from 08:11 on (failed with the 07:06 build).
# Class A (identity variant): one object built in the frame, appended to a caller-visible list
# AND returned: eager's state.out[0] is the returned object; under fastdyn they are two objects
# from the second call on (the returned one is the first call's constant, with its stale field).
import dataclasses

import torch
from _common import observe


@dataclasses.dataclass
class Rec:
    a: int


def f(x, out):
    r = Rec(int(x.argmax()))
    out.append(r)
    return x.max(), r


observe(f, lambda k: (torch.tensor([0.0, 1.0, 2.0]).roll(k), []),
        lambda r, args, earlier: f"returned r.a={r[1].a}, out[0] is r: {args[1][0] is r[1]}")
