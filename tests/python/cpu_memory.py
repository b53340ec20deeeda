"""The most bytes a call holds at once on the CPU allocator, from the profiler's allocation events
(exact there; torch.cuda.max_memory_allocated is the GPU's counterpart). Used by the tests of
what a compiled backward frees and by bench/train_step.py's CPU peaks."""
import torch
from torch._C._profiler import _EventType


def peak_bytes(call):
    """Peak of the bytes allocated during `call()` and not yet freed (what it frees of memory
    allocated before it is not counted: the profiler does not see those blocks' sizes)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    events = []

    def walk(e):
        if e.tag == _EventType.Allocation:
            events.append((e.start_time_ns, e.typed[1].alloc_size))
        for c in e.children:
            walk(c)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    held = peak = 0
    for _, nbytes in sorted(events):
        held += nbytes
        peak = max(peak, held)
    return peak
