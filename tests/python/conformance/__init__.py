"""The issue-3 conformance suite: small functions of each Python feature, compared with eager.

One file per theme. Most files register table functions with `cases.Cases` (each becomes a test
named test_<function name>); the tests that need more than fdcheck.check (globals, exceptions,
tracebacks, modules mutated between calls) are written out. Expected graph and break counts are
what torch._dynamo.explain reports for the same function (measured once with
dynamo_reference.py, hard-coded here; Dynamo is never called at test time); where fastdyn
deliberately differs, the case says why.

Working with it: `pytest tests/python/conformance` (about 30 s). A strict xfail names the missing
issue-3 feature; `pytest --runxfail -k <name>` shows what fails today (FASTDYN_LOG=graph_breaks,
recompiles tells why). A failing test that is not xfailed is a wrong result or a bug, never a
missing feature. `python3 -m conformance.dynamo_reference` (from tests/python) re-measures the
expected counts against Dynamo.
"""
