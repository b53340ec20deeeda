// codegen/llvm/jit_engine.cpp — the process-wide ORC LLJIT, the optimisation pipeline and object
// emission, in front of the kernel cache (see jit_engine.h for the contract).
//
// One compile: verify → O3 (new pass manager, loop + SLP vectorisation, host TTI) → object file
// through our own TargetMachine → link the object into a fresh JITDylib → look up the symbols.
// Emitting the object ourselves (rather than letting LLJIT's IR layer do it) means the very bytes
// that the JIT links are the bytes the disk cache stores, and a disk hit links them unchanged.
#include "codegen/llvm/jit_engine.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <llvm/Analysis/TargetTransformInfo.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/Orc/Core.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/StandardInstrumentations.h>
#include <llvm/Transforms/InstCombine/InstCombine.h>
#include <llvm/Transforms/Scalar/ADCE.h>
#include <llvm/Transforms/Scalar/EarlyCSE.h>
#include <llvm/Transforms/Scalar/LICM.h>
#include <llvm/Transforms/Scalar/LoopPassManager.h>
#include <llvm/Transforms/Scalar/LoopRotation.h>
#include <llvm/Transforms/Scalar/SROA.h>
#include <llvm/Transforms/Scalar/SimplifyCFG.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/StringSaver.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/TargetParser/Host.h>

#include "runtime/kernel_cache.h"
#include "codegen/passes/pass_timer.h"
#include "codegen/llvm/perf_map.h"
#include "runtime/background_compiler.h"
#include "runtime/env_flag.h"
#include "runtime/errors.h"
#include "runtime/parallel.h"

namespace fastdyn::codegen::llvm_jit {
namespace {

using runtime::KernelCache;
using runtime::TargetIdentity;
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string error_text(llvm::Error e) { return llvm::toString(std::move(e)); }

// FASTDYN_LLVM_ARGS: LLVM command-line options for experiments, e.g.
// "-enable-epilogue-vectorization=false". They change the code, so they join the cache identity.
const std::string& llvm_args() {
  static const std::string args = [] {
    const char* env = std::getenv("FASTDYN_LLVM_ARGS");
    return std::string(env ? env : "");
  }();
  return args;
}

// FASTDYN_LLVM_PIPELINE: "lean" (default) or "o3". The emitter writes vectorised, unrolled loops
// itself, so the kernels need only a short function pipeline: SROA (accumulator allocas to
// registers), early CSE, instcombine, CFG simplification, loop rotation + LICM (slot pointers and
// strides out of the loops), then instcombine/simplifycfg/ADCE to tidy. O3's vectorisers,
// unroller, inliner and CGSCC passes found nothing more here, and cost as much again: on the bench
// machine the lean pipeline halved LLVM's time for one-kernel graphs (gelu_bias 15.9 -> 7.5 ms,
// reductions 60 -> 30 ms of thread CPU) with per-call times within run-to-run noise. "o3" stays
// for comparison; the choice joins the kernel cache's identity.
const std::string& pipeline() {
  static const std::string p = [] {
    const char* env = std::getenv("FASTDYN_LLVM_PIPELINE");
    return std::string(env && *env ? env : "lean");
  }();
  return p;
}

// Whether init_llvm_once turns loop strength reduction off (FASTDYN_LLVM_ARGS does not name it).
bool lsr_off_by_default() { return llvm_args().find("disable-lsr") == std::string::npos; }

void init_llvm_once() {
  static const bool done = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    // Loop strength reduction off (unless FASTDYN_LLVM_ARGS names it). The emitter's loops index
    // with one induction variable each, which x86 addressing modes take as they are, so LSR found
    // nothing to improve in the kernels' speed (24 cases, static and symbolic sizes, within +-2.5%
    // interleaved in one process) while it was the second most expensive codegen pass after
    // instruction selection: 15-20% of a kernel's LLVM time, more in the loops of symbolic rows
    // (softmax + layer_norm: 17.0 -> 13.4 ms static, 22.6 -> 17.9 ms with size symbols).
    if (lsr_off_by_default()) {
      llvm::cl::Option* lsr = llvm::cl::getRegisteredOptions().lookup("disable-lsr");
      if (lsr) lsr->addOccurrence(0, "disable-lsr", "true");
    }
    if (!llvm_args().empty()) {
      llvm::SmallVector<const char*, 8> argv{"fastdyn"};
      llvm::BumpPtrAllocator storage;
      llvm::StringSaver saver(storage);
      llvm::cl::TokenizeGNUCommandLine(llvm_args(), saver, argv);
      std::string errors;
      llvm::raw_string_ostream os(errors);
      if (!llvm::cl::ParseCommandLineOptions(int(argv.size()), argv.data(), "", &os))
        throw UserError("FASTDYN_LLVM_ARGS: " + os.str());
    }
    return true;
  }();
  (void)done;
}

std::unique_ptr<llvm::TargetMachine> make_target_machine(const HostTarget& h) {
  std::string err;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(h.triple, err);
  if (!target) throw BackendError("llvm_jit: no LLVM target for " + h.triple + ": " + err);
  // NB: PIC + small code model: calls to SLEEF, libm and fastdyn_parallel_for go through the
  // JIT linker's GOT/PLT stubs, so they work wherever those libraries were mapped.
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      h.triple, h.cpu, h.features, llvm::TargetOptions(), llvm::Reloc::PIC_, llvm::CodeModel::Small,
      llvm::CodeGenOptLevel::Aggressive, /*JIT=*/true));
  if (!tm) throw BackendError("llvm_jit: cannot create a TargetMachine for " + h.cpu);
  return tm;
}

