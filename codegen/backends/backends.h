// codegen/backends/backends.h — which backend compiles a graph, and the one way to ask it to.
//
// A backend is a name in an enum, not a string: users' strings are parsed once (parse_backend),
// and everything below carries the enum. `Native` is a request, not a backend: the best backend
// this build has for the graph's device (resolve_backend). The table says what each backend is
// and whether this build has it; nothing above this folder tests FASTDYN_HAVE_LLVM.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/backends/backend_id.h"
#include "codegen/graph/graph.h"
#include "runtime/executable.h"

namespace fastdyn::codegen {

struct BackendInfo {
  Backend id;
  const char* name;     // as users write it: enable(backend=...), jit(..., backend=...)
  const char* summary;  // one line for errors and docs
  bool built;           // this build has it
};
const std::vector<BackendInfo>& backend_table();

std::optional<Backend> parse_backend(std::string_view name);
const char* backend_name(Backend b);
std::string backend_choices();  // "'native', 'llvm_cpu', 'cuda' or 'aten'"

// The backend that compiles `g` for a request: Native is llvm_cpu for a CPU graph where built, cuda
// for a graph on one CUDA device where NVRTC and the driver load, aten otherwise; a backend that
// cannot take the graph's device runs it on aten.
Backend resolve_backend(Backend requested, const Graph& g);

// A graph prepared on a resolved backend. finish() compiles it (it may run on a worker thread:
// a tiered backend's first calls run on aten meanwhile); load_now(), when set, serves it from a
// cache at once or returns nullptr having compiled nothing. `program` is what the finished
// executable's describe() will say.
struct PreparedGraph {
  Backend backend = Backend::Aten;
  bool tiered = false;  // worth compiling in the background behind an aten baseline
  std::string program;
  std::function<runtime::ExecutablePtr()> finish;
  std::function<runtime::ExecutablePtr()> load_now;
  // The executable from kernels already built, or nullptr (codegen/llvm/backend.h's from_cache).
  std::function<runtime::ExecutablePtr()> from_cache;
};
// Throws the backend's refusal (loop::Unsupported: the graph runs on aten, by design) or its
// failure (any other exception: a compiler bug the caller reports).
PreparedGraph prepare_graph(const Graph& g, Backend resolved);

// Whether `resolved` might serve g's first call from its disk cache (PreparedGraph::load_now), as
// far as the graph alone tells: where not, nothing the caller's thread could run compiled at
// once depends on preparing g there.
bool warm_start_may_pay(const Graph& g, Backend resolved);

// Starts what a backend needs (the LLVM JIT) on a thread while the user's code runs.
void prewarm(Backend requested);

}  // namespace fastdyn::codegen
