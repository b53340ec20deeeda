// codegen/cuda/emit_cuda.cpp — see emit_cuda.h. One class writes one kernel: sizes as code over
// the size parameters, addresses, one instr's expression (a table per op), then the pointwise or
// the row shape around the stages.
#include "codegen/cuda/emit_cuda.h"

#include "runtime/format.h"

#include "codegen/loop/passes.h"
#include "runtime/errors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

namespace fastdyn::codegen::cuda_emit {
namespace {

using loop::Addr;
using loop::Instr;
using loop::Op;
using loop::ReduceOp;
using loop::Stage;
using shapes::SizeExpr;
using ST = c10::ScalarType;

// Before every grid-stride loop (a thread or block mostly runs it once or a few times): NVVM
// would otherwise unroll it by 4 at run time, copying the whole body, math functions included:
// twice the PTX and about 40% more NVRTC time for a pointwise kernel, for no speed.
const char* const kGridStride = "#pragma unroll 1\n";
const char* const kPrelude =
#include "codegen/cuda/cuda_prelude.inc"
    ;

// Rows of up to kMaxItems points per thread run the persistent path: the row's values stay in
// registers between stages.
constexpr int kMaxItems = 16;
// Blocks the column shape aims for at least, splitting its groups of rows (split_columns): about
// two per SM of an H100 or H200 (132 SMs).
constexpr int64_t kColumnBlocks = 256;

bool is_fp(ST t) { return t == ST::Float || t == ST::Double; }

const char* compute_name(ST t) {
  switch (t) {
    case ST::Float: return "float";
    case ST::Double: return "double";
    case ST::Long: return "i64";
    case ST::Int: return "int";
    case ST::Bool: return "bool";
    default: throw loop::Unsupported(std::string("cuda emitter: no compute type for ") + c10::toString(t));
  }
}

const char* storage_name(ST t) {
  switch (t) {
    case ST::BFloat16:
    case ST::Half: return "unsigned short";
    case ST::Bool: return "unsigned char";
    default: return compute_name(t);
  }
}

int storage_bytes(ST t) { return static_cast<int>(c10::elementSize(t)); }

// A stored element as its compute value, and back.
std::string widen(ST storage, const std::string& raw) {
  switch (storage) {
    case ST::Half: return "fd_h2f(" + raw + ")";
    case ST::BFloat16: return "fd_bf2f(" + raw + ")";
    case ST::Bool: return "(" + raw + " != 0)";
    default: return raw;
  }
}

std::string narrow(ST storage, const std::string& v) {
  switch (storage) {
    case ST::Half: return "fd_f2h(" + v + ")";
    case ST::BFloat16: return "fd_f2bf(" + v + ")";
    case ST::Bool: return "(unsigned char)(" + v + " ? 1 : 0)";
    default: return v;
  }
}

std::string literal(double v, ST t) {
  char buf[64];
  switch (t) {
    case ST::Float: {
      const float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      std::snprintf(buf, sizeof buf, "__int_as_float(0x%08x)", bits);
      return buf;
    }
    case ST::Double: {
      uint64_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      std::snprintf(buf, sizeof buf, "__longlong_as_double(0x%016llxLL)", static_cast<unsigned long long>(bits));
      return buf;
    }
    case ST::Bool: return v != 0 ? "true" : "false";
    case ST::Int: return "(" + std::to_string(static_cast<int32_t>(v)) + ")";
    default: {
      const auto i = static_cast<int64_t>(v);
      if (i == INT64_MIN) return "(-9223372036854775807LL - 1)";
      return "(" + std::to_string(i) + "LL)";
    }
  }
}

std::string lowest(ST t, bool lowest_value) {
  switch (t) {
    case ST::Float: return lowest_value ? "__int_as_float(0xff800000)" : "__int_as_float(0x7f800000)";
    case ST::Double: return lowest_value ? "__longlong_as_double(0xfff0000000000000LL)" : "__longlong_as_double(0x7ff0000000000000LL)";
    case ST::Int: return lowest_value ? "(-2147483647 - 1)" : "2147483647";
    case ST::Long: return lowest_value ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL";
    default: throw loop::Unsupported(std::string("cuda emitter: no reduction over ") + c10::toString(t));
  }
}

std::string identity(ReduceOp op, ST t) {
  switch (op) {
    case ReduceOp::Sum: return literal(0, t);
    case ReduceOp::Prod: return literal(1, t);
    case ReduceOp::Max:
    case ReduceOp::MaxLoose:
    case ReduceOp::ArgMax: return lowest(t, true);
    case ReduceOp::Min:
    case ReduceOp::ArgMin: return lowest(t, false);
  }
  return "";
}

const char* functor(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "FdSum";
    case ReduceOp::Prod: return "FdProd";
    case ReduceOp::Max: return "FdMax";
    case ReduceOp::Min: return "FdMin";
    case ReduceOp::MaxLoose: return "FdMaxLoose";
    default: return nullptr;
  }
}

bool is_arg(ReduceOp op) { return op == ReduceOp::ArgMax || op == ReduceOp::ArgMin; }

// The math library's function for an op (float32 adds 'f'), one row per op.
struct MathRow {
  Op op;
  const char* name;
};
constexpr MathRow kMath[] = {
    {Op::Exp, "exp"},     {Op::Expm1, "expm1"}, {Op::Log, "log"},     {Op::Log1p, "log1p"}, {Op::Log2, "log2"},
    {Op::Log10, "log10"}, {Op::Sqrt, "sqrt"},   {Op::Sin, "sin"},     {Op::Cos, "cos"},     {Op::Tan, "tan"},
    {Op::Tanh, "tanh"},   {Op::Sinh, "sinh"},   {Op::Cosh, "cosh"},   {Op::Asin, "asin"},   {Op::Acos, "acos"},
    {Op::Atan, "atan"},   {Op::Erf, "erf"},     {Op::Erfc, "erfc"},   {Op::Floor, "floor"}, {Op::Ceil, "ceil"},
    {Op::Round, "rint"},  {Op::Trunc, "trunc"}, {Op::Pow, "pow"},     {Op::Atan2, "atan2"}, {Op::Fma, "fma"},
};

// Infix operators for the binary ops whose C meaning is ATen's for the types they get.
struct InfixRow {
  Op op;
  const char* op_text;
};
constexpr InfixRow kInfix[] = {
    {Op::Sub, "-"}, {Op::Div, "/"}, {Op::And, "&"}, {Op::Or, "|"}, {Op::Xor, "^"}, {Op::Lt, "<"},
    {Op::Le, "<="}, {Op::Gt, ">"},  {Op::Ge, ">="}, {Op::Eq, "=="}, {Op::Ne, "!="},
};

// A kernel's (or a group member's) parameter list: its pointers a<i>, its size parameters z<j>,
// the CPU scalars it takes by value h<k> (the ABI of emit_cuda.h), then `tail` ("char* ws", the
// block range of a member), comma-separated.
std::string parameter_list(int num_args, size_t num_sizes, const std::vector<HostValue>& host, const std::string& tail = "") {
  std::string out;
  auto add = [&](const std::string& p) { out += (out.empty() ? "" : ", ") + p; };
  for (int i = 0; i < num_args; ++i) add("char* a" + std::to_string(i));
  for (size_t j = 0; j < num_sizes; ++j) add("i64 z" + std::to_string(j));
  for (size_t k = 0; k < host.size(); ++k) add("const " + std::string(storage_name(host[k].storage)) + " h" + std::to_string(k));
  if (!tail.empty()) add(tail);
  return out;
}

class Emitter {
 public:
  // `bid`/`grid`: the expressions of the block's index and the grid's size in the grid-stride
  // loops (a group's member: its own block range, emit_cuda_group).
  explicit Emitter(const loop::KernelInput& in, std::string bid = "blockIdx.x", std::string grid = "gridDim.x")
      : in_(in), k_(*in.kernel), bid_(std::move(bid)), grid_(std::move(grid)) {}