HostTarget detect_host() {
  init_llvm_once();
  HostTarget h;
  h.triple = llvm::sys::getProcessTriple();
  h.cpu = llvm::sys::getHostCPUName().str();
  // All features, enabled and disabled, sorted by name: a CPU name alone over-promises under
  // hypervisors that hide features, and a sorted list keeps the cache key stable.
  std::vector<std::pair<std::string, bool>> features;
  for (const auto& kv : llvm::sys::getHostCPUFeatures()) features.emplace_back(kv.first().str(), kv.second);
  std::sort(features.begin(), features.end());
  for (const auto& [name, on] : features) {
    if (!h.features.empty()) h.features += ',';
    h.features += (on ? '+' : '-') + name;
  }
  // The widest vectors worth using: 512 bits where the CPU has the AVX-512 subsets ATen's own
  // AVX512 kernels require (ATen runs them there, so kernels that compete with them must too),
  // else what LLVM's cost model picks. NB: LLVM's tuning for Intel server CPUs prefers 256 bits
  // (an old AVX-512 frequency concern); measured on a Xeon with AVX-512 (2 threads), 512 bits made
  // the softmax kernel 73 -> 60 us, gelu(x + b) on 1M floats 519 -> 367 us, a 10-op pointwise chain
  // 1.54 -> 1.04 ms. FASTDYN_VECTOR_BITS=128|256|512 overrides (comparisons; part of the cache key).
  auto tm = make_target_machine(h);
  llvm::LLVMContext ctx;
  llvm::Module probe("fastdyn_probe", ctx);
  probe.setDataLayout(tm->createDataLayout());
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false),
                                    llvm::Function::ExternalLinkage, "probe", probe);
  uint64_t bits = tm->getTargetTransformInfo(*fn)
                      .getRegisterBitWidth(llvm::TargetTransformInfo::RGK_FixedWidthVector)
                      .getFixedValue();
  bool avx512 = true;
  for (const char* f : {"+avx512f,", "+avx512bw,", "+avx512dq,", "+avx512vl,"})
    avx512 = avx512 && (h.features + ",").find(f) != std::string::npos;
  if (avx512) bits = 512;
  h.vector_bits = bits >= 512 ? 512 : bits >= 256 ? 256 : 128;
  if (const char* force = std::getenv("FASTDYN_VECTOR_BITS")) {
    const int v = std::atoi(force);
    if (v == 128 || v == 256 || v == 512) h.vector_bits = std::min<int>(v, avx512 ? 512 : static_cast<int>(std::max<uint64_t>(bits, 128)));
  }
  return h;
}

