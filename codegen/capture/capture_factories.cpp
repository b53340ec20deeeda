// codegen/capture/capture_factories.cpp — binders of the tensor factories (torch.zeros, arange, *_like,
// Tensor.new_*) and of the dtype/device casts (Tensor.to, .float(), type_as...).
//
// Factories take no tensor input (the *_like and new_* ones read only the metadata of theirs);
// their dtype follows eager's rules (default dtype from the CaptureContext, Long for integer
// aranges, the fill value's kind for full) and is passed to ATen explicitly, so the recorded graph
// does not depend on global state at run time. Casts that change nothing return their input's
// value without emitting a node: eager returns the very same tensor object.
#include "codegen/capture/view_helpers.h"
#include "codegen/capture/binder.h"
#include "codegen/shapes/propagate.h"
#include "codegen/capture/meta_views.h"

#include <c10/core/Device.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cmath>
#include <cstring>

namespace fastdyn::codegen {
namespace {

using meta::Ints;
using namespace views;

// A device as ATen places a tensor on it: "cuda" without an index is the current CUDA device, so
// the metadata names the index the tensor gets (a graph of cuda:0 values beside one "cuda" factory
// was no single device, and ran wholly on the aten backend). Unchanged where no guard is
// registered for its type (CUDA in a CPU-only build).
c10::Device indexed(c10::Device d) {
  if (d.has_index() || d.is_cpu() || d.is_meta()) return d;
  try {
    return c10::impl::VirtualGuardImpl(d.type()).getDevice();
  } catch (const std::exception&) {
    return d;
  }
}

// A device argument: torch.device, "cpu"/"cuda:1", or None.
bool read_device(const char* op, const CallArg& a, std::optional<c10::Device>& out, CaptureResult& err) {
  if (a.kind == CallArg::Kind::None) return true;
  if (a.kind == CallArg::Kind::Device) {
    out = indexed(a.device);
    return true;
  }
  if (a.kind == CallArg::Kind::String) {
    try {
      out = indexed(c10::Device(a.str));
      return true;
    } catch (const std::exception&) {
      err = fail(op, "invalid device string '" + a.str + "'");
      return false;
    }
  }
  err = fail(op, "argument 'device' must be torch.device or str");
  return false;
}

// The keyword options every factory shares (dtype=, layout=, device=, requires_grad=, ...).
struct Options {
  std::optional<c10::ScalarType> dtype;
  std::optional<c10::Device> device;
  bool requires_grad = false;
};

// Reads the options that the signature declares; the unsupported ones must be left at None.
bool read_options(const char* op, const BoundArgs& a, Options& o, CaptureResult& err) {
  for (const char* unsupported : {"out", "layout", "memory_format", "generator"}) {
    auto it = a.values.find(unsupported);
    if (it != a.values.end() && it->second.kind != CallArg::Kind::None) {
      err = fail(op, std::string(unsupported) + "= is not supported");
      return false;
    }
  }
  if (auto it = a.values.find("pin_memory"); it != a.values.end() && it->second.kind == CallArg::Kind::Bool && it->second.b) {
    err = fail(op, "pin_memory=True is not supported");
    return false;
  }
  if (!a.is_none("dtype")) o.dtype = a.dtype("dtype");
  if (!read_device(op, a.get("device"), o.device, err)) return false;
  if (auto it = a.values.find("requires_grad"); it != a.values.end()) o.requires_grad = a.boolean("requires_grad");
  return true;
}

// The fresh tensor a factory returns; fails like eager for negative sizes or requires_grad on
// an integer dtype.
bool factory_meta(const char* op, const Options& o, c10::ScalarType dtype, c10::Device device, const Ints& sizes,
                  const Ints& strides, TensorMeta& out, CaptureResult& err) {
  for (int64_t s : sizes)
    if (s < 0) {
      err = fail(op, "Trying to create tensor with negative dimension " + std::to_string(s) + ": " + meta::format_ints(sizes));
      return false;
    }
  if (o.requires_grad && !differentiable(dtype)) {
    err = fail(op, "Only Tensors of floating point and complex dtype can require gradients");
    return false;
  }
  out.dtype = dtype;
  out.device = device;
  out.sizes = sizes;
  out.strides = strides;
  out.storage_offset = 0;
  out.requires_grad = false;  // set by emit_factory's requires_grad_ node, as Python's binding does
  return true;
}

// Emits the factory node, then `requires_grad_` when the call asked for it: ATen factories have
// no requires_grad argument, so the graph must flip it itself to return what eager returns.
CaptureResult emit_factory(BindCall& call, OpId op, std::vector<Arg> args, TensorMeta out, bool requires_grad) {
  ValueId v = emit1(call.graph, op, std::move(args), out);
  if (!requires_grad) return tensor_result(v);
  out.requires_grad = true;
  return tensor_result(emit1(call.graph, OpId::requires_grad_, {Arg::of_value(v), Arg::of_bool(true)}, out));
}

// The trailing `*, ScalarType? dtype, Layout? layout, Device? device, bool? pin_memory` of an
// ATen factory schema.
void push_tail(std::vector<Arg>& args, c10::ScalarType dtype, const std::optional<c10::Device>& device) {
  args.push_back(Arg::of_dtype(dtype));
  args.push_back(Arg::none());
  args.push_back(device ? Arg::of_device(*device) : Arg::none());
  args.push_back(Arg::none());
}

Arg number_arg(const CallArg& a) {
  switch (a.kind) {
    case CallArg::Kind::Int: {
      Arg out = Arg::of_int(a.i);
      if (a.sym.size() == 1 && !a.sym[0].is_constant()) out.sym_ints = a.sym;  // a size-derived int
      return out;
    }
    case CallArg::Kind::Bool: return Arg::of_bool(a.b);
    default: return Arg::of_double(a.d);
  }
}

// The dtype eager infers for a fill value: bool, Long for ints, the default dtype for floats.
c10::ScalarType fill_dtype(const CallArg& v, c10::ScalarType default_dtype) {
  if (v.kind == CallArg::Kind::Bool) return c10::ScalarType::Bool;
  if (v.kind == CallArg::Kind::Int) return c10::ScalarType::Long;
  return default_dtype;
}

const c10::Device kCpu(c10::DeviceType::CPU);

// ---- sized factories: zeros(*size), ones, empty, rand, randn, full -----------------------------

// Parameters shared by the sized factories; each family prefixes its own name so that binding
// errors name it ("zeros() got an unexpected keyword argument ...").
constexpr const char* kSizedParams =
    "(int[] *size, *, Any out=None, ScalarType? dtype=None, Any layout=None, Any device=None, "
    "bool requires_grad=False, bool pin_memory=False, Any memory_format=None, Any generator=None)";
constexpr const char* kLikeParams =
    "(Tensor input, *, ScalarType? dtype=None, Any layout=None, Any device=None, bool requires_grad=False, "
    "bool pin_memory=False, Any memory_format=None)";
constexpr const char* kNewParams =
    "(Tensor input, int[] *size, ScalarType? dtype=None, Any layout=None, Any device=None, "
    "bool requires_grad=False, bool pin_memory=False)";

Signature make_sig(const char* name, const char* params) { return Signature((std::string(name) + params).c_str()); }

struct SizedFactory {
  const char* name;
  OpId op;
  bool memory_format;  // the ATen schema ends with MemoryFormat? (empty)
  bool floating_only;  // rand/randn need a floating dtype
};

// zeros(*size), ones, empty, rand, randn; full(size, fill_value) when `fill`.
CaptureResult sized_factory(BindCall& call, const Signature& sig, const SizedFactory& f, bool fill = false) {
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  Options o;
  if (!read_options(f.name, a, o, err)) return err;
  c10::ScalarType dtype = o.dtype.value_or(fill ? fill_dtype(a.get("fill_value"), call.ctx.default_dtype)
                                                : call.ctx.default_dtype);
  if (f.floating_only && !differentiable(dtype))
    return fail(f.name, std::string("a floating point dtype is required, got ") + c10::toString(dtype));
  Ints sizes = a.ints("size");
  TensorMeta out;
  if (!factory_meta(f.name, o, dtype, o.device.value_or(kCpu), sizes, contiguous_strides(sizes), out, err)) return err;
  std::vector<Arg> args{ints_arg(sizes, a.sym_ints("size"))};  // sizes from x.shape stay symbols
  if (fill) args.push_back(number_arg(a.get("fill_value")));
  push_tail(args, dtype, o.device);
  if (f.memory_format) args.push_back(Arg::none());
  return emit_factory(call, f.op, std::move(args), out, o.requires_grad);
}

// ---- *_like and new_* --------------------------------------------------------------------------

struct LikeFactory {
  const char* name;
  OpId op;
  bool floating_only;
};

// zeros_like(input), ...; full_like(input, fill_value) when `fill`.
CaptureResult like_factory(BindCall& call, const Signature& sig, const LikeFactory& f, bool fill = false) {
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  Options o;
  if (!read_options(f.name, a, o, err)) return err;
  ValueId self = a.tensor("input");
  const TensorMeta m = call.graph.meta(self);
  c10::ScalarType dtype = o.dtype.value_or(m.dtype);
  if (f.floating_only && !differentiable(dtype))
    return fail(f.name, std::string("a floating point dtype is required, got ") + c10::toString(dtype));
  TensorMeta out;
  // preserve_format: the input's layout is kept (dense inputs keep their exact strides).
  if (!factory_meta(f.name, o, dtype, o.device.value_or(m.device), m.sizes, preserve_format_strides(m), out, err))
    return err;
  std::vector<Arg> args{Arg::of_value(self)};
  if (fill) args.push_back(number_arg(a.get("fill_value")));
  push_tail(args, dtype, o.device);
  args.push_back(Arg::none());  // memory_format
  return emit_factory(call, f.op, std::move(args), out, o.requires_grad);
}

CaptureResult new_factory(BindCall& call, const Signature& sig, const char* name, OpId op, bool fill = false) {
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  Options o;
  if (!read_options(name, a, o, err)) return err;
  ValueId self = a.tensor("input");
  const TensorMeta m = call.graph.meta(self);
  c10::ScalarType dtype = o.dtype.value_or(m.dtype);
  Ints sizes = a.ints("size");
  TensorMeta out;
  if (!factory_meta(name, o, dtype, o.device.value_or(m.device), sizes, contiguous_strides(sizes), out, err))
    return err;
  std::vector<Arg> args{Arg::of_value(self), ints_arg(sizes, a.sym_ints("size"))};
  if (fill) args.push_back(number_arg(a.get("fill_value")));
  push_tail(args, dtype, o.device);
  return emit_factory(call, op, std::move(args), out, o.requires_grad);
}

}  // namespace

CaptureResult bind_zeros(BindCall& call) {
  static const Signature sig = make_sig("zeros", kSizedParams);
  return sized_factory(call, sig, {"zeros", OpId::zeros, false, false});
}
CaptureResult bind_ones(BindCall& call) {
  static const Signature sig = make_sig("ones", kSizedParams);
  return sized_factory(call, sig, {"ones", OpId::ones, false, false});
}
CaptureResult bind_empty(BindCall& call) {
  static const Signature sig = make_sig("empty", kSizedParams);
  return sized_factory(call, sig, {"empty", OpId::empty_memory_format, true, false});
}
CaptureResult bind_rand(BindCall& call) {
  static const Signature sig = make_sig("rand", kSizedParams);
  return sized_factory(call, sig, {"rand", OpId::rand, false, true});
}
CaptureResult bind_randn(BindCall& call) {
  static const Signature sig = make_sig("randn", kSizedParams);
  return sized_factory(call, sig, {"randn", OpId::randn, false, true});
}
CaptureResult bind_full(BindCall& call) {
  static const Signature sig(
      "full(int[] size, Number fill_value, *, Any out=None, ScalarType? dtype=None, Any layout=None, Any device=None, "
      "bool requires_grad=False, bool pin_memory=False)");
  return sized_factory(call, sig, {"full", OpId::full, false, false}, /*fill=*/true);
}

CaptureResult bind_zeros_like(BindCall& call) {
  static const Signature sig = make_sig("zeros_like", kLikeParams);
  return like_factory(call, sig, {"zeros_like", OpId::zeros_like, false});
}
CaptureResult bind_ones_like(BindCall& call) {
  static const Signature sig = make_sig("ones_like", kLikeParams);
  return like_factory(call, sig, {"ones_like", OpId::ones_like, false});
}
CaptureResult bind_empty_like(BindCall& call) {
  static const Signature sig = make_sig("empty_like", kLikeParams);
  return like_factory(call, sig, {"empty_like", OpId::empty_like, false});
}
CaptureResult bind_rand_like(BindCall& call) {
  static const Signature sig = make_sig("rand_like", kLikeParams);
  return like_factory(call, sig, {"rand_like", OpId::rand_like, true});
}
CaptureResult bind_randn_like(BindCall& call) {
  static const Signature sig = make_sig("randn_like", kLikeParams);
  return like_factory(call, sig, {"randn_like", OpId::randn_like, true});
}
CaptureResult bind_full_like(BindCall& call) {
  static const Signature sig(
      "full_like(Tensor input, Number fill_value, *, ScalarType? dtype=None, Any layout=None, Any device=None, "
      "bool requires_grad=False, bool pin_memory=False, Any memory_format=None)");
  return like_factory(call, sig, {"full_like", OpId::full_like, false}, /*fill=*/true);
}

CaptureResult bind_new_zeros(BindCall& call) {
  static const Signature sig = make_sig("new_zeros", kNewParams);
  return new_factory(call, sig, "new_zeros", OpId::new_zeros);
}
CaptureResult bind_new_ones(BindCall& call) {
  static const Signature sig = make_sig("new_ones", kNewParams);
  return new_factory(call, sig, "new_ones", OpId::new_ones);
}
CaptureResult bind_new_empty(BindCall& call) {
  static const Signature sig = make_sig("new_empty", kNewParams);
  return new_factory(call, sig, "new_empty", OpId::new_empty);
}
CaptureResult bind_new_full(BindCall& call) {
  static const Signature sig(
      "new_full(Tensor input, int[] size, Number fill_value, *, ScalarType? dtype=None, Any layout=None, "
      "Any device=None, bool requires_grad=False, bool pin_memory=False)");
  return new_factory(call, sig, "new_full", OpId::new_full, /*fill=*/true);
}

CaptureResult bind_arange(BindCall& call) {
  static const Signature sig(
      "arange(Number start, Number? end=None, Number step=1, *, Any out=None, ScalarType? dtype=None, Any layout=None, "
      "Any device=None, bool requires_grad=False, bool pin_memory=False)");
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  Options o;
  if (!read_options("arange", a, o, err)) return err;
  // arange(end) counts from 0.
  CallArg start = a.get("start"), end = a.get("end"), step = a.get("step");
  if (end.kind == CallArg::Kind::None) {
    end = start;
    start = CallArg::of_int(0);
  }
  const bool any_float = start.kind == CallArg::Kind::Double || end.kind == CallArg::Kind::Double ||
                         step.kind == CallArg::Kind::Double;
  c10::ScalarType dtype = o.dtype.value_or(any_float ? call.ctx.default_dtype : c10::ScalarType::Long);
  auto as_double = [](const CallArg& v) {
    return v.kind == CallArg::Kind::Double ? v.d : v.kind == CallArg::Kind::Int ? static_cast<double>(v.i) : (v.b ? 1.0 : 0.0);
  };
  const double b = as_double(start), e = as_double(end), s = as_double(step);
  if (s == 0) return fail("arange", "step must be nonzero");
  if (!std::isfinite(b) || !std::isfinite(e)) return fail("arange", "unsupported range: " + std::to_string(b) + " -> " + std::to_string(e));
  if ((s > 0 && e < b) || (s < 0 && e > b)) return fail("arange", "upper bound and larger bound inconsistent with step sign");
  // ATen's length: for integer bounds the difference is taken in int64 (exact past 2^53), then
  // divided in double.
  const bool all_int = start.kind == CallArg::Kind::Int && end.kind == CallArg::Kind::Int &&
                       step.kind == CallArg::Kind::Int && c10::isIntegralType(dtype, false);
  const double n = all_int ? std::ceil(static_cast<double>(end.i - start.i) / static_cast<double>(step.i))
                           : std::ceil((e - b) / s);
  TensorMeta out;
  Ints sizes{static_cast<int64_t>(n)};
  if (!factory_meta("arange", o, dtype, o.device.value_or(kCpu), sizes, {1}, out, err)) return err;
  std::vector<Arg> args{number_arg(start), number_arg(end), number_arg(step)};
  push_tail(args, dtype, o.device);
  return emit_factory(call, OpId::arange_start_step, std::move(args), out, o.requires_grad);
}

CaptureResult bind_linspace(BindCall& call) {
  static const Signature sig(
      "linspace(Number start, Number end, int steps, *, Any out=None, ScalarType? dtype=None, Any layout=None, "
      "Any device=None, bool requires_grad=False, bool pin_memory=False)");
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  Options o;
  if (!read_options("linspace", a, o, err)) return err;
  const int64_t steps = a.integer("steps");
  if (steps < 0) return fail("linspace", "number of steps must be non-negative");
  c10::ScalarType dtype = o.dtype.value_or(call.ctx.default_dtype);
  TensorMeta out;
  if (!factory_meta("linspace", o, dtype, o.device.value_or(kCpu), {steps}, {1}, out, err)) return err;
  std::vector<Arg> args{number_arg(a.get("start")), number_arg(a.get("end")), Arg::of_int(steps)};
  push_tail(args, dtype, o.device);
  return emit_factory(call, OpId::linspace, std::move(args), out, o.requires_grad);
}

CaptureResult bind_eye(BindCall& call) {
  static const Signature sig(
      "eye(int n, int? m=None, *, Any out=None, ScalarType? dtype=None, Any layout=None, Any device=None, "
      "bool requires_grad=False, bool pin_memory=False)");
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  Options o;
  if (!read_options("eye", a, o, err)) return err;
  const int64_t n = a.integer("n"), m = a.is_none("m") ? n : a.integer("m");
  if (n < 0) return fail("eye", "n must be greater or equal to 0, got " + std::to_string(n));
  if (m < 0) return fail("eye", "m must be greater or equal to 0, got " + std::to_string(m));
  c10::ScalarType dtype = o.dtype.value_or(call.ctx.default_dtype);
  TensorMeta out;
  if (!factory_meta("eye", o, dtype, o.device.value_or(kCpu), {n, m}, contiguous_strides({n, m}), out, err)) return err;
  std::vector<Arg> args{Arg::of_int(n), Arg::of_int(m)};
  push_tail(args, dtype, o.device);
  return emit_factory(call, OpId::eye_m, std::move(args), out, o.requires_grad);
}

CaptureResult bind_randint(BindCall& call) {
  // randint(high, size) and randint(low, high, size): told apart by the positional count.
  static const Signature high_only(
      "randint(int high, int[] size, *, Any generator=None, Any out=None, ScalarType? dtype=None, Any layout=None, "
      "Any device=None, bool requires_grad=False, bool pin_memory=False)");
  static const Signature low_high(
      "randint(int low, int high, int[] size, *, Any generator=None, Any out=None, ScalarType? dtype=None, "
      "Any layout=None, Any device=None, bool requires_grad=False, bool pin_memory=False)");
  BoundArgs a;
  CaptureResult err;
  bool has_low = call.args.size() >= 3;
  for (const auto& kw : call.kwargs)
    has_low = has_low || kw.first == "low" || (kw.first == "size" && call.args.size() == 2);
  if (!bind_sig(has_low ? low_high : high_only, call, a, err)) return err;
  Options o;
  if (!read_options("randint", a, o, err)) return err;
  const int64_t low = has_low ? a.integer("low") : 0, high = a.integer("high");
  if (low >= high)
    return fail("randint", "random_ expects 'from' to be less than 'to', but got from=" + std::to_string(low) +
                               " >= to=" + std::to_string(high));
  c10::ScalarType dtype = o.dtype.value_or(c10::ScalarType::Long);
  Ints sizes = a.ints("size");
  TensorMeta out;
  if (!factory_meta("randint", o, dtype, o.device.value_or(kCpu), sizes, contiguous_strides(sizes), out, err))
    return err;
  std::vector<Arg> args{Arg::of_int(low), Arg::of_int(high), Arg::of_ints(sizes)};
  push_tail(args, dtype, o.device);
  return emit_factory(call, OpId::randint_low, std::move(args), out, o.requires_grad);
}

// ---- more random draws: each is ATen's own op, run between the kernels in program order, so the
// generator advances as eager's does and the values are eager's bit for bit. No generator= (the
// default generator is the one the stream follows).

CaptureResult bind_randperm(BindCall& call) {
  static const Signature sig(
      "randperm(int n, *, Any generator=None, Any out=None, ScalarType? dtype=None, Any layout=None, Any device=None, "
      "bool requires_grad=False, bool pin_memory=False)");
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  if (!a.is_none("generator")) return fail("randperm", "a generator= other than the default is not recorded");
  Options o;
  if (!read_options("randperm", a, o, err)) return err;
  const int64_t n = a.integer("n");
  if (n < 0) return fail("randperm", "n must be non-negative, got" + std::to_string(n));
  c10::ScalarType dtype = o.dtype.value_or(c10::ScalarType::Long);
  TensorMeta out;
  if (!factory_meta("randperm", o, dtype, o.device.value_or(kCpu), {n}, {1}, out, err)) return err;
  std::vector<Arg> args{Arg::of_int(n)};
  push_tail(args, dtype, o.device);
  return emit_factory(call, OpId::randperm, std::move(args), out, o.requires_grad);
}

// torch.normal(mean, std, size) of two numbers (the float_float overload); tensor means and stds
// are left to eager.
CaptureResult bind_normal(BindCall& call) {
  static const Signature sig(
      "normal(float mean, float std, int[] size, *, Any generator=None, Any out=None, ScalarType? dtype=None, "
      "Any layout=None, Any device=None, bool requires_grad=False, bool pin_memory=False)");
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  if (!a.is_none("generator")) return fail("normal", "a generator= other than the default is not recorded");
  Options o;
  if (!read_options("normal", a, o, err)) return err;
  const double std = a.number("std");
  if (std < 0) return fail("normal", "normal expects std >= 0.0, but found std " + std::to_string(std));
  c10::ScalarType dtype = o.dtype.value_or(call.ctx.default_dtype);
  Ints sizes = a.ints("size");
  TensorMeta out;
  if (!factory_meta("normal", o, dtype, o.device.value_or(kCpu), sizes, contiguous_strides(sizes), out, err)) return err;
  std::vector<Arg> args{Arg::of_double(a.number("mean")), Arg::of_double(std), Arg::of_ints(sizes), Arg::none()};
  push_tail(args, dtype, o.device);
  return emit_factory(call, OpId::normal_float_float, std::move(args), out, o.requires_grad);
}

// torch.bernoulli(input) (its probabilities) and torch.bernoulli(input, p): a new contiguous
// tensor of input's dtype, as ATen allocates it.
CaptureResult bind_bernoulli(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "bernoulli(Tensor input, float? p=None, *, Any generator=None)");
  if (!a.is_none("generator")) return fail("bernoulli", "a generator= other than the default is not recorded");
  const ValueId x = a.tensor("input");
  const TensorMeta& m = call.graph.meta(x);
  if (!c10::isFloatingType(m.dtype)) return fail("bernoulli", std::string("expects a floating point input, got ") + c10::toString(m.dtype));
  const TensorMeta out = contiguous_meta(m.dtype, m.device, m.sizes, false);
  if (a.is_none("p")) return tensor_result(emit1(call.graph, OpId::bernoulli, {Arg::of_value(x), Arg::none()}, out));
  return tensor_result(emit1(call.graph, OpId::bernoulli_p, {Arg::of_value(x), Arg::of_double(a.number("p")), Arg::none()}, out));
}

