// codegen/backends/backends.cpp — see backends.h.
#include "codegen/backends/backends.h"

#include <cstdio>
#include <optional>

#include "codegen/aten/aten_backend.h"
#include "codegen/autograd/joint.h"
#include "codegen/cuda/backend.h"
#include "codegen/passes/graph_passes.h"
#include "codegen/passes/pass_timer.h"
#include "codegen/loop/interpret.h"
#include "codegen/loop/passes.h"
#include "runtime/autograd_function.h"
#include "runtime/cuda/cuda_api.h"
#ifdef FASTDYN_HAVE_LLVM
#include "codegen/llvm/backend.h"
#include "codegen/llvm/jit_engine.h"
#endif

namespace fastdyn::codegen {

namespace {
#ifdef FASTDYN_HAVE_LLVM
constexpr bool kHaveLlvm = true;
#else
constexpr bool kHaveLlvm = false;
#endif
}  // namespace

const std::vector<BackendInfo>& backend_table() {
  static const std::vector<BackendInfo> table = {
      {Backend::Native, "native", "the best backend built for the graph's device", true},
      {Backend::LlvmCpu, "llvm_cpu", "fused loop kernels compiled by LLVM for the host CPU", kHaveLlvm},
      {Backend::Cuda, "cuda", "fused loop kernels compiled by NVRTC for NVIDIA GPUs (needs NVRTC and a GPU at run time)", true},
      {Backend::Aten, "aten", "the graph's ops called one by one through ATen", true},
  };
  return table;
}

std::optional<Backend> parse_backend(std::string_view name) {
  for (const BackendInfo& b : backend_table())
    if (name == b.name) return b.id;
  return std::nullopt;
}

const char* backend_name(Backend b) {
  for (const BackendInfo& i : backend_table())
    if (i.id == b) return i.name;
  return "?";
}

std::string backend_choices() {
  const auto& t = backend_table();
  std::string s;
  for (size_t i = 0; i < t.size(); ++i) {
    if (i) s += i + 1 == t.size() ? " or " : ", ";
    s += std::string("'") + t[i].name + "'";
  }
  return s;
}

Backend resolve_backend(Backend requested, const Graph& g) {
  // The graph's one device: CPU, or one CUDA device, beside which small CPU tensors may be
  // (loop/interpret.h: an optimizer's step counts; the cuda backend computes them on the host).
  bool cpu = true, one_cuda = true;
  c10::Device cuda_device(c10::DeviceType::CUDA, 0);
  bool seen_cuda = false;
  for (const TensorMeta& m : g.values) {
    cpu = cpu && m.device.is_cpu();
    if (!m.device.is_cuda()) {
      one_cuda = one_cuda && loop::host_scalar(m);
      continue;
    }
    if (seen_cuda && m.device != cuda_device) one_cuda = false;
    cuda_device = m.device;
    seen_cuda = true;
  }
  one_cuda = one_cuda && seen_cuda;
  switch (requested) {
    case Backend::Native: return cpu && kHaveLlvm ? Backend::LlvmCpu : one_cuda && runtime::cuda::available() ? Backend::Cuda : Backend::Aten;
    case Backend::LlvmCpu: return cpu && kHaveLlvm ? Backend::LlvmCpu : Backend::Aten;
    case Backend::Cuda: return one_cuda && runtime::cuda::available() ? Backend::Cuda : Backend::Aten;
    case Backend::Aten: return Backend::Aten;
  }
  return Backend::Aten;
}

namespace {

// One half of a split graph on the resolved backend, or on aten where the backend refuses it.
PreparedGraph prepare_part(const Graph& g, Backend resolved) {
  try {
    return prepare_graph(g, resolved);
  } catch (const loop::Unsupported& e) {
    if (loop::dump_enabled("autograd")) std::fprintf(stderr, "=== autograd: a part runs on aten: %s\n", e.what());
    PreparedGraph p;
    p.finish = [g] { return compile_aten(g); };
    p.program = std::string("backend aten (") + backend_name(resolved) + " refused it: " + e.what() + ")";
    return p;
  }
}

// A graph whose outputs require grad (codegen/autograd/joint.h): its forward and backwards compiled
// apart, and joined by the autograd nodes of runtime/autograd_function.h.
PreparedGraph prepare_autograd(const Graph& g, Backend resolved) {
  autograd::AutogradSplit split;
  PassTimer timer;
  try {
    split = autograd::split_for_autograd(g);
  } catch (const autograd::NoDerivative& e) {
    throw loop::Unsupported(std::string("autograd: ") + e.what());
  }
  timer.lap("autograd_split");
  if (loop::dump_enabled("autograd")) {
    std::fprintf(stderr, "=== autograd forward ===\n%s", print_graph(split.forward).c_str());
    for (size_t L = 0; L < split.backward.size(); ++L)
      std::fprintf(stderr, "=== autograd backward %zu ===\n%s", L, print_graph(split.backward[L]).c_str());
  }
  using Get = std::function<runtime::ExecutablePtr()>;
  std::vector<PreparedGraph> parts{prepare_part(split.forward, resolved)};  // the forward, then each level's backward
  for (const Graph& b : split.backward) parts.push_back(prepare_part(b, resolved));
  auto eager = std::make_shared<std::vector<Graph>>(std::move(split.eager));
  auto plan = std::make_shared<runtime::AutogradPlan>(std::move(split.plan));
  // Calls whose inputs alias an input the forward writes into run the traced graph on ATen.
  auto traced = plan->written_inputs.empty() ? nullptr : std::make_shared<const Graph>(g);
  // Every part's executable by `pick` (nullptr where one has none), joined. A part builds once: a
  // from_cache that found the forward's kernels but not the backward's leaves the forward built,
  // and the finish that follows takes it (a backend's build hands its program over: it cannot run twice).
  std::vector<std::shared_ptr<runtime::ExecutablePtr>> built;
  for (size_t k = 0; k < parts.size(); ++k) built.push_back(std::make_shared<runtime::ExecutablePtr>());
  auto join = [&parts, &built, eager, plan, traced](Get PreparedGraph::*pick) -> Get {
    std::vector<Get> gets;
    for (size_t k = 0; k < parts.size(); ++k) {
      Get get = parts[k].backend == Backend::Aten ? parts[k].finish : parts[k].*pick;  // aten needs no compile
      if (!get) return nullptr;
      gets.push_back([get, once = built[k]]() -> runtime::ExecutablePtr {
        if (!*once) *once = get();
        return *once;
      });
    }
    return [gets, eager, plan, traced]() -> runtime::ExecutablePtr {
      std::vector<runtime::ExecutablePtr> exes;
      for (const Get& get : gets) {
        exes.push_back(get());
        if (!exes.back()) return nullptr;
      }
      std::vector<runtime::LevelExecutables> levels;
      for (size_t L = 0; L < eager->size(); ++L) levels.push_back({exes[L + 1], compile_aten((*eager)[L])});
      return runtime::make_autograd_executable(exes[0], std::move(levels), *plan, traced ? compile_aten(*traced) : nullptr);
    };
  };
  PreparedGraph p;
  p.backend = resolved;
  p.program = std::string("backend ") + backend_name(resolved) + " (autograd: a forward and " +
              std::to_string(split.backward.size()) + " backward graph(s))";
  for (size_t k = 0; k < parts.size(); ++k) {
    p.tiered = p.tiered || parts[k].tiered;
    p.program += (k ? "\n--- backward " + std::to_string(k - 1) + ": " : "\n--- forward: ") + parts[k].program;
  }
  p.finish = join(&PreparedGraph::finish);
  p.load_now = join(&PreparedGraph::load_now);
  p.from_cache = join(&PreparedGraph::from_cache);
  return p;
}

}  // namespace

PreparedGraph prepare_graph(const Graph& g, Backend resolved) {
  if (resolved != Backend::Aten && autograd::needs_autograd(g)) return prepare_autograd(g, resolved);
  PreparedGraph p;
  p.backend = resolved;
  // The compiling backends: the one pass list (codegen/passes/graph_passes.h), graph rewrites here,
  // then the loop pipeline and the backend's emission inside its prepare.
  using Prepare = loop::PreparedKernels (*)(const Graph&, RewrittenGraph);
  Prepare prepare = resolved == Backend::Cuda ? &prepare_cuda : nullptr;
#ifdef FASTDYN_HAVE_LLVM
  if (resolved == Backend::LlvmCpu) prepare = static_cast<Prepare>(&prepare_llvm_cpu);
#endif
  if (prepare) {
    std::optional<Graph> on_gpu;  // (the cuda backend's attention: autograd/joint.h)
    if (resolved == Backend::Cuda) on_gpu = autograd::with_efficient_attention(g, /*training=*/false);
    const Graph& attended = on_gpu ? *on_gpu : g;
    RewrittenGraph rewritten = rewrite_graph(attended);
    if (loop::dump_enabled("rewritten")) {  // what the loop pipeline gets
      std::fprintf(stderr, "=== rewritten ===\n%s", print_graph(rewritten.graph).c_str());
      if (!rewritten.constants.empty()) std::fprintf(stderr, "=== folded constants ===\n%s", print_graph(rewritten.folded).c_str());
    }
    loop::PreparedKernels k = prepare(attended, std::move(rewritten));
    p.tiered = true;
    p.program = std::move(k.program);
    p.finish = std::move(k.finish);
    p.load_now = std::move(k.load_now);
    p.from_cache = std::move(k.from_cache);
    return p;
  }
  p.backend = Backend::Aten;
  p.finish = [g] { return compile_aten(g); };
  p.program = "backend aten";
  return p;
}

bool warm_start_may_pay(const Graph& g, Backend resolved) {
#ifdef FASTDYN_HAVE_LLVM
  if (resolved == Backend::LlvmCpu) return llvm_warm_start_may_pay(g);
#else
  (void)g;
#endif
  return resolved != Backend::Aten;  // cuda: its cached binaries may load for a first call
}

void prewarm(Backend requested) {
#ifdef FASTDYN_HAVE_LLVM
  if (requested != Backend::Aten) llvm_jit::prewarm();
#else
  (void)requested;
#endif
}

}  // namespace fastdyn::codegen
