// tests/cpp/llvm/test_llvm_jit.cpp — the LLVM JIT engine and its kernel cache, without Python:
// kernels built by hand with IRBuilder, compiled, run and checked; memory and disk hits; corrupt,
// foreign and unreadable cache files; compile-time measurement.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <cstring>
#include <cmath>
#include <sstream>

#include <gtest/gtest.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Support/CommandLine.h>

#include "codegen/llvm/jit_engine.h"
#include "runtime/kernel_cache.h"
#include "runtime/errors.h"
#include "tests/cpp/llvm/test_kernels.h"

namespace fastdyn::codegen::llvm_jit {
namespace {

using runtime::KernelCache;
using runtime::TargetIdentity;

namespace fs = std::filesystem;
using testing::AddKernel;
using testing::ParallelScaleKernel;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// Every test runs with its own empty cache directory and an engine that remembers nothing.
class LlvmJit : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "fastdyn_jit_test_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    use_cache_dir(dir_);
  }
  void TearDown() override {
    reset_for_testing();
    ::chmod(dir_.c_str(), 0755);
    fs::remove_all(dir_);
    ::unsetenv("FASTDYN_CACHE_DIR");
  }
  void use_cache_dir(const std::string& dir) {
    ::setenv("FASTDYN_CACHE_DIR", dir.c_str(), 1);
    reset_for_testing();
  }

  // Compiles `add` (out = a + b + bias) under `key` and returns it.
  AddKernel compile_add(const std::string& key, float bias = 0.0f) {
    ModuleBuilder m = new_module("add_module");
    testing::add_add_kernel(*m.module, "add", bias);
    std::vector<void*> fns = compile(std::move(m), key, {"add"});
    EXPECT_EQ(fns.size(), 1u);
    return reinterpret_cast<AddKernel>(fns.at(0));
  }

