// codegen/llvm/backend.cpp — compile_llvm_cpu and its Executable.
#include "codegen/llvm/backend.h"

#include "codegen/aten_backend.h"
#include "codegen/graph_passes.h"
#include "codegen/pass_timer.h"
#include "codegen/prepacked_linear.h"
#include "codegen/llvm/emit.h"
#include "codegen/llvm/jit_engine.h"
#include "codegen/llvm/perf_map.h"
#include "codegen/loop/passes.h"
#include "runtime/errors.h"

#include <ATen/ATen.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <cstdio>
#include <optional>

namespace fastdyn::codegen {
namespace {

using loop::ValuePlan;
using KernelFn = void (*)(void**, int32_t*);

class LlvmExecutable final : public runtime::Executable {
 public:
  struct Extern {
    runtime::ExecutablePtr exe;
    std::vector<ValueId> inputs, outputs;
    bool prepacked = false;  // prepacked_linear.h rather than the aten backend
  };
  struct Call {
    KernelFn fn;
    std::vector<int32_t> slots;  // the kernel's argument array, as slot numbers (kernel_slots)
    std::shared_ptr<void> hold;  // keeps fn's module linked (the kernel cache may evict it)
  };
  struct Run {
    bool is_kernel;
    int32_t index;  // calls_ or externs_
  };

  LlvmExecutable(loop::Program p, std::string text, std::vector<Call> calls, std::vector<Extern> externs,
                 runtime::ExecutablePtr aliased, std::vector<at::Tensor> constants)
      : p_(std::move(p)), text_(std::move(text)), calls_(std::move(calls)), externs_(std::move(externs)),
        aliased_(std::move(aliased)), constants_(std::move(constants)) {
    for (const loop::WriteBack& w : p_.writebacks) {
      size_t i = 0;
      while (p_.graph.inputs.at(i) != w.input) ++i;
      mutated_.push_back({i, w.bumps});
    }
    int32_t e = 0;
    for (const loop::Step& s : p_.steps)
      runs_.push_back(s.kind == loop::Step::Kind::Kernel ? Run{true, s.index} : Run{false, e++});
    for (size_t s = 0; s < p_.slot_owner.size(); ++s) {
      ValueId v = p_.slot_owner[s];
      if (p_.plans[static_cast<size_t>(v)].kind == ValuePlan::Kind::Buffer) buffers_.push_back(static_cast<int32_t>(s));
    }
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override {
    const Graph& g = p_.graph;
    if (inputs.size() + constants_.size() != g.inputs.size())
      throw UserError("llvm_cpu backend: graph takes " + std::to_string(g.inputs.size() - constants_.size()) +
                      " inputs, got " + std::to_string(inputs.size()));
    if (mutated_.empty()) return run_steps(inputs);
    if (overlaps_another_input(inputs)) return aliased_->run(inputs);
    std::vector<at::Tensor> outputs;
    try {
      outputs = run_steps(inputs);
    } catch (const std::exception&) {
      // An op failed (x.add_(1); x[bad_index]): eager raises with x already written. The
      // write-backs come last and cannot fail, so the inputs are untouched: ATen replays the
      // recorded ops, mutation and error included, exactly as eager.
      return aliased_->run(inputs);
    }
    // NB: after the writes, as eager: for an inference tensor outside inference mode this throws
    // eager's error with the data already written.
    for (const Mutated& m : mutated_)
      for (int32_t k = 0; k < m.bumps; ++k) inputs[m.input].unsafeGetTensorImpl()->bump_version();
    return outputs;
  }

  std::string describe() const override { return "backend llvm_cpu\n" + text_; }

 private:
  std::vector<at::Tensor> run_steps(const std::vector<at::Tensor>& inputs) const {
    const Graph& g = p_.graph;
    std::vector<at::Tensor> slots(p_.slot_owner.size());
    for (size_t i = 0; i < g.inputs.size(); ++i)
      slots[static_cast<size_t>(p_.plans[static_cast<size_t>(g.inputs[i])].slot)] =
          i < inputs.size() ? inputs[i] : constants_[i - inputs.size()];
    for (int32_t s : buffers_) {
      const TensorMeta& m = g.meta(p_.slot_owner[static_cast<size_t>(s)]);
      slots[static_cast<size_t>(s)] = at::empty_strided(m.sizes, m.strides, at::TensorOptions().dtype(m.dtype));
    }
    std::vector<void*> ptrs(slots.size(), nullptr);
    for (const Run& r : runs_) {
      if (r.is_kernel) {
        const Call& c = calls_[static_cast<size_t>(r.index)];
        for (size_t i = 0; i < c.slots.size(); ++i) {
          const at::Tensor& t = slots[static_cast<size_t>(c.slots[i])];
          ptrs[i] = t.defined() ? t.data_ptr() : nullptr;
        }
        int32_t status = 0;
        c.fn(ptrs.data(), &status);
        if (status != 0) throw BackendError("llvm_cpu: index out of range in self (embedding / index_select)");
        continue;
      }
      const Extern& e = externs_[static_cast<size_t>(r.index)];
      std::vector<at::Tensor> ins;
      ins.reserve(e.inputs.size());
      for (ValueId v : e.inputs) ins.push_back(tensor_of(v, slots));
      std::vector<at::Tensor> outs = e.exe->run(ins);
      for (size_t o = 0; o < e.outputs.size(); ++o) {
        const ValuePlan& pl = p_.plans[static_cast<size_t>(e.outputs[o])];
        if (pl.slot < 0) continue;
        const TensorMeta& m = g.meta(e.outputs[o]);
        at::Tensor t = std::move(outs[o]);
        // Kernels address extern results with the graph's strides: keep that promise.
        if (t.defined() && t.strides() != c10::IntArrayRef(m.strides) && t.numel() > 1) {
          at::Tensor fixed = at::empty_strided(m.sizes, m.strides, t.options());
          fixed.copy_(t);
          t = fixed;
        }
        slots[static_cast<size_t>(pl.slot)] = std::move(t);
      }
    }
    std::vector<at::Tensor> outputs;
    outputs.reserve(g.outputs.size());
    for (ValueId v : g.outputs) outputs.push_back(tensor_of(v, slots));
    return outputs;
  }

  struct Mutated {
    size_t input;   // position in the graph's inputs
    int32_t bumps;  // in-place ops on it: version counter increments
  };

  // The bytes a tensor's elements can touch: [lo, hi).
  static std::pair<uintptr_t, uintptr_t> extent(const at::Tensor& t) {
    const auto base = reinterpret_cast<uintptr_t>(t.data_ptr());
    int64_t lo = 0, hi = 0;
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t span = (t.size(d) - 1) * t.stride(d);
      (span < 0 ? lo : hi) += span;
    }
    const auto item = static_cast<int64_t>(t.element_size());
    return {base + static_cast<uintptr_t>(lo * item), base + static_cast<uintptr_t>((hi + 1) * item)};
  }

