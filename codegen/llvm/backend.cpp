// codegen/llvm/backend.cpp — compile_llvm_cpu: the loop Program's kernels compiled by LLVM, run
// as a runtime::Program (runtime/program.h).
#include "codegen/llvm/backend.h"

#include "codegen/aten/aten_backend.h"
#include "codegen/passes/graph_passes.h"
#include "codegen/passes/pass_timer.h"
#include "codegen/llvm/emit.h"
#include "codegen/llvm/jit_engine.h"
#include "codegen/llvm/perf_map.h"
#include "codegen/loop/passes.h"
#include "codegen/loop/runtime_program.h"
#include "runtime/errors.h"
#include "runtime/host_kernel.h"
#include "runtime/journal.h"
#include "runtime/program_executable.h"

#include <ATen/ATen.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace fastdyn::codegen {
namespace {

using KernelFn = runtime::HostKernel::Function;

// One kernel: its module is keyed by its own IR (emit_kernel makes that independent of the graph,
// the kernel's name and the slot numbers), so a kernel met before — in another layer of this graph,
// in another graph, or by an earlier process (disk cache) — is not compiled again.
// NB: the key holds the module as bitcode, not as text: the same exact content, written about 3x
// faster (gpt2_2layer's 15 kernels: ~4 ms against ~12 ms for printing), and the key is computed for
// every kernel of every graph, cached or not.
// "k4 outer[1,4,64] inner[32]": how perf report names the kernel (FASTDYN_PERF_MAP=1).
std::string kernel_label(const loop::Kernel& k) {
  auto dims = [](const std::vector<int64_t>& sizes) {
    std::string s = "[";
    for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
    return s + "]";
  };
  return "fastdyn " + k.name + " outer" + dims(k.outer) + " inner" + dims(k.inner);
}

// Emitted kernels by their planned form (llvm_emit::emit_key, which names the module exactly):
// the cache key (the module as bitcode, what the kernel cache knows it by) and the symbols of its
// size parameters. Emitting a module and writing its bitcode cost about 0.3-0.5 ms per kernel, and
// a dynamic graph meets its kernels again at every new size, as does every layer after the first.
// Bounded: the oldest entries go first. It holds no kernel: a hit still finds the kernel in the
// kernel cache by its key (and emits again where that evicted it).
class EmitMemo {
 public:
  struct Entry {
    std::shared_ptr<const std::string> key;
    std::vector<int32_t> params;
  };
  std::optional<Entry> find(const std::string& input) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(input);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void insert(const std::string& input, Entry e) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, fresh] = map_.emplace(input, std::move(e));
    if (!fresh) return;
    order_.push_back(&it->first);  // NB: the map's nodes (and keys) stay put until erased
    if (order_.size() > kBound) {
      map_.erase(*order_.front());
      order_.pop_front();
    }
  }

 private:
  static constexpr size_t kBound = 1024;
  std::mutex mutex_;
  std::unordered_map<std::string, Entry> map_;
  std::deque<const std::string*> order_;  // the keys, oldest first
};

std::atomic<int64_t> g_emitted{0};

EmitMemo& emit_memo() {
  static EmitMemo* memo = new EmitMemo();  // NB: leaked, so that no exit-time destructor races a compile thread
  return *memo;
}

// An emitted kernel with its cache key (the module as bitcode) and size parameters. A lookup that
// found it in neither cache (PreparedLlvm::from_cache) keeps it for the compile that follows
// (finish), so that it is not emitted twice.
struct EmittedModule {
  llvm_jit::ModuleBuilder mb;
  std::shared_ptr<const std::string> key;
  std::vector<int32_t> params;
};

constexpr const char* kSymbol = "fastdyn_kernel";
constexpr const char* kKeyHead = "llvm_cpu 4 vector_bits=";  // then the bits, a newline, the module's bitcode

