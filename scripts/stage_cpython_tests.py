"""Stage the part of CPython's `test` package that tests/cpython/regrtest.py runs, for a machine
whose Python lacks it and cannot install it (the accelerator machine: no internet, and its
Python has no `test` package).

    python scripts/stage_cpython_tests.py PYTHON [DEST]

PYTHON is an interpreter of the same major.minor version that has the package (a pyenv build,
say); DEST defaults to .cpython-test/pyXY. The copy holds the package's __init__, its helper
packages (support, typinganndata, libregrtest), the shared test bases, and the regrtest modules
(MODULES and EXTRA_MODULES). Put DEST first on PYTHONPATH there (scripts/device_test.sh does when
the folder is present; name it in the device call's carry list). The staged modules come from
PYTHON's patch release, which may differ from the machine's: the comparison of the two modes on
one interpreter stays exact, the tests themselves are that release's.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "cpython"))
import regrtest  # noqa: E402  (MODULES, EXTRA_MODULES)

HELPERS = ["__init__.py", "support", "typinganndata", "libregrtest", "list_tests.py", "mapping_tests.py",
           "seq_tests.py", "shadowed_super.py", "string_tests.py", "lock_tests.py", "pickletester.py",
           "test_grammar.py", "test_typing.py"]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    python = sys.argv[1]
    info = subprocess.run([python, "-c", "import sys, os, test.support as s, test; "
                           "print('%d%d' % sys.version_info[:2]); print(os.path.dirname(test.__file__))"],
                          capture_output=True, text=True)
    if info.returncode != 0:
        sys.exit(f"{python} has no CPython test package:\n{info.stderr}")
    ver, src = info.stdout.split()
    dest = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, ".cpython-test", f"py{ver}")
    pkg = os.path.join(dest, "test")
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(pkg)
    names = set(HELPERS)
    for m in list(regrtest.MODULES) + list(regrtest.EXTRA_MODULES):
        names.add(m if os.path.isdir(os.path.join(src, m)) else m + ".py")
    for entry in os.listdir(src):  # data files and folders next to the modules (test_math's ieee754.txt)
        path = os.path.join(src, entry)
        if entry == "data" or (os.path.isfile(path) and not entry.endswith((".py", ".pyc"))):
            names.add(entry)
    copied = 0
    for n in sorted(names):
        s, d = os.path.join(src, n), os.path.join(pkg, n)
        if os.path.isdir(s):
            shutil.copytree(s, d, ignore=shutil.ignore_patterns("__pycache__"))
        elif os.path.isfile(s):
            shutil.copy2(s, d)
        else:
            continue
        copied += 1
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(dest) for f in fs)
    print(f"staged {copied} entries of {src} ({size / 1e6:.1f} MB) into {dest}")


if __name__ == "__main__":
    main()