// Resolves Sleef_* names for the JIT on demand, through math_symbol_address (torch's exported
// SLEEF, else libsleef), so kernels linked from the disk cache find them too.
class SleefGenerator : public llvm::orc::DefinitionGenerator {
 public:
  llvm::Error tryToGenerate(llvm::orc::LookupState&, llvm::orc::LookupKind, llvm::orc::JITDylib& jd,
                            llvm::orc::JITDylibLookupFlags, const llvm::orc::SymbolLookupSet& wanted) override {
    llvm::orc::SymbolMap defs;
    for (const auto& [name, flags] : wanted) {
      llvm::StringRef text = *name;
      if (!text.starts_with("Sleef_")) continue;
      if (void* address = math_symbol_address(text.str()))
        defs[name] = {llvm::orc::ExecutorAddr::fromPtr(address),
                      llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
    }
    if (defs.empty()) return llvm::Error::success();
    return jd.define(llvm::orc::absoluteSymbols(std::move(defs)));
  }
};

// Conversions to bfloat16 that LLVM calls on CPUs without bf16 instructions. libgcc (GCC < 13)
// lacks them, compiler-rt is not in the process, so the engine supplies them. NB: LLVM returns a
// bf16 in the low 16 bits of xmm0, which is where a float-returning function leaves them.
float bits_as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
uint16_t float_to_bf16_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::isnan(f)) return uint16_t((bits >> 16) | 0x40);            // stay NaN, quietly
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);         // round to nearest even
}
float fastdyn_truncsfbf2(float f) { return bits_as_float(float_to_bf16_bits(f)); }
float fastdyn_truncdfbf2(double d) {
  if (std::isnan(d)) return bits_as_float(float_to_bf16_bits(float(d)));
  // Round to odd into float first, so that the second rounding (to bf16, 16 fewer bits) is
  // exact: truncate towards zero, then set the last bit if anything was lost.
  float f = float(d);
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if (double(f) != d) bits |= 1;
  return bits_as_float(float_to_bf16_bits(bits_as_float(bits)));
}

// Symbols every kernel may call that the engine itself provides (absolute addresses).
struct RuntimeSymbol {
  const char* name;
  void* address;
};
const RuntimeSymbol kRuntimeSymbols[] = {
    {"fastdyn_parallel_for", reinterpret_cast<void*>(&fastdyn_parallel_for)},
    {"fastdyn_parallel_work", reinterpret_cast<void*>(&fastdyn_parallel_work)},
    {"__truncsfbf2", reinterpret_cast<void*>(&fastdyn_truncsfbf2)},
    {"__truncdfbf2", reinterpret_cast<void*>(&fastdyn_truncdfbf2)},
};

struct Engine {
  // The JIT, the cache and the stats. Never held across a module's optimisation and codegen (tens
  // of milliseconds): a caller looking a kernel up (a dynamic entry at a new size, on the Python
  // thread) must not wait for the background thread's compile of another kernel.
  std::mutex mutex;
  // Optimisation and object emission with `tm`, one module at a time; taken without `mutex`.
  std::mutex tm_mutex;
  std::unique_ptr<llvm::TargetMachine> tm;
  std::string data_layout;
  std::unique_ptr<llvm::orc::LLJIT> jit;
  llvm::orc::JITDylib* runtime_jd = nullptr;  // kRuntimeSymbols + SLEEF, first in every kernel's links
  std::unique_ptr<KernelCache> cache;
  uint64_t dylib_counter = 0;
  CompileTimes last_times;
  // Errors the session reports on the side (e.g. "Symbols not found: [ foo ]" while linking)
  // rather than through the failing lookup, which only says "Failed to materialize symbols".
  std::string session_errors;
  // Modules whose last hold went (an evicted kernel's last executable died): removed from the JIT
  // at the next engine call, under `mutex`. A hold may go on any thread, with `mutex` held or
  // not, so it only queues here, under its own lock.
  std::mutex released_mutex;
  std::vector<llvm::orc::JITDylib*> released;
  size_t linked = 0;  // modules linked and not yet removed
};

