// codegen/cuda/emit_cuda.h — the cuda kernel emitter: one loop-IR kernel as CUDA C++ source for
// NVRTC (codegen/ layer; no CUDA header, no driver: it only writes text, so it runs and is
// tested on a machine without a GPU).
//
// ABI: `extern "C" __global__ void fastdyn_kernel(char* a0, ..., long long z0, ..., T h0, ...)`: the
// data pointers of the kernel's slots (loop::kernel_slots order), then its size parameters, the
// values of the symbols in `size_params` at the launch (runtime/cuda/cuda_kernel.h), then the CPU
// scalars it reads, by value (`host_values`: a pointwise kernel reading an optimizer's step count;
// a slot in host memory is still a pointer parameter, never dereferenced on the GPU). A size that is a
// symbol at the graph's binding is code over the z's (loop::domain_exprs and the accesses'
// computable expressions), so one kernel serves every size; the source is the kernel's key.
//
// Kernel shapes, chosen from the kernel's structure alone:
// - pointwise (one inner stage, no reduction, no scan): a grid-stride loop over every point of
//   the domain, one thread per point; where the innermost dim is contiguous for every access and
//   its length a multiple of the vector width, each thread takes a vector of points (128-bit
//   loads and stores of float32, 64-bit of 16-bit types);
// - rows (reductions, epilogues): a block per outer point (grid-stride over them); each inner
//   stage is a block-strided loop over the row, reductions combine per thread, then across the
//   block (warp shuffles, then one shared word per warp), and every thread gets the result, so a
//   per-outer stage (an epilogue: mean, rstd) and later stages read it from registers. Softmax and
//   layer_norm are one kernel, one block per row; block size from the row length (32..1024).
//   A row of up to 16 points per thread stays in registers between stages (loaded once, as
//   aligned vectors where one contiguous inner dim allows; a store a later stage overwrites
//   never reaches memory); longer rows loop;
// - split (few long rows: x.sum(), a loss's mean): several blocks per row, partials in a workspace
//   the launch allocates, combined by the row's last block, which runs the per-row stages;
// - columns (many rows whose points are far apart while neighbouring rows are adjacent: a sum over
//   dim 0 of a matrix, a bias's gradient): 32 adjacent rows per block, one per lane so that loads
//   coalesce, the warps splitting each row and combining through shared memory.
// Float32 accumulation for 16-bit types (the loop IR's compute types). Out-of-range gathered
// indices trap (a device-side assertion, as ATen's embedding does).
// Not yet: scans (CumSum) throw loop::Unsupported (the graph runs on ATen); argmax/argmin and
// multi-stage kernels (softmax of one long row) over few long rows still take one block per row.
#pragma once
#include "codegen/loop/kernel_input.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fastdyn::codegen::cuda_emit {

// How a launch's grid follows the sizes: `work` units, the product of these polynomials (each a
// sum of coef * product of size parameters, by position in size_params), per_block of them per
// block.
struct WorkTerm {
  int64_t coef = 1;
  std::vector<int32_t> params;
};

// A CPU scalar a GPU kernel reads (loop::Addr::host): the launch reads the element `offset` of
// pointer argument `arg`'s tensor on the host and passes it by value, as parameter h<i> (after the
// size parameters) of type `storage`.
struct HostValue {
  int32_t arg = -1;
  int64_t offset = 0;  // elements
  c10::ScalarType storage = c10::ScalarType::Float;
  bool operator==(const HostValue& o) const { return arg == o.arg && offset == o.offset && storage == o.storage; }
};

struct CudaSource {
  std::string source;                       // one translation unit, the kernel's cache key
  std::vector<shapes::SymbolId> size_params;  // the symbols of z0, z1, ...
  int num_args = 0;                          // pointer parameters
  std::vector<std::vector<WorkTerm>> work;
  int64_t per_block = 1;
  int block = 256;
  // The split shape (`split` blocks per row): the kernel's last parameter is a workspace of
  // work units * split_reductions * 8 bytes of partials, then a zeroed counter (u32) per row.
  int64_t split = 0;
  int split_reductions = 0;
  bool pointwise = false;    // the pointwise shape (a group may take it as a member)
  bool exact_grid = false;   // a group: exactly work / per_block blocks, each member owning its range
  std::vector<HostValue> host_values;  // by-value parameters after the sizes (pointwise kernels only)
  bool on_host = false;      // not a GPU kernel: one over CPU scalars, interpreted (loop/interpret.h)
};

constexpr const char* kSymbol = "fastdyn_kernel";

// Throws loop::Unsupported for what the emitter does not handle yet (above).
CudaSource emit_cuda(const loop::KernelInput& in);

// Horizontal fusion: independent pointwise kernels of constant sizes (an optimizer step's update
// of each parameter, one after another) as one launch. Each member is its pointwise kernel as a
// `__noinline__` device function whose grid-stride loops run over the member's own range of
// blocks: member m takes blocks [first_m, first_m + blocks_m), blocks_m the blocks its points
// need up to kMemberBlocks (the loop takes the rest). Members of the same body (parameters of one
// shape) share one function. The kernel's pointer parameters are the members' in order; the grid
// is exactly the sum of the ranges (exact_grid). The backend (codegen/cuda/horizontal.h) decides
// which kernels may launch together.
constexpr int kGroupBlock = 256;  // the pointwise shape's block
constexpr int64_t kMemberBlocks = 512;
CudaSource emit_cuda_group(const std::vector<loop::KernelInput>& members);

}  // namespace fastdyn::codegen::cuda_emit
