// codegen/loop/interpret.h — a loop kernel run on the host by interpretation (codegen/ layer).
//
// What it is for: the few kernels of a GPU graph that compute on CPU scalars beside the GPU's
// tensors (torch.optim's step counts, kept on the CPU as eager keeps them, and the bias
// corrections made from them). They run where eager runs them, on the host, between the GPU
// launches; the GPU kernels then read their results by value (emit_cuda.h). A handful of points
// does not pay for a compiler: each point's instrs are evaluated here, in double, each result
// rounded to its compute type (for float32's + - * / and sqrt that is exactly the float32
// operation's result; pow and exp may differ from ATen's by an ulp).
// Only pointwise kernels (one inner stage, no reduction, no gather) of constant sizes with at
// most kMaxHostPoints points; anything else throws Unsupported (the graph then runs on ATen).
#pragma once
#include "codegen/loop/kernel_input.h"
#include "runtime/kernel.h"

#include <cstdint>
#include <vector>

namespace fastdyn::codegen::loop {

// The CPU tensors a GPU graph may hold beside its GPU tensors and still compile: small ones (an
// optimizer's step counts, their bias corrections, a stack of them), whose kernels run here.
constexpr int64_t kMaxHostPoints = 4096;
inline bool host_scalar(const TensorMeta& m) { return m.device.is_cpu() && m.numel() <= kMaxHostPoints; }

class InterpretedKernel final : public runtime::Kernel {
 public:
  explicit InterpretedKernel(const KernelInput& in);
  // Several interpreted kernels as one, run in order: member m's pointer arguments follow the
  // earlier members' (the cuda backend's run of host kernels between two GPU launches: one step).
  explicit InterpretedKernel(const std::vector<const InterpretedKernel*>& members);
  // args: the data pointers of the kernel's slots (kernel_slots order), host memory.
  void launch(void** args, const int64_t* sizes) const override;
  int32_t num_args() const;

 private:
  struct Part {
    loop::Kernel kernel;  // a copy: the program's kernels may go before this does
    std::vector<Addr> loads, stores;
    std::vector<int64_t> dims;
    int64_t points = 1;
    int32_t first_arg = 0, num_args = 0;
  };
  static void run(const Part& part, void** args);
  std::vector<Part> parts_;
};

}  // namespace fastdyn::codegen::loop
