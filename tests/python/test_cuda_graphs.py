"""mode="reduce-overhead": compiled graphs on CUDA tensors replayed as CUDA graphs under their
guards (runtime/cuda_graph_executable.h, python/fastdyn/_cuda_graphs.py). The GPU cases are
skipped without a GPU (scripts/device_test.sh runs them on the accelerator machine); the mode's
API and its no-op on CPU tensors run everywhere."""
import os

import pytest
import torch
import torch.nn.functional as F

from fdcheck import fastdyn

gpu = pytest.mark.skipif(fastdyn is None or not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _fresh():
    fastdyn.reset()
    yield
    fastdyn.reset()


def block(x, w, b):
    h = F.gelu(F.linear(x, w, b))
    return torch.softmax(h * 0.5, dim=-1) + x.mean(-1, keepdim=True)


def graph_stats():
    s = fastdyn.stats()
    return {k: s[k] for k in ("cuda_graph_captures", "cuda_graph_replays", "cuda_graph_skipped", "cuda_graph_recaptures")}


# --------------------------------------------------------------------------- everywhere

def test_mode_names_are_checked_where_jit_and_enable_are_called():
    with pytest.raises(ValueError, match="unknown mode 'max-autotune'"):
        fastdyn.jit(block, mode="max-autotune")
    with pytest.raises(TypeError, match="mode must be a str"):
        fastdyn.jit(block, mode=1)
    with pytest.raises(ValueError, match="unknown mode"):
        fastdyn.enable(mode="fast")
    assert not fastdyn._C.is_enabled()


def test_on_cpu_tensors_the_mode_changes_nothing():
    w, b = torch.randn(16, 16), torch.randn(16)
    f = fastdyn.jit(block, mode="reduce-overhead")
    for _ in range(4):
        x = torch.randn(4, 16)
        torch.testing.assert_close(f(x, w, b), block(x, w, b))
    assert graph_stats() == {"cuda_graph_captures": 0, "cuda_graph_replays": 0, "cuda_graph_skipped": 0,
                             "cuda_graph_recaptures": 0}


def test_an_entry_serves_the_mode_it_was_compiled_for():
    # Like the backend: jit(f, mode=...) beside jit(f) compiles its own entry.
    w, b, x = torch.randn(16, 16), torch.randn(16), torch.randn(4, 16)
    plain = fastdyn.jit(block)
    graphs = fastdyn.jit(block, mode="reduce-overhead")
    plain(x, w, b)
    graphs(x, w, b)
    plain(x, w, b)
    s = fastdyn.stats()
    assert s["frames_compiled"] == 2 and s["cache_hits"] == 1, s


# --------------------------------------------------------------------------- on a GPU

@gpu
@pytest.mark.parametrize("background", [False, True])
def test_replays_equal_eager_with_fresh_inputs_at_every_call(background):
    fastdyn.set_background_compile(background)
    try:
        w, b = torch.randn(64, 64, device="cuda"), torch.randn(64, device="cuda")
        f = fastdyn.jit(block, mode="reduce-overhead")
        for _ in range(8):
            x = torch.randn(32, 64, device="cuda")  # a new tensor each call: copied into the graph's buffer
            torch.testing.assert_close(f(x, w, b), block(x, w, b))
            if background:
                fastdyn.synchronize()
    finally:
        fastdyn.set_background_compile(False)
    s = graph_stats()
    assert s["cuda_graph_captures"] == 1 and s["cuda_graph_replays"] >= 4, s


@gpu
def test_outputs_are_fresh_tensors_a_later_replay_does_not_overwrite():
    w, b = torch.randn(64, 64, device="cuda"), torch.randn(64, device="cuda")
    f = fastdyn.jit(block, mode="reduce-overhead")
    xs = [torch.randn(32, 64, device="cuda") for _ in range(6)]
    outs = [f(x, w, b) for x in xs]  # captured at the third call, replayed after
    assert graph_stats()["cuda_graph_replays"] >= 3
    for x, y in zip(xs, outs):
        torch.testing.assert_close(y, block(x, w, b))
    assert len({y.data_ptr() for y in outs}) == len(outs)


@gpu
def test_a_module_reads_its_parameters_in_place_and_follows_their_updates():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64)).cuda().eval()
    f = fastdyn.jit(m, mode="reduce-overhead")
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        for _ in range(5):
            torch.testing.assert_close(f(x), m(x))
        m[0].weight.mul_(0.5)  # in place: same address, the graph reads the new values
        torch.testing.assert_close(f(x), m(x))
    s = graph_stats()
    assert s["cuda_graph_captures"] == 1 and s["cuda_graph_recaptures"] == 0, s


