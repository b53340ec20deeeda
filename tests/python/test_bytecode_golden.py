"""Golden dumps of transformed bytecode and graph IR for small functions.

The transformed code of a fully captured frame is: load the graph inputs from where the trace
found them (argument slots, globals, attributes), call the compiled graph once, return. The
dumps are per Python minor version (3.11 and 3.12 encode calls differently). Line numbers in
the dump are relative to the function's first line, so edits above a function do not churn the
goldens. Regenerate with FASTDYN_UPDATE_GOLDEN=1 after an intended change, and read the diff.
"""
import os
import sys
from pathlib import Path

import pytest
import torch

import fastdyn
from fastdyn import _C

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "bytecode"
SCALE = 3.0


def golden_args_only(x, y):
    return x * y + 1


def golden_global_and_attr(x):
    return torch.relu(x) * SCALE


def golden_tuple_return(x, *rest):
    a = x.sum()
    return a, x.shape[0], rest[0] - x


CASES = [
    (golden_args_only, lambda: (torch.randn(3), torch.randn(3))),
    (golden_global_and_attr, lambda: (torch.randn(2, 2),)),
    (golden_tuple_return, lambda: (torch.randn(4), torch.randn(4))),
]


def _check(name, text):
    path = GOLDEN / f"{name}.py3{sys.version_info.minor}.txt"
    if os.environ.get("FASTDYN_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}: run with FASTDYN_UPDATE_GOLDEN=1"
    assert text == path.read_text()


@pytest.mark.parametrize("fn,make_args", CASES, ids=[c[0].__name__ for c in CASES])
def test_transformed_code_golden(fn, make_args):
    fastdyn.reset()
    args = make_args()
    out = fastdyn.jit(fn)(*args)
    expected = fn(*args)
    for got, want in zip(out if isinstance(out, tuple) else (out,),
                         expected if isinstance(expected, tuple) else (expected,)):
        if isinstance(want, torch.Tensor):
            torch.testing.assert_close(got, want)
        else:
            assert got == want
    code = _C.transformed_code(fn)
    assert code is not None, "the function was not compiled"
    assert code.co_name == fn.__code__.co_name and code.co_filename == fn.__code__.co_filename
    _check(fn.__name__ + ".code", _C.disassemble(code))
    _check(fn.__name__ + ".graph", _C.graph_text(fn))


def test_transformed_code_line_numbers_point_at_the_source():
    fastdyn.reset()
    x, y = torch.randn(3), torch.randn(3)
    fastdyn.jit(golden_args_only)(x, y)
    code = _C.transformed_code(golden_args_only)
    lines = {ln for _, _, ln in code.co_lines() if ln is not None}
    first = golden_args_only.__code__.co_firstlineno
    assert lines <= {first, first + 1}, lines


class _Layers:
    def __init__(self, n):
        self.layers = [{"w": torch.randn(3), "b": torch.randn(3)} for _ in range(n)]


def shared_paths(model, x):
    for layer in model.layers:
        x = x * layer["w"] + layer["b"]
    return x


def test_paths_the_inputs_share_are_read_once():
    # Eight inputs under `model.layers`: the transformed code reads that path once into a local
    # and each input from there (symbolic/continuation.cpp BoxSlots::prefixes), as an optimizer
    # step's hundreds of inputs under `opt.param_groups[0]['params']` are.
    import dis

    fastdyn.reset()
    model, x = _Layers(4), torch.randn(3)
    torch.testing.assert_close(fastdyn.jit(shared_paths)(model, x), shared_paths(model, x))
    code = _C.transformed_code(shared_paths)
    assert code is not None, "the function was not compiled"
    reads = [i for i in dis.get_instructions(code) if i.opname == "LOAD_ATTR" and i.argval == "layers"]
    assert len(reads) == 1, _C.disassemble(code)
    # The cached path serves later calls with other contents, as the guards allow.
    model.layers[2]["w"] = torch.randn(3)
    torch.testing.assert_close(fastdyn.jit(shared_paths)(model, x), shared_paths(model, x))
