// runtime/parallel.cpp — fastdyn_parallel_for over ATen's intra-op pool (see parallel.h).
#include "runtime/parallel.h"

#include <ATen/Parallel.h>

extern "C" void fastdyn_parallel_for(int64_t n, int64_t grain, FastdynParallelBody body, void* ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  // NB: decide inline ourselves rather than leave it to at::parallel_for: the check is two
  // compares, and it keeps tiny kernels off the pool's lambda/exception machinery altogether.
  if (n <= grain || at::in_parallel_region() || at::get_num_threads() <= 1) {
    body(ctx, 0, n);
    return;
  }
  at::parallel_for(0, n, grain, [body, ctx](int64_t begin, int64_t end) { body(ctx, begin, end); });
}

extern "C" void fastdyn_parallel_work(int64_t n, int64_t work_per_task, FastdynParallelBody body, void* ctx) {
  fastdyn_parallel_for(n, fastdyn_grain_for(work_per_task), body, ctx);
}