  // The kernel's launch metadata, and its body (the statements inside the function).
  CudaSource build(std::string& body);
  // The whole kernel.
  CudaSource run();

 private:
  // ---- sizes as code ----
  std::string size(const SizeExpr& e, int64_t number);
  int32_t param(shapes::SymbolId s);
  std::vector<WorkTerm> work_terms(const SizeExpr& e, int64_t number);

  // ---- addresses and values ----
  std::string offset(const Addr& a, size_t stage, size_t first_dim, size_t end_dim);
  std::string load(const Addr& a, size_t stage);
  // The by-value parameter of a CPU scalar's load (Addr::host): "h<i>".
  std::string host_value(const Addr& a);
  void store(Text& os, const Addr& a, size_t stage, const std::string& v, const std::string& indent);
  std::string expr(size_t s, const Instr& in, const std::function<std::string(int32_t)>& load_of);
  std::string value(size_t s, int32_t i) const { return "v" + std::to_string(s) + "_" + std::to_string(i); }
  void instrs(Text& os, size_t s, const std::string& indent, const std::function<std::string(int32_t)>& load_of);

  // ---- shapes ----
  void decompose(Text& os, const std::string& flat, size_t first_dim, size_t end_dim, const std::string& indent);
  void pointwise(Text& os);
  std::vector<const Addr*> accesses(bool inner_stages_only) const;
  void vector_condition(Text& os, const std::vector<const Addr*>& accesses, const std::string& indent);
  void vector_path(Text& os);
  enum class RowPath { Vector, Registers, Looped };
  bool splittable() const;
  void split_chunk(Text& os, const std::string& first, const std::string& stride, const char* live);
  void split_rows(Text& os);
  bool columnar() const;
  void columns(Text& os);
  void stash_partials(Text& os, size_t s, int32_t first);
  void combine_partials(Text& os, size_t s, int32_t first, const char* name, const std::string& indent);
  void split_columns(Text& os);
  void rows(Text& os);
  void row_loop(Text& os, RowPath path);
  // Every thread computes it; `who` (a condition) stores.
  void per_row_stage(Text& os, size_t s, const std::string& indent, const char* who = "threadIdx.x == 0");

  const loop::KernelInput& in_;
  const loop::Kernel& k_;
  const std::string bid_, grid_;
  std::vector<shapes::SymbolId> params_;
  std::vector<HostValue> host_;
  std::vector<SizeExpr> dims_;  // per kernel dim
  size_t n_outer_ = 0, n_dims_ = 0;
  int block_ = 256;
  int vec_ = 4;    // points per thread in the vector paths (128-bit accesses of the narrowest type)
  bool pointwise_vector_ = false;  // the pointwise shape has its vector path
  int items_ = 0;    // points per thread in the register row path (0: none)
  int items_v_ = 0;  // vectors per thread in the vector row path (0: none)
  int64_t split_ = 0;  // blocks per row (with warps_: per 32 rows) in the split shapes (0: one block per row)
  int warps_ = 0;      // warps per block in the column shape (0: not that shape)
};

int32_t Emitter::param(shapes::SymbolId s) {
  auto pos = std::find(params_.begin(), params_.end(), s);
  if (pos == params_.end()) pos = params_.insert(params_.end(), s);
  return static_cast<int32_t>(pos - params_.begin());
}

std::string Emitter::size(const SizeExpr& e, int64_t number) {
  if (e.is_constant()) return literal(static_cast<double>(number), ST::Long);
  std::string out;
  for (const SizeExpr::TermView& t : e.terms()) {
    std::string term = t.coef == 1 ? "" : literal(static_cast<double>(t.coef), ST::Long);
    for (const auto& [atom, exponent] : t.atoms) {
      FD_CHECK(atom->kind == shapes::Atom::Kind::Symbol, "cuda emitter: a size expression that is not a polynomial");
      for (int i = 0; i < exponent; ++i) term += (term.empty() ? "z" : " * z") + std::to_string(param(atom->symbol));
    }
    if (term.empty()) term = "1LL";
    out += (out.empty() ? "" : " + ") + term;
  }
  return "(" + out + ")";
}

std::vector<WorkTerm> Emitter::work_terms(const SizeExpr& e, int64_t number) {
  if (e.is_constant()) return {WorkTerm{number, {}}};
  std::vector<WorkTerm> terms;
  for (const SizeExpr::TermView& t : e.terms()) {
    WorkTerm w{t.coef, {}};
    for (const auto& [atom, exponent] : t.atoms)
      for (int i = 0; i < exponent; ++i) w.params.push_back(param(atom->symbol));
    terms.push_back(std::move(w));
  }
  return terms;
}

// base + sum over dims [first_dim, end_dim) of stride * i_d, plus the gathered index.
std::string Emitter::offset(const Addr& a, size_t stage, size_t first_dim, size_t end_dim) {
  std::string off = a.sym_base.is_constant() ? std::to_string(a.base) + "LL" : size(a.sym_base, a.base);
  for (size_t d = first_dim; d < end_dim; ++d) {
    if (a.stride[d] == 0 && a.sym_stride[d].is_constant()) continue;
    const std::string s = size(a.sym_stride[d], a.stride[d]);
    off += " + i" + std::to_string(d) + (s == "(1LL)" ? "" : " * " + s);
  }
  if (a.dynamic >= 0)
    off += " + fd_index((i64)" + value(stage, a.dynamic) + ", " + size(a.sym_dyn_size, a.dyn_size) + ") * " +
           size(a.sym_dyn_stride, a.dyn_stride);
  return off;
}

std::string Emitter::host_value(const Addr& a) {
  if (a.dynamic >= 0 || !a.sym_base.is_constant() ||
      std::any_of(a.stride.begin(), a.stride.end(), [](int64_t s) { return s != 0; }))
    throw loop::Unsupported("cuda emitter: a GPU kernel reading a CPU tensor that is not one scalar");
  const HostValue h{a.slot, a.base, a.storage};
  auto pos = std::find(host_.begin(), host_.end(), h);
  if (pos == host_.end()) pos = host_.insert(host_.end(), h);
  return "h" + std::to_string(pos - host_.begin());
}

std::string Emitter::load(const Addr& a, size_t stage) {
  if (a.host) return widen(a.storage, host_value(a));
  return widen(a.storage, "((const " + std::string(storage_name(a.storage)) + "*)a" + std::to_string(a.slot) + ")[" +
                              offset(a, stage, 0, n_dims_) + "]");
}

void Emitter::store(Text& os, const Addr& a, size_t stage, const std::string& v, const std::string& indent) {
  os << indent << "((" << storage_name(a.storage) << "*)a" << a.slot << ")[" << offset(a, stage, 0, n_dims_)
     << "] = " << narrow(a.storage, v) << ";\n";
}

std::string Emitter::expr(size_t s, const Instr& in, const std::function<std::string(int32_t)>& load_of) {
  const Stage& st = k_.stages[s];
  const ST t = in.type;
  const bool fp = is_fp(t);
  auto arg = [&](int32_t i) { return value(s, i); };
  auto type_of = [&](int32_t i) { return st.instrs[static_cast<size_t>(i)].type; };
  const std::string T = compute_name(t);
  for (const MathRow& r : kMath)
    if (r.op == in.op) {
      if (!fp) throw loop::Unsupported(std::string("cuda emitter: ") + loop::op_name(in.op) + " on an integer type");
      std::string call = std::string(r.name) + (t == ST::Float ? "f(" : "(") + arg(in.a);
      if (loop::op_arity(in.op) >= 2) call += ", " + arg(in.b);
      if (loop::op_arity(in.op) >= 3) call += ", " + arg(in.c);
      return call + ")";
    }
  for (const InfixRow& r : kInfix)
    if (r.op == in.op) return "(" + arg(in.a) + " " + r.op_text + " " + arg(in.b) + ")";
  switch (in.op) {
    case Op::Load: return load_of(in.a);
    case Op::Const: return literal(in.value, t);
    case Op::Count: return "(" + T + ")inner_n";
    case Op::Reduced: return "red" + std::to_string(in.a);
    case Op::StageValue: return value(static_cast<size_t>(in.a), in.b);
    case Op::Cast: {
      const ST from = type_of(in.a);
      if (from == t) return arg(in.a);
      if (t == ST::Bool) return "(" + arg(in.a) + " != 0)";
      if (from == ST::Bool) return "(" + T + ")(" + arg(in.a) + " ? 1 : 0)";
      return "(" + T + ")(" + arg(in.a) + ")";
    }
    case Op::Neg: return "(-" + arg(in.a) + ")";
    case Op::Abs:
      return fp ? std::string(t == ST::Float ? "fabsf(" : "fabs(") + arg(in.a) + ")"
             : t == ST::Bool ? arg(in.a) : "(" + arg(in.a) + " < 0 ? -" + arg(in.a) + " : " + arg(in.a) + ")";
    case Op::Rsqrt: return "(" + literal(1, t) + " / " + (t == ST::Float ? "sqrtf(" : "sqrt(") + arg(in.a) + "))";
    case Op::Recip: return "(" + literal(1, t) + " / " + arg(in.a) + ")";
    case Op::IsNan: return "(" + arg(in.a) + " != " + arg(in.a) + ")";
    case Op::Not: return t == ST::Bool ? "(!" + arg(in.a) + ")" : "(~" + arg(in.a) + ")";
    case Op::RoundBF16: return "fd_round_bf16(" + arg(in.a) + ")";
    case Op::RoundF16: return "fd_round_f16(" + arg(in.a) + ")";
    case Op::Add: return t == ST::Bool ? "(" + arg(in.a) + " || " + arg(in.b) + ")" : "(" + arg(in.a) + " + " + arg(in.b) + ")";
    case Op::Mul: return t == ST::Bool ? "(" + arg(in.a) + " && " + arg(in.b) + ")" : "(" + arg(in.a) + " * " + arg(in.b) + ")";
    case Op::Fmod:
      return fp ? std::string(t == ST::Float ? "fmodf(" : "fmod(") + arg(in.a) + ", " + arg(in.b) + ")"
                : "(" + arg(in.a) + " % " + arg(in.b) + ")";
    case Op::Max:
      return t == ST::Bool ? "(" + arg(in.a) + " || " + arg(in.b) + ")" : "fd_max(" + arg(in.a) + ", " + arg(in.b) + ")";
    case Op::Min:
      return t == ST::Bool ? "(" + arg(in.a) + " && " + arg(in.b) + ")" : "fd_min(" + arg(in.a) + ", " + arg(in.b) + ")";
    case Op::Shl:
    case Op::Shr:
      if (fp || t == ST::Bool) throw loop::Unsupported("cuda emitter: shift of a non-integer type");
      return std::string(in.op == Op::Shl ? "fd_shl(" : "fd_shr(") + arg(in.a) + ", " + arg(in.b) + ")";
    case Op::Select: return "(" + arg(in.a) + " ? " + arg(in.b) + " : " + arg(in.c) + ")";
    default: break;
  }
  throw loop::Unsupported(std::string("cuda emitter: no code for ") + loop::op_name(in.op));
}

void Emitter::instrs(Text& os, size_t s, const std::string& indent,
                     const std::function<std::string(int32_t)>& load_of) {
  const Stage& st = k_.stages[s];
  for (size_t i = 0; i < st.instrs.size(); ++i) {
    const Instr& in = st.instrs[i];
    os << indent << "const " << compute_name(in.type) << " " << value(s, static_cast<int32_t>(i)) << " = "
       << expr(s, in, load_of) << ";\n";
  }
}

// i_d for d in [first_dim, end_dim) from a flat index over those dims (the last fastest).
void Emitter::decompose(Text& os, const std::string& flat, size_t first_dim, size_t end_dim,
                        const std::string& indent) {
  if (first_dim == end_dim) return;
  os << indent << "i64 rest = " << flat << ";\n";
  for (size_t d = end_dim; d-- > first_dim;) {
    if (d == first_dim) {
      os << indent << "const i64 i" << d << " = rest;\n";
      break;
    }
    os << indent << "const i64 i" << d << " = rest % n" << d << "; rest /= n" << d << ";\n";
  }
}

// Accesses that a vector path loads or stores contiguously: every one walks the last kernel dim
// with a constant stride 0 or 1 and none gathers; at least one is contiguous.
bool vectorisable(const std::vector<const Addr*>& accesses, size_t last) {
  bool contiguous = false;
  for (const Addr* a : accesses) {
    if (a->dynamic >= 0 || !a->sym_stride[last].is_constant() || (a->stride[last] != 0 && a->stride[last] != 1)) return false;
    contiguous = contiguous || a->stride[last] == 1;
  }
  return contiguous;
}

// 16 bytes of the narrowest contiguous access per thread: 4 floats, 8 halves; at least 4 points.
int vector_width(const std::vector<const Addr*>& accesses, size_t last) {
  int narrowest = 16;
  for (const Addr* a : accesses)
    if (a->stride[last] == 1) narrowest = std::min(narrowest, storage_bytes(a->storage));
  return std::clamp(16 / narrowest, 4, 8);
}

std::vector<const Addr*> Emitter::accesses(bool inner_stages_only) const {
  std::vector<const Addr*> out;
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    if (inner_stages_only && k_.stages[s].per_outer) continue;
    for (const Addr& a : in_.loads[s]) out.push_back(&a);
    for (const Addr& a : in_.stores[s]) out.push_back(&a);
  }
  return out;
}