  // The kernels read every input as it was and write the mutated ones last: right only when no
  // other input shares a mutated one's memory (f(x, x), f(x, x[1:])). Such calls run the recorded
  // graph op by op on ATen, which mutates exactly as eager.
  bool overlaps_another_input(const std::vector<at::Tensor>& inputs) const {
    for (const Mutated& m : mutated_) {
      const at::Tensor& t = inputs[m.input];
      if (t.numel() == 0) continue;
      const auto [lo, hi] = extent(t);
      for (size_t j = 0; j < inputs.size(); ++j) {
        if (j == m.input || !inputs[j].defined() || inputs[j].numel() == 0) continue;
        const auto [olo, ohi] = extent(inputs[j]);
        if (olo < hi && lo < ohi) return true;
      }
    }
    return false;
  }

  at::Tensor tensor_of(ValueId v, const std::vector<at::Tensor>& slots) const {
    const ValuePlan& pl = p_.plans[static_cast<size_t>(v)];
    const TensorMeta& m = p_.graph.meta(v);
    if (pl.slot < 0) throw InternalError("llvm_cpu backend: v" + std::to_string(v) + " was never materialised");
    const at::Tensor& t = slots[static_cast<size_t>(pl.slot)];
    if (pl.kind == ValuePlan::Kind::Alias) {
      int64_t off = t.storage_offset() + m.storage_offset - p_.graph.meta(pl.root).storage_offset;
      return t.as_strided(m.sizes, m.strides, off);
    }
    if (pl.kind == ValuePlan::Kind::Buffer && (t.sizes() != c10::IntArrayRef(m.sizes) || t.strides() != c10::IntArrayRef(m.strides)))
      return t.as_strided(m.sizes, m.strides, t.storage_offset());  // a reused slot
    return t;
  }

  loop::Program p_;
  std::string text_;
  std::vector<Call> calls_;
  std::vector<Extern> externs_;
  std::vector<Run> runs_;
  std::vector<int32_t> buffers_;
  runtime::ExecutablePtr aliased_;  // the original graph on ATen (only when it mutates inputs)
  std::vector<at::Tensor> constants_;  // folded values (constant_fold.h): the last graph inputs
  std::vector<Mutated> mutated_;
};

LlvmExecutable::Extern compile_extern(const Graph& g, const Node& n) {
  LlvmExecutable::Extern e;
  auto add_input = [&](ValueId v) {
    if (v < 0) return;
    for (ValueId u : e.inputs)
      if (u == v) return;
    e.inputs.push_back(v);
  };
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::Value) add_input(a.value);
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId v : a.values) add_input(v);
  }
  e.outputs = n.outputs;
  e.exe = compile_prepacked_linear(g, n);
  e.prepacked = e.exe != nullptr;
  if (e.prepacked) return e;
  Graph sub;  // the node alone, on the aten backend
  sub.values = g.values;
  sub.inputs = e.inputs;
  sub.nodes.push_back(n);
  sub.outputs = n.outputs;
  e.exe = compile_aten(sub);
  return e;
}

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