namespace {

// self.bernoulli_(p) / uniform_(from, to) / normal_(mean, std): in place on a contiguous floating
// tensor (functionalization records ATen's functional form, which draws the same numbers).
CaptureResult random_fill_(BindCall& call, const char* name, OpId op, const BoundArgs& a, const char* p0, const char* p1) {
  if (!a.is_none("generator")) return fail(name, "a generator= other than the default is not recorded");
  const ValueId x = a.tensor("self");
  const TensorMeta& m = call.graph.meta(x);
  if (!c10::isFloatingType(m.dtype)) return fail(name, std::string("expects a floating point tensor, got ") + c10::toString(m.dtype));
  if (m.strides != contiguous_strides(m.sizes)) return fail(name, "only a contiguous tensor is filled in the graph");
  std::vector<Arg> args{Arg::of_value(x), Arg::of_double(a.number(p0))};
  if (p1) args.push_back(Arg::of_double(a.number(p1)));
  args.push_back(Arg::none());
  return tensor_result(emit1(call.graph, op, std::move(args), m));
}

}  // namespace

CaptureResult bind_bernoulli_(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "bernoulli_(Tensor self, float p=0.5, *, Any generator=None)");
  return random_fill_(call, "bernoulli_", OpId::bernoulli__float, a, "p", nullptr);
}
CaptureResult bind_uniform_(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "uniform_(Tensor self, float from=0.0, float to=1.0, *, Any generator=None)");
  if (a.number("from") > a.number("to")) return fail("uniform_", "expects to return a [from, to) range, but found from > to");
  return random_fill_(call, "uniform_", OpId::uniform_, a, "from", "to");
}
CaptureResult bind_normal_(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "normal_(Tensor self, float mean=0.0, float std=1.0, *, Any generator=None)");
  if (a.number("std") < 0) return fail("normal_", "normal expects std >= 0.0");
  return random_fill_(call, "normal_", OpId::normal_, a, "mean", "std");
}

