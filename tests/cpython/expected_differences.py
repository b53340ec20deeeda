"""Per-test outcome differences between running CPython's regression tests with and without
fastdyn.enable() (tensor-free frames compiled too) that the suite tolerates, each with its reason.

EXPECTED_DIFFERENCES: legitimate, not bugs (what a PEP 523 JIT necessarily changes, which no
program relies on to compute its results).
KNOWN_BUGS: differences that ARE fastdyn bugs, still open (issue 18's closing note lists them).
They are tolerated so that the suite catches every new difference; each test run prints them, and
an entry must go when its bug is fixed (a KNOWN_BUGS entry that no longer differs is reported).
A silently wrong result, an object kept alive, or user code observed to run extra times is never
an EXPECTED_DIFFERENCES entry.
"""

EXPECTED_DIFFERENCES = {
    "test_exceptions.ExceptionTests.testSettingException":
        "frame introspection: an exception raised in a continuation has the function's transformed "
        "frame as f_back (the same function), not its caller",
    "test_descr.ClassPropertiesAndMethods.test_slots":
        "counts len(gc.get_objects()) around a loop: compiling the loop's frames creates code "
        "objects, functions and cache entries that the garbage collector tracks",
}

KNOWN_BUGS = {}
