// tests/cpp/llvm/cache_demo.cpp — one process of the two-process warm-start check: looks up a
// kernel in the cache (FASTDYN_CACHE_DIR), compiles it on a miss, runs it, and prints how the
// kernel was obtained ("disk hit", "compiled") and whether its result is right. Run twice with
// the same directory (run_cache_demo.cmake): the second run must print "disk hit".
#include <chrono>
#include <cstdio>
#include <vector>

#include "codegen/llvm/jit_engine.h"
#include "tests/cpp/llvm/test_kernels.h"

using namespace fastdyn::codegen::llvm_jit;

int main() {
  const std::string key = "fastdyn cache demo: out = a + b + 0.25 (v1)";
  auto t0 = std::chrono::steady_clock::now();
  std::vector<void*> fns = find_cached(key, {"add"});
  const char* how = "disk hit";
  if (fns.empty()) {
    ModuleBuilder m = new_module("cache_demo");
    testing::add_add_kernel(*m.module, "add", 0.25f);
    fns = compile(std::move(m), key, {"add"});
    how = "compiled";
  }
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto add = reinterpret_cast<testing::AddKernel>(fns.at(0));
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f), out(1000);
  add(a.data(), b.data(), out.data(), 1000);
  bool ok = true;
  for (float v : out) ok = ok && v == 3.25f;
  CacheStats s = cache_stats();
  std::printf("%s in %.2f ms (disk_hits=%lld compiles=%lld rejected=%lld) result %s\n", how, ms,
              (long long)s.disk_hits, (long long)s.compiles, (long long)s.rejected_files, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
