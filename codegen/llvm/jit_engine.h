// codegen/llvm/jit_engine.h — the LLVM 19 ORC JIT that turns kernel modules into native code for
// this host, with the kernel cache in front of it (memory, then disk).
//
// Contract (the kernel emitter codes against this; the engine owns everything below it):
// - Kernels are plain C-ABI functions emitted into a Module made by new_module(), which carries the
//   host triple and data layout. The engine optimises (a short function pipeline: the emitter
//   vectorises for the host itself; FASTDYN_LLVM_PIPELINE=o3 runs LLVM's O3 instead, see
//   jit_engine.cpp), compiles, and links each module into its own JITDylib, so two modules may
//   reuse symbol names.
// - Before building a module at all, the caller asks find_cached(key) — compile time is a product
//   feature: a hit costs a hash lookup (memory) or one small file read plus linking (disk).
//   `key_text` is the full canonical text of what the module computes (e.g. the printed loop IR);
//   the engine hashes it together with the host CPU name and features, the LLVM version and the
//   cache format version, and stores key_text inside the file so that a hash collision, a corrupt
//   or truncated file, or a file written for another CPU is rejected (and recompiled), never used.
// - Disk cache: $FASTDYN_CACHE_DIR, else ~/.cache/fastdyn; FASTDYN_CACHE_DIR=off disables it.
//   Writes are atomic (temp file + rename), so concurrent processes never see half a file.
// - Vector math: SLEEF (Debian libsleef) functions are resolvable by the JIT; math_function()
//   declares the right one in a module (scalar or vector form, f32/f64, lane count).
// - Threads: generated code splits outer loops with fastdyn_parallel_for (runtime/parallel.h),
//   whose address the JIT resolves.
// No Python headers; no ATen headers. Thread-safe: one mutex around the JIT and the cache, and one
// around optimisation and codegen, never held together with the first (a lookup never waits for
// another kernel's compile).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kernel_cache.h"

namespace llvm {
class LLVMContext;
class Module;
class Function;
}  // namespace llvm

