"""CUDA graphs for mode="reduce-overhead" (jit and enable): the Python half.

runtime/cuda_graph_executable.h wraps a compiled graph's executable on CUDA tensors; the wrapper
runs under the entry's guards (a call reaches it only when they hold) and hands each call to a
Runner here, which owns the torch.cuda.CUDAGraph. Per Runner (one graph at one set of sizes):

- warm-up: the first WARMUP calls run the executable as compiled, on the capture stream (a
  stream's first cuBLAS call cannot be captured: it sets up that stream's workspace; on an H200 a
  capture whose matmul was the stream's first failed). They also classify the inputs: an input passed at the same
  address at every warm-up call (parameters, buffers, a preallocated cache) is read in place by
  the graph; any other input is copied into a static buffer before each replay. An input the
  graph writes (its version moves) must be read in place: the user's tensor is what it mutates.
- capture: on that side stream, into the Family's memory pool (one pool per compiled entry,
  shared by its sizes: their graphs never run concurrently), in thread-local capture mode (the
  background compiler, or the user's other threads, may call CUDA meanwhile), with the garbage
  collector off and kernels unloaded meanwhile left loaded until the capture ends (an unload
  invalidates a capture: runtime/cuda/cuda_api.h).
- cuBLAS's workspaces are cleared around each capture (as inductor's cudagraph trees do), so a
  captured matmul's workspace is allocated inside the capture, from the graph's pool. Captured
  with the workspace that the warm-up left for the stream (ordinary memory), a graph kept using
  that memory after anything else cleared the workspaces (torch.compile's reduce-overhead does,
  around each of its recordings) and the allocator gave it away: a replay then read or wrote
  freed memory (an H200 run of bench/gpu_kernels.py --ro failed with "unspecified launch
  failure" in GPT-2's replay). Clearing them frees the workspace of a graph someone else captured
  the same way, as torch.compile's clearing does.
- replay: copy the moving inputs in, check the in-place inputs are still where they were (else
  this call runs the compiled executable and a later call captures again), replay, and return
  fresh outputs (clones): a later replay never overwrites a tensor the user holds.
- moves are counted per input: one that came at a new address twice, and that the graph does not
  write, is copied in from the next capture on; inputs that stayed put stay read in place. (A
  static KV cache made anew per generate() is written by the graph, so each new cache is a new
  capture; the weights beside it never move and are never copied. Copying every input after two
  moves, as before, copied the weights at every decode step: 41 copies per step on a 4-layer
  Llama.)

A graph is not captured when it draws random numbers (the capture call would draw them twice and
leave the generator where eager does not), when an input lives off the GPU or on another GPU than the others, when
an output aliases an input or another output (clones would break the aliasing), or when capture
fails (an op that synchronises, e.g. nonzero); the executable then runs as compiled, and the
reason is logged (FASTDYN_LOG=code) and kept in stats()['cuda_graph_skipped'].
"""
import contextlib
import gc

import torch

WARMUP = 2

_stats = {"cuda_graph_captures": 0, "cuda_graph_replays": 0, "cuda_graph_skipped": 0, "cuda_graph_recaptures": 0,
          "cuda_graph_input_copies": 0}


def stats():
    return dict(_stats)


def reset_stats():
    for k in _stats:
        _stats[k] = 0


_side_streams = {}


def _side_stream(device):
    # Warm-up and capture stream, one per device: each new stream gets cuBLAS a workspace of its
    # own (tens of MB).
    if device not in _side_streams:
        _side_streams[device] = torch.cuda.Stream(device)
    return _side_streams[device]


