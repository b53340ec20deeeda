// codegen/capture/autocast.cpp — see autocast.h.
#include "codegen/capture/autocast.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <optional>
#include <cstring>
#include <mutex>

#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"
#include "codegen/capture/meta_views.h"
#include "codegen/capture/view_helpers.h"

namespace fastdyn::codegen::autocast {
namespace {

// How eager's autocast treats an op's floating tensor arguments on one device type (ATen's
// autocast_mode.cpp policies), plus Plain: a composite op that calls no op autocast casts.
enum class Policy : uint8_t { Unknown, Plain, Lower, Fp32, Fp32OptDtype, Promote };

struct Row {
  OpId op;
  Policy cpu, cuda;
  int dtype_arg = -1;  // Fp32OptDtype: the position of the op's dtype= argument
};

constexpr Policy U = Policy::Unknown, P = Policy::Plain, L = Policy::Lower, F = Policy::Fp32,
                 FD = Policy::Fp32OptDtype, PR = Policy::Promote;

// One row per op of ops.def that autocast casts on a device type (checked against ATen's
// registrations by tests/python/test_autocast.py), or that ATen implements by calling other ops
// and that calls none autocast casts (Plain). Ops without a row: autocast does nothing to them
// unless ATen has an autocast kernel for them or they are composite, and then a call is refused.
const Row kRows[] = {
    // matmuls, convolutions, attention: to the lower-precision dtype
    {OpId::matmul, L, L},
    {OpId::mm, L, L},
    {OpId::bmm, L, L},
    {OpId::addmm, L, L},
    {OpId::baddbmm, L, L},
    {OpId::linear, L, L},
    {OpId::conv1d, L, L},
    {OpId::conv2d, L, L},
    {OpId::conv1d_padding, L, U},
    {OpId::conv2d_padding, L, U},
    {OpId::scaled_dot_product_attention, L, L},
    {OpId::einsum, U, L},  // NB: on the CPU einsum has no autocast kernel and calls bmm, which casts
    // to float32
    {OpId::prod, F, U},
    {OpId::prod_dim_int, F, U},
    {OpId::mse_loss, F, F},
    {OpId::cross_entropy_loss, F, U},
    {OpId::exp, P, F},
    {OpId::log, P, F},
    {OpId::log2, P, F},
    {OpId::log10, P, F},
    {OpId::log1p, P, F},
    {OpId::expm1, P, F},
    {OpId::rsqrt, P, F},
    {OpId::tan, P, F},
    {OpId::asin, P, F},
    {OpId::acos, P, F},
    {OpId::sinh, P, F},
    {OpId::cosh, P, F},
    {OpId::reciprocal, P, F},
    {OpId::softplus, P, F},
    {OpId::pow_Tensor_Tensor, P, F},
    {OpId::pow_Tensor_Scalar, P, F},
    {OpId::pow_Scalar, P, F},
    {OpId::layer_norm, P, F},
    {OpId::rms_norm, P, F},
    {OpId::group_norm, P, F},
    {OpId::logsumexp, P, F},
    // float32 unless the call names a dtype
    {OpId::softmax_int, P, FD, 2},
    {OpId::log_softmax_int, P, FD, 2},
    {OpId::sum_dim_IntList, P, FD, 3},
    {OpId::cumsum, P, FD, 2},
    // to the widest floating dtype among the arguments
    {OpId::cat, PR, P},
    {OpId::stack, PR, P},
    {OpId::index_copy, PR, P},
    {OpId::atan2, P, PR},
    {OpId::addcmul, P, PR},
    {OpId::addcdiv, P, PR},
    {OpId::dot, P, PR},
    // composite ops that call no op autocast casts
    {OpId::where_ScalarOther, P, P},
    {OpId::where_ScalarSelf, P, P},
    {OpId::where_Scalar, P, P},
    {OpId::square, P, U},  // NB: square is pow(x, 2), which casts to float32 on a GPU
    {OpId::square_, P, U},
    {OpId::isfinite, P, P},
    {OpId::relu6, P, P},
    {OpId::selu, P, P},
    {OpId::selu_, P, P},
    {OpId::log_sigmoid, P, P},
    {OpId::outer, P, P},
    {OpId::batch_norm, P, P},
    {OpId::dropout, P, P},
    {OpId::max_pool2d, P, P},
    {OpId::max_pool1d, P, P},
    {OpId::adaptive_avg_pool2d, P, P},
    {OpId::adaptive_avg_pool1d, P, P},
    {OpId::avg_pool1d, P, P},
    {OpId::pad, P, P},
    {OpId::repeat_interleave_self_int, P, P},
    {OpId::requires_grad_, P, P},
};

const Row* row_of(OpId op) {
  static const std::array<const Row*, static_cast<size_t>(OpId::kCount)> index = [] {
    std::array<const Row*, static_cast<size_t>(OpId::kCount)> a{};
    for (const Row& r : kRows) a[static_cast<size_t>(r.op)] = &r;
    return a;
  }();
  return index[static_cast<size_t>(op)];
}

Policy table_policy(OpId op, c10::DeviceType d) {
  const Row* r = row_of(op);
  if (!r) return Policy::Unknown;
  return d == c10::DeviceType::CPU ? r->cpu : r->cuda;
}

// What ATen's dispatcher registers for the op (the torch in use), once per op.
struct Registrations {
  bool autocast_cpu = false, autocast_cuda = false, composite = false;
};
const Registrations& registrations(OpId op) {
  static std::array<Registrations, static_cast<size_t>(OpId::kCount)> table;
  static std::once_flag once;
  std::call_once(once, [] {
    for (size_t i = 0; i < table.size(); ++i) {
      const OpInfo& info = op_info(static_cast<OpId>(i));
      auto h = c10::Dispatcher::singleton().findSchema({std::string("aten::") + info.aten, info.overload});
      if (!h) continue;
      table[i].autocast_cpu = h->hasKernelForDispatchKey(c10::DispatchKey::AutocastCPU);
      table[i].autocast_cuda = h->hasKernelForDispatchKey(c10::DispatchKey::AutocastCUDA);
      table[i].composite = h->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
    }
  });
  return table[static_cast<size_t>(op)];
}

bool has_autocast_kernel(OpId op, c10::DeviceType d) {
  const Registrations& reg = registrations(op);
  return d == c10::DeviceType::CPU ? reg.autocast_cpu : reg.autocast_cuda;
}

// Whether autocast casts this tensor for an op on device type d: floating, of that device type,
// float64 excepted (ATen's is_eligible).
bool eligible(const TensorMeta& m, c10::DeviceType d) {
  return m.device.type() == d && is_floating(m.dtype) && m.dtype != c10::ScalarType::Double;
}

// The table's policy where the torch in use agrees: a casting row whose op ATen gives no autocast
// kernel on that device type (another torch version: rms_norm on CUDA before 2.13) casts nothing
// itself, and its callees may (Unknown) if it is composite.
Policy policy(OpId op, c10::DeviceType d) {
  const Policy p = table_policy(op, d);
  if (p == Policy::Unknown || p == Policy::Plain) return p;
  if (has_autocast_kernel(op, d)) return p;
  return registrations(op).composite ? Policy::Unknown : Policy::Plain;
}

thread_local const CaptureContext* t_scope = nullptr;

const TensorMeta* first_tensor(const Graph& g, const std::vector<Arg>& args) {
  for (const Arg& a : args) {
    if (a.kind == Arg::Kind::Value) return &g.meta(a.value);
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId v : a.values)
        if (v >= 0) return &g.meta(v);
  }
  return nullptr;
}

std::string refusal(OpId op, c10::DeviceType d, const char* why) {
  return std::string("under torch.autocast, aten::") + op_info(op).aten + " on " + c10::DeviceTypeName(d, true) + " " + why;
}

// v cast to `dtype` as autocast's cached_cast does (Tensor.to: a _to_copy keeping the layout).
ValueId cast_to(Graph& g, const CaptureContext& ctx, ValueId v, c10::ScalarType dtype) {
  const TensorMeta m = g.meta(v);
  if (m.dtype == dtype) return v;
  TensorMeta to = meta::fresh(m, m.sizes, meta::to_copy_strides(m));
  to.dtype = dtype;
  to.requires_grad = m.requires_grad && ctx.grad_enabled;
  return emit1(g, OpId::_to_copy,
               {Arg::of_value(v), Arg::of_dtype(dtype), Arg::none(), Arg::none(), Arg::none(), Arg::of_bool(false), Arg::none()},
               std::move(to));
}

// The op of ops.def a family's Python names reach ("torch.nn.functional.linear" -> linear,
// "Tensor.__matmul__" -> matmul) with a casting policy on device type d, if any.
std::optional<OpId> find_family_op(Family f, c10::DeviceType d) {
  for (const char* python_name : family_python_names(f)) {
    std::string name = python_name;
    name = name.substr(name.rfind('.') + 1);
    // NB: a dunder's name is the op's (__matmul__); a single trailing _ is an in-place op, which
    // autocast does not cast (exp_ is not exp).
    if (name.size() > 4 && name.compare(0, 2, "__") == 0 && name.compare(name.size() - 2, 2, "__") == 0)
      name = name.substr(2, name.size() - 4);
    for (const Row& r : kRows) {
      const Policy p = policy(r.op, d);
      if (p != Policy::Unknown && p != Policy::Plain && name == op_info(r.op).aten) return r.op;
    }
  }
  return std::nullopt;
}

// find_family_op, once per family and device type (read by both cast_call_args and check_family).
std::optional<OpId> family_op(Family f, c10::DeviceType d) {
  static const auto table = [] {
    std::array<std::array<std::optional<OpId>, 2>, static_cast<size_t>(Family::kCount)> t{};
    for (size_t i = 0; i < t.size(); ++i)
      for (int k = 0; k < 2; ++k)
        t[i][static_cast<size_t>(k)] = find_family_op(static_cast<Family>(i), k == 0 ? c10::DeviceType::CPU : c10::DeviceType::CUDA);
    return t;
  }();
  return table[static_cast<size_t>(f)][d == c10::DeviceType::CPU ? 0 : 1];
}

// The dtype autocast gives the eligible tensors `vs` of an op with policy p (none eligible: nullopt).
std::optional<c10::ScalarType> target_dtype(const Graph& g, const CaptureContext& ctx, Policy p, c10::DeviceType d,
                                            const std::vector<ValueId>& vs) {
  std::optional<c10::ScalarType> target;
  for (ValueId v : vs) {
    const TensorMeta& m = g.meta(v);
    if (!eligible(m, d)) continue;
    if (!target) target = p == Policy::Fp32 ? c10::ScalarType::Float : ctx.autocast.dtype(d);
    if (p == Policy::Promote) target = c10::promoteTypes(*target, m.dtype);
  }
  return target;
}

}  // namespace