@gpu
def test_guards_still_decide_a_changed_global_is_not_replayed_stale():
    f = fastdyn.jit(lambda x: (x * SCALE).sin() + 1, mode="reduce-overhead")
    x = torch.randn(1000, device="cuda")
    global SCALE
    SCALE = 2.0
    for _ in range(4):
        torch.testing.assert_close(f(x), (x * 2.0).sin() + 1)
    SCALE = 3.0
    for _ in range(4):
        torch.testing.assert_close(f(x), (x * 3.0).sin() + 1)
    assert graph_stats()["cuda_graph_captures"] == 2


SCALE = 2.0


@gpu
def test_an_input_written_in_place_is_updated_as_in_eager():
    def step(cache, x):
        cache.add_(x)  # the graph writes its input
        return cache * 2

    cache_e, cache_f = torch.zeros(256, device="cuda"), torch.zeros(256, device="cuda")
    f = fastdyn.jit(step, mode="reduce-overhead")
    for i in range(6):
        x = torch.full((256,), float(i), device="cuda")
        torch.testing.assert_close(f(cache_f, x), step(cache_e, x))
        torch.testing.assert_close(cache_f, cache_e)
    assert graph_stats()["cuda_graph_captures"] == 1
    # A written input that moves between calls cannot be read in place: no graph, still exact.
    fastdyn.reset()
    f = fastdyn.jit(step, mode="reduce-overhead")
    for i in range(6):
        c_e, c_f = torch.ones(256, device="cuda") * i, torch.ones(256, device="cuda") * i
        x = torch.randn(256, device="cuda")
        torch.testing.assert_close(f(c_f, x), step(c_e, x))
        torch.testing.assert_close(c_f, c_e)
    s = graph_stats()
    assert s["cuda_graph_captures"] == 0 and s["cuda_graph_skipped"] == 1, s


@gpu
def test_a_graph_reading_cpu_scalars_is_not_captured():
    # Its kernels read the CPU scalars by value when launched: a replay would keep the captured
    # values, so such a graph runs compiled, uncaptured.
    def step(x, c):
        c.add_(1)
        return x * c

    f = fastdyn.jit(step, mode="reduce-overhead")
    c_f, c_e = torch.tensor(0.0), torch.tensor(0.0)
    x = torch.randn(64, device="cuda")
    for _ in range(6):
        torch.testing.assert_close(f(x, c_f), step(x, c_e))
    assert c_f.item() == c_e.item() == 6
    s = graph_stats()
    assert s["cuda_graph_captures"] == 0 and s["cuda_graph_skipped"] == 1, s


@gpu
def test_dynamic_sizes_get_one_graph_each_up_to_the_bound():
    f = fastdyn.jit(lambda x: torch.softmax(x * 2, dim=-1).sum(0), mode="reduce-overhead", dynamic=True)
    for n in range(2, 14):
        x = torch.randn(n, 96, device="cuda")
        for _ in range(4):
            torch.testing.assert_close(f(x), torch.softmax(x * 2, dim=-1).sum(0))
    s = graph_stats()
    assert s["cuda_graph_captures"] == 8, s   # the bound per entry
    assert s["cuda_graph_skipped"] == 4, s    # the sizes past it run the compiled kernels


@gpu
def test_an_input_read_in_place_that_moves_is_captured_again_then_copied():
    w = torch.randn(64, 64, device="cuda")
    f = fastdyn.jit(lambda x, w: F.linear(x, w).relu(), mode="reduce-overhead")
    x = torch.randn(16, 64, device="cuda")
    for _ in range(4):
        f(x, w)  # x came at one address: read in place
    for _ in range(12):
        x = torch.randn(16, 64, device="cuda")
        torch.testing.assert_close(f(x, w), F.linear(x, w).relu())
    s = graph_stats()
    # x moved once: captured again with x copied in (it came at two addresses while warming up).
    assert s["cuda_graph_recaptures"] == 1 and s["cuda_graph_captures"] == 2, s


@gpu
def test_a_written_input_made_anew_per_round_leaves_the_weights_read_in_place():
    # A static KV cache made anew per generate(): the graph writes it, so each new cache is a new
    # capture; the weight beside it never moves and must not be copied in at every replay (all
    # inputs but the written one were, after two moves). The token is new at every step: copied.
    w = torch.randn(64, 64, device="cuda")

    def step(cache, tok, w):
        cache.add_(tok)
        return F.linear(cache, w).relu()

    f = fastdyn.jit(step, mode="reduce-overhead")
    for _ in range(4):  # four "generates", eight steps each
        c_e, c_f = torch.zeros(8, 64, device="cuda"), torch.zeros(8, 64, device="cuda")
        for _ in range(8):
            tok = torch.randn(8, 64, device="cuda")
            torch.testing.assert_close(f(c_f, tok, w), step(c_e, tok, w))
            torch.testing.assert_close(c_f, c_e)
    s = fastdyn.stats()
    assert s["cuda_graph_captures"] == 4 and s["cuda_graph_recaptures"] == 3, s
    # One copy (the token) per replay: the weight and the cache are read in place.
    assert s["cuda_graph_replays"] > 0 and s["cuda_graph_input_copies"] == s["cuda_graph_replays"], s


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_graph_on_the_second_gpu_is_captured_there():
    w, b = torch.randn(64, 64, device="cuda:1"), torch.randn(64, device="cuda:1")
    f = fastdyn.jit(block, mode="reduce-overhead")
    with torch.cuda.device(0):
        for i in range(5):
            x = torch.randn(32, 64, device="cuda:1")
            y = f(x, w, b)
            assert y.device == x.device
            torch.testing.assert_close(y, block(x, w, b), msg=lambda m: f"call {i}: {m} {graph_stats()}")
    assert graph_stats()["cuda_graph_captures"] == 1


