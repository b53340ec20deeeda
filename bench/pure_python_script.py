"""A tensor-free script for bench/launcher_overhead.py: bench/pure_python_work.py's workload,
timed from inside (never imports torch)."""
import time

from pure_python_work import pure_python

t = time.perf_counter()
for _ in range(10):
    pure_python(3000)
print("work", time.perf_counter() - t)