  // Runs an add kernel on n elements and checks every output.
  static void check_add(AddKernel add, int64_t n, float bias = 0.0f) {
    std::vector<float> a(n), b(n), out(n, -1.0f);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = 0.5f * float(i);
      b[i] = float(n - i);
    }
    add(a.data(), b.data(), out.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i] + bias) << "i=" << i << " n=" << n;
  }

  std::vector<std::string> cache_files() const {
    std::vector<std::string> out;
    for (const auto& entry : fs::directory_iterator(dir_)) out.push_back(entry.path().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  std::string dir_;
};

TEST(LlvmHost, TargetDescribesThisMachine) {
  const HostTarget& h = host_target();
  EXPECT_NE(h.triple.find("x86_64"), std::string::npos) << h.triple;
  EXPECT_FALSE(h.cpu.empty());
  EXPECT_NE(h.features.find("+sse2"), std::string::npos) << h.features;
  EXPECT_TRUE(h.vector_bits == 128 || h.vector_bits == 256 || h.vector_bits == 512) << h.vector_bits;
  if (h.features.find("+avx2,") != std::string::npos) EXPECT_GE(h.vector_bits, 256);
  // Where ATen's AVX512 kernels run, ours use 512-bit vectors too, whatever LLVM's tuning prefers.
  const std::string f = h.features + ",";
  bool avx512 = true;
  for (const char* need : {"+avx512f,", "+avx512bw,", "+avx512dq,", "+avx512vl,"}) avx512 = avx512 && f.find(need) != std::string::npos;
  if (avx512 && !std::getenv("FASTDYN_VECTOR_BITS")) EXPECT_EQ(h.vector_bits, 512);
  std::printf("[ host     ] %s cpu=%s vector_bits=%d\n", h.triple.c_str(), h.cpu.c_str(), h.vector_bits);
}

TEST_F(LlvmJit, CompiledAddKernelComputesForOddAndEmptySizes) {
  AddKernel add = compile_add("test add v1");
  for (int64_t n : {0, 1, 7, 16, 17, 1003, 4096 + 5}) check_add(add, n);
  EXPECT_EQ(cache_stats().compiles, 1);
}

// Loop strength reduction is off for the kernels (it cost 15-20% of their LLVM time and gained
// nothing in their speed), and the cache's identity says so: objects built with it stay apart.
TEST_F(LlvmJit, KernelsCompileWithoutLoopStrengthReduction) {
  compile_add("lsr");
  if (const char* args = std::getenv("FASTDYN_LLVM_ARGS"); args && std::strstr(args, "disable-lsr"))
    GTEST_SKIP() << "FASTDYN_LLVM_ARGS chooses LSR itself";
  auto* lsr = static_cast<llvm::cl::opt<bool>*>(llvm::cl::getRegisteredOptions().lookup("disable-lsr"));
  ASSERT_NE(lsr, nullptr) << "LLVM no longer registers -disable-lsr";
  EXPECT_TRUE(lsr->getValue());
  EXPECT_NE(engine_target_identity().toolchain.find(" lsr=off"), std::string::npos) << engine_target_identity().toolchain;
}

TEST_F(LlvmJit, SmallPointwiseKernelCompilesInMilliseconds) {
  compile_add("warm-up");  // the first compile pays for lazily built LLVM tables
  std::vector<double> total, optimise, codegen, link;
  for (int i = 0; i < 9; ++i) {
    AddKernel add = compile_add("timing " + std::to_string(i), float(i));
    check_add(add, 33, float(i));
    CompileTimes t = last_compile_times();
    total.push_back(t.total_ms);
    optimise.push_back(t.optimise_ms);
    codegen.push_back(t.codegen_ms);
    link.push_back(t.link_ms);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  std::printf("[ compile  ] small pointwise kernel: median %.2f ms (optimise %.2f, codegen %.2f, link %.2f)\n",
              median(total), median(optimise), median(codegen), median(link));
  // Generous bound: catches a pathological pipeline, not machine noise. The target is a few ms.
  EXPECT_LT(median(total), 100.0);
}

TEST_F(LlvmJit, ParallelForKernelCoversEveryElementOnce) {
  ModuleBuilder m = new_module("scale_module");
  testing::add_parallel_scale_kernel(*m.module, "scale");
  auto scale = reinterpret_cast<ParallelScaleKernel>(compile(std::move(m), "test scale", {"scale"}).at(0));
  for (int64_t n : {0, 1, 100, 100003}) {
    for (int64_t grain : {1, 64, 1 << 20}) {
      std::vector<float> a(n), out(n, 0.0f);
      std::iota(a.begin(), a.end(), 1.0f);
      scale(a.data(), out.data(), n, grain);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0f * a[i]) << "i=" << i << " n=" << n << " grain=" << grain;
    }
  }
}

// The memory cache is bounded: the least recently used kernel goes first, a kernel an
// executable still holds stays callable (its module linked) until that holder lets go, and an
// evicted kernel comes back from the disk cache.
TEST_F(LlvmJit, MemoryCacheIsBoundedAndEvictsLeastRecentlyUsed) {
  set_memory_bound(2);
  const size_t linked_before = linked_modules();
  std::shared_ptr<void> held;
  ModuleBuilder m = new_module("add_module");
  testing::add_add_kernel(*m.module, "add", 1.0f);
  auto first = reinterpret_cast<AddKernel>(compile(std::move(m), "test lru a", {"add"}, &held).at(0));
  ASSERT_TRUE(held);
  compile_add("test lru b", 2.0f);
  ASSERT_EQ(find_cached("test lru a", {"add"}).size(), 1u);  // a is now the most recently used
  compile_add("test lru c", 3.0f);                             // evicts b, the least recently used
  CacheStats s = cache_stats();
  EXPECT_EQ(s.memory_evictions, 1);
  EXPECT_EQ(linked_modules(), linked_before + 2) << "b had no holder: its module is gone";
  compile_add("test lru d", 4.0f);  // evicts a: still held by `held`, so still linked
  EXPECT_EQ(cache_stats().memory_evictions, 2);
  EXPECT_EQ(linked_modules(), linked_before + 3);
  check_add(first, 1000, 1.0f);
  held.reset();
  EXPECT_EQ(linked_modules(), linked_before + 2) << "its last holder let go";
  // b comes back from disk, evicting c.
  std::vector<void*> again = find_cached("test lru b", {"add"});
  ASSERT_EQ(again.size(), 1u);
  check_add(reinterpret_cast<AddKernel>(again[0]), 100, 2.0f);
  EXPECT_EQ(cache_stats().disk_hits, 1);
  set_memory_bound(KernelCache::kDefaultMemoryBound);
}

TEST_F(LlvmJit, SecondLookupOfSameKeyIsMemoryHit) {
  EXPECT_TRUE(find_cached("test memo", {"add"}).empty());
  AddKernel add = compile_add("test memo");
  std::vector<void*> again = find_cached("test memo", {"add"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0], reinterpret_cast<void*>(add));
  CacheStats s = cache_stats();
  EXPECT_EQ(s.memory_hits, 1);
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.disk_hits, 0);
}