@gpu
def test_a_graph_drawing_random_numbers_is_not_captured_and_keeps_eagers_stream():
    # A capture runs the graph once more (its warm-up) before recording it: a graph with dropout
    # would draw twice at that call (measured: seed 2, the capture call, differed from eager).
    def f(x):
        return F.dropout(x * 2, 0.5, training=True) + 1

    g = fastdyn.jit(f, mode="reduce-overhead")
    x = torch.randn(64, 256, device="cuda")
    for seed in range(6):
        torch.manual_seed(seed)
        want = f(x)
        after_eager = torch.rand(1, device="cuda")
        torch.manual_seed(seed)
        got = g(x)
        after_fastdyn = torch.rand(1, device="cuda")
        torch.testing.assert_close(got, want, msg=lambda m: f"seed {seed}: {m} {graph_stats()}")
        torch.testing.assert_close(after_fastdyn, after_eager)
    s = graph_stats()
    assert s["cuda_graph_captures"] == 0 and s["cuda_graph_skipped"] == 1, s



def _fresh_process(script):
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@gpu
def test_a_graph_that_writes_its_input_and_multiplies_is_captured_in_a_fresh_process():
    """A stream's first cuBLAS call sets up its workspace and cannot be captured (on an H200 such
    a capture failed). A graph that writes its input gets no extra warm-up call before its capture
    (its writes would apply once more), so its warm-up calls themselves run on the capture stream.
    A fresh process: no earlier graph warmed that stream's cuBLAS."""
    out = _fresh_process(
        "import torch, fastdyn\n"
        "def f(x, w, steps):\n"
        "    steps.add_(1)\n"
        "    return torch.relu(x @ w) * steps\n"
        "g = fastdyn.jit(f, mode='reduce-overhead')\n"
        "w = torch.randn(64, 64, device='cuda')\n"
        "mine, theirs = torch.zeros(1, device='cuda'), torch.zeros(1, device='cuda')\n"
        "for i in range(6):\n"
        "    x = torch.randn(32, 64, device='cuda')\n"
        "    torch.testing.assert_close(g(x, w, mine), f(x, w, theirs))\n"
        "    if i == 0:\n"
        "        fastdyn.synchronize()  # kernels ready: calls 2-3 warm up, call 4 captures (under load too)\n"
        "assert mine.item() == theirs.item() == 6, (mine, theirs)\n"
        "s = fastdyn.stats()\n"
        "print('captures', s['cuda_graph_captures'], 'replays', s['cuda_graph_replays'], 'skipped', s['cuda_graph_skipped'])\n")
    assert "captures 1 replays" in out and "skipped 0" in out, out


# A matmul of few rows and a long inner dimension: cuBLAS splits the sum and uses its workspace.
_WORKSPACE_SCRIPT = (
    "import torch, fastdyn\n"
    "clear = torch._C._cuda_clearCublasWorkspaces\n"
    "w, b = torch.randn(16384, 64, device='cuda'), torch.randn(64, device='cuda')\n"
    "f = lambda x: torch.addmm(b, x, w).relu() + 1  # cuBLASLt with a bias epilogue, as GPT-2's Conv1D\n"
    "g = fastdyn.jit(f, mode='reduce-overhead')\n"
    "x = torch.randn(32, 16384, device='cuda')\n"
    "g(x)\n"
    "fastdyn.synchronize()\n"
    "for _ in range(4):\n"
    "    g(x)  # warm-up, capture, replays\n"
    "f(x)  # eager: the current stream's workspace, in ordinary memory\n"
    "torch.cuda.synchronize()\n"
    "def freed_by_clear():\n"
    "    before = torch.cuda.memory_allocated()\n"
    "    clear()\n"
    "    return before - torch.cuda.memory_allocated()\n"
    "freed = freed_by_clear()  # as torch.compile's reduce-overhead does around each recording\n"
    "f(x)\n"
    "torch.cuda.synchronize()\n"
    "one = freed_by_clear()  # what one stream's workspace is\n"
    "assert one > 0 and freed == one, ('a workspace the graph uses was ordinary memory', freed, one)\n"
    "torch.cuda.empty_cache()  # the memory of workspaces no graph owns goes back to the driver\n"
    "sentinels = [torch.full((1 << 19,), 7.0, device='cuda') for _ in range(48)]  # and is handed out again\n"
    "for _ in range(3):\n"
    "    torch.testing.assert_close(g(x), f(x))\n"
    "torch.cuda.synchronize()\n"
    "assert all(bool((t == 7.0).all()) for t in sentinels), 'a replay wrote into memory it does not own'\n"
    "s = fastdyn.stats()\n"
    "print('captures', s['cuda_graph_captures'], 'replays', s['cuda_graph_replays'])\n")


