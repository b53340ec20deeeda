// codegen/loop/interpret.cpp — see interpret.h.
#include "codegen/loop/interpret.h"

#include "codegen/loop/passes.h"
#include "runtime/errors.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>

namespace fastdyn::codegen::loop {
namespace {

using ST = c10::ScalarType;

bool is_float(ST t) { return t == ST::Float || t == ST::Double; }

// One value: `f` for floating compute types, `i` for integers and bool.
struct V {
  double f = 0;
  int64_t i = 0;
};

double round_to(ST t, double v) { return t == ST::Float ? static_cast<double>(static_cast<float>(v)) : v; }

template <typename T>
T read_as(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

V load_storage(ST storage, const char* p) {
  V v;
  switch (storage) {
    case ST::Float: v.f = read_as<float>(p); break;
    case ST::Double: v.f = read_as<double>(p); break;
    case ST::Half: v.f = static_cast<float>(read_as<c10::Half>(p)); break;
    case ST::BFloat16: v.f = static_cast<float>(read_as<c10::BFloat16>(p)); break;
    case ST::Long: v.i = read_as<int64_t>(p); break;
    case ST::Int: v.i = read_as<int32_t>(p); break;
    case ST::Short: v.i = read_as<int16_t>(p); break;
    case ST::Char: v.i = read_as<int8_t>(p); break;
    case ST::Byte: v.i = read_as<uint8_t>(p); break;
    case ST::Bool: v.i = read_as<bool>(p) ? 1 : 0; break;
    default: throw InternalError("interpreted kernel: a load of an unexpected dtype");
  }
  return v;
}

template <typename T>
void write_as(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

void store_storage(ST storage, char* p, V v) {
  switch (storage) {
    case ST::Float: write_as(p, static_cast<float>(v.f)); break;
    case ST::Double: write_as(p, v.f); break;
    case ST::Half: write_as(p, c10::Half(static_cast<float>(v.f))); break;
    case ST::BFloat16: write_as(p, c10::BFloat16(static_cast<float>(v.f))); break;
    case ST::Long: write_as(p, v.i); break;
    case ST::Int: write_as(p, static_cast<int32_t>(v.i)); break;
    case ST::Short: write_as(p, static_cast<int16_t>(v.i)); break;
    case ST::Char: write_as(p, static_cast<int8_t>(v.i)); break;
    case ST::Byte: write_as(p, static_cast<uint8_t>(v.i)); break;
    case ST::Bool: write_as(p, v.i != 0); break;
    default: throw InternalError("interpreted kernel: a store of an unexpected dtype");
  }
}

// Storage types whose compute type the loops hold (loop_ir.h's compute_type), stored as is.
bool known_storage(ST t) {
  switch (t) {
    case ST::Float: case ST::Double: case ST::Half: case ST::BFloat16: case ST::Long: case ST::Int:
    case ST::Short: case ST::Char: case ST::Byte: case ST::Bool: return true;
    default: return false;
  }
}

// The floating-point functions of one operand, by op.
struct UnaryRow {
  Op op;
  double (*fn)(double);
};
const UnaryRow kUnary[] = {
    {Op::Exp, [](double x) { return std::exp(x); }},     {Op::Expm1, [](double x) { return std::expm1(x); }},
    {Op::Log, [](double x) { return std::log(x); }},     {Op::Log1p, [](double x) { return std::log1p(x); }},
    {Op::Log2, [](double x) { return std::log2(x); }},   {Op::Log10, [](double x) { return std::log10(x); }},
    {Op::Sqrt, [](double x) { return std::sqrt(x); }},   {Op::Rsqrt, [](double x) { return 1.0 / std::sqrt(x); }},
    {Op::Sin, [](double x) { return std::sin(x); }},     {Op::Cos, [](double x) { return std::cos(x); }},
    {Op::Tan, [](double x) { return std::tan(x); }},     {Op::Tanh, [](double x) { return std::tanh(x); }},
    {Op::Floor, [](double x) { return std::floor(x); }}, {Op::Ceil, [](double x) { return std::ceil(x); }},
    {Op::Round, [](double x) { return std::nearbyint(x); }}, {Op::Trunc, [](double x) { return std::trunc(x); }},
    {Op::Recip, [](double x) { return 1.0 / x; }},
};

const UnaryRow* unary_row(Op op) {
  for (const UnaryRow& r : kUnary)
    if (r.op == op) return &r;
  return nullptr;
}

bool supported(Op op) {
  if (unary_row(op)) return true;
  switch (op) {
    case Op::Load: case Op::Const: case Op::Cast: case Op::Neg: case Op::Abs: case Op::IsNan: case Op::Not:
    case Op::RoundBF16: case Op::RoundF16: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max:
    case Op::Min: case Op::Pow: case Op::And: case Op::Or: case Op::Xor: case Op::Lt: case Op::Le: case Op::Gt:
    case Op::Ge: case Op::Eq: case Op::Ne: case Op::Select: case Op::Fma: return true;
    default: return false;
  }
}

double compare_operand(const V& v, ST t) { return is_float(t) ? v.f : static_cast<double>(v.i); }

}  // namespace

InterpretedKernel::InterpretedKernel(const KernelInput& in) {
  Part part{*in.kernel, {}, {}, {}, 1, 0, 0};
  const loop::Kernel& k = part.kernel;
  if (k.stages.size() != 1 || k.stages[0].per_outer || !k.stages[0].reductions.empty())
    throw Unsupported("a kernel over CPU scalars that is not pointwise (" + k.name + ")");
  if (!in.binding.empty())
    for (const std::vector<Addr>* list : {&in.loads[0], &in.stores[0]})
      for (const Addr& a : *list)
        if (!a.sym_base.is_constant()) throw Unsupported("a kernel over CPU scalars whose sizes are symbols");
  for (const Instr& i : k.stages[0].instrs)
    if (!supported(i.op)) throw Unsupported(std::string("a kernel over CPU scalars with ") + op_name(i.op));
  part.loads = in.loads[0];
  part.stores = in.stores[0];
  for (const std::vector<Addr>* list : {&part.loads, &part.stores})
    for (const Addr& a : *list) {
      if (a.dynamic >= 0 || !known_storage(a.storage)) throw Unsupported("a kernel over CPU scalars with a gather or an unexpected dtype");
      part.num_args = std::max(part.num_args, a.slot + 1);
    }
  part.dims = k.outer;
  part.dims.insert(part.dims.end(), k.inner.begin(), k.inner.end());
  for (int64_t n : part.dims) part.points *= n;
  if (part.points > kMaxHostPoints) throw Unsupported("a kernel over " + std::to_string(part.points) + " CPU values beside GPU tensors");
  parts_.push_back(std::move(part));
}

InterpretedKernel::InterpretedKernel(const std::vector<const InterpretedKernel*>& members) {
  // Each member's parts carry their offsets within the member: shifted by the members before it.
  int32_t first = 0;
  for (const InterpretedKernel* m : members) {
    for (const Part& p : m->parts_) {
      parts_.push_back(p);
      parts_.back().first_arg = p.first_arg + first;
    }
    first += m->num_args();
  }
}

int32_t InterpretedKernel::num_args() const {
  int32_t n = 0;
  for (const Part& p : parts_) n = std::max(n, p.first_arg + p.num_args);
  return n;
}

void InterpretedKernel::launch(void** args, const int64_t*) const {
  for (const Part& p : parts_) run(p, args + p.first_arg);
}

void InterpretedKernel::run(const Part& part, void** args) {
  const Stage& st = part.kernel.stages[0];
  // NB: per thread, reused: a launch allocates nothing once warm.
  thread_local std::vector<int64_t> idx;
  thread_local std::vector<V> v;
  idx.assign(part.dims.size(), 0);
  v.resize(st.instrs.size());
  auto address = [&](const Addr& a) {
    int64_t off = a.base;
    for (size_t d = 0; d < idx.size(); ++d) off += a.stride[d] * idx[d];
    return static_cast<char*>(args[a.slot]) + off * static_cast<int64_t>(c10::elementSize(a.storage));
  };
  for (int64_t p = 0; p < part.points; ++p) {
    int64_t rest = p;
    for (size_t d = part.dims.size(); d-- > 0;) {
      idx[d] = rest % part.dims[d];
      rest /= part.dims[d];
    }
    for (size_t k = 0; k < st.instrs.size(); ++k) {
      const Instr& in = st.instrs[k];
      const ST t = in.type;
      const bool fp = is_float(t);
      auto A = [&] { return v[static_cast<size_t>(in.a)]; };
      auto B = [&] { return v[static_cast<size_t>(in.b)]; };
      auto type_of = [&](int32_t i) { return st.instrs[static_cast<size_t>(i)].type; };
      V r;
      if (const UnaryRow* u = unary_row(in.op)) {
        r.f = u->fn(A().f);
      } else {
        switch (in.op) {
          case Op::Load: {
            const Addr& a = part.loads[static_cast<size_t>(in.a)];
            r = load_storage(a.storage, address(a));  // widened to the compute type
            break;
          }
          case Op::Const: r.f = in.value; r.i = static_cast<int64_t>(in.value); break;
          case Op::Cast: {
            const ST from = type_of(in.a);
            const V x = A();
            if (t == ST::Bool) r.i = is_float(from) ? (x.f != 0) : (x.i != 0);
            else if (fp) r.f = is_float(from) ? x.f : static_cast<double>(x.i);
            else r.i = is_float(from) ? static_cast<int64_t>(x.f) : x.i;
            break;
          }
          case Op::Neg: r.f = -A().f; r.i = -A().i; break;
          case Op::Abs: r.f = std::fabs(A().f); r.i = A().i < 0 ? -A().i : A().i; break;
          case Op::IsNan: r.i = std::isnan(A().f) ? 1 : 0; break;
          case Op::Not: r.i = t == ST::Bool ? !A().i : ~A().i; break;
          case Op::RoundBF16: r.f = static_cast<float>(c10::BFloat16(static_cast<float>(A().f))); break;
          case Op::RoundF16: r.f = static_cast<float>(c10::Half(static_cast<float>(A().f))); break;
          case Op::Add: r.f = A().f + B().f; r.i = t == ST::Bool ? (A().i || B().i) : A().i + B().i; break;
          case Op::Sub: r.f = A().f - B().f; r.i = A().i - B().i; break;
          case Op::Mul: r.f = A().f * B().f; r.i = t == ST::Bool ? (A().i && B().i) : A().i * B().i; break;
          case Op::Div: r.f = A().f / B().f; r.i = B().i == 0 ? 0 : A().i / B().i; break;
          case Op::Max:
            r.f = std::isnan(A().f) || std::isnan(B().f) ? NAN : std::max(A().f, B().f);
            r.i = std::max(A().i, B().i);
            break;
          case Op::Min:
            r.f = std::isnan(A().f) || std::isnan(B().f) ? NAN : std::min(A().f, B().f);
            r.i = std::min(A().i, B().i);
            break;
          case Op::Pow: r.f = std::pow(A().f, B().f); break;
          case Op::And: r.i = A().i & B().i; break;
          case Op::Or: r.i = A().i | B().i; break;
          case Op::Xor: r.i = A().i ^ B().i; break;
          case Op::Lt: r.i = compare_operand(A(), type_of(in.a)) < compare_operand(B(), type_of(in.b)); break;
          case Op::Le: r.i = compare_operand(A(), type_of(in.a)) <= compare_operand(B(), type_of(in.b)); break;
          case Op::Gt: r.i = compare_operand(A(), type_of(in.a)) > compare_operand(B(), type_of(in.b)); break;
          case Op::Ge: r.i = compare_operand(A(), type_of(in.a)) >= compare_operand(B(), type_of(in.b)); break;
          case Op::Eq: r.i = compare_operand(A(), type_of(in.a)) == compare_operand(B(), type_of(in.b)); break;
          case Op::Ne: r.i = compare_operand(A(), type_of(in.a)) != compare_operand(B(), type_of(in.b)); break;
          case Op::Select: r = A().i ? B() : v[static_cast<size_t>(in.c)]; break;
          case Op::Fma: r.f = std::fma(A().f, B().f, v[static_cast<size_t>(in.c)].f); break;
          default: throw InternalError("interpreted kernel: no evaluation of " + std::string(op_name(in.op)));
        }
      }
      if (fp) r.f = round_to(t, r.f);
      v[k] = r;
    }
    for (size_t w = 0; w < st.stores.size(); ++w) store_storage(part.stores[w].storage, address(part.stores[w]), v[static_cast<size_t>(st.stores[w].instr)]);
  }
}

}  // namespace fastdyn::codegen::loop