// `bool vec_ok`: whether this launch may take the vector path: the last dim's length, every
// contiguous access's pointer, base and outer strides are multiples of the vector.
void Emitter::vector_condition(Text& os, const std::vector<const Addr*>& accesses, const std::string& indent) {
  const size_t last = n_dims_ - 1;
  const std::string V = std::to_string(vec_);
  std::vector<std::string> parts{"n" + std::to_string(last) + " % " + V + " == 0"};
  auto require = [&](std::string part) {
    if (std::find(parts.begin(), parts.end(), part) == parts.end()) parts.push_back(std::move(part));
  };
  for (const Addr* a : accesses) {
    if (a->stride[last] != 1) continue;
    require("((u64)a" + std::to_string(a->slot) + ") % " + std::to_string(vec_ * storage_bytes(a->storage)) + " == 0");
    // NB: offset() over the outer dims with every i_d = 0 (below) is the base.
    require("(" + offset(*a, 0, 0, last) + ") % " + V + " == 0");
    for (size_t d = 0; d < last; ++d)
      if (!(a->stride[d] == 0 && a->sym_stride[d].is_constant())) require(size(a->sym_stride[d], a->stride[d]) + " % " + V + " == 0");
  }
  std::string cond;
  for (const std::string& p : parts) cond += (cond.empty() ? "" : " && ") + p;
  os << indent << "bool vec_ok = false;\n" << indent << "{\n";
  for (size_t d = 0; d < last; ++d) os << indent << "  const i64 i" << d << " = 0;\n";
  os << indent << "  vec_ok = " << cond << ";\n" << indent << "}\n";
}