Engine* make_engine() {
  const HostTarget& h = host_target();
  auto e = std::make_unique<Engine>();
  e->tm = make_target_machine(h);
  e->data_layout = e->tm->createDataLayout().getStringRepresentation();

  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(h.triple)};
  jtmb.setCPU(h.cpu);
  llvm::SmallVector<llvm::StringRef, 128> features;
  llvm::StringRef(h.features).split(features, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef f : features) jtmb.getFeatures().AddFeature(f);
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  jtmb.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create();
  if (!jit) throw BackendError("llvm_jit: cannot create the JIT: " + error_text(jit.takeError()));
  e->jit = std::move(*jit);

  auto& es = e->jit->getExecutionSession();
  Engine* engine_ptr = e.get();
  es.setErrorReporter([engine_ptr](llvm::Error err) {
    if (!engine_ptr->session_errors.empty()) engine_ptr->session_errors += "; ";
    engine_ptr->session_errors += error_text(std::move(err));
  });
  e->runtime_jd = &es.createBareJITDylib("fastdyn_runtime");
  llvm::orc::SymbolMap runtime_symbols;
  for (const RuntimeSymbol& symbol : kRuntimeSymbols)
    runtime_symbols[es.intern(symbol.name)] = {llvm::orc::ExecutorAddr::fromPtr(symbol.address),
                                               llvm::JITSymbolFlags::Exported | llvm::JITSymbolFlags::Callable};
  if (auto err = e->runtime_jd->define(llvm::orc::absoluteSymbols(std::move(runtime_symbols))))
    throw BackendError("llvm_jit: " + error_text(std::move(err)));
  e->runtime_jd->addGenerator(std::make_unique<SleefGenerator>());

  e->cache = std::make_unique<KernelCache>(engine_target_identity());
  if (const int64_t bound = runtime::env_count("FASTDYN_KERNEL_CACHE_SIZE")) e->cache->set_memory_bound(static_cast<size_t>(bound));
  return e.release();
}

std::atomic<bool> g_engine_ready{false};

// NB: never destroyed. Kernels may still run from static destructors and other threads at exit;
// the OS reclaims the JIT's memory.
Engine& engine() {
  static Engine* e = [] {
    const auto t0 = Clock::now();
    Engine* built = make_engine();
    g_engine_ready.store(true, std::memory_order_release);
    if (PassTimer::enabled()) std::fprintf(stderr, "[fastdyn] llvm engine built: %.1f ms\n", ms_since(t0));
    return built;
  }();
  return *e;
}

// The program records' own cache: the same file format, under an identity that needs no LLVM.
struct ProgramRecords {
  std::mutex mutex;
  KernelCache cache{TargetIdentity{"program records", "", "", "", runtime::binary_identity()}};
};
ProgramRecords& program_records() {
  static ProgramRecords* r = new ProgramRecords();  // NB: leaked, like the engine
  return *r;
}