def _on_capture_stream(fn, inputs):
    """fn(*inputs) on the capture stream of the inputs' GPU, ordered after the caller's stream's
    work so far and before its next: PyTorch's recommended warm-up before a capture."""
    devices = {t.device for t in inputs}
    if len(devices) != 1 or next(iter(devices)).type != "cuda":
        return fn(*inputs)
    device = next(iter(devices))
    with torch.cuda.device(device):
        current = torch.cuda.current_stream()
        side = _side_stream(device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            out = fn(*inputs)
        current.wait_stream(side)
    return out


@contextlib.contextmanager
def capturing(graph, pool, stream):
    """torch.cuda.graph(graph, pool, stream) as fastdyn captures: thread-local capture mode, no
    garbage collection, kernels unloaded meanwhile kept loaded until the end (module docstring).
    NB: `stream` is of the graph's device: torch.cuda.graph's default capture stream is made once,
    on whichever device was current then, and a capture on it would record none of this device's
    work."""
    from fastdyn import _C
    collecting = gc.isenabled()
    gc.disable()
    _C.cuda_begin_graph_capture()
    # cuBLAS's workspace for this stream is made inside the capture, so it comes from the graph's
    # pool and lives as long as the graph (module docstring).
    torch._C._cuda_clearCublasWorkspaces()
    try:
        with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
            yield
    finally:
        torch._C._cuda_clearCublasWorkspaces()
        _C.cuda_end_graph_capture()
        if collecting:
            gc.enable()


def _log(message):
    from fastdyn import _C
    _C.log_code(message)


class Family:
    """The CUDA graphs of one compiled entry: one per set of sizes, up to `max_graphs`, in one
    memory pool."""

    def __init__(self, name, max_graphs):
        self.name = name
        self.max_graphs = max_graphs
        self.graphs = 0
        self.pool = None
        self.warned_full = False

    def runner(self, inner, not_capturable=""):
        return Runner(self, inner, not_capturable)


class Runner:
    def __init__(self, family, inner, not_capturable=""):
        self.family = family
        self.inner = inner          # inner(*tensors) -> tuple of tensors (the compiled executable)
        self.calls = 0
        self.ptrs = None            # input addresses seen at every warm-up call (None: not the same)
        self.mutated = set()        # inputs the graph writes
        self.graph = None
        self.static_in = None       # per input: a static buffer, or None (read in place)
        self.static_out = None
        self.device = None          # the graph's GPU
        self.in_place = []          # (input, address) read in place by the graph
        self.copied = []            # (input, static buffer) copied in before each replay
        self.skip = None            # why this graph is never captured
        self.moves = {}             # input index -> times it came at a new address after a capture read it in place
        if not_capturable:
            self._not_capturable(not_capturable)

    def _not_capturable(self, why):
        self.skip = why
        _stats["cuda_graph_skipped"] += 1
        _log(f"{self.family.name}: no CUDA graph ({why}); calls run the compiled kernels")

    def _warm(self, inputs):
        versions = [t._version for t in inputs]
        out = _on_capture_stream(self.inner, inputs)
        for i, t in enumerate(inputs):
            if t._version != versions[i]:
                self.mutated.add(i)
        ptrs = [t.data_ptr() if i in self.mutated or self.moves.get(i, 0) < 2 else None for i, t in enumerate(inputs)]
        if self.ptrs is None:
            self.ptrs = ptrs
        else:
            self.ptrs = [p if p == q else None for p, q in zip(self.ptrs, ptrs)]
        self.calls += 1
        return out

    def _check(self, inputs):
        devices = {t.device for t in inputs}
        if any(d.type != "cuda" for d in devices) or len(devices) > 1:
            first = inputs[0].device if inputs[0].device.type == "cuda" else next((d for d in devices if d.type == "cuda"), None)
            off = [f"input {i} ({t.device}, {str(t.dtype).replace('torch.', '')}, {list(t.shape)})"
                   for i, t in enumerate(inputs) if t.device != first]
            return "its inputs are not all on one GPU: " + ", ".join(off)
        for i in self.mutated:
            if self.ptrs[i] is None:
                return f"it writes input {i}, which came at a different address at each call"
        if self.family.graphs >= self.family.max_graphs:
            return f"the entry has {self.family.max_graphs} CUDA graphs already (one per set of sizes)"
        return None

    def _capture(self, inputs):
        self.static_in = [None if self.ptrs[i] is not None else t.clone() for i, t in enumerate(inputs)]
        args = [t if s is None else s for t, s in zip(inputs, self.static_in)]
        device = inputs[0].device
        with torch.cuda.device(device):
            if self.family.pool is None:
                self.family.pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            with capturing(graph, self.family.pool, _side_stream(device)):
                out = self.inner(*args)
        storages = [t.untyped_storage().data_ptr() for t in inputs] + [t.untyped_storage().data_ptr() for t in args]
        seen = set()
        for o in out:
            p = o.untyped_storage().data_ptr()
            if p in storages or p in seen:
                return None, "an output aliases an input or another output"
            seen.add(p)
        return (graph, out), None

    def __call__(self, inputs, settled):
        """One call: `settled` says the executable runs its final code (not a tier waiting for
        its kernels), which is all a graph may capture."""
        if self.graph is None:
            if not settled or self.skip is not None:
                return self.inner(*inputs)
            if self.calls < WARMUP:
                return self._warm(inputs)
            why = self._check(inputs)
            captured = None
            if why is None:
                try:
                    captured, why = self._capture(inputs)
                except Exception as e:  # noqa: BLE001 - an op that cannot be captured
                    why = f"capture failed: {type(e).__name__}: {str(e).splitlines()[0]}"
            if why is not None:
                self._not_capturable(why)
                return self.inner(*inputs)
            self.graph, self.static_out = captured
            self.device = inputs[0].device
            self.in_place = [(i, self.ptrs[i]) for i, s in enumerate(self.static_in) if s is None]
            self.copied = [(i, s) for i, s in enumerate(self.static_in) if s is not None]
            self.family.graphs += 1
            _stats["cuda_graph_captures"] += 1
            _log(f"{self.family.name}: captured CUDA graph {self.family.graphs} of at most "
                 f"{self.family.max_graphs} (inputs copied in: "
                 f"{sum(s is not None for s in self.static_in)} of {len(inputs)})")
        for i, p in self.in_place:
            if inputs[i].data_ptr() != p:
                return self._moved(inputs, [j for j, q in self.in_place if inputs[j].data_ptr() != q])
        if torch.cuda.current_device() != self.device.index:
            # replay() launches on the current device's current stream, where the copies in and
            # out must be ordered too: the graph's device, whatever the current one.
            with torch.cuda.device(self.device):
                return self._replay(inputs)
        return self._replay(inputs)

    def _replay(self, inputs):
        for i, s in self.copied:
            s.copy_(inputs[i])
        self.graph.replay()
        _stats["cuda_graph_replays"] += 1
        _stats["cuda_graph_input_copies"] += len(self.copied)
        return tuple(o.clone() for o in self.static_out)

    def _moved(self, inputs, moved):
        # Inputs the graph reads in place came at other addresses: the graph would read the old
        # ones. This call runs as compiled and warms up a new capture; an input's second move
        # makes it copied in from then on, unless the graph writes it (module docstring).
        self.graph = self.static_out = self.static_in = None
        self.family.graphs -= 1
        for i in moved:
            self.moves[i] = self.moves.get(i, 0) + 1
        self.calls = 0
        self.ptrs = None
        _stats["cuda_graph_recaptures"] += 1
        return self._warm(inputs)