@gpu
def test_a_captured_matmul_keeps_its_cublas_workspace_when_the_workspaces_are_cleared():
    """A graph captured with the workspace its stream's warm-up had left (ordinary memory) read
    freed memory once anything cleared cuBLAS's workspaces (torch.compile's reduce-overhead does):
    on an H200, "unspecified launch failure" in a GPT-2 replay (bench/gpu_kernels.py --ro, twice),
    which ran after the fix. Captures now make the workspace inside the graph's pool. Whether a
    replay lands on reused memory depends on cuBLAS's algorithm and the allocator, so the script
    checks the cause: clearing the workspaces frees exactly one stream's workspace of ordinary
    memory (eager's), none that the graph uses (two, without the fix). A fresh process: a failed
    replay poisons the CUDA context."""
    out = _fresh_process(_WORKSPACE_SCRIPT)
    captures, replays = (int(v) for v in out.split()[1::2])
    assert captures == 1 and replays >= 4, out  # the three calls after the clearing were replays


@gpu
def test_kernels_unloaded_during_a_capture_stay_loaded_until_it_ends(monkeypatch):
    """cuModuleUnload during a capture invalidates it (from any thread, in the global mode). The
    route timings load and unload a module per kernel compiled in this process: called inside a
    capture, their unloads wait for its end, and the capture holds."""
    from fastdyn import _C, _cuda_graphs
    monkeypatch.setenv("FASTDYN_CACHE_DIR", "off")  # NVRTC compiles: the route timings time those
    f = fastdyn.jit(lambda x: torch.tanh(x) * 0.6180339)
    x = torch.randn(1000, device="cuda")
    for _ in range(3):
        f(x)
    fastdyn.synchronize()
    if not _C.cuda_route_timings():
        pytest.fail("no kernel was compiled by NVRTC in this process: " + str(_C.cuda_info()))
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with _cuda_graphs.capturing(g, torch.cuda.graph_pool_handle(), side):
        y = x * 2
        timings = _C.cuda_route_timings()
        z = y + 1
    assert timings
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(z, x * 2 + 1)
    torch.testing.assert_close(f(x), torch.tanh(x) * 0.6180339)


@gpu
def test_a_static_cache_llama_generate_in_a_fresh_process():
    """transformers' static KV cache (cache_implementation="static": the shapes CUDA graphs need)
    is written in place by each decode step (index_copy_). Under mode="reduce-overhead", in a fresh
    process (what bench/gpu_decode.py's fastdyn_ro mode does), this generate died with
    CUBLAS_STATUS_INTERNAL_ERROR: the graphs that write the cache got no warm-up on the capture
    stream, and a capture whose matmul is its stream's first fails (the other graphs' warm-ups
    readied that stream or not, by the order of captures). Tokens equal eager's, graphs captured."""
    pytest.importorskip("transformers")
    out = _fresh_process(
        "import torch, transformers, fastdyn\n"
        "cfg = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=4,\n"
        "    num_attention_heads=8, num_key_value_heads=4, vocab_size=8192, max_position_embeddings=1024)\n"
        "torch.manual_seed(0)\n"
        "model = transformers.LlamaForCausalLM(cfg).cuda().eval()\n"
        "ids = torch.randint(0, 8192, (1, 16), device='cuda')\n"
        "gen = lambda: model.generate(ids, max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0,\n"
        "                             cache_implementation='static', disable_compile=True)\n"
        "forward = model.forward\n"
        "model.forward = fastdyn.jit(forward, mode='reduce-overhead')\n"
        "with torch.no_grad():\n"
        "    outs = [gen()]\n"
        "    fastdyn.synchronize()  # the decode graph's kernels: a whole model's, compiled in the background\n"
        "    outs += [gen() for _ in range(2)]\n"
        "    model.forward = forward\n"
        "    want = gen()\n"
        "assert all(torch.equal(o, want) for o in outs)\n"
        "print('captures', fastdyn.stats()['cuda_graph_captures'])\n")
    assert "captures 0" not in out, out