void optimise(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions options;
  options.LoopVectorization = true;
  options.SLPVectorization = true;
  options.LoopUnrolling = true;
  options.LoopInterleaving = true;
  // NB: the new pass manager honours `optnone` only through this instrumentation (clang registers
  // it via StandardInstrumentations, whose other hooks we do not need).
  llvm::PassInstrumentationCallbacks instrumentation;
  llvm::OptNoneInstrumentation optnone(/*DebugLogging=*/false);
  optnone.registerCallbacks(instrumentation);
  llvm::PassBuilder pb(&tm, options, std::nullopt, &instrumentation);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  if (pipeline() == "o3") {
    llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
    mpm.run(m, mam);
    return;
  }
  llvm::FunctionPassManager fpm;
  fpm.addPass(llvm::SROAPass(llvm::SROAOptions::ModifyCFG));
  fpm.addPass(llvm::EarlyCSEPass(/*UseMemorySSA=*/true));
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  llvm::LoopPassManager lpm;
  lpm.addPass(llvm::LoopRotatePass());
  lpm.addPass(llvm::LICMPass(llvm::LICMOptions()));
  fpm.addPass(llvm::createFunctionToLoopPassAdaptor(std::move(lpm), /*UseMemorySSA=*/true));
  fpm.addPass(llvm::InstCombinePass());
  fpm.addPass(llvm::SimplifyCFGPass());
  fpm.addPass(llvm::ADCEPass());
  llvm::ModulePassManager mpm;
  mpm.addPass(llvm::createModuleToFunctionPassAdaptor(std::move(fpm)));
  mpm.run(m, mam);
}

// Every kernel function prefers the host's vector width as host_target() chose it: otherwise, on a
// CPU tuned to prefer 256 bits, the backend splits each 512-bit operation in two (and O3's loop
// vectoriser picks 256). Before optimisation.
void declare_host_vector_width(llvm::Module& m) {
  const std::string bits = std::to_string(host_target().vector_bits);
  for (llvm::Function& f : m)
    if (!f.isDeclaration()) f.addFnAttr("prefer-vector-width", bits);
}

// A call that passes or returns a vector of N bits is lowered in registers of N bits only if N is
// legal in the calling function. A function that declares a smaller "min-legal-vector-width"
// (clang-style IR does) on a CPU tuned for 256-bit vectors would pass a 512-bit argument in two
// ymm registers, while SLEEF's avx512f functions expect one zmm; so raise the declaration.
void declare_call_vector_widths(llvm::Module& m) {
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    uint64_t widest = 0;
    auto consider = [&](llvm::Type* t) {
      if (auto* v = llvm::dyn_cast<llvm::FixedVectorType>(t))
        widest = std::max<uint64_t>(widest, v->getPrimitiveSizeInBits().getFixedValue());
    };
    for (llvm::BasicBlock& bb : f)
      for (llvm::Instruction& inst : bb)
        if (auto* call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
          if (call->getCalledFunction() && call->getCalledFunction()->isIntrinsic()) continue;
          consider(call->getType());
          for (const llvm::Use& arg : call->args()) consider(arg->getType());
        }
    if (widest == 0) continue;
    uint64_t declared = 0;
    if (f.hasFnAttribute("min-legal-vector-width"))
      f.getFnAttribute("min-legal-vector-width").getValueAsString().getAsInteger(10, declared);
    if (widest > declared) f.addFnAttr("min-legal-vector-width", std::to_string(widest));
  }
}

std::string emit_object(llvm::Module& m, llvm::TargetMachine& tm) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    throw BackendError("llvm_jit: the target cannot emit object files");
  pm.run(m);
  return std::string(buffer.begin(), buffer.end());
}

void remove_dylib(Engine& e, llvm::orc::JITDylib* jd) {
  if (!jd) return;
  --e.linked;
  if (auto err = e.jit->getExecutionSession().removeJITDylib(*jd)) llvm::consumeError(std::move(err));
}

// The keep-alive handle of a linked module (KernelCache::Entry::hold).
std::shared_ptr<void> make_hold(Engine& e, llvm::orc::JITDylib* jd) {
  return std::shared_ptr<void>(jd, [&e](void* p) {
    std::lock_guard<std::mutex> lock(e.released_mutex);
    e.released.push_back(static_cast<llvm::orc::JITDylib*>(p));
  });
}

