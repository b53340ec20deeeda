"""Per-test outcome differences between running CPython's regression tests with and without
fastdyn.enable() that are expected, i.e. NOT bugs: {"module.TestClass.test_name": "reason"}.

Keep this empty unless a difference is truly legitimate (a test that inspects sys.getrefcount,
frame objects or stack depth in a way a JIT may change). A silently wrong result, an object kept
alive, or user code observed to run extra times is a bug in fastdyn, never an entry here.
"""

EXPECTED_DIFFERENCES = {
}