Scope::Scope(const CaptureContext& ctx) : saved_(t_scope) { t_scope = ctx.autocast.any() ? &ctx : nullptr; }
Scope::~Scope() { t_scope = saved_; }

void before_emit(Graph& g, OpId op, std::vector<Arg>& args, std::vector<TensorMeta>& outs) {
  const CaptureContext* ctx = t_scope;
  if (!ctx || op == OpId::_to_copy) return;
  const TensorMeta* first = first_tensor(g, args);
  if (!first) return;
  const c10::DeviceType d = first->device.type();
  if (!ctx->autocast.on(d)) return;
  Policy p = policy(op, d);
  if (p == Policy::Unknown) {
    if (has_autocast_kernel(op, d)) throw Refused(refusal(op, d, "casts its arguments in a way fastdyn has no rule for"));
    if (registrations(op).composite) throw Refused(refusal(op, d, "runs other ops, which autocast may cast: fastdyn has no rule for it"));
    return;
  }
  if (p == Policy::Plain) return;
  if (p == Policy::Fp32OptDtype) {
    const Row* r = row_of(op);
    const bool named = r->dtype_arg >= 0 && static_cast<size_t>(r->dtype_arg) < args.size() &&
                       args[static_cast<size_t>(r->dtype_arg)].kind != Arg::Kind::None;
    if (named) return;  // eager runs the op as called
    p = Policy::Fp32;
  }
  std::vector<ValueId*> cast;
  bool any_double = false;
  auto visit = [&](ValueId& v) {
    if (v < 0) return;
    if (eligible(g.meta(v), d)) cast.push_back(&v);
    else if (g.meta(v).dtype == c10::ScalarType::Double) any_double = true;
  };
  for (Arg& a : args) {
    if (a.kind == Arg::Kind::Value) visit(a.value);
    if (a.kind == Arg::Kind::ValueList)
      for (ValueId& v : a.values) visit(v);
  }
  if (cast.empty()) return;
  if (any_double) throw Refused(refusal(op, d, "mixes float64 with other floating arguments"));
  std::vector<ValueId> values;
  for (ValueId* v : cast) values.push_back(*v);
  const c10::ScalarType target = *target_dtype(g, *ctx, p, d, values);
  for (ValueId* v : cast) *v = cast_to(g, *ctx, *v, target);
  for (TensorMeta& o : outs)
    if (is_floating(o.dtype) && o.dtype != c10::ScalarType::Double) o.dtype = target;
}

