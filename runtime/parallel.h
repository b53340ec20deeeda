// runtime/parallel.h — the one place generated kernels get threads from.
//
// fastdyn_parallel_for splits [0, n) into chunks of at least `grain` iterations and calls
// body(ctx, begin, end) for each, on ATen's intra-op thread pool (OpenMP in the CPU wheel), so
// fastdyn's kernels and ATen's share one set of threads and honour torch.set_num_threads.
// It runs inline, on the calling thread, when n <= grain or when already inside a parallel region.
// C ABI: the LLVM JIT resolves this symbol by name from generated code.
#pragma once
#include <cstdint>

extern "C" {
typedef void (*FastdynParallelBody)(void* ctx, int64_t begin, int64_t end);
void fastdyn_parallel_for(int64_t n, int64_t grain, FastdynParallelBody body, void* ctx);
}
