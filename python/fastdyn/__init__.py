"""fastdyn: a native JIT that makes unmodified PyTorch programs fast.

    import fastdyn
    fastdyn.enable()          # every Python frame of the process is a candidate
    @fastdyn.jit              # or opt in per function / nn.Module
    fastdyn.explain(f, *args) # graphs, breaks, guards

This package is the public surface only; the interpreter, guards, bytecode assembly and code
generation are C++ in fastdyn._C.
"""
import torch  # noqa: F401  (loads libtorch before _C, which links against it)

from . import _C
from .api import (
    GraphBreakError,
    ExplainOutput,
    enable,
    disable,
    jit,
    mark_dynamic,
    explain,
    stats,
    reset,
    skip,
    synchronize,
    set_background_compile,
    set_recompile_limit,
    recompile_limit,
)

__all__ = [
    "GraphBreakError", "ExplainOutput", "enable", "disable", "jit", "mark_dynamic", "explain", "stats",
    "reset", "skip", "synchronize", "set_background_compile", "set_recompile_limit", "recompile_limit",
]
__version__ = "0.1.0"