TEST_F(LlvmJit, SameSymbolNameInTwoModulesKeepsBothKernels) {
  AddKernel plus1 = compile_add("test bias 1", 1.0f);
  AddKernel plus2 = compile_add("test bias 2", 2.0f);
  EXPECT_NE(plus1, plus2);
  check_add(plus1, 19, 1.0f);
  check_add(plus2, 19, 2.0f);
}

TEST_F(LlvmJit, FreshEngineStateFindsKernelOnDisk) {
  compile_add("test disk", 3.0f);
  ASSERT_EQ(cache_files().size(), 1u);
  EXPECT_EQ(cache_dir(), dir_);
  reset_for_testing();  // as if a second process started
  std::vector<void*> fns = find_cached("test disk", {"add"});
  ASSERT_EQ(fns.size(), 1u);
  check_add(reinterpret_cast<AddKernel>(fns[0]), 1003, 3.0f);
  CacheStats s = cache_stats();
  EXPECT_EQ(s.disk_hits, 1);
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.rejected_files, 0);
  // ... and the kernel now sits in memory.
  EXPECT_EQ(find_cached("test disk", {"add"}), fns);
  EXPECT_EQ(cache_stats().memory_hits, 1);
}

TEST_F(LlvmJit, DiskHitWithUnknownSymbolIsRejectedNotTrusted) {
  compile_add("test symbols");
  reset_for_testing();
  EXPECT_TRUE(find_cached("test symbols", {"add", "no_such_kernel"}).empty());
  EXPECT_EQ(cache_stats().rejected_files, 1);
  EXPECT_EQ(cache_stats().disk_hits, 0);
}

// Each corruption of a valid cache file must be detected: find_cached misses and counts a
// rejection, compile() rewrites the file, and the rewritten file then serves a disk hit.
struct Corruption {
  const char* name;
  std::function<std::string(const std::string& file)> apply;
};

// The file re-encoded for the engine's own identity with one field changed by `edit`.
std::string reencode_for(const std::string& file, const std::string& key,
                         const std::function<void(TargetIdentity&)>& edit) {
  std::optional<std::string> object = KernelCache(engine_target_identity()).decode_file(file, key);
  EXPECT_TRUE(object.has_value());
  TargetIdentity target = engine_target_identity();
  edit(target);
  return KernelCache(std::move(target)).encode_file(key, object.value_or(""));
}

const char* const kCorruptKey = "test corrupt";

const Corruption kCorruptions[] = {
    {"flipped object byte", [](const std::string& f) { std::string s = f; s[s.size() - 100] ^= 0x5a; return s; }},
    {"flipped last byte", [](const std::string& f) { std::string s = f; s.back() ^= 1; return s; }},
    {"flipped key byte", [](const std::string& f) {
       std::string s = f; s[s.find(kCorruptKey) + 2] ^= 1; return s; }},
    {"truncated", [](const std::string& f) { return f.substr(0, f.size() / 2); }},
    {"truncated header", [](const std::string& f) { return f.substr(0, 11); }},
    {"empty", [](const std::string&) { return std::string(); }},
    {"trailing garbage", [](const std::string& f) { return f + "xyz"; }},
    {"wrong magic", [](const std::string& f) { std::string s = f; s[0] = 'X'; return s; }},
    {"other format version", [](const std::string& f) { std::string s = f; s[8] ^= 0x7; return s; }},
    {"other cpu", [](const std::string& f) {
       return reencode_for(f, kCorruptKey, [](TargetIdentity& t) { t.device = "pentium4"; }); }},
    {"other features", [](const std::string& f) {
       return reencode_for(f, kCorruptKey, [](TargetIdentity& t) { t.features = "+sse2"; }); }},
    {"other llvm", [](const std::string& f) {
       return reencode_for(f, kCorruptKey, [](TargetIdentity& t) { t.toolchain = "18.1.0"; }); }},
    {"other backend", [](const std::string& f) {
       return reencode_for(f, kCorruptKey, [](TargetIdentity& t) { t.backend = "cuda"; }); }},
    {"other fastdyn build", [](const std::string& f) {
       return reencode_for(f, kCorruptKey, [](TargetIdentity& t) { t.build += "0"; }); }},
    {"object of another key", [](const std::string& f) {
       std::string s = reencode_for(f, kCorruptKey, [](TargetIdentity&) {});
       return s.replace(s.find(kCorruptKey), std::string(kCorruptKey).size(), "test c0rrupt"); }},
};

