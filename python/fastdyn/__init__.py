"""fastdyn: a native JIT that makes unmodified PyTorch programs fast.

    import fastdyn
    fastdyn.enable()          # every Python frame of the process is a candidate
    @fastdyn.jit              # or opt in per function / nn.Module
    fastdyn.explain(f, *args) # graphs, breaks, guards
    fastdyn.report("out.html")  # after fastdyn.start_report() or FASTDYN_REPORT: the HTML report

This package is the public surface only; the interpreter, guards, bytecode assembly and code
generation are C++ in fastdyn._C.
"""
import torch  # noqa: F401  (loads libtorch before _C, which links against it)

from . import _C


def _register_nvidia_libraries():
    """NVRTC for the cuda backend: the nvidia-cuda-nvrtc wheel that a CUDA build of torch depends
    on installs it outside the loader's path; tell the native side where (it loads it only when a
    graph on a GPU first compiles)."""
    import importlib.util
    import os
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cuda_nvrtc", "cu12"):
            lib = os.path.join(root, sub, "lib")
            if os.path.isdir(lib):
                _C.cuda_add_library_dir(lib)


_register_nvidia_libraries()
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
from ._report import report, start_report, stop_report

_report.install_from_environment()  # FASTDYN_REPORT=out.html: record, write at exit

__all__ = [
    "GraphBreakError", "ExplainOutput", "enable", "disable", "jit", "mark_dynamic", "explain", "stats",
    "reset", "skip", "synchronize", "set_background_compile", "set_recompile_limit", "recompile_limit",
    "report", "start_report", "stop_report",
]
__version__ = "0.1.0"
