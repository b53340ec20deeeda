"""Steady-state generate() under fastdyn.enable() against eager and torch.compile, interleaved in
one process (this VM's memory bandwidth differs between processes, so ratios are taken within one).

    python3 bench/generate_steady.py [--tokens 64] [--rounds 7] [--skip-inductor]

A tiny GPT-2 and Llama (2 layers, hidden 64, random weights), greedy generate() with the default
DynamicCache. Modes: eager; fastdyn = fastdyn.enable() around the whole generate() (its decoding
loop traced: one graph per step); jit = fastdyn.jit(model.forward), the model alone, as inductor
compiles it; inductor = torch.compile(model.forward), what
`torch.compile(model)` compiles. Each mode is warmed up (compiles included) and checked against
eager's tokens, then the rounds run the modes one after another; the table gives each mode's
median time per generate and its speed-up over eager.
"""
import argparse
import statistics
import time

import torch

import fastdyn


def build(name):
    import transformers
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    if name == "llama":
        cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, vocab_size=500, max_position_embeddings=128)
        model = transformers.LlamaForCausalLM(cfg).eval()
    else:
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=128)
        model = transformers.GPT2LMHeadModel(cfg).eval()
    return model, torch.randint(0, 500, (1, 7))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--skip-inductor", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(2)
    print("| model | eager ms | fastdyn enable() ms | x | fastdyn jit(forward) ms | x | inductor ms | x |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in ("gpt2", "llama"):
        model, ids = build(name)
        forward = model.forward
        compiled = None if args.skip_inductor else torch.compile(forward)
        jitted = fastdyn.jit(forward)

        def generate():
            return model.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False,
                                  pad_token_id=0)

        def eager():
            return generate()

        def fd():
            fastdyn.enable()
            try:
                return generate()
            finally:
                fastdyn.disable()

        def with_forward(f):
            def run():
                model.forward = f
                try:
                    return generate()
                finally:
                    model.forward = forward
            return run

        modes = {"eager": eager, "fastdyn": fd, "jit": with_forward(jitted)}
        if compiled is not None:
            modes["inductor"] = with_forward(compiled)
        times = {m: [] for m in modes}
        with torch.no_grad():
            want = eager()
            for m, run in modes.items():
                for _ in range(2):  # compiles, then the automatic-dynamic recompiles
                    got = run()
                assert torch.equal(got, want), f"{name}: {m}'s tokens differ from eager's"
            fastdyn.synchronize()
            for _ in range(args.rounds):
                for m, run in modes.items():
                    t0 = time.perf_counter()
                    run()
                    times[m].append(time.perf_counter() - t0)
        med = {m: 1e3 * statistics.median(v) for m, v in times.items()}
        ind = (f"{med['inductor']:.1f} | {med['eager'] / med['inductor']:.2f}x" if "inductor" in med else "- | -")
        print(f"| {name} | {med['eager']:.1f} | {med['fastdyn']:.1f} | {med['eager'] / med['fastdyn']:.2f}x | "
              f"{med['jit']:.1f} | {med['eager'] / med['jit']:.2f}x | {ind} |")


if __name__ == "__main__":
    main()
