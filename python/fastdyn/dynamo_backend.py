"""torch.compile(model, backend="fastdyn"): Dynamo captures the program, fastdyn compiles its graphs.

Dynamo hands a backend each graph it captured as an FX GraphModule, whose generated `forward` is
straight-line torch code (Dynamo already removed the Python around it). fastdyn traces that code
with its own symbolic interpreter into one graph per GraphModule and compiles it with its own
code generators (llvm_cpu on the CPU, cuda on NVIDIA GPUs), with its guards, tiers and caches,
exactly as `fastdyn.jit` compiles any function. Dynamo's guards decide which GraphModule runs;
fastdyn's guard the inputs again (a GraphModule Dynamo made with dynamic sizes meets several
sizes, which fastdyn's automatic dynamic covers), so each GraphModule costs one fastdyn compile.

The package registers this backend under the name "fastdyn" in the `torch_dynamo_backends` entry
point group (setup.py), so `torch.compile(m, backend="fastdyn")` finds it without `import
fastdyn`. fastdyn's own PEP 523 hook (`fastdyn.enable()`) stays on across torch.compile calls:
Dynamo puts back the frame evaluator it found when it leaves a compiled region, and fastdyn.jit
reinstalls fastdyn's where a region left the default one (eval_hook::reassert).
"""
from . import api


def fastdyn_backend(gm, example_inputs, **kwargs):
    """A Dynamo backend: returns the callable that runs `gm` compiled by fastdyn. Keyword arguments
    are fastdyn.jit's (backend, fullgraph, dynamic, mode), for `functools.partial` or
    `torch.compile(..., backend=lambda gm, ex: fastdyn_backend(gm, ex, mode="reduce-overhead"))`."""
    del example_inputs  # fastdyn reads the inputs of the first call itself
    return api.jit(gm.forward, **kwargs)
