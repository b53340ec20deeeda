# Status: FIXED (capture refuses a write that partially overlaps what it reads: codegen/capture/capture.cpp).
# Class D: an in-place op that eager rejects (its operand overlaps the written tensor) raises the
# same RuntimeError under fastdyn, but the traceback's last frame names the NEXT line of the
# graph (line 10 instead of 9): the error surfaces when the graph runs, not at the op.
import torch
from _common import observe


def f(x, y):
    y.sub_(y.t())                  # eager raises here (line 9)
    x.sub_(y)                      # fastdyn reports this line (10)


observe(f, lambda k: (torch.ones(2, 2), torch.arange(4.).reshape(2, 2)), lambda r, args, earlier: "")
