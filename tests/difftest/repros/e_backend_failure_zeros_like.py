# Status: FIXED (passes at this commit; see issue 18's notes for the fix).
# Class E: a compiler failure that fastdyn hides by running the graph on aten instead (the
# results stay right, but fastdyn.stats()['backend_failures'] > 0; FASTDYN_LOG=code shows it):
#   llvm_cpu failed, running on aten: aten backend: node '%2: f32[2, 2]{2, 1} =
#   aten::zeros_like(%1, ...)': uses %1 before it is defined
# zeros_like of an intermediate whose values nothing else uses (also `x.sub_(zeros_like(t))`,
# `t9.add_(zeros_like(y @ x))`): the graph handed to the backend refers to a node it no longer
# defines.
import torch
import fastdyn


def f(y):
    t = y.cos()
    return torch.zeros_like(t) + 2.0


fastdyn.set_background_compile(False)
fastdyn.reset()
fastdyn.enable()
try:
    out = f(torch.ones(2, 2))
finally:
    fastdyn.disable()
fastdyn.synchronize()
print("result", out.tolist(), "(eager: [[2.0, 2.0], [2.0, 2.0]])")
n = fastdyn.stats().get("backend_failures")
print("backend_failures:", n, "(expected 0)")
print("MISMATCH" if n else "same")
