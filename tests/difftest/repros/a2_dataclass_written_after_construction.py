# Status: FIXED: passes with the working-tree builds from 08:11 on (failed with the 07:06 build).
# Class A (dataclass variant): a dataclass instance built in the frame and written after
# construction (`r.a = n`) is a trace-time constant when returned with other graph outputs:
# later calls return the first call's instance, with the first call's tensor.
import dataclasses

import torch
from _common import observe


@dataclasses.dataclass
class Rec:
    a: int
    b: object = None


def f(x):
    r = Rec(3, torch.sin(x))
    r.a = x.shape[0]
    return x + 1, r


observe(f, lambda k: (torch.full((2,), float(k)),),
        lambda r, args, earlier: f"r.b={[round(v, 4) for v in r[1].b.tolist()]}, r is the first call's object: "
                                 f"{bool(earlier) and r[1] is earlier[0][1]}")