// vec_ points of the innermost dim per thread, loaded and stored as one aligned vector where the
// access is contiguous: taken at run time when vector_condition holds.
void Emitter::vector_path(Text& os) {
  const size_t last = n_dims_ - 1;
  const Stage& st = k_.stages[0];
  vector_condition(os, accesses(false), "  ");
  os << "  if (vec_ok) {\n";
  os << "    const i64 rowv = n" << last << " / " << vec_ << ";\n";
  os << kGridStride << "    for (i64 lin = (i64)" << bid_ << " * blockDim.x + threadIdx.x; lin < total / " << vec_
     << "; lin += (i64)" << grid_ << " * blockDim.x) {\n";
  os << "      const i64 i" << last << " = (lin % rowv) * " << vec_ << ";\n";
  decompose(os, "lin / rowv", 0, last, "      ");
  const std::string V = std::to_string(vec_);
  for (size_t l = 0; l < st.loads.size(); ++l) {
    const Addr& a = in_.loads[0][l];
    const std::string sn = storage_name(a.storage);
    const std::string ptr = "((const " + sn + "*)a" + std::to_string(a.slot) + ")";
    if (a.host)
      os << "      const " << sn << " L" << l << " = " << host_value(a) << ";\n";
    else if (a.stride[last] == 1)
      os << "      const fd_vec<" << sn << ", " << V << "> L" << l << " = *(const fd_vec<" << sn << ", " << V << ">*)(" << ptr
         << " + " << offset(a, 0, 0, n_dims_) << ");\n";
    else
      os << "      const " << sn << " L" << l << " = " << ptr << "[" << offset(a, 0, 0, n_dims_) << "];\n";
  }
  for (size_t w = 0; w < st.stores.size(); ++w) {
    const Addr& a = in_.stores[0][w];
    if (a.stride[last] == 1) os << "      fd_vec<" << storage_name(a.storage) << ", " << V << "> S" << w << ";\n";
  }
  os << "#pragma unroll\n      for (int l = 0; l < " << V << "; ++l) {\n";
  instrs(os, 0, "        ", [&](int32_t l) {
    const Addr& a = in_.loads[0][static_cast<size_t>(l)];
    return widen(a.storage, "L" + std::to_string(l) + (a.stride[last] == 1 ? ".v[l]" : ""));
  });
  for (size_t w = 0; w < st.stores.size(); ++w) {
    const Addr& a = in_.stores[0][w];
    const std::string v = value(0, st.stores[w].instr);
    if (a.stride[last] == 1)
      os << "        S" << w << ".v[l] = " << narrow(a.storage, v) << ";\n";
    else  // every lane writes the same element: the last lane wins, as in the scalar loop
      os << "        if (l == " << vec_ - 1 << ") ((" << storage_name(a.storage) << "*)a" << a.slot << ")["
         << offset(a, 0, 0, n_dims_) << "] = " << narrow(a.storage, v) << ";\n";
  }
  os << "      }\n";
  for (size_t w = 0; w < st.stores.size(); ++w) {
    const Addr& a = in_.stores[0][w];
    if (a.stride[last] != 1) continue;
    const std::string sn = storage_name(a.storage);
    os << "      *(fd_vec<" << sn << ", " << V << ">*)(((" << sn << "*)a" << a.slot << ") + " << offset(a, 0, 0, n_dims_)
       << ") = S" << w << ";\n";
  }
  os << "    }\n    return;\n  }\n";
}

void Emitter::pointwise(Text& os) {
  os << "  const i64 total = 1";
  for (size_t d = 0; d < n_dims_; ++d) os << " * n" << d;
  os << ";\n";
  pointwise_vector_ = n_dims_ > 0 && vectorisable(accesses(false), n_dims_ - 1);
  if (pointwise_vector_) {
    vec_ = vector_width(accesses(false), n_dims_ - 1);
    vector_path(os);
  }
  os << kGridStride << "  for (i64 lin = (i64)" << bid_ << " * blockDim.x + threadIdx.x; lin < total; lin += (i64)" << grid_
     << " * blockDim.x) {\n";
  decompose(os, "lin", 0, n_dims_, "    ");
  const Stage& st = k_.stages[0];
  instrs(os, 0, "    ", [&](int32_t l) { return load(in_.loads[0][static_cast<size_t>(l)], 0); });
  for (size_t w = 0; w < st.stores.size(); ++w) store(os, in_.stores[0][w], 0, value(0, st.stores[w].instr), "    ");
  os << "  }\n";
}

// The persistent path's register cache: an access (value and index) that an inner stage loads or
// stores and a later inner stage loads again is kept per thread, items_ values each, and read from
// there; a store that a later stage overwrites at the same access, where nothing reads that buffer
// another way, never reaches memory (softmax's exp values: stored, reloaded, overwritten).
struct RowCache {
  std::vector<loop::Access> accesses;  // distinct inner-stage accesses, by id
  std::vector<ST> types;               // their storage types
  std::vector<bool> cached;            // read by a stage after the one that first touches it
  std::vector<std::vector<int32_t>> load_id, store_id;  // per stage, per load / store: the access id
  std::vector<std::vector<bool>> dead_store;            // per stage, per store
};

RowCache plan_row_cache(const loop::Kernel& k, const loop::KernelInput& in) {
  RowCache c;
  auto id_of = [&](const loop::Access& a, ST storage) {
    for (size_t i = 0; i < c.accesses.size(); ++i)
      if (c.accesses[i] == a) return static_cast<int32_t>(i);
    c.accesses.push_back(a);
    c.types.push_back(storage);
    return static_cast<int32_t>(c.accesses.size() - 1);
  };
  std::vector<int32_t> first_stage;
  c.load_id.resize(k.stages.size());
  c.store_id.resize(k.stages.size());
  c.dead_store.resize(k.stages.size());
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const Stage& st = k.stages[s];
    if (st.per_outer) continue;
    for (size_t l = 0; l < st.loads.size(); ++l) c.load_id[s].push_back(id_of(st.loads[l], in.loads[s][l].storage));
    for (size_t w = 0; w < st.stores.size(); ++w) c.store_id[s].push_back(id_of(st.stores[w].dst, in.stores[s][w].storage));
  }
  c.cached.assign(c.accesses.size(), false);
  first_stage.assign(c.accesses.size(), -1);
  for (size_t s = 0; s < k.stages.size(); ++s) {
    for (int32_t id : c.store_id[s])
      if (first_stage[static_cast<size_t>(id)] < 0) first_stage[static_cast<size_t>(id)] = static_cast<int32_t>(s);
    for (int32_t id : c.load_id[s]) {
      int32_t& f = first_stage[static_cast<size_t>(id)];
      if (f >= 0 && f < static_cast<int32_t>(s)) c.cached[static_cast<size_t>(id)] = true;
      if (f < 0) f = static_cast<int32_t>(s);
    }
  }
  // A slot read through more than one access (or by a per-row stage) must see every store.
  auto read_otherwise = [&](int32_t slot, const loop::Access& a) {
    for (size_t s = 0; s < k.stages.size(); ++s)
      for (size_t l = 0; l < k.stages[s].loads.size(); ++l)
        if (in.loads[s][l].slot == slot && (k.stages[s].per_outer || !(k.stages[s].loads[l] == a))) return true;
    return false;
  };
  for (size_t s = 0; s < k.stages.size(); ++s) {
    c.dead_store[s].assign(k.stages[s].stores.size(), false);
    if (k.stages[s].per_outer) continue;
    for (size_t w = 0; w < k.stages[s].stores.size(); ++w) {
      const int32_t id = c.store_id[s][w];
      bool overwritten = false;
      for (size_t later = s + 1; later < k.stages.size(); ++later)
        for (int32_t other : c.store_id[later]) overwritten = overwritten || other == id;
      c.dead_store[s][w] = overwritten && c.cached[static_cast<size_t>(id)] &&
                           !read_otherwise(in.stores[s][w].slot, k.stages[s].stores[w].dst);
    }
  }
  return c;
}

// Two paths, the first that applies at run time: the row in registers (as aligned vectors where
// one contiguous inner dim allows, else point by point), and the row looped over (a size symbol
// made it longer than the kernel was planned for, or the vector path's tensors are misaligned).
// A static row that fits without vectors needs no loop.
// A per-row stage (an epilogue: mean, rstd): every thread computes it (the reductions it reads
// are in every thread's registers); thread 0 stores.
void Emitter::per_row_stage(Text& os, size_t s, const std::string& indent, const char* who) {
  const Stage& st = k_.stages[s];
  for (const std::vector<Addr>* list : {&in_.loads[s], &in_.stores[s]})
    for (const Addr& a : *list)
      for (size_t d = n_outer_; d < n_dims_; ++d)
        if (a.stride[d] != 0 || !a.sym_stride[d].is_constant()) throw loop::Unsupported("cuda emitter: a per-row stage that walks the row");
  os << indent << "// stage " << s << ": per row\n";
  instrs(os, s, indent, [&](int32_t l) { return load(in_.loads[s][static_cast<size_t>(l)], s); });
  if (st.stores.empty()) return;
  os << indent << "if (" << who << ") {\n";
  for (size_t w = 0; w < st.stores.size(); ++w) store(os, in_.stores[s][w], s, value(s, st.stores[w].instr), indent + "  ");
  os << indent << "}\n";
}

