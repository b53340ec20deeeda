"""A tensor-free workload for bench/launcher_overhead.py (never imports torch)."""
import time


def collatz_len(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def bucket(counts, key, value):
    counts[key] = counts.get(key, 0) + value


def workload(n):
    counts = {}
    for i in range(1, n + 1):
        bucket(counts, i % 17, collatz_len(i))
    return sum(k * v for k, v in counts.items())


t = time.perf_counter()
for _ in range(10):
    workload(3000)
print("work", time.perf_counter() - t)
