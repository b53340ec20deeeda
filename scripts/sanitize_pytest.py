"""pytest plugin of scripts/sanitize.sh (loaded with `-p sanitize_pytest`): which test did it.

Under ASan/UBSan every report goes to a file of $SANITIZE_LOG_DIR (the sanitizers' log_path; one
file per reporting process, subprocesses of a test included) and the reporting process dies, so
pytest's own output cannot say which test caused it. This plugin appends to $SANITIZE_PROGRESS:

    pid <pid>                 pytest (re)started
    start <nodeid>            before a test runs
    report <nodeid> <file>    a sanitizer log that appeared while it ran (a subprocess's report)
    end <nodeid>              after it ran

A `start` without its `end` is the test during which pytest itself died. With
$SANITIZE_RESUME_AFTER set to a node id, the tests up to and including it are deselected, so that
sanitize.sh can go on with the rest of the selection after such a crash.
"""
import os

_seen = set()


def _write(line):
    path = os.environ.get("SANITIZE_PROGRESS")
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode("utf-8", "backslashreplace"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _logs():
    d = os.environ.get("SANITIZE_LOG_DIR")
    return set(os.listdir(d)) if d and os.path.isdir(d) else set()


def pytest_configure(config):
    _seen.update(_logs())
    _write(f"pid {os.getpid()}")


def pytest_collection_modifyitems(session, config, items):
    after = os.environ.get("SANITIZE_RESUME_AFTER")
    if not after:
        return
    ids = [item.nodeid for item in items]
    if after not in ids:
        return
    cut = ids.index(after) + 1
    config.hook.pytest_deselected(items=items[:cut])
    del items[:cut]


def pytest_runtest_logstart(nodeid, location):
    _write(f"start {nodeid}")


def pytest_runtest_logfinish(nodeid, location):
    new = _logs() - _seen
    for name in sorted(new):
        _write(f"report {nodeid} {name}")
    _seen.update(new)
    _write(f"end {nodeid}")
