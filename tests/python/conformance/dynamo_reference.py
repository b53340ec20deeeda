"""Developer tool, never run by pytest: compares the hard-coded graph/break counts of the table
cases with what torch._dynamo.explain reports for the same functions.

    cd tests/python && python3 -m conformance.dynamo_reference [module ...]

Prints one line per case where (graphs, breaks) differ (a case that deliberately differs from Dynamo
says why in a comment next to it).
"""
import importlib
import sys

import torch
import torch._dynamo

from fdcheck import clone_tree

MODULES = ["test_arith_views", "test_control_flow", "test_inlining", "test_modules",
           "test_containers", "test_side_effects", "test_graph_breaks", "test_exceptions"]


def main(names):
    for name in names or MODULES:
        try:
            module = importlib.import_module(f"conformance.{name}")
        except ImportError as error:
            print(f"{name}: not importable: {error}")
            continue
        table = getattr(module, "CASES", None)
        for case in (table.cases if table else []):
            torch._dynamo.reset()
            torch.manual_seed(0)
            args = clone_tree(case.make_args())
            try:
                kwargs = clone_tree(case.opts.get("kwargs") or {})
                report = torch._dynamo.explain(case.fn)(*args, **kwargs)
                # Dynamo's graph_break_count is graph_count - 1; the breaks it met are its break_reasons.
                got = (report.graph_count, len(report.break_reasons))
                reasons = [str(b.reason).splitlines()[0][:90] for b in report.break_reasons]
            except Exception as error:  # noqa: BLE001
                got, reasons = None, [f"{type(error).__name__}: {str(error)[:90]}"]
            ours = (case.graphs, case.breaks)
            if got != ours:
                print(f"{name}::{case.fn.__name__}: ours {ours} dynamo {got} {reasons}")


if __name__ == "__main__":
    main(sys.argv[1:])