// Removes the modules no hold keeps any more. Called with e.mutex held.
void remove_released(Engine& e) {
  std::vector<llvm::orc::JITDylib*> gone;
  {
    std::lock_guard<std::mutex> lock(e.released_mutex);
    gone.swap(e.released);
  }
  for (llvm::orc::JITDylib* jd : gone) remove_dylib(e, jd);
}

// Puts a freshly linked module in the memory cache; the entries it evicts let their holds go.
KernelCache::Entry& cache_linked(Engine& e, const std::string& key_text, KernelCache::Entry entry) {
  entry.hold = make_hold(e, static_cast<llvm::orc::JITDylib*>(entry.handle));
  std::vector<KernelCache::Entry> evicted;
  KernelCache::Entry& kept = e.cache->insert_memory(key_text, std::move(entry), &evicted);
  evicted.clear();  // the holds go: a module no executable uses is queued for removal
  remove_released(e);
  return kept;
}

// Links `object` into a fresh JITDylib. Returns it, or nullptr with `error` set.
llvm::orc::JITDylib* link_object(Engine& e, const std::string& object, const std::string& name,
                                 std::string& error) {
  e.session_errors.clear();
  auto jd = e.jit->createJITDylib("fastdyn_kernel_" + std::to_string(++e.dylib_counter));
  if (!jd) {
    error = error_text(jd.takeError());
    return nullptr;
  }
  ++e.linked;  // remove_dylib counts it down
  // Our runtime symbols first, so that fastdyn_parallel_for and each Sleef_* name resolve to
  // exactly what math_symbol_address() reports, whatever else the process exports.
  llvm::orc::JITDylibSearchOrder order{{e.runtime_jd, llvm::orc::JITDylibLookupFlags::MatchExportedSymbolsOnly}};
  for (const auto& link : e.jit->defaultLinkOrder()) order.push_back(link);
  jd->setLinkOrder(std::move(order));
  if (auto err = e.jit->addObjectFile(*jd, llvm::MemoryBuffer::getMemBufferCopy(object, name))) {
    error = error_text(std::move(err));
    remove_dylib(e, &*jd);
    return nullptr;
  }
  perf_map_record(object, [&](const std::string& symbol) -> void* {
    auto address = e.jit->lookup(*jd, symbol);
    if (address) return address->toPtr<void*>();
    llvm::consumeError(address.takeError());
    return nullptr;
  });
  return &*jd;
}

// Addresses of `symbols` in the entry's dylib (looked up once each, then remembered); empty with
// `error` set if any is missing or fails to link.
std::vector<void*> lookup_all(Engine& e, KernelCache::Entry& entry, const std::vector<std::string>& symbols,
                              std::string& error) {
  std::vector<void*> out;
  out.reserve(symbols.size());
  for (const std::string& name : symbols) {
    auto known = entry.symbols.find(name);
    if (known != entry.symbols.end()) {
      out.push_back(known->second);
      continue;
    }
    auto address = e.jit->lookup(*static_cast<llvm::orc::JITDylib*>(entry.handle), name);
    if (!address) {
      error = error_text(address.takeError());
      if (!e.session_errors.empty()) error = e.session_errors + " (" + error + ")";
      return {};
    }
    void* p = address->toPtr<void*>();
    entry.symbols.emplace(name, p);
    out.push_back(p);
  }
  return out;
}

}  // namespace

const HostTarget& host_target() {
  static const HostTarget host = detect_host();
  return host;
}

const TargetIdentity& engine_target_identity() {
  static const TargetIdentity identity = [] {
    const HostTarget& h = host_target();
    std::string llvm = LLVM_VERSION_STRING;
    if (!llvm_args().empty()) llvm += " " + llvm_args();
    llvm += " pipeline=" + pipeline() + (lsr_off_by_default() ? " lsr=off" : "");
    return TargetIdentity{"llvm_cpu", llvm, h.cpu, h.features, runtime::binary_identity()};
  }();
  return identity;
}