// The corruptions above that re-encode are only meaningful if re-encoding with the engine's own
// identity reproduces the file byte for byte.
TEST_F(LlvmJit, CacheFileIsExactlyTheEncodingOfEngineIdentityAndObject) {
  compile_add(kCorruptKey, 5.0f);
  const std::string file = read_file(cache_files().at(0));
  EXPECT_EQ(reencode_for(file, kCorruptKey, [](TargetIdentity&) {}), file);
  EXPECT_FALSE(engine_target_identity().build.empty()) << "this test binary should be identifiable";
}

TEST_F(LlvmJit, CorruptOrForeignCacheFilesAreRejectedAndRewritten) {
  for (const Corruption& c : kCorruptions) {
    SCOPED_TRACE(c.name);
    use_cache_dir(dir_);
    fs::remove_all(dir_);
    fs::create_directory(dir_);
    compile_add(kCorruptKey, 5.0f);
    std::vector<std::string> files = cache_files();
    ASSERT_EQ(files.size(), 1u);
    const std::string good = read_file(files[0]);
    const std::string bad = c.apply(good);
    ASSERT_NE(bad, good);
    write_file(files[0], bad);

    reset_for_testing();
    EXPECT_TRUE(find_cached(kCorruptKey, {"add"}).empty());
    EXPECT_EQ(cache_stats().rejected_files, 1);
    EXPECT_EQ(cache_stats().disk_hits, 0);
    check_add(compile_add(kCorruptKey, 5.0f), 41, 5.0f);
    EXPECT_EQ(read_file(files[0]), good) << "the recompiled object must overwrite the bad file";
    EXPECT_EQ(cache_files().size(), 1u) << "no temporary files left behind";

    reset_for_testing();
    std::vector<void*> fns = find_cached(kCorruptKey, {"add"});
    ASSERT_EQ(fns.size(), 1u);
    check_add(reinterpret_cast<AddKernel>(fns[0]), 41, 5.0f);
  }
}

TEST_F(LlvmJit, UnusableCacheDirectoryNeverBreaksCompilation) {
  // A path below a regular file can never be created (even by root); the cache is then off.
  const std::string file = dir_ + "/not_a_directory";
  write_file(file, "x");
  use_cache_dir(file + "/cache");
  EXPECT_EQ(cache_dir(), "");
  check_add(compile_add("test unusable dir"), 9);
  reset_for_testing();
  EXPECT_TRUE(find_cached("test unusable dir", {"add"}).empty());
  EXPECT_EQ(cache_stats().rejected_files, 0);

  // A read-only directory: compile works, and (unless we are root, whom chmod does not stop)
  // nothing is written.
  const std::string ro = dir_ + "/read_only";
  fs::create_directory(ro);
  ::chmod(ro.c_str(), 0555);
  use_cache_dir(ro);
  check_add(compile_add("test read-only dir"), 9);
  if (::geteuid() != 0) EXPECT_TRUE(fs::is_empty(ro));
  ::chmod(ro.c_str(), 0755);
}

TEST_F(LlvmJit, CacheOffWritesNothing) {
  use_cache_dir("off");
  EXPECT_EQ(cache_dir(), "");
  check_add(compile_add("test off"), 5);
  EXPECT_TRUE(cache_files().empty());
  reset_for_testing();
  EXPECT_TRUE(find_cached("test off", {"add"}).empty());
}

TEST_F(LlvmJit, InvalidModuleIsBackendErrorWithVerifierMessage) {
  ModuleBuilder m = new_module("broken_module");
  llvm::IRBuilder<> ir(*m.context);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(ir.getVoidTy(), false), llvm::Function::ExternalLinkage,
                                    "bad", *m.module);
  llvm::BasicBlock::Create(*m.context, "entry", fn);  // no terminator
  try {
    compile(std::move(m), "test invalid", {"bad"});
    FAIL() << "an invalid module compiled";
  } catch (const BackendError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("broken_module"), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not have terminator"), std::string::npos) << msg;
  }
  EXPECT_TRUE(cache_files().empty());
  EXPECT_TRUE(find_cached("test invalid", {"bad"}).empty());
}

