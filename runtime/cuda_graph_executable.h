// runtime/cuda_graph_executable.h — mode="reduce-overhead": a compiled graph on CUDA tensors
// replayed as a CUDA graph.
//
// It wraps the executable of one graph at one set of sizes (a dynamic entry wraps each size's
// executable: one CUDA graph per size, up to the family's bound). It sits under the entry's guards:
// the compiled-graph callable reaches it only when they hold, so a replay never outlives what the
// trace relied on. Capture needs torch.cuda.CUDAGraph and the caching allocator's graph pools,
// which live in libtorch_cuda; fastdyn does not link it (a CPU build must build and run), so the
// capture, the static input buffers and the replay are in Python (python/fastdyn/_cuda_graphs.py,
// its Runner), called once per call: one Python call instead of one launch per kernel.
// Until the inner executable is settled (its kernels still compiling, calls on aten) the runner
// only passes calls through; warm-up and capture count from the first settled call.
#pragma once
#include <Python.h>

#include <string>

#include "runtime/executable.h"

namespace fastdyn::runtime {

class CudaGraphExecutable final : public Executable {
 public:
  // `family`: a fastdyn._cuda_graphs.Family (borrowed; kept) shared by the executables of one entry.
  // `not_capturable`: why this graph must not be captured (its calls then run `inner`), or "".
  CudaGraphExecutable(ExecutablePtr inner, size_t n_outputs, PyObject* family, std::string name,
                      std::string not_capturable = "");
  ~CudaGraphExecutable() override;

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override;
  std::string describe() const override;
  bool settled() const override { return inner_->settled(); }

 private:
  ExecutablePtr inner_;
  size_t n_outputs_;
  PyObject* family_;            // strong reference
  PyObject* runner_ = nullptr;  // strong reference, made at the first call
  std::string name_;
  std::string not_capturable_;
};

// A new fastdyn._cuda_graphs.Family (new reference) for the executables of one entry, or nullptr
// with a Python error set.
PyObject* new_cuda_graph_family(const std::string& name, int max_graphs);

}  // namespace fastdyn::runtime