// The report's copy of a kernel's code: printed from its bitcode (the cache key) on the journal's
// own thread (runtime::journal::add_deferred; LLVM's printer takes about 20 ns a byte, 4.7 ms for
// the tiny GPT-2's 220 KB of IR, which the compiling thread paid while it printed each emitted
// module), and remembered by cache key, so a kernel met again (the next layer, the next size: an
// emit-memo hit) costs a lookup. Bounded by kPrintedBytes of text, oldest out.
class PrintedIr {
 public:
  std::shared_ptr<const std::string> find(const std::string* key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : it->second.ir;
  }
  void insert(std::shared_ptr<const std::string> key, std::shared_ptr<const std::string> ir) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string* k = key.get();
    if (!map_.emplace(k, Entry{std::move(key), ir}).second) return;
    order_.push_back(k);
    bytes_ += ir->size();
    while (bytes_ > kPrintedBytes && order_.size() > 1) {
      auto old = map_.find(order_.front());
      bytes_ -= old->second.ir->size();
      map_.erase(old);
      order_.pop_front();
    }
  }

 private:
  static constexpr size_t kPrintedBytes = size_t{16} << 20;
  struct Entry {
    std::shared_ptr<const std::string> key;  // keeps the address the map is keyed by alive
    std::shared_ptr<const std::string> ir;
  };
  std::mutex mutex_;
  std::unordered_map<const std::string*, Entry> map_;
  std::deque<const std::string*> order_;
  size_t bytes_ = 0;
};

PrintedIr& printed_ir() {
  static PrintedIr* p = new PrintedIr();  // NB: leaked, as emit_memo()
  return *p;
}

// The LLVM IR text of a module from its cache key (kKeyHead, then the bitcode).
std::string kernel_ir(const std::string& key) {
  const size_t nl = key.find('\n');
  if (key.rfind(kKeyHead, 0) != 0 || nl == std::string::npos) return "; (not a kernel's bitcode)\n";
  llvm::LLVMContext context;
  llvm::Expected<std::unique_ptr<llvm::Module>> m = llvm::parseBitcodeFile(
      llvm::MemoryBufferRef(llvm::StringRef(key).substr(nl + 1), "kernel"), context);
  if (!m) return "; (the kernel's bitcode did not read back: " + llvm::toString(m.takeError()) + ")\n";
  std::string ir;
  llvm::raw_string_ostream os(ir);
  (*m)->print(os, nullptr);
  os.flush();
  return ir;
}

void journal_code(const loop::Kernel& k, const std::shared_ptr<const std::string>& key) {
  if (!runtime::journal::recording()) return;
  if (std::shared_ptr<const std::string> ir = printed_ir().find(key.get())) {
    runtime::journal::add("kernel_code", {{"name", k.name}, {"language", "llvm"}, {"code", *ir}});
    return;
  }
  runtime::journal::add_deferred("kernel_code", [name = k.name, key]() -> std::vector<std::pair<std::string, std::string>> {
    std::shared_ptr<const std::string> ir = printed_ir().find(key.get());
    if (!ir) {
      ir = std::make_shared<const std::string>(kernel_ir(*key));
      printed_ir().insert(key, ir);
    }
    return {{"name", name}, {"language", "llvm"}, {"code", *ir}};
  });
}

std::unique_ptr<EmittedModule> emit_module(const llvm_emit::KernelInput& input, const loop::Kernel& k, int bits) {
  llvm_jit::ModuleBuilder mb = llvm_jit::new_module(kSymbol);
  std::vector<int32_t> params = llvm_emit::emit_kernel(input, *mb.module, bits, kSymbol);
  ++g_emitted;
  if (loop::dump_enabled("llvm")) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    mb.module->print(os, nullptr);
    os.flush();
    std::fprintf(stderr, "=== llvm %s ===\n%s", k.name.c_str(), ir.c_str());
  }
  auto key = std::make_shared<std::string>(std::string(kKeyHead) + std::to_string(bits) + "\n");
  {
    llvm::raw_string_ostream key_os(*key);
    llvm::WriteBitcodeToFile(*mb.module, key_os);
  }
  journal_code(k, key);
  return std::make_unique<EmittedModule>(EmittedModule{std::move(mb), std::move(key), std::move(params)});
}

// How far kernel_fn goes for a kernel that no cache lookup by its plan key finds.
enum class Missing {
  Compile,  // emit it, look in both caches, compile it (finish)
  Load,     // emit it, look in both caches, else nullptr (load_now: a warm start from disk)
  Skip,     // nullptr unless this process emitted it before (from_cache: kernels already built)
};