// The kernel from the cache (memory, then disk), else, with compile_missing, compiled now; nullptr
// when it is in neither cache and compile_missing is false.
KernelFn kernel_fn(const loop::Program& p, const loop::Kernel& k, bool compile_missing, std::shared_ptr<void>* hold) {
  static const char* const kSymbol = "fastdyn_kernel";
  const int bits = llvm_jit::host_target().vector_bits;
  llvm_jit::ModuleBuilder mb = llvm_jit::new_module(kSymbol);
  llvm_emit::emit_kernel(p, k, *mb.module, bits, kSymbol);
  if (loop::dump_enabled("llvm")) {
    std::string ir;
    llvm::raw_string_ostream os(ir);
    mb.module->print(os, nullptr);
    std::fprintf(stderr, "=== llvm %s ===\n%s", k.name.c_str(), os.str().c_str());
  }
  std::string key = "llvm_cpu 3 vector_bits=" + std::to_string(bits) + "\n";
  llvm::raw_string_ostream key_os(key);
  llvm::WriteBitcodeToFile(*mb.module, key_os);
  key_os.flush();
  if (llvm_jit::perf_map_enabled()) llvm_jit::set_perf_label(kernel_label(k));
  std::vector<void*> addrs = llvm_jit::find_cached(key, {kSymbol}, hold);
  if (addrs.empty() && !compile_missing) return nullptr;
  if (addrs.empty()) addrs = llvm_jit::compile(std::move(mb), key, {kSymbol}, hold);
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

PreparedLlvm prepare_llvm_cpu(const Graph& original, RewrittenGraph rewritten) {
  const Graph& g = rewritten.graph;
  std::vector<at::Tensor> constants = std::move(rewritten.constants);
  auto p = std::make_shared<loop::Program>(loop::build_program(g));
  PassTimer timer;
  std::string text = loop::print_program(*p);
  auto externs = std::make_shared<std::vector<LlvmExecutable::Extern>>();
  for (const loop::Step& s : p->steps)
    if (s.kind == loop::Step::Kind::Extern) {
      const Node& n = p->graph.nodes[static_cast<size_t>(s.index)];
      externs->push_back(compile_extern(p->graph, n));
      if (externs->back().prepacked) text += "extern " + print_node(p->graph, n) + " runs as " + externs->back().exe->describe() + "\n";
    }
  runtime::ExecutablePtr aliased = p->writebacks.empty() ? nullptr : compile_aten(original);
  timer.lap("externs");
  PreparedLlvm prepared;
  prepared.program = "backend llvm_cpu\n" + text;
  // NB: LLVM only from here (emission, the kernel cache, compilation): no ATen op runs, no Python.
  // `build` runs once with success (the header's contract): the program and externs move out.
  auto build = [p, text, externs, aliased, constants = std::move(constants)](bool compile_missing) -> runtime::ExecutablePtr {
    std::vector<LlvmExecutable::Call> calls;
    for (const loop::Kernel& k : p->kernels) {
      std::shared_ptr<void> hold;
      KernelFn fn = kernel_fn(*p, k, compile_missing, &hold);
      if (!fn) return nullptr;
      calls.push_back({fn, llvm_emit::kernel_slots(*p, k), std::move(hold)});
    }
    llvm_jit::record_program(text);
    return std::make_shared<LlvmExecutable>(std::move(*p), text, std::move(calls), std::move(*externs), aliased, constants);
  };
  prepared.finish = [build] { return build(true); };
  prepared.from_cache = [build] { return build(false); };
  const double load_ms = double(p->kernels.size()) * kLoadMsPerKernel + (llvm_jit::engine_ready() ? 0.0 : kEngineBuildMs);
  if (!p->kernels.empty() && kernel_bytes(*p) / kAtenBytesPerMs > load_ms + kMinGainMs && llvm_jit::program_recorded(text))
    prepared.load_now = [build] { return build(false); };
  timer.lap("warm_start_check");
  return prepared;
}

PreparedLlvm prepare_llvm_cpu(const Graph& g) { return prepare_llvm_cpu(g, rewrite_graph(g)); }

runtime::ExecutablePtr compile_llvm_cpu(const Graph& g) { return prepare_llvm_cpu(g).finish(); }

}  // namespace fastdyn::codegen
