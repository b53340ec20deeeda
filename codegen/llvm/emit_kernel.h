// codegen/llvm/emit_kernel.h — INTERNAL to the kernel emitter: included only by emit.cpp and
// emit_*.cpp (codegen/ layer; everyone else uses emit.h). It declares KernelEmitter, the class that
// turns one loop IR kernel into LLVM IR, whose members are defined across three files along the
// shape of the code it emits:
//   emit.cpp        — the kernel's setup: dims collapsed, modes chosen, the body and entry
//                     functions, loops, and the per-task code (outer point, base offsets);
//   emit_stages.cpp — inner stages: split mode, row and column modes, reductions (accumulators,
//                     the summation cascade, lanes combined at the end);
//   emit_point.cpp  — one point, lanes wide: instr code (the per-Op table), loads and stores,
//                     types, constants and math calls.
// It also holds the tunables that shape every kernel, so that they read as one list.
#pragma once
#include "codegen/llvm/emit.h"
#include "codegen/llvm/jit_engine.h"
#include "runtime/env_flag.h"

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace fastdyn::codegen::llvm_emit::detail {

using loop::Access;
using loop::Instr;
using loop::Kernel;
using loop::Op;
using loop::Program;
using loop::ReduceOp;
using loop::Stage;
using ST = c10::ScalarType;

// Elements a reduction accumulates per lane before its partial sum is flushed (blocked summation).
constexpr int64_t kSumBlock = 4096;
// Sums cascade over three levels: a block partial, flushed every block into a middle partial,
// flushed every kCascade blocks into the total, so that no partial adds more than ~kCascade
// numbers of similar size; the error grows like kCascade * eps instead of n * eps.
constexpr int64_t kCascade = 64;
// Column mode (a reduction whose reduced dims are strided and whose kept innermost dim is
// contiguous): lanes are kept outer points, a task covers kColumnVectors vectors of them (a wide
// strip of each row: fewer pages and more independent adds per step), and a sum's block partial
// is flushed every kColumnBlock rows.
constexpr int kColumnVectors = 4;
constexpr int64_t kColumnBlock = 64;
// Split mode (a kernel without outer loops, e.g. a full reduction): it splits when it has at least
// kSplitMinElements points, into chunks of about kSplitChunkElements, at most kSplitMaxChunks.
constexpr int64_t kSplitMinElements = int64_t{1} << 18;
constexpr int64_t kSplitChunkElements = int64_t{1} << 17;
constexpr int64_t kSplitMaxChunks = 64;
// Independent vector accumulators per reduction: the vector loop is unrolled this many times so
// that additions do not wait on each other (floating-point adds may not be reassociated).
constexpr int kUnroll = 4;
// Along a row whose length is a size symbol, a stage whose reductions are all sums takes two
// vectors a step (two of the kUnroll accumulators; the others stay at the identity and fold away):
// its code is then three copies (two in the step, one in the masked remainder) instead of five,
// which LLVM compiles that much faster, and sums measured no slower (interleaved in one process,
// static/dynamic: sum, sum of squares, var, softmax, softmax(layer_norm) at 20 shapes, rows of 256
// to 262144, the same ratios with two or four). A max, min or arg-reduction keeps four: its
// NaN-propagating compare-and-select chain is latency-bound (amax 1.44-1.53x slower with two,
// as an earlier try of a two-way unroll found). Compile, dynamic against static (min of 9, one
// process): reduction 1.24-1.28x -> 1.15-1.18x, softmax(layer_norm) 1.26-1.30x -> 1.18-1.21x.
constexpr int kUnrollSymbolic = 2;
// A pure pointwise kernel's rows are split into blocks of this many elements across threads.
constexpr int64_t kRowBlock = 16384;

// What a number that has a size expression reads as once the kernel is planned (plan()): no
// emitted code may depend on it (every use of such a number goes through size()), and a use
// that slipped through would compute with this absurd value at every size, never silently with
// one size's value at another.
constexpr int64_t kForgotten = (int64_t{1} << 40) + 1;

inline bool is_fp(ST t) { return t == ST::Float || t == ST::Double; }
inline bool is_arg(ReduceOp op) { return op == ReduceOp::ArgMax || op == ReduceOp::ArgMin; }

// Combines `parts` pairwise, left to right, level after level (an odd one out moves up as is)
// until one is left: the summation order of every reduction's final combine.
template <class T, class F>
T pairwise(std::vector<T> parts, const F& combine) {
  while (parts.size() > 1) {
    std::vector<T> next;
    for (size_t q = 0; q + 1 < parts.size(); q += 2) next.push_back(combine(parts[q], parts[q + 1]));
    if (parts.size() % 2) next.push_back(parts.back());
    parts = std::move(next);
  }
  return parts[0];
}

class KernelEmitter {
 public:
  KernelEmitter(const KernelInput& in, llvm::Module& m, int vector_bits, std::string symbol)
      : in_(in), k_(*in.kernel), m_(m), ctx_(m.getContext()), b_(ctx_), vf_(std::max(1, vector_bits / 32)),
        symbol_(std::move(symbol)) {}

  // Makes every decision (loops merged and their order, modes, chunk counts) from the input's
  // numbers, then forgets the numbers that have size expressions (plan_key says why). Idempotent.
  void plan();
  // The planned kernel as a string: the decisions, the loop and access facts with each symbolic
  // number as its expression, and the stages. Emission reads nothing else, so equal keys give
  // equal modules, at any sizes (see emit.h).
  std::string plan_key();
  void emit();  // plans first where plan() was not called
  // The symbols the kernel reads as size parameters, in parameter order (after emit()).
  const std::vector<shapes::SymbolId>& size_params() const { return params_; }

 private:
  // One reduction's accumulators in the current inner stage (allocas).
  struct Acc {
    std::array<llvm::Value*, kUnroll> vec{};   // vector partials (allocas), one per unrolled slot
    std::array<llvm::Value*, kUnroll> vidx{};  // arg: vector best indices
    std::array<llvm::Value*, kUnroll> blk{};   // float sums: block partials (see kCascade)
    std::array<llvm::Value*, kUnroll> mid{};   // float sums: middle partials
    llvm::Value* sc = nullptr;     // scalar accumulator (row mode's tail)
    llvm::Value* sidx = nullptr;
    int width = 1, slots = 1;      // lanes of vec/vidx/blk/mid, and how many of them are used
  };

  // ---- emit.cpp: setup, functions, loops, per task ----
  void prepare();
  void forget_symbolic_numbers();
  void choose_column_mode();
  void choose_streaming_store();
  int64_t stride(const Addr& a, size_t loop) const { return a.stride[static_cast<size_t>(loop_dim_[loop])]; }
  // Sizes as code: the run-time value of `e` when it is not a constant (kernel_input and
  // domain_exprs keep only expressions that give their number at the binding, polynomials over
  // size symbols), else `value`. The code lives in the current function's first block, so it
  // dominates every use.
  llvm::Value* size(const shapes::SizeExpr& e, int64_t value);
  llvm::Value* loop_len(size_t loop) { return size(loop_sym_[loop], loop_size_[loop]); }
  llvm::Value* stride_v(const Addr& a, size_t loop) {
    const size_t d = static_cast<size_t>(loop_dim_[loop]);
    return size(a.sym_stride[d], a.stride[d]);
  }
  llvm::Value* ceil_div(llvm::Value* n, int64_t k);
  llvm::Value* blocks_v();
  llvm::Value* col_groups_v();
  llvm::Value* tasks_v();
  llvm::Value* work_v();
  llvm::Function* begin_body(const std::string& name);
  void begin_function(llvm::Function* f);
  llvm::Function* begin_entry();
  llvm::FunctionCallee parallel_for();
  llvm::FunctionCallee parallel_work();
  llvm::FunctionCallee runtime_loop(const char* name);
  void for_loop(llvm::Value* lo, llvm::Value* hi, llvm::Value* step, const std::function<void(llvm::Value*)>& body);
  void if_then(llvm::Value* cond, const std::function<void()>& body);
  llvm::Value* entry_alloca(llvm::Type* t);
  void emit_task(llvm::Value* task);
  void run_stages(const std::vector<llvm::Value*>& oidx, llvm::Value* block, int col_lanes);
  void compute_bases(const std::vector<llvm::Value*>& oidx);

  // ---- emit_stages.cpp: split mode, inner stages, reductions ----
  void choose_split_mode();
  void emit_split();
  void emit_inner_stage(size_t s, llvm::Value* block, int col_lanes);
  void flush(const loop::Reduction& red, Acc& a, ST vt, std::array<llvm::Value*, kUnroll>& from,
             std::array<llvm::Value*, kUnroll>& to);
  void flush_blocks(size_t s, llvm::Value* done, int64_t step);
  void flush_level(size_t s, bool to_total);
  bool cascaded() const {  // some accumulator of the stage being emitted is a float sum's cascade
    return std::any_of(accs_.begin(), accs_.end(), [](const Acc& a) { return a.blk[0] != nullptr; });
  }
  void cascade(size_t s, llvm::Value* lo, llvm::Value* hi, int64_t block,
               const std::function<void(llvm::Value*, llvm::Value*)>& body);
  void innermost(size_t s, std::vector<llvm::Value*>& idx, size_t l, llvm::Value* lo, llvm::Value* hi, llvm::Value* flat);
  bool masked_remainder(size_t s, size_t loop) const;
  llvm::Value* lanes_below(llvm::Value* n);

  // ---- emit_point.cpp: one point, lanes wide ----
  ST value_type(size_t s, int32_t instr) const { return k_.stages[s].instrs.at(static_cast<size_t>(instr)).type; }
  llvm::Type* scalar_type(ST t);
  llvm::Type* storage_type(ST t);
  llvm::Type* vec_type(ST t, int lanes);
  static llvm::Type* lanes_of(llvm::Type* t, int lanes) {
    return lanes == 1 ? t : static_cast<llvm::Type*>(llvm::FixedVectorType::get(t, static_cast<unsigned>(lanes)));
  }
  llvm::Value* splat(llvm::Value* v, int lanes);
  llvm::Constant* lane_steps(int lanes, int64_t step);
  llvm::Value* constant(double v, ST t, int lanes);
  llvm::Value* identity(ReduceOp op, ST t, int lanes);
  llvm::Value* int_limit(ST t, int lanes, bool lowest);
  llvm::Value* intrinsic(llvm::Intrinsic::ID id, llvm::ArrayRef<llvm::Value*> args);
  llvm::Value* combine(ReduceOp op, ST t, llvm::Value* a, llvm::Value* b);
  llvm::Value* better(ReduceOp op, ST t, llvm::Value* v, llvm::Value* best);
  llvm::Value* same(ST t, llvm::Value* v, llvm::Value* best);
  llvm::Value* element_offset(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
                              const std::vector<llvm::Value*>& vals, bool& contiguous, bool& uniform);
  llvm::Value* slot_ptr(int32_t slot);
  llvm::Value* widen(llvm::Value* raw, ST storage, ST compute, int lanes);
  llvm::Value* narrow(llvm::Value* v, ST storage, int lanes);
  llvm::Value* load(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
                    const std::vector<llvm::Value*>& vals, ST compute);
  void store(const Addr& a, llvm::Value* base, const std::vector<llvm::Value*>& idx, int lanes,
             const std::vector<llvm::Value*>& vals, llvm::Value* v);
  void run_point(size_t s, int lanes, const std::vector<llvm::Value*>& idx, llvm::Value* flat, int slot = 0);
  llvm::Value* instr(size_t s, const Instr& in, int lanes, const std::vector<llvm::Value*>& idx,
                     const std::vector<llvm::Value*>& vals);
  llvm::Value* frem_lanes(llvm::Value* a, llvm::Value* b, int lanes);
  llvm::Value* shift(Op op, ST t, llvm::Value* a, llvm::Value* n);
  llvm::Value* compare(Op op, ST t, llvm::Value* a, llvm::Value* b);
  llvm::Value* cast(llvm::Value* v, ST from, ST to, int lanes);
  llvm::Value* math_op(const Instr& in, int lanes, const std::vector<llvm::Value*>& vals);
  llvm::Value* math_call(llvm_jit::MathFn fn, ST t, std::vector<llvm::Value*> args, int lanes);

  const KernelInput& in_;
  const Kernel& k_;
  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  llvm::IRBuilder<> b_;
  int vf_;
  llvm::Function* body_ = nullptr;  // the parallel body being emitted (begin_body)
  llvm::Function* fn_ = nullptr;    // the function being emitted: a body or the entry point
  llvm::Value* slots_ = nullptr;  // the kernel's argument array: data pointers, kernel_slots order
  std::string symbol_;
  llvm::Value* status_ = nullptr;
  std::vector<std::vector<Addr>> load_addr_, store_addr_;
  std::vector<std::vector<llvm::Value*>> load_base_, store_base_;
  bool pure_ = false;
  size_t n_outer_ = 0;
  std::vector<int64_t> loop_size_;
  std::vector<shapes::SizeExpr> loop_sym_;  // loop_size_ over size symbols (see size())
  std::vector<int32_t> loop_dim_;
  int64_t inner_numel_ = 1;
  bool blocked_ = false;      // pure pointwise: rows cut into blocks (long, or of symbolic length)
  bool ranged_ = false;       // pure pointwise over one symbolic row: tasks are its vectors (prepare)
  bool planned_ = false;
  // Size parameters: the symbols read, in order, and per function the values made of them.
  std::vector<shapes::SymbolId> params_;
  llvm::Value* sizes_ = nullptr;                    // the current function's `const int64_t* sizes`
  llvm::BasicBlock* size_block_ = nullptr;          // the current function's first block
  std::map<std::string, llvm::Value*> size_cache_;  // per current function: expression text -> value
  bool column_ = false;       // lanes run along the innermost outer loop (choose_column_mode)
  int64_t col_width_ = 1;     // column mode: outer points per task (a multiple of vf_)
  int32_t nt_store_ = -1;     // stage 0's store that streams, or -1
  int64_t nt_align_ = 1;      // bytes its vector stores are aligned to
  bool nt_active_ = false;    // emitting the aligned vector loop, where that store streams
  llvm::Value* mask_ = nullptr;  // emitting a masked vector step: the lanes that are points (<vf_ x i1>)
  llvm::Value* whole_ = nullptr;  // ... and whether that is every lane (i1)
  // Row remainders may be masked vector steps (masked_remainder); FASTDYN_MASKED_TAIL=0 keeps the
  // scalar tail, read per kernel so that a benchmark can compare both in one process.
  const bool masked_tail_ = [] {
    const char* env = std::getenv("FASTDYN_MASKED_TAIL");
    return !(env && *env && runtime::is_off_word(env));
  }();
  bool split_ = false;        // split mode (choose_split_mode)
  int64_t split_chunks_ = 1;
  // The current range of the first inner loop: split mode's chunk, or a ranged kernel's thread share.
  llvm::Value* split_lo_ = nullptr;
  llvm::Value* split_hi_ = nullptr;
  std::vector<llvm::Value*> arg_best_;  // per reduction of the last inner stage: an arg's best value
  std::vector<llvm::Value*> scans_;     // per instr of the current inner stage: a CumSum's running sum
  std::vector<Acc> accs_;
  std::vector<llvm::Value*> reduced_;
  std::vector<std::vector<llvm::Value*>> stage_values_;
};

}  // namespace fastdyn::codegen::llvm_emit::detail