// ---- casts -----------------------------------------------------------------------------------

namespace {

bool same_device(const c10::Device& tensor_device, const c10::Device& wanted) {
  return tensor_device.type() == wanted.type() && (!wanted.has_index() || wanted.index() == tensor_device.index() ||
                                                   !tensor_device.has_index());
}

// Tensor.to's core: returns `self` untouched when nothing changes and no copy is forced.
// `contiguous`: memory_format=torch.contiguous_format: a copy, if one is made, is contiguous.
// Whether one is made is eager's to_will_alias: a tensor is returned as it is when nothing else
// changes and its suggested memory format is the one asked for, which is always the case below
// 4 or above 5 dims (a transposed matrix stays transposed); for 4-d and 5-d tensors that
// suggestion reads the strides (channels-last or not), which the trace does not follow.
CaptureResult cast(BindCall& call, ValueId self, std::optional<c10::ScalarType> dtype, std::optional<c10::Device> device,
                   bool non_blocking, bool copy, bool contiguous = false) {
  const TensorMeta m = call.graph.meta(self);
  const c10::ScalarType to_dtype = dtype.value_or(m.dtype);
  const bool device_changes = device && !same_device(m.device, *device);
  if (!copy && to_dtype == m.dtype && !device_changes) {
    if (contiguous && (m.dim() == 4 || m.dim() == 5))
      return fail("to", "memory_format=torch.contiguous_format of a 4-d or 5-d tensor without a copy is not supported");
    return tensor_result(self);
  }
  TensorMeta out = meta::fresh(m, m.sizes, contiguous ? contiguous_strides(m.sizes) : meta::to_copy_strides(m));
  out.dtype = to_dtype;
  if (device_changes) out.device = *device;
  out.requires_grad = m.requires_grad && call.ctx.grad_enabled && differentiable(to_dtype);
  return tensor_result(emit1(call.graph, OpId::_to_copy,
                             {Arg::of_value(self), Arg::of_dtype(to_dtype), Arg::none(),
                              device_changes ? Arg::of_device(*device) : Arg::none(), Arg::none(),
                              Arg::of_bool(non_blocking),
                              contiguous ? Arg::of_int(static_cast<int64_t>(c10::MemoryFormat::Contiguous)) : Arg::none()},
                             out));
}

// memory_format= of a cast: None or torch.preserve_format, or torch.contiguous_format
// (*contiguous); false after a failure in err.
bool read_memory_format(const char* name, const BoundArgs& a, bool& contiguous, CaptureResult& err) {
  const c10::MemoryFormat f = a.memory_format("memory_format").value_or(c10::MemoryFormat::Preserve);
  contiguous = f == c10::MemoryFormat::Contiguous;
  if (f == c10::MemoryFormat::Preserve || contiguous) return true;
  err = fail(name, "only memory_format=torch.contiguous_format or torch.preserve_format is supported");
  return false;
}

CaptureResult cast_method(BindCall& call, const char* name, c10::ScalarType dtype) {
  FD_BIND_OR_RETURN(call, a, "cast(Tensor input, *, MemoryFormat? memory_format=None)");
  bool contiguous = false;
  CaptureResult err;
  if (!read_memory_format(name, a, contiguous, err)) return err;
  return cast(call, a.tensor("input"), dtype, std::nullopt, false, false, contiguous);
}

}  // namespace