void Emitter::rows(Text& os) {
  os << "  const i64 outer_n = 1";
  for (size_t d = 0; d < n_outer_; ++d) os << " * n" << d;
  os << ";\n";
  const std::vector<const Addr*> inner = accesses(true);
  if (items_v_ > 0) {
    vector_condition(os, inner, "  ");
    os << "  if (vec_ok && inner_n <= (i64)blockDim.x * " << items_v_ * vec_ << ") {  // the row fits in registers, as vectors\n";
    row_loop(os, RowPath::Vector);
    os << "    return;\n  }\n";
  }
  // NB: where the vector path exists, its fallback (misaligned tensors) is the plain loop: the
  // register path unrolled point by point costs NVRTC more than the vector path itself.
  bool static_row = true;
  for (size_t d = n_outer_; d < n_dims_; ++d) static_row = static_row && dims_[d].is_constant();
  if (items_ > 0 && items_v_ == 0 && static_row) {  // the kernel's only row length fits: no loop needed
    row_loop(os, RowPath::Registers);
    return;
  }
  if (items_ > 0 && items_v_ == 0) {
    os << "  if (inner_n <= (i64)blockDim.x * " << items_ << ") {  // the row fits in registers\n";
    row_loop(os, RowPath::Registers);
    os << "    return;\n  }\n";
  }
  row_loop(os, RowPath::Looped);
}

void Emitter::row_loop(Text& os, RowPath path) {
  const bool persistent = path != RowPath::Looped, vector = path == RowPath::Vector;
  const RowCache cache = persistent ? plan_row_cache(k_, in_) : RowCache{};
  const int slots = vector ? items_v_ * vec_ : items_;  // cached values per thread and access
  const std::string V = std::to_string(vec_);
  const std::string at = vector ? "[k * " + V + " + l]" : "[k]";
  os << kGridStride << "  for (i64 o = blockIdx.x; o < outer_n; o += gridDim.x) {\n";
  decompose(os, "o", 0, n_outer_, "    ");
  if (persistent)
    for (size_t id = 0; id < cache.accesses.size(); ++id)
      if (cache.cached[id]) os << "    " << compute_name(loop::compute_type(cache.types[id])) << " c" << id << "[" << slots << "];\n";
  int32_t red = 0;
  bool synced = false;
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    const Stage& st = k_.stages[s];
    synced = false;
    if (has_scan(st)) throw loop::Unsupported("cuda emitter: scans (cumsum) are not lowered for cuda yet");
    if (st.per_outer) {
      per_row_stage(os, s, "    ");
      continue;
    }
    os << "    // stage " << s << ": over the row\n";
    const int32_t first_red = red;
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const loop::Reduction& rd = st.reductions[r];
      const ST vt = st.instrs[static_cast<size_t>(rd.instr)].type;
      os << "    " << compute_name(vt) << " acc" << first_red + r << " = " << identity(rd.op, vt) << ";\n";
      if (is_arg(rd.op)) os << "    i64 acci" << first_red + r << " = 0x7fffffffffffffffLL;\n";
    }
    const std::string in = vector ? "          " : persistent ? "        " : "      ";
    // Which loads an earlier stage left in registers.
    auto cached_earlier = [&](size_t l) {
      if (!persistent) return false;
      const int32_t id = cache.load_id[s][l];
      if (!cache.cached[static_cast<size_t>(id)]) return false;
      for (size_t e = 0; e < s; ++e)
        for (const auto* ids : {&cache.load_id[e], &cache.store_id[e]})
          for (int32_t x : *ids)
            if (x == id) return true;
      return false;
    };
    if (vector) {
      const size_t last = n_dims_ - 1;
      os << "#pragma unroll\n    for (int k = 0; k < " << items_v_ << "; ++k) {\n"
         << "      const i64 q = ((i64)k * blockDim.x + threadIdx.x) * " << V << ";\n      if (q < inner_n) {\n"
         << "        const i64 i" << last << " = q;\n";
      for (size_t l = 0; l < st.loads.size(); ++l) {
        if (cached_earlier(l)) continue;
        const Addr& a = in_.loads[s][l];
        const std::string sn = storage_name(a.storage);
        const std::string ptr = "((const " + sn + "*)a" + std::to_string(a.slot) + ")";
        if (a.stride[last] == 1)
          os << "        const fd_vec<" << sn << ", " << V << "> L" << l << " = *(const fd_vec<" << sn << ", " << V << ">*)(" << ptr
             << " + " << offset(a, s, 0, n_dims_) << ");\n";
        else
          os << "        const " << sn << " L" << l << " = " << ptr << "[" << offset(a, s, 0, n_dims_) << "];\n";
      }
      for (size_t w = 0; w < st.stores.size(); ++w)
        if (in_.stores[s][w].stride[last] == 1 && !cache.dead_store[s][w])
          os << "        fd_vec<" << storage_name(in_.stores[s][w].storage) << ", " << V << "> S" << w << ";\n";
      os << "#pragma unroll\n        for (int l = 0; l < " << V << "; ++l) {\n          const i64 j = q + l;\n";
    } else if (persistent) {
      os << "#pragma unroll\n    for (int k = 0; k < " << items_ << "; ++k) {\n"
         << "      const i64 j = (i64)k * blockDim.x + threadIdx.x;\n      if (j < inner_n) {\n";
      decompose(os, "j", n_outer_, n_dims_, in);
    } else {
      os << "    for (i64 j = threadIdx.x; j < inner_n; j += blockDim.x) {\n";
      decompose(os, "j", n_outer_, n_dims_, in);
    }
    // Loads: from the register cache where an earlier stage put the access there (a load from
    // memory of a cached access fills it), else from memory (the vector path: from the vector
    // loaded above).
    instrs(os, s, in, [&](int32_t l) {
      const auto li = static_cast<size_t>(l);
      const Addr& a = in_.loads[s][li];
      if (cached_earlier(li)) return "c" + std::to_string(cache.load_id[s][li]) + at;
      if (vector) return widen(a.storage, "L" + std::to_string(l) + (a.stride[n_dims_ - 1] == 1 ? ".v[l]" : ""));
      return load(a, s);
    });
    if (persistent)
      for (size_t l = 0; l < st.loads.size(); ++l) {
        const int32_t id = cache.load_id[s][l];
        if (!cache.cached[static_cast<size_t>(id)] || cached_earlier(l)) continue;
        for (size_t i = 0; i < st.instrs.size(); ++i)  // the instr that loaded it
          if (st.instrs[i].op == Op::Load && st.instrs[i].a == static_cast<int32_t>(l)) {
            os << in << "c" << id << at << " = " << value(s, static_cast<int32_t>(i)) << ";\n";
            break;
          }
      }
    bool stored = false;
    for (size_t w = 0; w < st.stores.size(); ++w) {
      const Addr& a = in_.stores[s][w];
      const std::string v = value(s, st.stores[w].instr);
      if (persistent && cache.cached[static_cast<size_t>(cache.store_id[s][w])])
        os << in << "c" << cache.store_id[s][w] << at << " = " << widen(a.storage, narrow(a.storage, v)) << ";\n";
      if (persistent && cache.dead_store[s][w]) continue;
      stored = true;
      if (!vector) {
        store(os, a, s, v, in);
      } else if (a.stride[n_dims_ - 1] == 1) {
        os << in << "S" << w << ".v[l] = " << narrow(a.storage, v) << ";\n";
      } else {  // every lane writes the same element: the last lane wins, as point by point
        os << in << "if (l == " << vec_ - 1 << ") ";
        store(os, a, s, v, "");
      }
    }
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const loop::Reduction& rd = st.reductions[r];
      const std::string acc = "acc" + std::to_string(first_red + r), x = value(s, rd.instr);
      if (is_arg(rd.op)) {
        const std::string acci = "acci" + std::to_string(first_red + r);
        os << in << "if (fd_takes<" << (rd.op == ReduceOp::ArgMax ? "true" : "false") << ">(" << x << ", j, " << acc << ", "
           << acci << ")) { " << acc << " = " << x << "; " << acci << " = j; }\n";
      } else {
        os << in << acc << " = " << functor(rd.op) << "<" << compute_name(st.instrs[static_cast<size_t>(rd.instr)].type)
           << ">()(" << acc << ", " << x << ");\n";
      }
    }
    if (vector) {
      os << "        }\n";
      for (size_t w = 0; w < st.stores.size(); ++w) {
        const Addr& a = in_.stores[s][w];
        if (a.stride[n_dims_ - 1] != 1 || cache.dead_store[s][w]) continue;
        const std::string sn = storage_name(a.storage);
        os << "        *(fd_vec<" << sn << ", " << V << ">*)(((" << sn << "*)a" << a.slot << ") + " << offset(a, s, 0, n_dims_)
           << ") = S" << w << ";\n";
      }
    }
    os << (persistent ? "      }\n    }\n" : "    }\n");
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const loop::Reduction& rd = st.reductions[r];
      const ST vt = st.instrs[static_cast<size_t>(rd.instr)].type;
      const std::string id = std::to_string(first_red + r);
      if (is_arg(rd.op))
        os << "    const i64 red" << id << " = fd_arg_block_reduce<" << (rd.op == ReduceOp::ArgMax ? "true" : "false") << ">(acc"
           << id << ", acci" << id << ", " << identity(rd.op, vt) << ");\n";
      else
        os << "    const " << compute_name(vt) << " red" << id << " = fd_block_reduce(acc" << id << ", " << functor(rd.op) << "<"
           << compute_name(vt) << ">(), " << identity(rd.op, vt) << ");\n";
    }
    red += static_cast<int32_t>(st.reductions.size());
    // A later stage may read what this one stored at another thread's points.
    synced = stored;
    if (synced) os << "    __syncthreads();\n";
  }
  // The next row's first reduction reuses the shared words this row's last one read.
  if (!synced) os << "    __syncthreads();\n";
  os << "  }\n";
}

