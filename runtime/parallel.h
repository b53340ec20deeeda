// runtime/parallel.h — the one place generated kernels get threads from.
//
// fastdyn_parallel_for splits [0, n) into chunks of at least `grain` iterations and calls
// body(ctx, begin, end) for each, on ATen's intra-op thread pool (OpenMP in the CPU wheel), so
// fastdyn's kernels and ATen's share one set of threads and honour torch.set_num_threads.
// It runs inline, on the calling thread, when n <= grain or when already inside a parallel region.
// fastdyn_parallel_work is the form generated kernels call: each of the n tasks is about
// `work_per_task` elements of work, and a thread gets at least kFastdynGrainWork elements
// (fastdyn_grain_for): the division happens here, once per call, rather than in the kernel, where a
// size-symbolic work would cost a 64-bit division in every dynamic kernel's code (LLVM's
// instruction selection expands each one into a fast and a slow path: about 0.4 ms of compile).
// C ABI: the LLVM JIT resolves these symbols by name from generated code.
#pragma once
#include <cstdint>

extern "C" {
typedef void (*FastdynParallelBody)(void* ctx, int64_t begin, int64_t end);
void fastdyn_parallel_for(int64_t n, int64_t grain, FastdynParallelBody body, void* ctx);
void fastdyn_parallel_work(int64_t n, int64_t work_per_task, FastdynParallelBody body, void* ctx);
}

// Work (elements) below which a parallel chunk is not worth a thread.
constexpr int64_t kFastdynGrainWork = 32768;
// Tasks per thread at least, for tasks of `work_per_task` elements each.
inline int64_t fastdyn_grain_for(int64_t work_per_task) {
  return work_per_task >= kFastdynGrainWork ? 1 : kFastdynGrainWork / (work_per_task < 1 ? 1 : work_per_task);
}
