// runtime/dynamic_executable.h — one compiled graph serving every size of its size symbols.
//
// A graph whose shapes hold size symbols (codegen/shapes/propagate.h) is guarded by relations,
// not sizes: one cache entry serves every call whose sizes satisfy them. What runs for a call is
// the graph specialised to that call's sizes: `instantiate` (given by the layer above: the
// graph, the backend and the compile path) builds it on the first call at those sizes, and the
// executable keeps it, up to a bound (past it, a pseudo-random other binding goes: a decode loop
// longer than the bound cycles through its lengths, the worst case of least-recently-used). The sizes come straight
// from the input tensors (symbol k is inputs[input].size(dim)): no guard re-evaluation, no map of
// strings on the call path.
//
// llvm_cpu's kernels take their symbolic sizes as arguments (codegen/llvm/emit.h), so the graph
// specialised to a new binding finds its kernels in the cache, built at an earlier size (a kernel
// whose decisions came out different at this size, e.g. a row that now fits one vector,
// compiles). What a new binding still costs is the graph passes and one key lookup per kernel
// (the emitter's memo, codegen/llvm/backend.cpp): about 1.5 ms for a 2-layer transformer, which
// the layer above runs on the background thread while the call runs on aten (eval_hook/compiler.cpp
// compile_dynamic); the aten backend itself needs no binding (one executable evaluates the sizes). A
// runtime program whose buffers, views and extern arguments are size expressions would serve every
// binding from one executable here (not built yet).
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/executable.h"

namespace fastdyn::runtime {

class DynamicExecutable final : public Executable {
 public:
  struct Symbol {
    int32_t input = -1;  // position in the graph's inputs
    int32_t dim = -1;
  };
  using Instantiate = std::function<ExecutablePtr(const std::vector<int64_t>& sizes)>;

  // `program` describes the symbolic graph (explain); `max_sizes` bounds the bindings kept.
  DynamicExecutable(std::vector<Symbol> symbols, Instantiate instantiate, std::string program, size_t max_sizes = 256);

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override;
  std::vector<at::Tensor> run_taking(std::vector<at::Tensor>&& inputs) override;
  std::string describe() const override;

  size_t instantiated() const;  // bindings compiled so far (evicted ones included)

 private:
  using Binding = std::vector<int64_t>;
  struct Slot {
    Binding sizes;
    ExecutablePtr exe;
  };
  ExecutablePtr find_or_build(const Binding& b);

  std::vector<Symbol> symbols_;
  Instantiate instantiate_;
  std::string program_;
  size_t max_sizes_;
  int32_t journal_graph_;  // the report's graph it was compiled for (runtime/journal.h), -1 none
  mutable std::mutex mutex_;
  std::list<Slot> lru_;  // most recently used first; past the bound a random one goes (.cpp)
  std::map<Binding, std::list<Slot>::iterator> index_;
  size_t built_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace fastdyn::runtime