CaptureResult bind_to(BindCall& call) {
  static const Signature by_dtype(
      "to(Tensor input, ScalarType dtype, bool non_blocking=False, bool copy=False, *, MemoryFormat? memory_format=None)");
  static const Signature by_other(
      "to(Tensor input, Tensor other, bool non_blocking=False, bool copy=False, *, MemoryFormat? memory_format=None)");
  static const Signature by_device(
      "to(Tensor input, Any device=None, ScalarType? dtype=None, bool non_blocking=False, bool copy=False, *, "
      "MemoryFormat? memory_format=None)");
  const CallArg::Kind first = call.args.size() >= 2 ? call.args[1].kind : CallArg::Kind::None;
  bool has_other = first == CallArg::Kind::Tensor;
  for (const auto& kw : call.kwargs) has_other = has_other || kw.first == "other";
  const Signature& sig = first == CallArg::Kind::DType ? by_dtype : has_other ? by_other : by_device;
  BoundArgs a;
  CaptureResult err;
  if (!bind_sig(sig, call, a, err)) return err;
  bool contiguous = false;
  if (!read_memory_format("to", a, contiguous, err)) return err;
  std::optional<c10::ScalarType> dtype;
  std::optional<c10::Device> device;
  if (&sig == &by_other) {
    const TensorMeta& o = call.graph.meta(a.tensor("other"));
    dtype = o.dtype;
    device = o.device;
  } else {
    if (!a.is_none("dtype")) dtype = a.dtype("dtype");
    if (&sig == &by_device && !read_device("to", a.get("device"), device, err)) return err;
  }
  return cast(call, a.tensor("input"), dtype, device, a.boolean("non_blocking"), a.boolean("copy"), contiguous);
}

