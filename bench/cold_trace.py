#!/usr/bin/env python3
"""What a cold first call costs the calling thread: fastdyn's trace, guards, bytecode and graph
passes for a model's forward, against torch.compile's first call and eager's call, in one process.

    python3 bench/cold_trace.py [--model gpt2|llama] [--rounds 200] [--inductor-rounds 2]

fastdyn: `fastdyn.jit(model.forward)` called once after each `fastdyn.reset()` (which forgets every
compiled entry and the decoded bytecode, so each call traces from scratch; kernels already built stay
in the cache and compile on the background thread anyway): the median of `stats()["compile_seconds"]`
(the calling thread's compile time) and of the whole call. inductor: `torch.compile(model.forward)`
after `torch._dynamo.reset()`, the first call's wall time (its compile, with inductor's own caches
warm after the first round). eager: the median call. Random weights, 2 layers, 8 tokens, no_grad.
"""
import argparse
import statistics
import time

import torch

torch.set_num_threads(2)


def build(name):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=1000, n_positions=256)
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                                   intermediate_size=256, vocab_size=1000, max_position_embeddings=256)
    return transformers.LlamaForCausalLM(cfg).eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", choices=["gpt2", "llama"])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--inductor-rounds", type=int, default=2)
    args = ap.parse_args()
    import fastdyn
    model = build(args.model)
    ids = torch.randint(0, 999, (1, 8))
    with torch.no_grad():
        want = model(ids).logits
        eager = []
        for _ in range(50):
            t0 = time.perf_counter()
            model(ids)
            eager.append(time.perf_counter() - t0)
        f = fastdyn.jit(model.forward)
        f(ids)
        fastdyn.synchronize()
        compile_s, call_s = [], []
        for _ in range(args.rounds):
            fastdyn.reset()
            t0 = time.perf_counter()
            got = f(ids).logits
            call_s.append(time.perf_counter() - t0)
            compile_s.append(fastdyn.stats()["compile_seconds"])
        fastdyn.synchronize()
        assert torch.allclose(got, want, atol=1e-5), "fastdyn's output differs from eager's"
        inductor = []
        for _ in range(args.inductor_rounds):
            torch._dynamo.reset()
            g = torch.compile(model.forward)
            t0 = time.perf_counter()
            g(ids)
            inductor.append(time.perf_counter() - t0)
    ms = lambda v: f"{statistics.median(v) * 1e3:.2f} ms"
    print(f"{args.model}, 2 layers, 8 tokens (one process):")
    print(f"  eager call                              {ms(eager)}")
    print(f"  fastdyn cold first call                 {ms(call_s)}  (compile on the calling thread {ms(compile_s)}, median of {args.rounds})")
    print(f"  torch.compile first call                {ms(inductor)}  (median of {args.inductor_rounds})")


if __name__ == "__main__":
    main()
