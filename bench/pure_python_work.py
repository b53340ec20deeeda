"""The tensor-free workload of the pure_python bench case and of bench/pure_python_script.py
(loops, dict updates, small function calls; about 2n Python frames). Never imports torch."""


def collatz_len(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def bucket(counts, key, value):
    counts[key] = counts.get(key, 0) + value


def pure_python(n):
    counts = {}
    for i in range(1, n + 1):
        bucket(counts, i % 17, collatz_len(i))
    return sum(k * v for k, v in counts.items())