void cast_call_args(Graph& g, const CaptureContext& ctx, Family f, std::vector<CallArg>& args,
                    std::vector<std::pair<std::string, CallArg>>& kwargs) {
  if (!ctx.autocast.any()) return;
  std::vector<ValueId*> tensors;
  auto visit = [&](CallArg& a) {
    if (a.kind == CallArg::Kind::Tensor) tensors.push_back(&a.value);
    if (a.kind == CallArg::Kind::TensorList)
      for (ValueId& v : a.values)
        if (v >= 0) tensors.push_back(&v);
  };
  for (CallArg& a : args) visit(a);
  for (auto& kv : kwargs) visit(kv.second);
  if (tensors.empty()) return;
  const c10::DeviceType d = g.meta(*tensors.front()).device.type();
  if (!ctx.autocast.on(d)) return;
  const std::optional<OpId> op = family_op(f, d);
  if (!op) return;
  const Policy p = policy(*op, d);
  if (p == Policy::Fp32OptDtype) return;  // one tensor: the node's own cast (before_emit) does it
  std::vector<ValueId> values;
  for (ValueId* v : tensors) values.push_back(*v);
  for (ValueId v : values)
    if (g.meta(v).dtype == c10::ScalarType::Double) return;  // before_emit refuses the mix
  const std::optional<c10::ScalarType> target = target_dtype(g, ctx, p, d, values);
  if (!target) return;
  for (ValueId* v : tensors)
    if (eligible(g.meta(*v), d)) *v = cast_to(g, ctx, *v, *target);
}

