// codegen/loop/loop_ir.h — the loop-level IR between the tensor graph and a code emitter
// (codegen/ layer; backend-neutral: no LLVM, no ATen headers, shared with a future GPU backend).
//
// A Program is a list of Steps over the graph's values: a Kernel step runs generated code, an
// Extern step calls one graph node through ATen (matmul, conv, anything without a lowering).
// Values keep their graph ValueId; after memory planning each materialised value lives in a
// buffer slot (ValuePlan). Views never copy: a view of a materialised value is an alias of its
// root with the view's own strides, and a view of a value that is computed inline is an affine
// index map composed into the loads that read it.
//
// A Kernel iterates a static domain `outer ++ inner` (sizes known at compile time; shapes are
// guarded). The outer points are independent and are split across threads; for each outer point
// the Stages run in order:
//   - an inner Stage loops over the inner dims, evaluating its SSA instrs at each point, ending
//     in Stores and/or Reductions (sum/prod/max/min/argmax/argmin) over the whole inner space;
//   - a per-outer Stage runs once (an epilogue): it can use reduction results and the values of
//     earlier per-outer stages (Reduced / StageValue instrs), which dominate it.
// That single shape covers pointwise chains (outer = all dims but the last, 1 inner stage),
// reductions with pointwise prologues and epilogues, and reduction -> broadcast -> reduction
// patterns (softmax: max stage, sum-of-exp stage, store stage; layer_norm: mean, variance,
// store) in one kernel, with every intermediate in registers.
//
// Loads and stores name a value and an affine index per value dim over the kernel's domain
// (value_index[k] = constant + sum_d coef[d] * i_d); the emitter turns that into a byte address
// with the planned buffer's strides, so broadcast (coef 0), permute, slice and select cost nothing.
// An index may also add the runtime value of an integer instr (`dynamic`): gathers for
// embedding/index_select.
//
// Scalars are computed in a compute type: f32 for f32/bf16/f16 storage (loads widen, stores
// round), f64, i64, i32, bool. The printed Program is the kernel-cache key, so the printer must
// show everything that changes the generated code.
#pragma once
#include "codegen/graph/graph.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fastdyn::codegen::loop {

// Scalar operations: (name, arity). Comparison results are Bool. Max/Min propagate NaN.
// RoundBF16/RoundF16 round an f32 to the nearest bf16/f16 value (still f32): eager ATen rounds
// every 16-bit result, so a fused chain does too wherever a graph value has such a dtype.
// Integer Div truncates and Fmod is its remainder (C's / and %); lowerings emit them only with a
// divisor that cannot be 0 or -1. Shl/Shr follow ATen: a count outside [0, bits) gives 0 (Shl) or
// the sign fill (Shr, arithmetic).
// Fma(a, b, c) = a * b + c rounded once (floats only): lowerings use it inside polynomials that
// ATen's own vectorised code evaluates with fused multiply-adds (the float32 erf of GELU).
// Count is the number of points of the kernel's inner domain, `value` (mean's and layer_norm's
// divisor): a constant, except that an emitter may compute it from the sizes at run time where
// they are symbols (a kernel then serves every length of the rows it reduces).
// CumSum is a scan: the running sum of its operand over the inner points of its stage so far, in
// loop order, this point included (cumsum along the kernel's one inner dim). Its stage is never
// vectorised along that dim, and a kernel with one is never pure pointwise (its points depend on
// each other).
#define FD_LOOP_OPS(X)                                                                        \
  X(Load, 0) X(Const, 0) X(Count, 0) X(Reduced, 0) X(StageValue, 0)                             \
  X(Cast, 1) X(Neg, 1) X(Abs, 1) X(Exp, 1) X(Expm1, 1) X(Log, 1) X(Log1p, 1) X(Log2, 1)       \
  X(Log10, 1) X(Sqrt, 1) X(Rsqrt, 1) X(Sin, 1) X(Cos, 1) X(Tan, 1) X(Tanh, 1) X(Sinh, 1)      \
  X(Cosh, 1) X(Asin, 1) X(Acos, 1) X(Atan, 1) X(Erf, 1) X(Erfc, 1) X(Floor, 1) X(Ceil, 1)     \
  X(Round, 1) X(Trunc, 1) X(IsNan, 1) X(Not, 1) X(Recip, 1) X(RoundBF16, 1) X(RoundF16, 1)       \
  X(Add, 2) X(Sub, 2) X(Mul, 2) X(Div, 2) X(Max, 2) X(Min, 2) X(Pow, 2) X(Atan2, 2)          \
  X(Rem, 2) X(Fmod, 2) X(And, 2) X(Or, 2) X(Xor, 2) X(Shl, 2) X(Shr, 2)                       \
  X(Lt, 2) X(Le, 2) X(Gt, 2) X(Ge, 2) X(Eq, 2) X(Ne, 2)                                       \
  X(Select, 3) X(Fma, 3) X(CumSum, 1)

enum class Op : uint8_t {
#define FD_X(name, arity) name,
  FD_LOOP_OPS(FD_X)
#undef FD_X
};
const char* op_name(Op op);
int op_arity(Op op);

// MaxLoose: the maximum where no NaN is involved; with a NaN it may give any operand, and +0/-0
// in either order. The stabiliser of softmax, log_softmax and logsumexp (x - max): a NaN in the
// row makes every result NaN through the sum of exp anyway, and exp(x - 0) does not depend on the
// zero's sign, while the loose form is one instruction (x86 max) instead of a NaN- and
// sign-of-zero-exact sequence.
enum class ReduceOp : uint8_t { Sum, Prod, Max, Min, ArgMax, ArgMin, MaxLoose };
const char* reduce_name(ReduceOp r);

