"""Op coverage of the five Hugging Face models (issue 3): which torch-level calls and ATen ops
their forward makes, and whether fastdyn captures each call on its own.

    python bench/models_ops.py [--attn default|eager|sdpa|both] [--models gpt2,bert,...] [--aten]
                               [--compiling] [--backend aten|native]

For each model (tests/python/hf_zoo.py), attention implementation and with/without a padding
mask, runs one forward under the recorders of tests/python/op_replay.py, then replays every
distinct torch-level call alone under fastdyn.jit(fullgraph=True) and compares it with eager
(values, dtypes, sizes, strides). Prints the callables per model, the Python-level protocol calls
(symbolic/'s business), optionally the ATen overloads eager runs, and every call fastdyn does not
capture alone with the reason (a missing family, an unsupported argument form, a mismatch).
With --compiling, the models run the paths transformers takes when torch.compiler.is_compiling()
is True (as under Dynamo). Exit status 1 when some call is not captured.
"""
import argparse
import collections
import contextlib
import os
import sys
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import hf_zoo  # noqa: E402
import op_replay  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attn", default="both", choices=["default", "eager", "sdpa", "both"])
    ap.add_argument("--models", default=",".join(hf_zoo.MODELS))
    ap.add_argument("--aten", action="store_true", help="also list the ATen overloads eager runs")
    ap.add_argument("--backend", default="aten", choices=["aten", "native"],
                    help="backend of the replays: aten checks the op table alone, native adds codegen")
    ap.add_argument("--compiling", action="store_true",
                    help="record with torch.compiler.is_compiling() returning True (Dynamo's paths)")
    args = ap.parse_args()
    import fastdyn
    attns = {"default": [None], "eager": ["eager"], "sdpa": ["sdpa"], "both": ["eager", "sdpa"]}[args.attn]
    variants = [(m, a, mask) for m in args.models.split(",") for a in attns for mask in (True, False)
                if mask or m != "vit"]
    failures = collections.defaultdict(set)   # "callable: reason\n e.g. call" -> {model/attn[/nomask]}
    names = collections.defaultdict(set)
    python_level = collections.defaultdict(set)
    aten_ops = collections.defaultdict(set)
    for model_name, attn, mask in variants:
        tag = f"{model_name}/{attn or 'default'}" + ("" if mask else "/nomask")
        model, inputs = hf_zoo.build(model_name, attn, mask)
        paths = mock.patch("torch.compiler.is_compiling", lambda: True) if args.compiling else contextlib.nullcontext()
        with paths:
            calls, aten = op_replay.record(lambda: model(**inputs))
        for op in aten.ops:
            aten_ops[op].add(tag)
        for n in calls.python_level:
            python_level[n].add(tag)
        for u in calls.unwritable:
            failures[f"unwritable {u}"].add(tag)
        for name, text, tensors, constants in op_replay.distinct_calls(calls):
            names[name].add(tag)
            why = op_replay.replay(fastdyn, text, tensors, constants, args.backend)
            if why:
                failures[f"{name}: {why}\n      e.g. {op_replay.describe(text, tensors, constants)}"].add(tag)
    print(f"torch-level callables ({len(names)}):")
    for n in sorted(names):
        print(f"  {n:55s} {', '.join(sorted(names[n]))}")
    print("\nPython-level protocol calls (symbolic/'s business):")
    for n in sorted(python_level):
        print(f"  {n:55s} {', '.join(sorted(python_level[n]))}")
    if args.aten:
        print(f"\nATen overloads eager runs ({len(aten_ops)}):")
        for op in sorted(aten_ops):
            print(f"  {op:55s} {', '.join(sorted(aten_ops[op]))}")
    print(f"\ncalls fastdyn does not capture alone ({len(failures)}):")
    for f in sorted(failures):
        print(f"  {f}\n      [{', '.join(sorted(failures[f]))}]")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
