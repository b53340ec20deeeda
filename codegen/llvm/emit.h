// codegen/llvm/emit.h — the llvm_cpu kernel emitter: a planned loop Program -> LLVM IR functions
// (codegen/ layer; LLVM types only by forward declaration here).
//
// ABI: every kernel of the Program becomes
// `void <symbol>(void** slots, int32_t* status, const int64_t* sizes)`, where slots[i] is the data
// pointer of the i-th buffer slot the kernel uses (kernel_slots) and sizes[j] the value of its
// j-th size parameter (emit_kernel's result): the ABI of runtime::HostKernel
// (runtime/host_kernel.h).
//
// Sizes as parameters: in a graph specialised to one call's sizes (Graph::binding set), a loop
// bound, stride or offset whose expression over size symbols gives its number at the binding is
// computed from the sizes argument instead of being a constant. Every decision (loop order, dims
// merged, modes, vector paths) is still made from the numbers, and the module is the cache key:
// code emitted at two sizes is the same code, compiled once, exactly when every decision came
// out the same; and code emitted at sizes B, run with B's sizes, computes with B's numbers. So a
// kernel reused across sizes is correct by construction, whatever the decisions were. The runtime calls the kernels in step order from C++, with the extern ATen calls between them:
// the tensors of an extern step are C++ objects anyway, so a callback ABI would buy nothing. Each
// kernel is its own module and cache entry (emit_kernel). *status is set to 1 when a gathered
// index (embedding / index_select) is out of range; the kernel then reads row 0 instead.
//
// Code shape: the outer points (for pure pointwise kernels: blocks of the innermost row) are
// split by fastdyn_parallel_for with a grain that keeps small tensors on the calling thread.
// Row mode (the default): the innermost loop is vectorised explicitly to the host width with a
// scalar tail; reductions keep vector accumulators, summed in a three-level cascade (block,
// middle, total partials) and combined pairwise at the end; float32 exp and tanh are inline code
// (inline_math.h), other transcendental functions call SLEEF through math_function(). Three variations, chosen per kernel from its static shape:
// - streaming stores: a pure pointwise kernel whose contiguous output is larger than the
//   last-level cache writes it with non-temporal vector stores (peeled to alignment per block) and
//   fences them (sfence) at the end of each thread's chunk;
// - column mode: when the reduced dims are strided and the innermost kept dim is contiguous
//   (x.sum(0) on a row-major matrix), vector lanes are kept outer points: contiguous loads, one
//   accumulator lane per output, no gathers;
// - split mode: a kernel without outer points (x.sum(), softmax of a 1-d tensor) runs each inner
//   stage over a fixed number of chunks in parallel, partials combined pairwise in chunk order, so
//   the result does not depend on the thread count.
// A CumSum stage runs its inner loop point after point (row mode) or a vector of columns at a
// time (column mode).
#pragma once
#include "codegen/loop/kernel_input.h"

#include <string>
#include <vector>

namespace llvm {
class Module;
}

namespace fastdyn::codegen::llvm_emit {

// The emitter's input is codegen/loop/kernel_input.h's, shared with the cuda backend.
using loop::Addr;
using loop::KernelInput;
using loop::kernel_input;
using loop::kernel_slots;

// Plan, then emit: the emitter first makes every decision (which dims merge, loop order, row /
// column / split mode, chunk counts, streaming stores) from the input's numbers, then forgets each
// number that has a size expression: from there on such a number only exists as code computing
// the expression from the `sizes` argument. emit_key is that planned kernel as a string (the
// decisions, the loops and addresses with those numbers as expressions, the stages), and emission
// reads nothing else, so two inputs with equal keys get the same module, whatever their sizes.
// The llvm_cpu backend keeps a memo of emitted kernels by this key: a kernel met again (another
// layer, another graph, the next length of a dynamic one where the decisions came out the same)
// is neither emitted nor serialised again. Correct by construction: the decisions are in the key,
// so a size where one comes out differently (a row that now fits one vector, a column mode that
// now pays) is another key and another kernel.
std::string emit_key(const KernelInput& in, int vector_bits);
std::vector<int32_t> emit_kernel(const KernelInput& in, llvm::Module& m, int vector_bits, const std::string& symbol);
std::vector<int32_t> emit_kernel(const loop::Program& p, const loop::Kernel& k, llvm::Module& m, int vector_bits,
                                 const std::string& symbol);

// Every kernel of `p` into `m`, each under its own name (tests); returns the names in
// Program::kernels order.
std::vector<std::string> emit_program(const loop::Program& p, llvm::Module& m, int vector_bits);

}  // namespace fastdyn::codegen::llvm_emit
