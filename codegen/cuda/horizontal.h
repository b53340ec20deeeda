// codegen/cuda/horizontal.h — horizontal fusion in the cuda backend: which of a program's kernels
// launch together, and the program rewritten so that they do (codegen/ layer).
//
// An optimizer step updates each parameter with its own kernel (one or two per parameter after
// vertical fusion): a hundred launches of a few microseconds each where ATen's multi-tensor
// kernels make a handful. Kernels that run one after another, are pointwise with constant sizes,
// and touch disjoint slots where one writes (no member writes a slot another member reads or
// writes: reused buffer slots included) become one launch of emit_cuda_group's kernel. The
// steps between are kernel launches only (an extern call ends a run), so nothing reads a member's
// result before the group has run, and each member's buffers are allocated before the group and
// released after it. Host kernels (CPU scalars, loop/interpret.h) first move to the start or the
// end of the GPU launches around them where they may, so that they do not split them; host
// kernels that then follow each other run as one step.
#pragma once
#include "codegen/cuda/emit_cuda.h"
#include "codegen/loop/kernel_input.h"
#include "runtime/program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fastdyn::codegen::cuda_emit {

// Parameters (pointers and CPU scalars) a group may have in all: 8 bytes each at most, within the
// 4 KiB of a kernel's parameters on every architecture and CUDA version.
constexpr int kMaxGroupArgs = 480;

// Fuses `r`'s runs of launches in place. step_source[i] is the index in `sources` of step i's
// kernel (-1: an extern call); `inputs[j]` is what sources[j] was emitted from. Each group's
// source is appended to `sources` and its step takes the members' pointer arguments in order;
// step_source follows the new steps. Returns one line per group for the program's text.
std::string fuse_horizontally(runtime::Program& r, std::vector<int32_t>& step_source, std::vector<CudaSource>& sources,
                              const std::vector<loop::KernelInput>& inputs);

}  // namespace fastdyn::codegen::cuda_emit