std::string check_family(const Graph& g, const CaptureContext& ctx, Family f, size_t first_node) {
  for (c10::DeviceType d : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    if (!ctx.autocast.on(d)) continue;
    const std::optional<OpId> op = family_op(f, d);
    if (!op) continue;
    // Some node of that device type the binder recorded casts the same way (matmul may be mm).
    const Policy want = policy(*op, d);
    bool same = false, on_device = false;
    for (size_t k = first_node; k < g.nodes.size(); ++k) {
      const TensorMeta* m = first_tensor(g, g.nodes[k].args);
      if (!m || m->device.type() != d || g.nodes[k].op == OpId::_to_copy) continue;
      on_device = true;
      same = same || policy(g.nodes[k].op, d) == want;
    }
    if (on_device && !same) return refusal(*op, d, "is recorded as other ops, which autocast would not cast alike");
  }
  return {};
}

std::string policy_name(OpId op, c10::DeviceType device) {
  switch (table_policy(op, device)) {
    case Policy::Unknown: return "";
    case Policy::Plain: return "plain";
    case Policy::Lower: return "lower";
    case Policy::Fp32: return "fp32";
    case Policy::Fp32OptDtype: return "fp32 unless dtype=";
    case Policy::Promote: return "promote";
  }
  return "";
}

}  // namespace fastdyn::codegen::autocast
