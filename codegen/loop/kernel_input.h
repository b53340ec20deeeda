// codegen/loop/kernel_input.h — one kernel as a code emitter sees it: its loop IR, and per access
// the planned address (codegen/ layer; backend-neutral: the llvm_cpu and cuda emitters both read
// this and nothing else of the Program).
//
// Sizes as parameters: in a graph specialised to one call's sizes (Graph::binding set), a loop
// bound, stride or offset whose expression over size symbols gives its number at the binding is
// computed by the kernel from its size arguments instead of being a constant. Only polynomials
// over size symbols qualify (`computable`): a // or % of sizes stays the binding's number, so an
// expression a pass left stale can only cost a kernel's reuse across sizes, never a result.
#pragma once
#include "codegen/loop/loop_ir.h"

#include <cstdint>
#include <vector>

namespace fastdyn::codegen::loop {

// The buffer slots kernel `k` reads and writes, in first-use order: a kernel's pointer arguments
// are their data pointers in this order.
std::vector<int32_t> kernel_slots(const Program& p, const Kernel& k);

// Strides of one access, after the plan: element offset = base + sum_d stride[d] * i_d (+ dyn).
// The numbers are the sizes of the graph's binding (what every decision reads); the sym_* are the
// same over size symbols (what the code computes, where they are computable sizes).
struct Addr {
  int32_t slot = -1;  // position in kernel_slots (the kernel's pointer arguments)
  c10::ScalarType storage = c10::ScalarType::Float;
  // The value lives in host memory (a CPU tensor). In a GPU kernel that is a CPU scalar beside
  // the GPU's tensors (an optimizer's step count): read on the host at the launch, passed by value.
  bool host = false;
  int64_t base = 0;
  std::vector<int64_t> stride;  // per kernel dim
  int32_t dynamic = -1;          // instr id in the stage
  int64_t dyn_stride = 0, dyn_size = 0;
  shapes::SizeExpr sym_base;
  std::vector<shapes::SizeExpr> sym_stride;
  shapes::SizeExpr sym_dyn_stride, sym_dyn_size;
};

// Everything an emitter reads to emit one kernel: the kernel's loop IR and, per access, what the
// memory plan and the metadata say about the value it touches.
struct KernelInput {
  const Kernel* kernel = nullptr;
  std::vector<std::vector<Addr>> loads, stores;  // per stage, per access
  // The accessed value's sizes over size symbols (empty: a value of static shape), per access.
  std::vector<std::vector<std::vector<shapes::SizeExpr>>> load_sizes, store_sizes;
  std::vector<int64_t> store_bytes;  // stage 0's stores: the stored value's size in bytes
  std::vector<int64_t> binding;      // the graph's binding (empty: none)
};
KernelInput kernel_input(const Program& p, const Kernel& k);

// A polynomial over size symbols that is not a constant: what a kernel can compute from its size
// arguments.
bool computable(const shapes::SizeExpr& e);

// The size of each kernel dim (outer then inner) over size symbols: the size of a value dim that
// an access walks one for one along it, where that is computable and equal to the dim's size at
// the binding; else the number.
std::vector<shapes::SizeExpr> domain_exprs(const KernelInput& in);

}  // namespace fastdyn::codegen::loop
