// runtime/executable.h — what runs on every call of a compiled graph.
//
// An Executable takes the graph inputs (tensors, in Graph::inputs order) and returns the graph
// outputs (in Graph::outputs order). Backends in codegen/ build them: op by op on ATen, or, for a
// backend that compiles kernels, a runtime::Program run by ProgramExecutable
// (program_executable.h). The eval hook calls them through the Python callable of
// runtime/compiled_graph.h, with no Python per op.
#pragma once
#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace fastdyn::runtime {

class Executable {
 public:
  virtual ~Executable() = default;
  // Throws c10::Error (from ATen) or fastdyn::BackendError; never returns partial outputs.
  virtual std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) = 0;
  // The same call where the caller gives up its references to the inputs: an executable that can
  // drops each one after its last reader, so that a tensor nobody else holds is freed mid-call (a
  // compiled backward's saved activations, as eager's autograd frees each node's). The inputs are
  // gone afterwards, also when it throws.
  virtual std::vector<at::Tensor> run_taking(std::vector<at::Tensor>&& inputs) {
    std::vector<at::Tensor> taken = std::move(inputs);
    return run(taken);
  }
  // Human-readable description: backend name and its program (for explain / FASTDYN_LOG=code).
  virtual std::string describe() const = 0;
  // Its calls run the code they will keep running, not a baseline tier waiting for a compile
  // (a tiered or deferred executable before its switch). A CUDA graph captures only then.
  virtual bool settled() const { return true; }
};

using ExecutablePtr = std::shared_ptr<Executable>;

}  // namespace fastdyn::runtime