CaptureResult bind_to_float(BindCall& call) { return cast_method(call, "float", c10::ScalarType::Float); }
CaptureResult bind_to_double(BindCall& call) { return cast_method(call, "double", c10::ScalarType::Double); }
CaptureResult bind_to_half(BindCall& call) { return cast_method(call, "half", c10::ScalarType::Half); }
CaptureResult bind_to_bfloat16(BindCall& call) { return cast_method(call, "bfloat16", c10::ScalarType::BFloat16); }
CaptureResult bind_to_int(BindCall& call) { return cast_method(call, "int", c10::ScalarType::Int); }
CaptureResult bind_to_long(BindCall& call) { return cast_method(call, "long", c10::ScalarType::Long); }
CaptureResult bind_to_bool(BindCall& call) { return cast_method(call, "bool", c10::ScalarType::Bool); }
CaptureResult bind_to_short(BindCall& call) { return cast_method(call, "short", c10::ScalarType::Short); }
CaptureResult bind_to_char(BindCall& call) { return cast_method(call, "char", c10::ScalarType::Char); }
CaptureResult bind_to_byte(BindCall& call) { return cast_method(call, "byte", c10::ScalarType::Byte); }

CaptureResult bind_type_as(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "type_as(Tensor input, Tensor other)");
  return cast(call, a.tensor("input"), call.graph.meta(a.tensor("other")).dtype, std::nullopt, false, false);
}