// The split shape: few rows, each long (x.sum(), a loss's mean): `split_` blocks share a row, each
// reduces a contiguous chunk of it and writes its partials to the launch's workspace; the last
// block of the row to finish (a counter per row) combines the partials in split order and runs the
// per-row stages. Kernels of one inner stage (reductions other than argmax/argmin, stores allowed)
// followed by per-row stages only.
bool Emitter::splittable() const {
  if (k_.stages.empty() || k_.stages[0].per_outer || k_.stages[0].reductions.empty() || has_scan(k_.stages[0])) return false;
  for (size_t s = 1; s < k_.stages.size(); ++s)
    if (!k_.stages[s].per_outer) return false;
  for (const loop::Reduction& r : k_.stages[0].reductions)
    if (is_arg(r.op)) return false;
  return true;
}

// The split shapes' first stage over one block's chunk of a row (`part` of split_): the chunk's
// bounds, each reduction's accumulator, and the loop over the chunk from `first` by `stride`
// (while `live`), its stores and accumulations.
void Emitter::split_chunk(Text& os, const std::string& first, const std::string& stride, const char* live) {
  const Stage& st = k_.stages[0];
  const std::string S = std::to_string(split_);
  os << "    const i64 chunk = (inner_n + " << S << " - 1) / " << S << ";\n";
  os << "    const i64 lo = part * chunk, hi = lo + chunk < inner_n ? lo + chunk : inner_n;\n";
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const ST vt = st.instrs[static_cast<size_t>(st.reductions[r].instr)].type;
    os << "    " << compute_name(vt) << " acc" << r << " = " << identity(st.reductions[r].op, vt) << ";\n";
  }
  os << "    for (i64 j = lo + " << first << "; " << live << "j < hi; j += " << stride << ") {\n";
  decompose(os, "j", n_outer_, n_dims_, "      ");
  instrs(os, 0, "      ", [&](int32_t l) { return load(in_.loads[0][static_cast<size_t>(l)], 0); });
  for (size_t w = 0; w < st.stores.size(); ++w) store(os, in_.stores[0][w], 0, value(0, st.stores[w].instr), "      ");
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const loop::Reduction& rd = st.reductions[r];
    os << "      acc" << r << " = " << functor(rd.op) << "<" << compute_name(st.instrs[static_cast<size_t>(rd.instr)].type)
       << ">()(acc" << r << ", " << value(0, rd.instr) << ");\n";
  }
  os << "    }\n";
}

void Emitter::split_rows(Text& os) {
  const Stage& st = k_.stages[0];
  const std::string S = std::to_string(split_);
  os << "  const i64 outer_n = 1";
  for (size_t d = 0; d < n_outer_; ++d) os << " * n" << d;
  os << ";\n  const i64 units = outer_n * " << S << ";\n";
  os << "  unsigned int* counters = (unsigned int*)(ws + " << st.reductions.size() << " * units * 8);\n";
  os << "  __shared__ bool last;\n";
  os << kGridStride << "  for (i64 t = blockIdx.x; t < units; t += gridDim.x) {\n";
  os << "    const i64 o = t / " << S << ", part = t % " << S << ";\n";
  decompose(os, "o", 0, n_outer_, "    ");
  split_chunk(os, "threadIdx.x", "blockDim.x", "");
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const loop::Reduction& rd = st.reductions[r];
    const std::string T = compute_name(st.instrs[static_cast<size_t>(rd.instr)].type);
    os << "    acc" << r << " = fd_block_reduce(acc" << r << ", " << functor(rd.op) << "<" << T << ">(), "
       << identity(rd.op, st.instrs[static_cast<size_t>(rd.instr)].type) << ");\n";
  }
  os << "    if (threadIdx.x == 0) {\n";
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const std::string T = compute_name(st.instrs[static_cast<size_t>(st.reductions[r].instr)].type);
    os << "      *(" << T << "*)(ws + (" << r << " * units + t) * 8) = acc" << r << ";\n";
  }
  os << "      __threadfence();\n      last = atomicAdd(&counters[o], 1u) == " << S << " - 1;\n    }\n";
  os << "    __syncthreads();\n    if (last) {\n      __threadfence();\n";
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const loop::Reduction& rd = st.reductions[r];
    const ST vt = st.instrs[static_cast<size_t>(rd.instr)].type;
    const std::string T = compute_name(vt);
    os << "      " << T << " part" << r << " = " << identity(rd.op, vt) << ";\n";
    os << "      for (i64 q = threadIdx.x; q < " << S << "; q += blockDim.x) part" << r << " = " << functor(rd.op) << "<" << T
       << ">()(part" << r << ", *(volatile " << T << "*)(ws + (" << r << " * units + o * " << S << " + q) * 8));\n";
    os << "      const " << T << " red" << r << " = fd_block_reduce(part" << r << ", " << functor(rd.op) << "<" << T << ">(), "
       << identity(rd.op, vt) << ");\n";
  }
  for (size_t s = 1; s < k_.stages.size(); ++s) per_row_stage(os, s, "      ");
  os << "    }\n    __syncthreads();\n  }\n";
}

