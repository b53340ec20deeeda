"""Device diagnostic: GPT-2 inference in grad mode on the GPU, with FASTDYN_LOG=code (what runs where)."""
import time
import torch
import fastdyn
from transformers import GPT2Config, GPT2LMHeadModel

fastdyn.set_background_compile(False)
torch.manual_seed(0)
config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=128, bos_token_id=999,
                    eos_token_id=999, use_cache=False)
model = GPT2LMHeadModel(config).eval().cuda()
ids = torch.randint(0, 1000, (1, 64), device="cuda")
f = fastdyn.jit(model)
for grad in (False, True):
    with torch.set_grad_enabled(grad):
        for _ in range(3):
            out = f(ids)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            f(ids)
        torch.cuda.synchronize()
        print("grad" if grad else "no_grad", (time.perf_counter() - t0) / 50 * 1e3, "ms", out.logits.grad_fn)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
    for _ in range(5):
        f(ids)
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