// Kernels may call the C math library and the compiler's runtime helpers: llvm.powi becomes a
// call to __powisf2 (libgcc), nextafterf is plain libm.
TEST_F(LlvmJit, LibmAndCompilerHelpersResolveFromTheProcess) {
  ModuleBuilder m = new_module("helpers_module");
  llvm::IRBuilder<> ir(*m.context);
  auto* f32 = ir.getFloatTy();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(f32, {f32, ir.getInt32Ty()}, false),
                                    llvm::Function::ExternalLinkage, "helpers", *m.module);
  ir.SetInsertPoint(llvm::BasicBlock::Create(*m.context, "entry", fn));
  llvm::Value* powi = ir.CreateIntrinsic(llvm::Intrinsic::powi, {f32, ir.getInt32Ty()}, {fn->getArg(0), fn->getArg(1)});
  llvm::FunctionCallee nextafterf = m.module->getOrInsertFunction("nextafterf", f32, f32, f32);
  ir.CreateRet(ir.CreateCall(nextafterf, {powi, llvm::ConstantFP::get(f32, 1e30)}));
  auto helpers = reinterpret_cast<float (*)(float, int32_t)>(compile(std::move(m), "test helpers", {"helpers"}).at(0));
  for (int e : {0, 1, 3, -2, 7}) {
    volatile float x = 1.5f;
    EXPECT_EQ(helpers(x, e), std::nextafter(std::pow(1.5f, float(e)), 1e30f)) << "e=" << e;
  }
}

TEST_F(LlvmJit, MissingSymbolIsBackendErrorNamingIt) {
  ModuleBuilder m = new_module("add_module");
  testing::add_add_kernel(*m.module, "add");
  try {
    compile(std::move(m), "test missing", {"add", "sub"});
    FAIL() << "a missing symbol was not reported";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("sub"), std::string::npos) << e.what();
  }
}

TEST_F(LlvmJit, UnresolvableExternalIsBackendError) {
  ModuleBuilder m = new_module("extern_module");
  llvm::IRBuilder<> ir(*m.context);
  auto* callee = m.module->getOrInsertFunction("fastdyn_no_such_function", ir.getVoidTy()).getCallee();
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(ir.getVoidTy(), false), llvm::Function::ExternalLinkage,
                                    "calls_nothing", *m.module);
  ir.SetInsertPoint(llvm::BasicBlock::Create(*m.context, "entry", fn));
  ir.CreateCall(llvm::FunctionType::get(ir.getVoidTy(), false), callee);
  ir.CreateRetVoid();
  try {
    compile(std::move(m), "test unresolved", {"calls_nothing"});
    FAIL() << "an unresolvable external linked";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("fastdyn_no_such_function"), std::string::npos) << e.what();
  }
}

// bfloat16 nearest to v (ties to even), from a table of every finite bf16: an oracle that shares
// nothing with the engine's bit tricks.
uint16_t bf16_oracle(long double v) {
  static const std::vector<std::pair<long double, uint16_t>> finite = [] {
    std::vector<std::pair<long double, uint16_t>> out;
    for (uint32_t b = 0; b < 0x10000; ++b) {
      uint32_t bits = b << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      if (std::isfinite(f) && !(f == 0 && std::signbit(f))) out.emplace_back(f, uint16_t(b));
    }
    std::sort(out.begin(), out.end());
    return out;
  }();
  if (std::isnan(v)) return 0x7fc0;
  // Halfway between the largest bf16, (2 - 2^-7) * 2^127, and 2^128 rounds to infinity.
  const long double overflow = std::ldexp(1.0L, 127) * (2 - std::ldexp(1.0L, -8));
  if (v >= overflow) return 0x7f80;
  if (v <= -overflow) return 0xff80;
  auto hi = std::lower_bound(finite.begin(), finite.end(), std::make_pair(v, uint16_t(0)));
  auto lo = hi == finite.begin() ? hi : hi - 1;
  if (hi == finite.end()) hi = lo;
  auto pick = (v - lo->first < hi->first - v) ? lo
              : (v - lo->first > hi->first - v) ? hi
              : ((lo->second & 1) == 0 ? lo : hi);
  uint16_t bits = pick->second;
  if (pick->first == 0 && std::signbit(v)) bits = 0x8000;
  return bits;
}

