"""fastdyn demo: a small GPT-style transformer in plain PyTorch, timed eager vs fastdyn.

    fastdyn run examples/demo_transformer.py    # the launcher enables fastdyn for the process
    python3 examples/demo_transformer.py        # the same; the script enables fastdyn itself

The model is ordinary PyTorch code that knows nothing of fastdyn. The script times the same
model call twice: first with fastdyn disabled (the eager baseline), then enabled, where the first
call includes compilation; then batches of eager and fastdyn calls alternate. It prints the
median time per call of each, the first-call (compile) time, what fastdyn compiled, and the
largest difference between the two outputs. It exits with
status 1 if the outputs differ.
"""
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, DIM, HEADS, LAYERS, SEQ = 1000, 128, 4, 4, 64
ROUNDS, ROUND_S = 10, 0.1  # timed batches per mode, seconds per batch


class Block(nn.Module):
    """Pre-norm attention + MLP, written straight-line with torch.nn.functional."""

    def __init__(self, dim: int, heads: int, max_seq: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scale = self.head_dim ** -0.5

        def weight(rows, cols):
            return nn.Parameter(torch.randn(rows, cols) * cols ** -0.5)

        self.ln1_w, self.ln1_b = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))
        self.qkv_w, self.qkv_b = weight(3 * dim, dim), nn.Parameter(torch.zeros(3 * dim))
        self.out_w, self.out_b = weight(dim, dim), nn.Parameter(torch.zeros(dim))
        self.ln2_w, self.ln2_b = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))
        self.fc_w, self.fc_b = weight(4 * dim, dim), nn.Parameter(torch.zeros(4 * dim))
        self.proj_w, self.proj_b = weight(dim, 4 * dim), nn.Parameter(torch.zeros(dim))
        # Additive causal mask: 0 on and below the diagonal, -inf above.
        self.register_buffer(
            "causal", torch.full((max_seq, max_seq), float("-inf")).triu(1), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        h = F.layer_norm(x, (c,), self.ln1_w, self.ln1_b)
        q, k, v = F.linear(h, self.qkv_w, self.qkv_b).split(c, dim=-1)
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * self.scale + self.causal[:t, :t]
        y = torch.softmax(scores, dim=-1) @ v
        y = y.transpose(1, 2).reshape(b, t, c)
        x = x + F.linear(y, self.out_w, self.out_b)
        h = F.layer_norm(x, (c,), self.ln2_w, self.ln2_b)
        h = F.gelu(F.linear(h, self.fc_w, self.fc_b))
        return x + F.linear(h, self.proj_w, self.proj_b)


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Parameter(torch.randn(VOCAB, DIM) * 0.02)
        self.pos = nn.Parameter(torch.randn(SEQ, DIM) * 0.02)
        self.blocks = nn.ModuleList(Block(DIM, HEADS, SEQ) for _ in range(LAYERS))
        self.lnf_w, self.lnf_b = nn.Parameter(torch.ones(DIM)), nn.Parameter(torch.zeros(DIM))

    def embed(self, idx):
        return F.embedding(idx, self.tok) + self.pos[: idx.shape[1]]

    def logits(self, x):
        x = F.layer_norm(x, (x.shape[-1],), self.lnf_w, self.lnf_b)
        return F.linear(x, self.tok)  # tied embedding

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.logits(x)


# ---------------------------------------------------------------------------------------------

def _first_call(model, idx):
    now = time.perf_counter_ns
    t0 = now()
    out = model(idx)
    return now() - t0, out


def _per_call(model, idx, calls: int) -> float:
    now = time.perf_counter_ns
    t0 = now()
    for _ in range(calls):
        model(idx)
    return (now() - t0) / calls


def _probe(t):
    return t * 2 + 1


def _fastdyn_is_enabled(fastdyn) -> bool:
    """Whether the hook is on now (e.g. the `fastdyn run` launcher turned it on)."""
    for owner in (fastdyn, getattr(fastdyn, "_C", None)):
        fn = getattr(owner, "is_enabled", None)
        if callable(fn):
            return bool(fn())
    # No query function: a tensor-touching frame the hook sees shows up in frames_seen.
    before = dict(fastdyn.stats()).get("frames_seen", 0)
    _probe(torch.ones(2))
    return dict(fastdyn.stats()).get("frames_seen", 0) > before


def _ms(ns: float) -> str:
    return f"{ns / 1e6:8.3f} ms"


def main() -> int:
    torch.set_num_threads(2)
    try:
        import fastdyn
    except Exception as e:  # still useful: prints the eager baseline and says why
        fastdyn, why = None, f"{type(e).__name__}: {e}"
    launched_enabled = fastdyn is not None and _fastdyn_is_enabled(fastdyn)
    if fastdyn is not None:
        fastdyn.disable()  # the eager baseline runs with the hook off
        for helper in (_first_call, _per_call):  # time the model, not the timing loops
            fastdyn.skip(helper)

    torch.manual_seed(0)
    model = TinyGPT().eval()
    idx = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(0))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"TinyGPT: {LAYERS} layers, dim {DIM}, {HEADS} heads, vocab {VOCAB}, "
          f"{n_params / 1e6:.2f} M parameters; input [1, {SEQ}]; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    with torch.no_grad():
        # Eager first, before fastdyn has compiled any of the model's code.
        eager_first, ref = _first_call(model, idx)
        calls = max(1, int(ROUND_S * 1e9 / _per_call(model, idx, 3)))
        eager = [_per_call(model, idx, calls) for _ in range(ROUNDS)]
        if fastdyn is None:
            print(f"eager    time per call: {_ms(statistics.median(eager))}")
            print(f"fastdyn  unavailable: {why}")
            return 1
        fastdyn.reset()
        fastdyn.enable()
        try:
            fd_first, out = _first_call(model, idx)
            stats = dict(fastdyn.stats())
            _per_call(model, idx, 3)  # warm-up, as for eager
            # Alternate eager and fastdyn batches, so that changing load on the machine hits both
            # alike. The eager batches count only if fastdyn ran none of its cached code in them.
            eager_again, fast, ran_cached = [], [], False
            for _ in range(ROUNDS):
                fastdyn.disable()
                hits = fastdyn.stats().get("cache_hits")
                eager_again.append(_per_call(model, idx, calls))
                ran_cached = ran_cached or fastdyn.stats().get("cache_hits") != hits
                fastdyn.enable()
                fast.append(_per_call(model, idx, calls))
            out_warm = model(idx)  # a cache hit, unlike the first call
        finally:
            if not launched_enabled:
                fastdyn.disable()
    if hits is not None and not ran_cached:
        eager = eager_again
    else:
        print("eager    (timed before compiling: fastdyn.disable() still ran cached code, "
              "or stats() has no cache_hits)")
    eager_call, fd_call = statistics.median(eager), statistics.median(fast)
    print(f"eager    time per call: {_ms(eager_call)}   (first call {_ms(eager_first)})")
    compiled = stats.get("frames_compiled", 1) > 0
    print(f"fastdyn  time per call: {_ms(fd_call)}   "
          + (f"({eager_call / fd_call:.2f}x eager)" if compiled else "(nothing compiled)"))
    print(f"fastdyn  first call (includes compile): {_ms(fd_first)}"
          + (f"; compile time {_ms(stats['compile_seconds'] * 1e9)}"
             if "compile_seconds" in stats else ""))
    keys = ("frames_compiled", "graphs", "graph_breaks", "recompiles")
    print("fastdyn  after the first call: "
          + ", ".join(f"{k} {stats[k]}" for k in keys if k in stats)
          + ("   (launched with fastdyn enabled)" if launched_enabled
             else "   (enabled by this script)"))
    if not compiled:
        print("fastdyn  compiled nothing: the fastdyn times above are eager code")

    same, diff = True, 0.0
    for got in (out, out_warm):
        same = same and got.shape == ref.shape and torch.allclose(got, ref, rtol=1e-4, atol=1e-5)
        diff = max(diff, (got - ref).abs().max().item())
    print(f"outputs match: {'yes' if same else 'NO'} (first and later calls against eager: "
          f"max abs diff {diff:.3g}, logits {list(ref.shape)})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
