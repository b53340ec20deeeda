// tests/cpp/runtime/test_kernel_cache.cpp — the kernel cache's file format and file names
// (runtime/kernel_cache.h), with no compiler: what any compiling backend's binaries go through.
// The llvm_cpu engine's use of it (disk hits, corrupt and foreign files rejected and rewritten)
// is tested in tests/cpp/llvm/test_llvm_jit.cpp.
#include "runtime/kernel_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace fastdyn::runtime {
namespace {

TEST(KernelCacheFile, EncodeDecodeRoundTripsAndChecksEveryField) {
  TargetIdentity target{"llvm_cpu", "19.1.7", "znver4", "+avx2,+fma", "build 1"};
  KernelCache cache(target);
  const std::string object("\x7f" "ELF\0\1\2object bytes", 20);
  const std::string file = cache.encode_file("key", object);
  EXPECT_EQ(file.compare(0, 8, "FDKCACHE"), 0);
  EXPECT_EQ(cache.decode_file(file, "key"), object);
  EXPECT_FALSE(cache.decode_file(file, "kez").has_value());
  EXPECT_FALSE(cache.decode_file(file, "ke").has_value());
  // Another value of any identity field: not this target's binary.
  for (std::string TargetIdentity::*field : {&TargetIdentity::backend, &TargetIdentity::toolchain, &TargetIdentity::device,
                                             &TargetIdentity::features, &TargetIdentity::build}) {
    TargetIdentity other = target;
    other.*field += "x";
    EXPECT_FALSE(KernelCache(other).decode_file(file, "key").has_value()) << other.*field;
  }
  // Every single-byte change anywhere in the file is caught.
  for (size_t i = 0; i < file.size(); ++i) {
    std::string bad = file;
    bad[i] ^= 0x20;
    EXPECT_FALSE(cache.decode_file(bad, "key").has_value()) << "byte " << i;
  }
  for (size_t n = 0; n < file.size(); ++n) EXPECT_FALSE(cache.decode_file(file.substr(0, n), "key").has_value()) << n;
  // An empty binary (a program record) round-trips too.
  EXPECT_EQ(cache.decode_file(cache.encode_file("record", ""), "record"), std::string());
}

TEST(KernelCacheFile, FileNameDependsOnKeyAndTarget) {
  ::setenv("FASTDYN_CACHE_DIR", "/tmp", 1);
  KernelCache a({"llvm_cpu", "19.1.7", "znver4", "+avx2", ""}), b({"llvm_cpu", "19.1.7", "znver3", "+avx2", ""});
  KernelCache c({"cuda", "19.1.7", "znver4", "+avx2", ""});
  EXPECT_NE(a.file_path("k1"), a.file_path("k2"));
  EXPECT_NE(a.file_path("k1"), b.file_path("k1"));
  EXPECT_NE(a.file_path("k1"), c.file_path("k1"));
  EXPECT_EQ(a.file_path("k1"), KernelCache({"llvm_cpu", "19.1.7", "znver4", "+avx2", ""}).file_path("k1"));
  EXPECT_EQ(a.file_path("k1").rfind("/tmp/", 0), 0u);
  ::setenv("FASTDYN_CACHE_DIR", "off", 1);
  EXPECT_EQ(a.file_path("k1"), "");
  ::unsetenv("FASTDYN_CACHE_DIR");
}

// The memory side: bounded, least recently used first out, and a hit refreshes an entry.
TEST(KernelCacheMemory, BoundedLeastRecentlyUsedFirstOut) {
  KernelCache cache({"test", "", "", "", ""});
  cache.set_memory_bound(2);
  std::vector<KernelCache::Entry> evicted;
  int handles[3];
  for (int i = 0; i < 2; ++i) {
    KernelCache::Entry e;
    e.handle = &handles[i];
    cache.insert_memory("k" + std::to_string(i), std::move(e), &evicted);
  }
  ASSERT_NE(cache.find_memory("k0"), nullptr);  // k0 is now the most recent
  KernelCache::Entry e;
  e.handle = &handles[2];
  cache.insert_memory("k2", std::move(e), &evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].handle, &handles[1]);
  EXPECT_EQ(cache.find_memory("k1"), nullptr);
  ASSERT_NE(cache.find_memory("k0"), nullptr);
  EXPECT_EQ(cache.find_memory("k0")->handle, &handles[0]);
  EXPECT_EQ(cache.stats().memory_evictions, 1);
  EXPECT_EQ(cache.memory_size(), 2u);
}

}  // namespace
}  // namespace fastdyn::runtime