// On a CPU without bf16 instructions LLVM converts through __truncsfbf2 / __truncdfbf2, which the
// engine supplies; the kernel here is compiled for baseline x86-64 to take that path anywhere.
TEST_F(LlvmJit, Bf16ConversionsWithoutHardwareRoundToNearestEven) {
  ModuleBuilder m = new_module("bf16_module");
  llvm::IRBuilder<> ir(*m.context);
  auto make = [&](const char* name, llvm::Type* from) {
    auto* fn = llvm::Function::Create(llvm::FunctionType::get(ir.getInt16Ty(), {from}, false),
                                      llvm::Function::ExternalLinkage, name, *m.module);
    fn->addFnAttr("target-cpu", "x86-64");
    fn->addFnAttr("target-features", "+sse2,+cx8,+x87");
    ir.SetInsertPoint(llvm::BasicBlock::Create(*m.context, "entry", fn));
    ir.CreateRet(ir.CreateBitCast(ir.CreateFPTrunc(fn->getArg(0), ir.getBFloatTy()), ir.getInt16Ty()));
  };
  make("f2bf", ir.getFloatTy());
  make("d2bf", ir.getDoubleTy());
  std::vector<void*> fns = compile(std::move(m), "test bf16", {"f2bf", "d2bf"});
  auto f2bf = reinterpret_cast<uint16_t (*)(float)>(fns[0]);
  auto d2bf = reinterpret_cast<uint16_t (*)(double)>(fns[1]);

  std::vector<double> values = {0.0, -0.0, 1.0, -1.0, 1.00390625, 1.01171875, 1.005859375, 3.0e38, 3.39e38, 3.3961e38,
                                3.4e38, 1e39, -1e39, 1e-40, 9.2e-41, 4.6e-41, 1e-45, 1e-50, INFINITY, -INFINITY};
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-4, 4);
  for (int i = 0; i < 2000; ++i) values.push_back(std::ldexp(u(rng), int(rng() % 260) - 130));
  for (double d : values) {
    const float f = float(d);
    EXPECT_EQ(f2bf(f), bf16_oracle(f)) << "float " << f;
    EXPECT_EQ(d2bf(d), bf16_oracle(d)) << "double " << d;
  }
  // A double just above a bf16 tie must round up, which a double -> float -> bf16 chain of two
  // round-to-nearest steps gets wrong: 1 + 2^-8 + 2^-30 is not a float.
  EXPECT_EQ(d2bf(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30)), 0x3f81);
  EXPECT_EQ(f2bf(NAN) & 0x7fc0, 0x7fc0);
  EXPECT_EQ(d2bf(NAN) & 0x7fc0, 0x7fc0);

  // The object calls the helpers (the hardware path would not need them).
  const std::string object = read_file(cache_files().at(0));
  EXPECT_NE(object.find("__truncsfbf2"), std::string::npos);
  EXPECT_NE(object.find("__truncdfbf2"), std::string::npos);
}

// Warm-start records: written once, read back by a later process (reset_for_testing forgets what
// this one remembers), in their own .prog files; a corrupt record or a disk cache that is off is
// no record.
TEST_F(LlvmJit, ProgramRecordsAreReadBackAndNeverTrustedCorrupt) {
  EXPECT_FALSE(program_recorded("program p1"));
  record_program("program p1");
  EXPECT_TRUE(program_recorded("program p1"));
  EXPECT_FALSE(program_recorded("program p2"));
  reset_for_testing();
  EXPECT_TRUE(program_recorded("program p1")) << "the record is on disk";
  EXPECT_EQ(cache_stats().compiles + cache_stats().disk_hits + cache_stats().rejected_files, 0) << "records are not kernels";
  const std::vector<std::string> files = cache_files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].substr(files[0].size() - 5), ".prog");
  std::string bytes = read_file(files[0]);
  bytes[bytes.size() / 2] ^= 0x20;
  write_file(files[0], bytes);
  reset_for_testing();
  EXPECT_FALSE(program_recorded("program p1")) << "a corrupt record was trusted";
  EXPECT_EQ(cache_stats().rejected_files, 0) << "a record is not a kernel file";
  ::setenv("FASTDYN_CACHE_DIR", "off", 1);
  record_program("program p3");
  EXPECT_FALSE(program_recorded("program p3"));
}

}  // namespace
}  // namespace fastdyn::codegen::llvm_jit
