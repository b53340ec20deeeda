// tests/cpp/llvm/test_parallel.cpp — fastdyn_parallel_for (runtime/parallel.h) called directly:
// every index exactly once, chunks of at least `grain`, inline when small or already parallel.
#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "runtime/parallel.h"

namespace {

struct Record {
  std::vector<std::atomic<int>> hits;
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  std::set<std::thread::id> threads;
  explicit Record(int64_t n) : hits(size_t(n)) {}
};

void record_body(void* ctx, int64_t begin, int64_t end) {
  auto* r = static_cast<Record*>(ctx);
  for (int64_t i = begin; i < end; ++i) r->hits[size_t(i)]++;
  std::lock_guard<std::mutex> lock(r->mutex);
  r->chunks.emplace_back(begin, end);
  r->threads.insert(std::this_thread::get_id());
}

TEST(ParallelFor, CoversEveryIndexOnceInChunksOfAtLeastGrain) {
  at::set_num_threads(2);
  for (int64_t n : {1, 2, 1000, 100001}) {
    for (int64_t grain : {1, 7, 4096}) {
      Record r(n);
      fastdyn_parallel_for(n, grain, record_body, &r);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(r.hits[size_t(i)].load(), 1) << "i=" << i << " n=" << n;
      for (auto [b, e] : r.chunks) EXPECT_TRUE(e - b >= grain || e == n) << b << ".." << e << " grain " << grain;
      EXPECT_LE(r.threads.size(), 2u);
    }
  }
}

TEST(ParallelFor, LargeRangeUsesMoreThanOneThread) {
  at::set_num_threads(2);
  Record r(1 << 20);
  fastdyn_parallel_for(1 << 20, 1024, record_body, &r);
  EXPECT_EQ(r.threads.size(), 2u) << "chunks: " << r.chunks.size();
}

TEST(ParallelFor, SmallRangeRunsInlineAsOneChunk) {
  Record r(100);
  fastdyn_parallel_for(100, 100, record_body, &r);
  ASSERT_EQ(r.chunks.size(), 1u);
  EXPECT_EQ(r.chunks[0], std::make_pair(int64_t(0), int64_t(100)));
  EXPECT_EQ(*r.threads.begin(), std::this_thread::get_id());
}

// The outer call opens the parallel region (a kernel's outer loop); each chunk's inner call
// (a nested kernel, or ATen called from one) must run inline as one chunk on the same thread.
struct Nested {
  std::atomic<int> calls{0}, inline_calls{0};
};
void outer_body(void* ctx, int64_t begin, int64_t end) {
  auto* nested = static_cast<Nested*>(ctx);
  for (int64_t i = begin; i < end; ++i) {
    Record r(1 << 16);
    fastdyn_parallel_for(1 << 16, 1, record_body, &r);
    nested->calls++;
    if (r.chunks.size() == 1 && r.threads.size() == 1 && *r.threads.begin() == std::this_thread::get_id())
      nested->inline_calls++;
  }
}

TEST(ParallelFor, NestedCallRunsInlineInsideParallelRegion) {
  at::set_num_threads(2);
  Nested nested;
  fastdyn_parallel_for(2, 1, outer_body, &nested);
  EXPECT_EQ(nested.calls.load(), 2);
  EXPECT_EQ(nested.inline_calls.load(), 2) << "a nested call must run as one inline chunk";
}

TEST(ParallelFor, EmptyAndNegativeRangesDoNothing) {
  Record r(1);
  fastdyn_parallel_for(0, 1, record_body, &r);
  fastdyn_parallel_for(-5, 1, record_body, &r);
  EXPECT_TRUE(r.chunks.empty());
}

}  // namespace