// index = constant + sum_d coef[d] * i_d (+ the value of instr `dynamic` when >= 0).
// sym_constant is `constant` over size symbols where it came from sizes (cat's offset past an
// input of symbolic length, a negative index into a symbolic dim): an emitter may compute it at
// run time where it gives `constant` at the graph's binding (codegen/llvm/emit.h), so it never
// changes what an index is, and == ignores it.
struct AffineIndex {
  std::vector<int64_t> coef;  // one per kernel dim (outer then inner)
  int64_t constant = 0;
  int32_t dynamic = -1;       // an integer instr of the same stage
  std::vector<shapes::SizeExpr> sym_constant;  // empty (the number), or one expression
  bool operator==(const AffineIndex& o) const {
    return coef == o.coef && constant == o.constant && dynamic == o.dynamic;
  }
  shapes::SizeExpr constant_expr() const { return sym_constant.empty() ? shapes::SizeExpr(constant) : sym_constant[0]; }
};

struct Access {
  ValueId value = -1;
  std::vector<AffineIndex> index;  // one per dim of the value
  bool operator==(const Access& o) const { return value == o.value && index == o.index; }
};

struct Instr {
  Op op = Op::Const;
  c10::ScalarType type = c10::ScalarType::Float;  // compute type of the result
  int32_t a = -1, b = -1, c = -1;  // operands (instr ids); Load: access id; Reduced: reduction id;
                                   // StageValue: a = stage, b = instr
  double value = 0.0;              // Const, Count (integers are exact up to 2^53)
};

struct Store {
  int32_t instr = -1;
  Access dst;
};

struct Reduction {
  ReduceOp op = ReduceOp::Sum;
  int32_t instr = -1;  // the value reduced (ArgMax/ArgMin: compared; the result is the i64 flat inner index)
  c10::ScalarType type = c10::ScalarType::Float;  // accumulator / result type
};

struct Stage {
  bool per_outer = false;
  std::vector<Instr> instrs;
  std::vector<Access> loads;  // Load instr `a` indexes this
  std::vector<Store> stores;
  std::vector<Reduction> reductions;  // numbered kernel-wide in stage order (Reduced instr `a`)
};

struct Kernel {
  std::string name;
  std::vector<int64_t> outer, inner;
  std::vector<Stage> stages;
  // The graph nodes it computes (each once; an inlined producer is in every kernel that inlines
  // it): the report's groups and source lines. No backend reads it.
  std::vector<int32_t> nodes;
  int64_t dims() const { return static_cast<int64_t>(outer.size() + inner.size()); }
};

struct Step {
  enum class Kind : uint8_t { Kernel, Extern };
  Kind kind = Kind::Kernel;
  int32_t index = -1;  // Kernel: into Program::kernels; Extern: graph node index
};

// Where a value lives once planned.
struct ValuePlan {
  enum class Kind : uint8_t {
    None,    // never materialised (computed inline where it is read)
    Input,   // a graph input; slot holds the caller's tensor
    Buffer,  // written by a kernel into a buffer the executable allocates (slot)
    Extern,  // returned by an extern step (slot)
    Alias,   // a strided view of `root`'s storage (meta strides; offset relative to root's)
  };
  Kind kind = Kind::None;
  int32_t slot = -1;  // Input/Buffer/Extern; Alias: the root's slot
  ValueId root = -1;  // Alias
};

// A graph input that the graph mutates in place (codegen/loop/functionalize.cpp): the last kernel
// steps store `value`, its final contents, into the caller's tensor. The executable bumps the
// tensor's version counter `bumps` times, once per in-place op, as eager does.
struct WriteBack {
  ValueId input = -1;
  ValueId value = -1;
  int32_t bumps = 1;
};

struct Program {
  Graph graph;  // the graph being compiled (Extern steps name its nodes; values carry metadata)
  std::vector<WriteBack> writebacks;
  std::vector<ValueId> extern_writes;  // graph inputs an in-place extern step writes (functionalize.cpp)
  // Whether a call writes its caller's tensors (the runtime then needs the ATen fallback).
  bool mutates_inputs() const { return !writebacks.empty() || !extern_writes.empty(); }
  std::vector<Kernel> kernels;
  std::vector<Step> steps;
  // Filled by plan_memory: per value, and per slot the value whose metadata allocates it.
  std::vector<ValuePlan> plans;
  std::vector<ValueId> slot_owner;
  // Per slot (plan_memory): the step before which its buffer is allocated, and the step after
  // which nothing reads it any more (-1: it lives to the end: inputs, outputs, constants).
  std::vector<int64_t> slot_alloc, slot_release;
};

// Text form, e.g.
//   kernel k0 outer[4] inner[8]:
//     stage 0 inner:
//       %0 = load f32 %1[i0, i1]
//       ...
//       red0 = sum f32 %3
// print_program is deterministic and complete: it is the cache key.
std::string print_program(const Program& p);
std::string print_kernel(const Program& p, const Kernel& k);

// The compute type for a storage dtype (f32 for f16/bf16), or Undefined when loops cannot hold it.
c10::ScalarType compute_type(c10::ScalarType storage);

// True when some instr of the stage is a CumSum (the stage is a sequential scan).
bool has_scan(const Stage& s);

}  // namespace fastdyn::codegen::loop