// The kernel from the cache (memory, then disk), else what `missing` says; nullptr when it is
// not built (then *keep holds the emitted module, if it was emitted). `sizes` gets the values of
// its size parameters at p's binding.
KernelFn kernel_fn(const loop::Program& p, const loop::Kernel& k, Missing missing, std::shared_ptr<void>* hold,
                   std::vector<int64_t>* sizes, std::unique_ptr<EmittedModule>* keep) {
  const int bits = llvm_jit::host_target().vector_bits;
  auto size_values = [&](const std::vector<int32_t>& params) {
    sizes->clear();
    for (int32_t s : params) sizes->push_back(p.graph.binding.at(static_cast<size_t>(s)));
  };
  if (!*keep) {
    const llvm_emit::KernelInput input = llvm_emit::kernel_input(p, k);
    const std::string plan_key = llvm_emit::emit_key(input, bits);
    // NB: FASTDYN_DUMP=llvm prints every kernel's IR, so it always emits.
    const std::optional<EmitMemo::Entry> known = emit_memo().find(plan_key);
    if (known && !loop::dump_enabled("llvm")) {
      std::vector<void*> addrs = llvm_jit::find_cached(*known->key, {kSymbol}, hold);
      if (!addrs.empty()) {
        journal_code(k, known->key);
        size_values(known->params);
        return reinterpret_cast<KernelFn>(addrs.at(0));
      }
    }
    // from_cache asks for a kernel this process never emitted: no compile or load of this
    // process has it (each went through emission, which the memo records), so the answer is no
    // without emitting it. The emission is finish()'s, on the background thread: a dynamic
    // entry's first size emitted every kernel on the calling thread only to find none (4.4 ms
    // of a GPT-2 decode step's compile). A kernel only on disk is load_now()'s (a warm start).
    if (!known && missing == Missing::Skip) return nullptr;
    *keep = emit_module(input, k, bits);
    emit_memo().insert(plan_key, {(*keep)->key, (*keep)->params});
  }
  EmittedModule& e = **keep;
  size_values(e.params);
  std::vector<void*> addrs = llvm_jit::find_cached(*e.key, {kSymbol}, hold);
  if (addrs.empty() && missing != Missing::Compile) return nullptr;
  if (addrs.empty()) {
    if (llvm_jit::perf_map_enabled()) llvm_jit::set_perf_label(kernel_label(k));
    addrs = llvm_jit::compile(std::move(e.mb), *e.key, {kSymbol}, hold);
  }
  keep->reset();
  return reinterpret_cast<KernelFn>(addrs.at(0));
}

// Warm starts (PreparedLlvm::load_now): what a first call would spend on each tier, roughly, as
// measured on the bench machine (AMD EPYC, 2 cores). Loading one kernel from the disk cache (emit,
// key, read, link) takes 0.25-0.4 ms, and building the engine 2-3 ms if it is not built yet
// (twice that while the first call's ATen ops share the cores with it);
// ATen runs the kernels' work op by op at about 5 GB/s of the bytes the kernels read and write
// (it also writes every intermediate, into freshly faulted pages). Only the choice of tier depends
// on these numbers, never a result; and only an expected gain of a millisecond or more changes it
// (layernorm_softmax's 2 MB: loading came out 0.8 ms slower than its tiered first call).
constexpr double kLoadMsPerKernel = 0.4;
constexpr double kMinGainMs = 1.0;
constexpr double kEngineBuildMs = 5.0;
constexpr double kAtenBytesPerMs = 5e6;

// Bytes the kernels read and write: each value a kernel touches, once per kernel.
double kernel_bytes(const loop::Program& p) {
  double bytes = 0;
  for (const loop::Kernel& k : p.kernels) {
    std::vector<ValueId> seen;
    auto count = [&](const loop::Access& a) {
      if (std::find(seen.begin(), seen.end(), a.value) != seen.end()) return;
      seen.push_back(a.value);
      bytes += double(p.graph.meta(a.value).nbytes());
    };
    for (const loop::Stage& st : k.stages) {
      for (const loop::Access& a : st.loads) count(a);
      for (const loop::Store& w : st.stores) count(w.dst);
    }
  }
  return bytes;
}

}  // namespace

