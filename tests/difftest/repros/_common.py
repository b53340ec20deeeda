"""Shared driver of the standalone reproducers: run `fn` eagerly and under fastdyn.enable() on the
same inputs, call by call, and print what a caller observes."""
import traceback

import torch

import fastdyn


def observe(fn, make_args, show, calls=3):
    """make_args(k) -> arguments of call k (fresh each time); show(result, args, earlier) -> what
    to print (earlier: the results of the earlier calls of the same mode, kept alive)."""
    runs = {}
    for mode in ("eager", "fastdyn"):
        fastdyn.reset()
        out = []
        earlier = []
        for k in range(calls):
            args = make_args(k)
            if mode == "fastdyn":
                fastdyn.enable()
            try:
                r, e = fn(*args), None
            except Exception as exc:  # noqa: BLE001
                r, e = None, exc
            finally:
                fastdyn.disable()
            if e is not None:
                line = traceback.extract_tb(e.__traceback__)[-1]
                out.append(f"raised {type(e).__name__}({str(e)[:70]}) at line {line.lineno} | {show(None, args, earlier)}")
            else:
                out.append(show(r, args, earlier))
            earlier.append(r)
        runs[mode] = out
    bad = 0
    for k in range(calls):
        a, b = runs["eager"][k], runs["fastdyn"][k]
        bad += a != b
        print(f"call {k}: eager   {a}\n        fastdyn {b}   {'' if a == b else '<-- MISMATCH'}")
    print("MISMATCH" if bad else "same")
    return bad