CaptureResult bind_type_cast(BindCall& call) {
  FD_BIND_OR_RETURN(call, a, "type(Tensor input, Any dtype=None, bool non_blocking=False)");
  const CallArg& d = a.get("dtype");
  if (d.kind == CallArg::Kind::DType)
    return cast(call, a.tensor("input"), d.dtype, std::nullopt, a.boolean("non_blocking"), false);
  if (d.kind == CallArg::Kind::String) {
    // The legacy CPU tensor type names (strings only at the Python boundary).
    static const struct { const char* name; c10::ScalarType dtype; } kLegacy[] = {
        {"torch.FloatTensor", c10::ScalarType::Float},   {"torch.DoubleTensor", c10::ScalarType::Double},
        {"torch.HalfTensor", c10::ScalarType::Half},     {"torch.BFloat16Tensor", c10::ScalarType::BFloat16},
        {"torch.LongTensor", c10::ScalarType::Long},     {"torch.IntTensor", c10::ScalarType::Int},
        {"torch.ShortTensor", c10::ScalarType::Short},   {"torch.CharTensor", c10::ScalarType::Char},
        {"torch.ByteTensor", c10::ScalarType::Byte},     {"torch.BoolTensor", c10::ScalarType::Bool},
    };
    for (const auto& row : kLegacy)
      if (d.str == row.name) return cast(call, a.tensor("input"), row.dtype, std::nullopt, a.boolean("non_blocking"), false);
    return fail("type", "unsupported tensor type name '" + d.str + "'");
  }
  return fail("type", "type() without a dtype returns a string, which cannot be traced");
}

}  // namespace fastdyn::codegen