bool llvm_warm_start_may_pay(const Graph& g) {
  // The values the graph computes, each once, twice over as a margin for the kernels that read one
  // again. Not its inputs: a model's weights are most of them, and the extern calls read those.
  double bytes = 0;
  for (const Node& n : g.nodes)
    for (ValueId v : n.outputs) bytes += double(g.meta(v).nbytes());
  return 2 * bytes / kAtenBytesPerMs > kMinGainMs;
}

PreparedLlvm prepare_llvm_cpu(const Graph& original, RewrittenGraph rewritten) {
  const Graph& g = rewritten.graph;
  std::vector<at::Tensor> constants = std::move(rewritten.constants);
  auto p = std::make_shared<loop::Program>(loop::build_program(g));
  PassTimer timer;
  std::string text = loop::print_program(*p);
  std::vector<loop::Extern> externs;
  for (const loop::Step& s : p->steps)
    if (s.kind == loop::Step::Kind::Extern) {
      const Node& n = p->graph.nodes[static_cast<size_t>(s.index)];
      externs.push_back(loop::compile_extern(p->graph, n));
      if (externs.back().prepacked) text += "extern " + print_node(p->graph, n) + " runs as " + externs.back().exe->describe() + "\n";
    }
  runtime::ExecutablePtr aliased = !p->mutates_inputs() ? nullptr : compile_aten(original);
  timer.lap("externs");
  auto program = std::make_shared<runtime::Program>(loop::runtime_program(*p, "llvm_cpu", text, std::move(externs), std::move(constants), std::move(aliased)));
  timer.lap("runtime_program");
  PreparedLlvm prepared;
  prepared.program = "backend llvm_cpu\n" + text;
  // NB: LLVM only from here (emission, the kernel cache, compilation): no ATen op runs, no Python.
  // `build` runs once with success (the header's contract): the program moves out.
  // The kernel a from_cache lookup emitted and did not find (finish compiles it; they run one after
  // the other, never at once).
  auto emitted = std::make_shared<std::vector<std::unique_ptr<EmittedModule>>>(p->kernels.size());
  auto build = [p, text, program, emitted](Missing missing) -> runtime::ExecutablePtr {
    PassTimer kernel_timer;
    std::vector<std::shared_ptr<const runtime::Kernel>> kernels;
    std::vector<std::vector<int64_t>> sizes(p->kernels.size());
    for (size_t i = 0; i < p->kernels.size(); ++i) {
      std::shared_ptr<void> hold;
      KernelFn fn = kernel_fn(*p, p->kernels[i], missing, &hold, &sizes[i], &(*emitted)[i]);
      if (!fn) return nullptr;
      kernels.push_back(std::make_shared<runtime::HostKernel>(fn, std::move(hold), "llvm_cpu"));
    }
    kernel_timer.lap(missing == Missing::Compile ? "kernels (emit, find or compile)" : "kernels (emit, find)");
    llvm_jit::record_program(text);
    for (size_t i = 0; i < p->steps.size(); ++i)  // the runtime's steps are p's, one for one
      if (p->steps[i].kind == loop::Step::Kind::Kernel) {
        auto& launch = std::get<runtime::KernelLaunch>(program->steps[i]);
        launch.kernel = kernels.at(static_cast<size_t>(p->steps[i].index));
        launch.sizes = sizes.at(static_cast<size_t>(p->steps[i].index));
      }
    return std::make_shared<runtime::ProgramExecutable>(std::move(*program));
  };
  prepared.finish = [build] { return build(Missing::Compile); };
  prepared.from_cache = [build] { return build(Missing::Skip); };
  const double load_ms = double(p->kernels.size()) * kLoadMsPerKernel + (llvm_jit::engine_ready() ? 0.0 : kEngineBuildMs);
  if (!p->kernels.empty() && kernel_bytes(*p) / kAtenBytesPerMs > load_ms + kMinGainMs && llvm_jit::program_recorded(text))
    prepared.load_now = [build] { return build(Missing::Load); };
  timer.lap("warm_start_check");
  return prepared;
}

PreparedLlvm prepare_llvm_cpu(const Graph& g) { return prepare_llvm_cpu(g, rewrite_graph(g)); }

runtime::ExecutablePtr compile_llvm_cpu(const Graph& g) { return prepare_llvm_cpu(g).finish(); }

int64_t kernels_emitted() { return g_emitted.load(); }

}  // namespace fastdyn::codegen