ModuleBuilder::ModuleBuilder() = default;
ModuleBuilder::ModuleBuilder(ModuleBuilder&&) noexcept = default;
ModuleBuilder& ModuleBuilder::operator=(ModuleBuilder&& other) noexcept {
  // NB: the module must die before the context it lives in; the defaulted operator would
  // replace the context first.
  if (this != &other) {
    module.reset();
    context = std::move(other.context);
    module = std::move(other.module);
  }
  return *this;
}
ModuleBuilder::~ModuleBuilder() { module.reset(); }

ModuleBuilder new_module(const std::string& name) {
  Engine& e = engine();
  ModuleBuilder b;
  b.context = std::make_unique<llvm::LLVMContext>();
  b.module = std::make_unique<llvm::Module>(name, *b.context);
  b.module->setTargetTriple(host_target().triple);
  b.module->setDataLayout(e.data_layout);
  return b;
}

std::vector<void*> find_cached(const std::string& key_text, const std::vector<std::string>& symbols,
                               std::shared_ptr<void>* hold) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  remove_released(e);
  std::string error;
  if (KernelCache::Entry* hit = e.cache->find_memory(key_text)) {
    std::vector<void*> out = lookup_all(e, *hit, symbols, error);
    if (!out.empty() || symbols.empty()) ++e.cache->stats().memory_hits;
    if (hold) *hold = hit->hold;
    return out;
  }
  std::optional<std::string> object = e.cache->read_object(key_text);
  if (!object) return {};
  KernelCache::Entry entry;
  entry.handle = link_object(e, *object, "fastdyn_cached_kernel", error);
  std::vector<void*> out;
  if (entry.handle) out = lookup_all(e, entry, symbols, error);
  if (out.empty() && !symbols.empty()) {
    // A file that verified but does not link or lacks a symbol is as untrustworthy as a corrupt
    // one: drop it from the JIT and let the caller compile afresh (which overwrites the file).
    remove_dylib(e, static_cast<llvm::orc::JITDylib*>(entry.handle));
    ++e.cache->stats().rejected_files;
    return {};
  }
  KernelCache::Entry& kept = cache_linked(e, key_text, std::move(entry));
  if (hold) *hold = kept.hold;
  ++e.cache->stats().disk_hits;
  return out;
}