namespace fastdyn::codegen::llvm_jit {

struct HostTarget {
  std::string triple;    // "x86_64-pc-linux-gnu"
  std::string cpu;       // "znver3"
  std::string features;  // "+avx2,+fma,..."
  int vector_bits = 128; // widest vector register the kernels should use: 128, 256 or 512
};
const HostTarget& host_target();

// A fresh context + module configured for the host (triple, data layout).
struct ModuleBuilder {
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  ModuleBuilder();
  ModuleBuilder(ModuleBuilder&&) noexcept;
  ModuleBuilder& operator=(ModuleBuilder&&) noexcept;
  ~ModuleBuilder();
};
ModuleBuilder new_module(const std::string& name);

// Addresses of `symbols` (in that order) of a module compiled earlier under key_text, from memory
// or disk; empty if there is none (or the file was rejected).
// `hold`, when given, receives the kernel module's keep-alive handle: the addresses stay valid
// while it (or the cache's own) exists, also after the memory cache evicts the kernel.
std::vector<void*> find_cached(const std::string& key_text, const std::vector<std::string>& symbols,
                               std::shared_ptr<void>* hold = nullptr);

// Verifies, optimises and compiles the module, links it, stores the object in the memory and disk
// caches under key_text and returns the addresses of `symbols`. Throws BackendError naming the
// module and the verifier's message on invalid IR, or a missing symbol.
std::vector<void*> compile(ModuleBuilder m, const std::string& key_text,
                           const std::vector<std::string>& symbols, std::shared_ptr<void>* hold = nullptr);

// Math functions the JIT can call. A declaration in `m` of the SLEEF function computing `fn` on
// `lanes` elements of f32 (is_f64=false) or f64 (lanes == 1: the scalar form), accurate to 1 ULP
// (the _u10 variants) where SLEEF offers it, else the best it offers. nullptr if SLEEF has no
// such width on this host (the emitter then uses a narrower width or the scalar form).
enum class MathFn : uint8_t { Exp, Expm1, Log, Log1p, Log2, Log10, Sin, Cos, Tan, Tanh, Sinh, Cosh, Asin, Acos, Atan, Atan2, Erf, Erfc, Pow, Cbrt, Lgamma };
llvm::Function* math_function(llvm::Module& m, MathFn fn, bool is_f64, int lanes);

// Warm starts. A process that has built every kernel of a program records it in the disk cache
// under `program_key` (the printed program), so that a later process knows, before emitting
// anything, that the kernels are very likely on disk and loading them is all a first call needs.
// A record is a hint for that choice only: kernels are still looked up by their own keys, and a
// missing one is never served. Records hash the key with the fastdyn build alone (no LLVM, so that
// asking costs a file read on the caller's thread even while the engine is still being built).
bool program_recorded(const std::string& program_key);
void record_program(const std::string& program_key);
// True once the engine (host detection, target machines, the ORC JIT) is built: from then on a
// disk hit costs only its file read and link.
bool engine_ready();

// Statistics for tests and FASTDYN_LOG: how each find_cached/compile call was answered (the
// engine's runtime::KernelCache, runtime/kernel_cache.h).
using runtime::CacheStats;
// The identity of the engine's kernel binaries: backend "llvm_cpu", the LLVM version (with
// FASTDYN_LLVM_ARGS), the host CPU and its features, this fastdyn build.
const runtime::TargetIdentity& engine_target_identity();
// The memory cache's bound, in kernels (default 4096, FASTDYN_KERNEL_CACHE_SIZE); for tests.
void set_memory_bound(size_t kernels);
// Kernel modules still linked (in the memory cache or held by an executable); for tests.
size_t linked_modules();
CacheStats cache_stats();
// The directory in use ("" when the disk cache is off).
std::string cache_dir();

// --- More of the engine ---
//
// More on math_function(): the scalar declaration (lanes == 1) carries
// "vector-function-abi-variant" mappings to the host's SLEEF vector forms (up to
// host_target().vector_bits), so the loop vectoriser turns a scalar call in a loop into a vector
// call by itself; the emitter may emit scalar calls and let it, or call vector forms directly.
// Where the process already exports a SLEEF symbol (the torch wheel exports the 256/512-bit forms
// its own kernels use) kernels call that copy, so they agree with ATen bit for bit; libsleef
// supplies the rest. Known SLEEF edge behaviour is listed in math_functions.cpp.
// Also resolvable from kernels: fastdyn_parallel_for, __truncsfbf2/__truncdfbf2 (supplied by the
// engine), libm and libgcc helpers (from the process).

// The SLEEF symbol math_function() declares ("" if there is none for this host), and its address
// (nullptr if libsleef or the symbol is missing). For tests and diagnostics.
constexpr int kMathFnCount = int(MathFn::Lgamma) + 1;
std::string math_function_name(MathFn fn, bool is_f64, int lanes);
void* math_symbol_address(const std::string& name);
const char* math_fn_name(MathFn fn);  // "exp", "atan2", ...
int math_fn_arity(MathFn fn);         // 1 or 2 (atan2, pow)
double math_fn_max_ulp(MathFn fn);    // SLEEF's documented bound: 1.0 (u10), 1.5 (u15), ...

// Starts building the engine (host detection, target machines, the ORC JIT: ~5-10 ms) on a
// background thread, at most once per process, so that a first compile or disk-cache hit does not
// pay for it; the API calls it when fastdyn is enabled or a function is jitted. finish_prewarm()
// waits for that thread: it runs before fork() (pthread_atfork: a child must not inherit a
// half-built engine) and from Python's atexit, before static destructors.
void prewarm();
void finish_prewarm();

// Tests only: forget every kernel in memory (their code is freed: addresses handed out earlier
// dangle) and zero the statistics, as if the process had just started. The disk is left alone.
void reset_for_testing();
// Wall time of the last compile() call's phases, in milliseconds (FASTDYN_LOG=code, tests);
// FASTDYN_TIME_PASSES=1 prints them on stderr for every compile, with the thread's CPU time.
// FASTDYN_LLVM_ARGS="-opt=value ..." passes options to LLVM (experiments; part of the cache key).
// "lean" or "o3" (FASTDYN_LLVM_PIPELINE, read once): how compile() optimises modules.
const std::string& optimisation_pipeline();
struct CompileTimes {
  double optimise_ms = 0, codegen_ms = 0, link_ms = 0, total_ms = 0;
};
CompileTimes last_compile_times();

}  // namespace fastdyn::codegen::llvm_jit
