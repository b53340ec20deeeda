// codegen/cuda/backend.cpp — see backend.h.
#include "codegen/cuda/backend.h"

#include "codegen/aten/aten_backend.h"
#include "codegen/cuda/emit_cuda.h"
#include "codegen/cuda/horizontal.h"
#include "codegen/loop/interpret.h"
#include "codegen/loop/kernel_input.h"
#include "codegen/loop/passes.h"
#include "codegen/loop/runtime_program.h"
#include "codegen/passes/pass_timer.h"
#include "runtime/accuracy_check.h"
#include "runtime/background_compiler.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/cuda/cuda_kernel.h"
#include "runtime/errors.h"
#include "runtime/journal.h"
#include "runtime/kernel_cache.h"
#include "runtime/program_executable.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <vector>
#include <memory>
#include <mutex>
#include <string_view>

namespace fastdyn::codegen {
namespace {

namespace rc = runtime::cuda;

// The kernel cache of the cuda backend: runtime/kernel_cache.h's, one per GPU architecture (its
// identity names the architecture, so a CUBIN is only ever served to the one it was built for):
// loaded kernels in memory (bounded, least recently used out; an executable holds its kernels),
// CUBINs on disk. `compiled` remembers the sources NVRTC compiled (cuda_route_timings), bounded.
// `in_flight`: the kernels NVRTC is compiling now, by key, so that a graph (or a dynamic entry's
// plan at another size) asking for one of them waits for that compile instead of starting its own:
// a 4-layer Llama's decode graph asked for each layer's kernels four times at once (45 NVRTC
// compiles for 12 sources, each slower for the others running beside it).
struct CudaKernels {
  std::mutex mutex;
  std::map<int, std::unique_ptr<runtime::KernelCache>> caches;  // by architecture
  std::vector<std::pair<std::string, int>> compiled;             // (source, device), newest last
  std::map<std::string, std::shared_future<std::string>> in_flight;  // key -> the image being compiled
  double compile_ms = 0;
  // NVRTC compiles running, at most one per usable CPU (each is one core's work; more only slow
  // every one of them down).
  std::condition_variable slot_free;
  int compiling = 0;
};

CudaKernels& kernels() {
  static CudaKernels* k = new CudaKernels();  // NB: leaked: no exit-time unload racing the driver's teardown
  return *k;
}

// NVRTC's options, as part of the cache's identity (they change the binary).
std::string options() {
  std::string out;
  for (const std::string& o : rc::nvrtc_options()) out += " " + o;
  return out;
}

runtime::KernelCache& cache(int arch) {  // NB: under kernels().mutex
  std::unique_ptr<runtime::KernelCache>& c = kernels().caches[arch];
  if (!c)
    c = std::make_unique<runtime::KernelCache>(
        runtime::TargetIdentity{"cuda", "nvrtc " + rc::nvrtc_version() + options(), "sm_" + std::to_string(arch), "", runtime::binary_identity()});
  return *c;
}

std::string cache_key(const std::string& source, int device) {
  return "cuda 2 device " + std::to_string(device) + "\n" + source;
}

std::shared_ptr<const rc::LoadedKernel> loaded(const runtime::KernelCache::Entry& e) {
  return std::static_pointer_cast<const rc::LoadedKernel>(e.hold);
}

// NVRTC's image of `source` (cache key `key`), compiled now by the thread that registered `mine`
// in `in_flight` (find_or_compile), once an NVRTC slot is free; recorded in the disk cache and
// handed to the threads waiting on the same key (its error too).
std::string compile_registered(const std::string& source, const std::string& key, int arch, int device,
                               std::promise<std::string>& mine) {
  CudaKernels& k = kernels();
  {
    static const int most = std::max(1, runtime::usable_cpus());
    std::unique_lock<std::mutex> lock(k.mutex);
    k.slot_free.wait(lock, [&] { return k.compiling < most; });
    ++k.compiling;
  }
  std::string image;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    image = rc::nvrtc_compile(source, "fastdyn_kernel.cu", arch, /*cubin=*/true);
  } catch (...) {
    std::lock_guard<std::mutex> lock(k.mutex);
    --k.compiling;
    k.slot_free.notify_one();
    mine.set_exception(std::current_exception());
    k.in_flight.erase(key);
    throw;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(k.mutex);
  --k.compiling;
  k.slot_free.notify_one();
  runtime::KernelCache& c = cache(arch);
  ++c.stats().compiles;
  k.compile_ms += ms;
  k.compiled.emplace_back(source, device);
  if (k.compiled.size() > 256) k.compiled.erase(k.compiled.begin());
  c.write_object(key, image);
  mine.set_value(image);
  k.in_flight.erase(key);  // NB: after the write: a later lookup finds it on disk (or, loaded, in memory)
  return image;
}

// The kernel for `source` from memory, then disk, else (compile_missing) the compile another
// thread is running for it, else compiled by NVRTC now; nullptr when missing and !compile_missing.
// One locked look decides, so two threads never compile one key.
std::shared_ptr<const rc::LoadedKernel> find_or_compile(const std::string& source, int arch, int device, bool compile_missing) {
  CudaKernels& k = kernels();
  const std::string key = cache_key(source, device);
  std::string image;
  std::shared_future<std::string> other;
  std::promise<std::string> mine;
  {
    std::lock_guard<std::mutex> lock(k.mutex);
    runtime::KernelCache& c = cache(arch);
    if (runtime::KernelCache::Entry* e = c.find_memory(key)) {
      ++c.stats().memory_hits;
      return loaded(*e);
    }
    if (std::optional<std::string> bytes = c.read_object(key)) {
      image = std::move(*bytes);
      ++c.stats().disk_hits;
    } else if (!compile_missing) {
      return nullptr;
    } else if (auto it = k.in_flight.find(key); it != k.in_flight.end()) {
      other = it->second;
    } else {
      k.in_flight.emplace(key, mine.get_future().share());
    }
  }
  if (other.valid()) image = other.get();  // NB: rethrows that compile's error
  else if (image.empty()) image = compile_registered(source, key, arch, device, mine);
  auto kernel = std::make_shared<rc::LoadedKernel>(image, cuda_emit::kSymbol, device);
  std::vector<runtime::KernelCache::Entry> evicted;  // NB: let go after the lock
  std::lock_guard<std::mutex> lock(k.mutex);
  runtime::KernelCache& c = cache(arch);
  if (runtime::KernelCache::Entry* e = c.find_memory(key)) return loaded(*e);  // another thread loaded it meanwhile
  runtime::KernelCache::Entry entry;
  entry.handle = kernel.get();
  entry.hold = kernel;
  c.insert_memory(key, std::move(entry), &evicted);
  return kernel;
}

// Whether every tensor the kernel touches is in host memory (CPU scalars beside the GPU's tensors).
bool on_host(const loop::KernelInput& in) {
  for (const auto* list : {&in.loads, &in.stores})
    for (const std::vector<loop::Addr>& stage : *list)
      for (const loop::Addr& a : stage)
        if (!a.host) return false;
  return true;
}

int graph_device(const Graph& g) {
  for (const TensorMeta& m : g.values)
    if (m.device.is_cuda()) return m.device.index() < 0 ? 0 : m.device.index();
  return 0;
}

}  // namespace

namespace {
PreparedCuda prepare(const Graph& original, RewrittenGraph rewritten, std::vector<std::string>* launched_sources);
}  // namespace

std::vector<std::string> cuda_sources(const Graph& g) {
  std::vector<std::string> out;
  prepare(g, rewrite_graph(g), &out);
  return out;
}

CudaCompileStats cuda_compile_stats() {
  std::lock_guard<std::mutex> lock(kernels().mutex);
  CudaCompileStats out;
  for (const auto& [arch, c] : kernels().caches) {
    out.compiled += c->stats().compiles;
    out.memory_hits += c->stats().memory_hits;
    out.disk_hits += c->stats().disk_hits;
  }
  out.compile_ms = kernels().compile_ms;
  return out;
}

std::vector<std::pair<std::string, int>> cuda_compiled_sources() {
  std::lock_guard<std::mutex> lock(kernels().mutex);
  return kernels().compiled;
}

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

std::vector<RouteTiming> cuda_route_timings(const std::vector<std::string>& extra) {
  std::vector<RouteTiming> out;
  for (const auto& [source, device] : cuda_compiled_sources()) {
    const int arch = rc::device_info(device).arch;
    RouteTiming t;
    auto t0 = std::chrono::steady_clock::now();
    const std::string cubin = rc::nvrtc_compile(source, "route1.cu", arch, true, extra);
    t.nvrtc_cubin_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    const std::string ptx = rc::nvrtc_compile(source, "route2.cu", arch, false, extra);
    t.nvrtc_ptx_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    { rc::LoadedKernel k(ptx, cuda_emit::kSymbol, device); }
    t.driver_ptx_load_ms = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    { rc::LoadedKernel k(cubin, cuda_emit::kSymbol, device); }
    t.driver_cubin_load_ms = ms_since(t0);
    out.push_back(t);
  }
  return out;
}

PreparedCuda prepare_cuda(const Graph& original, RewrittenGraph rewritten) { return prepare(original, std::move(rewritten), nullptr); }

namespace {

// prepare_cuda; `launched_sources` (where not null) gets the source of each kernel a step
// launches, in order of first launch.
PreparedCuda prepare(const Graph& original, RewrittenGraph rewritten, std::vector<std::string>* launched_sources) {
  const Graph& g = rewritten.graph;
  auto p = std::make_shared<loop::Program>(loop::build_program(g));
  PassTimer timer;
  std::string text = loop::print_program(*p);
  auto sources = std::make_shared<std::vector<cuda_emit::CudaSource>>();
  std::vector<loop::KernelInput> inputs;
  // A kernel over CPU scalars alone (an optimizer's step counts) runs on the host, interpreted
  // (loop/interpret.h); GPU kernels read its results by value.
  auto host_kernels = std::make_shared<std::map<size_t, std::shared_ptr<const runtime::Kernel>>>();
  for (const loop::Kernel& k : p->kernels) {
    inputs.push_back(loop::kernel_input(*p, k));
    if (on_host(inputs.back())) {
      (*host_kernels)[sources->size()] = std::make_shared<loop::InterpretedKernel>(inputs.back());
      sources->emplace_back().on_host = true;
    } else {
      sources->push_back(cuda_emit::emit_cuda(inputs.back()));
    }
  }
  timer.lap("emit cuda");
  std::vector<loop::Extern> externs;
  for (const loop::Step& s : p->steps)
    if (s.kind == loop::Step::Kind::Extern) externs.push_back(loop::compile_extern(p->graph, p->graph.nodes[static_cast<size_t>(s.index)]));
  runtime::ExecutablePtr aliased = !p->mutates_inputs() ? nullptr : compile_aten(original);
  timer.lap("externs");
  auto program = std::make_shared<runtime::Program>(
      loop::runtime_program(*p, "cuda", text, std::move(externs), std::move(rewritten.constants), std::move(aliased)));
  // The source of each step's kernel (-1: an extern call), then independent launches as one
  // (horizontal.h; not in accuracy mode, whose plan checks each kernel's stores after its step).
  auto step_source = std::make_shared<std::vector<int32_t>>();
  for (const loop::Step& s : p->steps) step_source->push_back(s.kind == loop::Step::Kind::Kernel ? s.index : -1);
  for (size_t i = 0; i < p->steps.size(); ++i)  // host kernels need no GPU: in place now
    if (auto h = host_kernels->find(static_cast<size_t>((*step_source)[i])); (*step_source)[i] >= 0 && h != host_kernels->end())
      std::get<runtime::KernelLaunch>(program->steps[i]).kernel = h->second;
  if (!runtime::check_enabled()) {
    const std::string groups = cuda_emit::fuse_horizontally(*program, *step_source, *sources, inputs);
    text += groups;
    program->text += groups;
    timer.lap("horizontal fusion");
  }
  std::vector<std::string> launched;  // the sources the steps launch, in order of first launch
  {
    std::vector<bool> seen(sources->size());
    for (int32_t k : *step_source) {
      if (k < 0 || seen[static_cast<size_t>(k)] || (*sources)[static_cast<size_t>(k)].on_host) continue;
      seen[static_cast<size_t>(k)] = true;
      launched.push_back((*sources)[static_cast<size_t>(k)].source);
      if (loop::dump_enabled("cuda")) std::fprintf(stderr, "=== cuda k%d ===\n%s", k, launched.back().c_str());
      if (runtime::journal::recording())
        runtime::journal::add("kernel_code", {{"name", "k" + std::to_string(k)}, {"language", "cuda"}, {"code", launched.back()}});
    }
  }
  const int device = graph_device(g);
  auto build = [p, program, sources, step_source, device](bool compile_missing) -> runtime::ExecutablePtr {
    PassTimer kernel_timer;
    const rc::DeviceInfo info = rc::device_info(device);
    const size_t n = sources->size();
    std::vector<std::shared_ptr<const rc::LoadedKernel>> loaded(n);
    // Only the sources a step launches (a group's members are not); kernels of the same source (a
    // model's layers) are one kernel: looked up, or compiled, once.
    std::vector<bool> used(n);
    for (int32_t k : *step_source)
      if (k >= 0 && !(*sources)[static_cast<size_t>(k)].on_host) used[static_cast<size_t>(k)] = true;
    std::vector<size_t> same(n);
    std::map<std::string_view, size_t> first;
    for (size_t i = 0; i < n; ++i)
      if (used[i]) same[i] = first.emplace((*sources)[i].source, i).first->second;
    // Several kernels compile at once: NVRTC is thread-safe and each compile is one core's work.
    std::vector<std::future<std::shared_ptr<const rc::LoadedKernel>>> pending(n);
    for (size_t i = 0; i < n; ++i)
      if (used[i] && same[i] == i && !(loaded[i] = find_or_compile((*sources)[i].source, info.arch, device, false)) && compile_missing)
        pending[i] = std::async(std::launch::async, [&, i] { return find_or_compile((*sources)[i].source, info.arch, device, true); });
    for (size_t i = 0; i < n; ++i)
      if (pending[i].valid()) loaded[i] = pending[i].get();
    for (size_t i = 0; i < n; ++i)
      if (used[i] && !(loaded[i] = loaded[same[i]])) return nullptr;
    kernel_timer.lap(compile_missing ? "kernels (find or compile)" : "kernels (find)");
    for (size_t i = 0; i < program->steps.size(); ++i) {
      if ((*step_source)[i] < 0) continue;
      const auto k = static_cast<size_t>((*step_source)[i]);
      const cuda_emit::CudaSource& src = (*sources)[k];
      auto& launch = std::get<runtime::KernelLaunch>(program->steps[i]);
      if (src.on_host) continue;  // its interpreted kernel is in place (prepare)
      rc::LaunchShape shape;
      for (const auto& factor : src.work) {
        shape.work.emplace_back();
        for (const cuda_emit::WorkTerm& t : factor) shape.work.back().push_back({t.coef, t.params});
      }
      shape.block = src.block;
      shape.per_block = src.per_block;
      shape.split = src.split;
      shape.split_reductions = src.split_reductions;
      // Enough blocks to fill every multiprocessor a few times over; grid-stride loops do the rest.
      // A group's blocks are its members' ranges: all of them.
      shape.max_grid = int64_t{info.multiprocessors} * (2048 / src.block) * 4;
      if (src.exact_grid) shape.max_grid = std::max(shape.max_grid, shape.work_units(nullptr));
      std::vector<rc::HostRead> host;
      for (const cuda_emit::HostValue& h : src.host_values) {
        const auto bytes = static_cast<int32_t>(c10::elementSize(h.storage));
        host.push_back({h.arg, h.offset * bytes, bytes});
      }
      launch.kernel = std::make_shared<rc::CudaKernel>(loaded[k], std::move(shape), src.num_args,
                                                        static_cast<int>(src.size_params.size()), std::move(host));
      launch.sizes.clear();
      for (shapes::SymbolId s : src.size_params) launch.sizes.push_back(p->graph.binding.at(static_cast<size_t>(s)));
      FD_CHECK(launch.args.size() == static_cast<size_t>(src.num_args), "cuda backend: kernel arguments do not match its slots");
    }
    return std::make_shared<runtime::ProgramExecutable>(std::move(*program));
  };
  PreparedCuda prepared;
  prepared.program = "backend cuda\n" + text;
  if (launched_sources) *launched_sources = std::move(launched);
  prepared.finish = [build] { return build(true); };
  prepared.from_cache = [build] { return build(false); };
  return prepared;
}

}  // namespace

}  // namespace fastdyn::codegen