std::vector<void*> compile(ModuleBuilder m, const std::string& key_text, const std::vector<std::string>& symbols,
                           std::shared_ptr<void>* hold) {
  FD_CHECK(m.module && m.context, "llvm_jit::compile: empty ModuleBuilder");
  Engine& e = engine();
  std::string error;
  // Another thread may have compiled the same kernel since our caller's find_cached (checked
  // again after codegen, which runs without the engine lock): use that one.
  auto compiled_meanwhile = [&](std::vector<void*>& out) {
    KernelCache::Entry* hit = e.cache->find_memory(key_text);
    if (!hit) return false;
    out = lookup_all(e, *hit, symbols, error);
    if (out.empty() && !symbols.empty()) throw BackendError("llvm_jit: " + error);
    ++e.cache->stats().memory_hits;
    if (hold) *hold = hit->hold;
    return true;
  };
  {
    std::lock_guard<std::mutex> lock(e.mutex);
    remove_released(e);
    std::vector<void*> out;
    if (compiled_meanwhile(out)) return out;
  }
  const std::string name = m.module->getModuleIdentifier();
  const auto t0 = Clock::now();
  timespec cpu0{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
  std::string verifier_text;
  llvm::raw_string_ostream verifier_os(verifier_text);
  if (llvm::verifyModule(*m.module, &verifier_os))
    throw BackendError("llvm_jit: module '" + name + "' is invalid: " + verifier_os.str());

  CompileTimes times;
  std::string object;
  {
    std::lock_guard<std::mutex> tm_lock(e.tm_mutex);
    declare_host_vector_width(*m.module);
    optimise(*m.module, *e.tm);
    declare_call_vector_widths(*m.module);
    times.optimise_ms = ms_since(t0);
    const auto t1 = Clock::now();
    object = emit_object(*m.module, *e.tm);
    times.codegen_ms = ms_since(t1);
  }
  m.module.reset();
  m.context.reset();

  std::lock_guard<std::mutex> lock(e.mutex);
  {
    std::vector<void*> out;
    if (compiled_meanwhile(out)) return out;
  }
  const auto t2 = Clock::now();
  KernelCache::Entry entry;
  entry.handle = link_object(e, object, name, error);
  if (!entry.handle) throw BackendError("llvm_jit: cannot link module '" + name + "': " + error);
  std::vector<void*> out = lookup_all(e, entry, symbols, error);
  if (out.empty() && !symbols.empty()) {
    remove_dylib(e, static_cast<llvm::orc::JITDylib*>(entry.handle));
    throw BackendError("llvm_jit: module '" + name + "': " + error);
  }
  times.link_ms = ms_since(t2);
  KernelCache::Entry& kept = cache_linked(e, key_text, std::move(entry));
  if (hold) *hold = kept.hold;
  ++e.cache->stats().compiles;
  e.cache->write_object(key_text, object);
  times.total_ms = ms_since(t0);
  e.last_times = times;
  if (PassTimer::enabled())
  {
    timespec cpu1{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
    const double cpu_ms = double(cpu1.tv_sec - cpu0.tv_sec) * 1e3 + double(cpu1.tv_nsec - cpu0.tv_nsec) / 1e6;
    std::fprintf(stderr, "[fastdyn] llvm %s: optimise %.1f ms, codegen %.1f ms, link %.1f ms, total %.1f ms (thread cpu %.1f ms)\n",
                 name.c_str(), times.optimise_ms, times.codegen_ms, times.link_ms, times.total_ms, cpu_ms);
  }
  return out;
}

namespace {
std::mutex g_prewarm_mutex;
std::thread* g_prewarm = nullptr;  // NB: never destroyed (a joinable std::thread would terminate)
}  // namespace

void prewarm() {
  std::lock_guard<std::mutex> lock(g_prewarm_mutex);
  if (g_prewarm) return;
  ::pthread_atfork([] { finish_prewarm(); }, nullptr, nullptr);
  g_prewarm = new std::thread([] {
    // NB: below the user's threads, like the compile worker: at full priority this thread took a
    // core from the first call's OpenMP regions (gelu_bias's first call: 7-16 ms -> 3.3-5 ms).
    runtime::run_below_user_threads("fastdyn-prewarm");
    try {
      (void)engine();
    } catch (...) {
      // The first real use reports the error (engine() retries its initialisation).
    }
  });
}

void finish_prewarm() {
  std::lock_guard<std::mutex> lock(g_prewarm_mutex);
  if (g_prewarm && g_prewarm->joinable()) g_prewarm->join();
}

bool program_recorded(const std::string& program_key) {
  ProgramRecords& r = program_records();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.cache.has_record(program_key);
}

void record_program(const std::string& program_key) {
  ProgramRecords& r = program_records();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.cache.write_record(program_key);
}

bool engine_ready() { return g_engine_ready.load(std::memory_order_acquire); }

CacheStats cache_stats() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.cache->stats();
}

std::string cache_dir() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.cache->dir();
}

void reset_for_testing() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.cache->clear_memory();  // their holds go: modules no executable uses are removed below
  remove_released(e);
  {
    ProgramRecords& r = program_records();
    std::lock_guard<std::mutex> records_lock(r.mutex);
    r.cache.clear_memory();
  }
  e.cache->stats() = CacheStats{};
  e.last_times = CompileTimes{};
}

void set_memory_bound(size_t kernels) {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.cache->set_memory_bound(kernels);
}

size_t linked_modules() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  remove_released(e);
  return e.linked;
}

const std::string& optimisation_pipeline() { return pipeline(); }

CompileTimes last_compile_times() {
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.last_times;
}

}  // namespace fastdyn::codegen::llvm_jit