// The column shape: many rows whose points lie far apart in memory while neighbouring rows are
// adjacent (a sum over dim 0 of a row-major matrix: a bias's gradient, a layer norm weight's).
// One block per 32 adjacent rows puts a warp's lanes on adjacent addresses, so every load is
// coalesced, where a block per row reads one element per 32-byte sector. The block's warps split
// each row's points; their partials meet in shared memory, and every thread combines them (in warp
// order) for its lane's row, so that per-row stages and later inner stages read the result from
// registers; the first warp stores per-row values. The lanes past the last row compute on the last
// row (in bounds) and store nothing. Not for argmax/argmin or scans.
bool Emitter::columnar() const {
  if (n_outer_ == 0) return false;
  const size_t last_outer = n_outer_ - 1, last = n_dims_ - 1;
  bool adjacent = false;
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    const Stage& st = k_.stages[s];
    if (st.per_outer) continue;
    if (has_scan(st)) return false;
    for (const loop::Reduction& r : st.reductions)
      if (is_arg(r.op)) return false;
    for (const std::vector<Addr>* list : {&in_.loads[s], &in_.stores[s]})
      for (const Addr& a : *list) {
        if (a.dynamic >= 0 || !a.sym_stride[last_outer].is_constant() || a.stride[last_outer] < 0 || a.stride[last_outer] > 1)
          return false;
        if (a.sym_stride[last].is_constant() && a.stride[last] == 1) return false;  // a contiguous row: rows coalesce
        adjacent = adjacent || a.stride[last_outer] == 1;
      }
  }
  return adjacent;
}

// The column shapes' warps meet in shared memory: stage s's accumulators (acc<first>, ...) stored
// per thread, then, for the row of the thread's lane, combined in warp order into <name><first>, ...
void Emitter::stash_partials(Text& os, size_t s, int32_t first) {
  const Stage& st = k_.stages[s];
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const std::string T = compute_name(st.instrs[static_cast<size_t>(st.reductions[r].instr)].type), id = std::to_string(first + r);
    os << "    __shared__ " << T << " part" << id << "[" << block_ << "];\n    part" << id << "[threadIdx.x] = acc" << id << ";\n";
  }
  os << "    __syncthreads();\n";
}

void Emitter::combine_partials(Text& os, size_t s, int32_t first, const char* name, const std::string& indent) {
  const Stage& st = k_.stages[s];
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const loop::Reduction& rd = st.reductions[r];
    const std::string T = compute_name(st.instrs[static_cast<size_t>(rd.instr)].type), id = std::to_string(first + r);
    const std::string v = name + id;
    os << indent << T << " " << v << " = part" << id << "[lane];\n";
    os << indent << "for (int w = 1; w < " << warps_ << "; ++w) " << v << " = " << functor(rd.op) << "<" << T << ">()(" << v
       << ", part" << id << "[w * 32 + lane]);\n";
  }
}

void Emitter::columns(Text& os) {
  os << "  const i64 outer_n = 1";
  for (size_t d = 0; d < n_outer_; ++d) os << " * n" << d;
  os << ";\n  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n";
  os << kGridStride << "  for (i64 first = (i64)blockIdx.x * 32; first < outer_n; first += (i64)gridDim.x * 32) {\n";
  os << "    const bool live = first + lane < outer_n;\n    const i64 o = live ? first + lane : outer_n - 1;\n";
  decompose(os, "o", 0, n_outer_, "    ");
  int32_t red = 0;
  for (size_t s = 0; s < k_.stages.size(); ++s) {
    const Stage& st = k_.stages[s];
    if (st.per_outer) {
      per_row_stage(os, s, "    ", "warp == 0 && live");
      continue;
    }
    os << "    // stage " << s << ": over the row, a warp's share\n";
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const ST vt = st.instrs[static_cast<size_t>(st.reductions[r].instr)].type;
      os << "    " << compute_name(vt) << " acc" << red + r << " = " << identity(st.reductions[r].op, vt) << ";\n";
    }
    os << "    for (i64 j = warp; live && j < inner_n; j += " << warps_ << ") {\n";
    decompose(os, "j", n_outer_, n_dims_, "      ");
    instrs(os, s, "      ", [&](int32_t l) { return load(in_.loads[s][static_cast<size_t>(l)], s); });
    for (size_t w = 0; w < st.stores.size(); ++w) store(os, in_.stores[s][w], s, value(s, st.stores[w].instr), "      ");
    for (size_t r = 0; r < st.reductions.size(); ++r) {
      const loop::Reduction& rd = st.reductions[r];
      os << "      acc" << red + r << " = " << functor(rd.op) << "<" << compute_name(st.instrs[static_cast<size_t>(rd.instr)].type)
         << ">()(acc" << red + r << ", " << value(s, rd.instr) << ");\n";
    }
    os << "    }\n";
    if (st.reductions.empty()) continue;
    stash_partials(os, s, red);
    combine_partials(os, s, red, "red", "    ");
    red += static_cast<int32_t>(st.reductions.size());
  }
  // The next rows' partials reuse the shared words, and a later stage may read what another warp stored.
  os << "    __syncthreads();\n  }\n";
}

// The split column shape: the column shape over few groups of 32 rows, each row long (the bias
// gradient of a [1024, 2048] matrix: 64 blocks would leave half of a 132-SM GPU idle). `split_`
// blocks share a group, each reducing a contiguous chunk of its rows' points as the column shape
// does; lane by lane the first warp writes the chunk's partials to the launch's workspace, and the
// group's last block (a counter per group) combines them in split order, the same order at every
// launch, and runs the per-row stages. Only one inner stage (splittable()).
void Emitter::split_columns(Text& os) {
  const Stage& st = k_.stages[0];
  const std::string S = std::to_string(split_), W = std::to_string(warps_);
  os << "  const i64 outer_n = 1";
  for (size_t d = 0; d < n_outer_; ++d) os << " * n" << d;
  os << ";\n  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;\n";
  os << "  const i64 units = outer_n * " << S << ", groups = (outer_n + 31) / 32;\n";
  os << "  unsigned int* counters = (unsigned int*)(ws + " << st.reductions.size() << " * units * 8);\n";
  os << "  __shared__ bool last;\n";
  os << kGridStride << "  for (i64 t = blockIdx.x; t < groups * " << S << "; t += gridDim.x) {\n";
  os << "    const i64 g = t / " << S << ", part = t % " << S << ";\n";
  os << "    const bool live = g * 32 + lane < outer_n;\n    const i64 o = live ? g * 32 + lane : outer_n - 1;\n";
  decompose(os, "o", 0, n_outer_, "    ");
  split_chunk(os, "warp", W, "live && ");
  stash_partials(os, 0, 0);
  os << "    if (warp == 0 && live) {\n";
  combine_partials(os, 0, 0, "sum", "      ");
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const std::string T = compute_name(st.instrs[static_cast<size_t>(st.reductions[r].instr)].type);
    os << "      *(" << T << "*)(ws + (" << r << " * units + o * " << S << " + part) * 8) = sum" << r << ";\n";
  }
  os << "      __threadfence();\n    }\n    __syncthreads();\n";
  os << "    if (threadIdx.x == 0) last = atomicAdd(&counters[g], 1u) == " << S << " - 1;\n";
  os << "    __syncthreads();\n    if (last) {\n      __threadfence();\n";
  for (size_t r = 0; r < st.reductions.size(); ++r) {
    const loop::Reduction& rd = st.reductions[r];
    const ST vt = st.instrs[static_cast<size_t>(rd.instr)].type;
    const std::string T = compute_name(vt);
    os << "      " << T << " red" << r << " = " << identity(rd.op, vt) << ";\n";
    os << "      for (i64 q = 0; q < " << S << "; ++q) red" << r << " = " << functor(rd.op) << "<" << T << ">()(red" << r
       << ", *(volatile " << T << "*)(ws + (" << r << " * units + o * " << S << " + q) * 8));\n";
  }
  for (size_t s = 1; s < k_.stages.size(); ++s) per_row_stage(os, s, "      ", "warp == 0 && live");
  // The next group's partials reuse the shared words.
  os << "    }\n    __syncthreads();\n  }\n";
}

CudaSource Emitter::build(std::string& body_text) {
  n_outer_ = k_.outer.size();
  n_dims_ = static_cast<size_t>(k_.dims());
  dims_ = loop::domain_exprs(in_);
  bool row_shape = k_.stages.size() != 1 || k_.stages[0].per_outer;
  for (const Stage& st : k_.stages) row_shape = row_shape || !st.reductions.empty() || has_scan(st);
  // CPU scalars (Addr::host): read by value, by pointwise kernels only; never stored from a GPU.
  for (const std::vector<Addr>& stage : in_.stores)
    for (const Addr& a : stage)
      if (a.host) throw loop::Unsupported("cuda emitter: a GPU kernel storing into a CPU tensor");
  for (const std::vector<Addr>& stage : in_.loads)
    for (const Addr& a : stage)
      if (a.host && row_shape) throw loop::Unsupported("cuda emitter: a GPU kernel of rows reading a CPU tensor");
  int64_t inner_numel = 1;
  for (int64_t n : k_.inner) inner_numel *= n;
  int64_t outer_numel = 1;
  for (int64_t n : k_.outer) outer_numel *= n;
  if (row_shape && outer_numel <= 32 && inner_numel >= 65536 && splittable()) {
    // About a thousand blocks in all, each at least 16 points per thread.
    block_ = 256;
    split_ = std::clamp<int64_t>(std::min<int64_t>(1024 / outer_numel, inner_numel / (block_ * 16)), 2, 1024);
  } else if (row_shape && outer_numel >= 32 && columnar()) {
    // Warps enough for 8 points per thread or more, up to 32 warps.
    int reductions = 0;
    for (const Stage& st : k_.stages) reductions += static_cast<int>(st.reductions.size());
    warps_ = 1;  // within 32 KiB of shared partials (8 bytes each at most)
    while (warps_ < 32 && warps_ * 8 < inner_numel && reductions * 64 * warps_ * 8 <= 32768) warps_ *= 2;
    block_ = 32 * warps_;
    // Fewer groups of 32 rows than kColumnBlocks, each row long: the groups split among blocks
    // too (split_columns), at 8 points per thread or more.
    const int64_t groups = (outer_numel + 31) / 32;
    if (groups < kColumnBlocks && splittable())
      split_ = std::min<int64_t>({kColumnBlocks / groups, inner_numel / (warps_ * 8), 64});
    if (split_ < 2) split_ = 0;
  } else if (row_shape) {
    // Up to 8 points per thread (a softmax row of 4096: 512 threads); longer rows take 1024
    // threads, up to kMaxItems points each in registers, and loop beyond that.
    block_ = 32;
    while (block_ < 1024 && block_ * 8 < inner_numel) block_ *= 2;
    const int64_t items = (inner_numel + block_ - 1) / block_;
    items_ = items <= kMaxItems ? static_cast<int>(items) : 0;
    const size_t last = n_dims_ - 1;
    if (items_ > 0 && n_dims_ == n_outer_ + 1 && vectorisable(accesses(true), last)) {
      vec_ = vector_width(accesses(true), last);
      items_v_ = static_cast<int>((inner_numel + block_ * vec_ - 1) / (block_ * vec_));
    }
  }
  Text body;
  std::vector<int64_t> numbers = k_.outer;
  numbers.insert(numbers.end(), k_.inner.begin(), k_.inner.end());
  for (size_t d = 0; d < n_dims_; ++d) body << "  const i64 n" << d << " = " << size(dims_[d], numbers[d]) << ";\n";
  body << "  const i64 inner_n = 1";
  for (size_t d = n_outer_; d < n_dims_; ++d) body << " * n" << d;
  body << ";\n  (void)inner_n;\n";
  if (split_ > 0 && warps_ > 0)
    split_columns(body);
  else if (split_ > 0)
    split_rows(body);
  else if (warps_ > 0)
    columns(body);
  else if (row_shape)
    rows(body);
  else {
    if (has_scan(k_.stages[0])) throw loop::Unsupported("cuda emitter: scans (cumsum) are not lowered for cuda yet");
    pointwise(body);
  }
  CudaSource out;
  out.block = block_;
  // The grid: rows, or points (per block: a block's threads, each a vector of points where the
  // vector path may run).
  const size_t work_dims = row_shape ? n_outer_ : n_dims_;
  for (size_t d = 0; d < work_dims; ++d) out.work.push_back(work_terms(dims_[d], numbers[d]));
  if (split_ > 0) {
    out.work.push_back({WorkTerm{split_, {}}});
    out.split = split_;
    out.split_reductions = static_cast<int>(k_.stages[0].reductions.size());
  }
  out.per_block = warps_ > 0 ? 32 : row_shape ? 1 : block_ * (pointwise_vector_ ? vec_ : 1);
  int num_args = 0;
  for (const auto& list : {in_.loads, in_.stores})
    for (const std::vector<Addr>& stage : list)
      for (const Addr& a : stage) num_args = std::max(num_args, a.slot + 1);
  out.num_args = num_args;
  out.size_params = params_;
  out.host_values = host_;
  out.pointwise = !row_shape && split_ == 0 && warps_ == 0;
  body_text = body.str();
  return out;
}

CudaSource Emitter::run() {
  std::string body;
  CudaSource out = build(body);
  Text src;
  src << kPrelude << "extern \"C\" __global__ void __launch_bounds__(" << block_ << ") " << kSymbol << "("
      << parameter_list(out.num_args, params_.size(), host_, split_ > 0 ? "char* ws" : "") << ") {\n" << body << "}\n";
  out.source = src.str();
  return out;
}

}  // namespace

CudaSource emit_cuda(const loop::KernelInput& in) { return Emitter(in).run(); }

CudaSource emit_cuda_group(const std::vector<loop::KernelInput>& members) {
  FD_CHECK(!members.empty(), "cuda emitter: an empty group");
  Text functions, dispatch;
  std::map<std::string, std::string> function_of;  // member body -> its function's name
  CudaSource out;
  int64_t first = 0;
  for (const loop::KernelInput& in : members) {
    std::string body;
    const CudaSource m = Emitter(in, "fd_bid", "fd_grid").build(body);
    FD_CHECK(m.pointwise && m.size_params.empty() && m.block == kGroupBlock,
             "cuda emitter: a group member that is not a pointwise kernel of constant sizes");
    // NB: the key holds the parameter list too: the same body may read CPU scalars of other types.
    const std::string params = parameter_list(m.num_args, 0, m.host_values, "const i64 fd_bid, const i64 fd_grid");
    auto [it, fresh] = function_of.emplace(params + "\n" + body, "fd_member" + std::to_string(function_of.size()));
    if (fresh) functions << "__device__ __noinline__ void " << it->second << "(" << params << ") {\n" << body << "}\n";
    int64_t units = 1;
    for (const std::vector<WorkTerm>& factor : m.work) {
      int64_t sum = 0;
      for (const WorkTerm& t : factor) sum += t.coef;
      units *= sum;
    }
    const int64_t blocks = std::clamp<int64_t>((units + m.per_block - 1) / m.per_block, 1, kMemberBlocks);
    dispatch << "  if (b < " << first + blocks << "LL) { " << it->second << "(";
    for (int i = 0; i < m.num_args; ++i) dispatch << "a" << out.num_args + i << ", ";
    for (const HostValue& h : m.host_values) {
      dispatch << "h" << out.host_values.size() << ", ";
      out.host_values.push_back({h.arg + out.num_args, h.offset, h.storage});
    }
    dispatch << "b - " << first << "LL, " << blocks << "LL); return; }\n";
    out.num_args += m.num_args;
    first += blocks;
  }
  Text src;
  src << kPrelude << functions.str() << "extern \"C\" __global__ void __launch_bounds__(" << kGroupBlock << ") " << kSymbol << "("
      << parameter_list(out.num_args, 0, out.host_values) << ") {\n  const i64 b = blockIdx.x;\n" << dispatch.str() << "}\n";
  out.source = src.str();
  out.block = kGroupBlock;
  out.work = {{WorkTerm{first, {}}}};
  out.per_block = 1;
  out.exact_grid = true;
  return out;
}

}  // namespace fastdyn::codegen::cuda_emit
