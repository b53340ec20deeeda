// codegen/capture/capture_nn.cpp — binders of linear algebra (matmul, mm, bmm, addmm, baddbmm, outer,
// dot, F.linear) and torch.nn.functional ops (layer/rms/group/batch norm, dropout, embedding,
// conv1d/conv2d, pooling, interpolation, pad, normalize, mse_loss, cross_entropy). Attention is
// capture_attention.cpp's.
//
// These ops are extern calls (ATen kernels, often composite), so their rules state the shapes
// and the layouts eager returns for them, which the tests check case by case:
//   - matmul-like and norm/loss outputs are contiguous;
//   - conv, group/batch norm and pad keep a channels-last input channels-last;
//   - dropout in training keeps the input's layout; outside training it is the input itself;
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"

#include "runtime/errors.h"

#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

namespace fastdyn::codegen {

namespace {

using ST = c10::ScalarType;
using K = CallArg::Kind;
using Ints = std::vector<int64_t>;

std::string dims_str(const Ints& s) {
  std::string r;
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

TensorMeta contiguous_out(const BindCall& c, ST dt, c10::Device dev, Ints sizes, const std::vector<ValueId>& ins) {
  return contiguous_meta(dt, dev, std::move(sizes), any_requires_grad(c.graph, c.ctx, ins));
}

// ---- matmul family ----------------------------------------------------------------------------

// torch.matmul's shape rule: 1-d operands are promoted (and the added dim dropped afterwards),
// batch dims broadcast.
std::optional<std::string> matmul_shape(const std::string& op, const Ints& a, const Ints& b, Ints& out) {
  if (a.empty() || b.empty()) return op + ": both arguments to matmul need to be at least 1D";
  Ints a2 = a.size() == 1 ? Ints{1, a[0]} : a;
  Ints b2 = b.size() == 1 ? Ints{b[0], 1} : b;
  int64_t n = a2[a2.size() - 2], k = a2.back(), k2 = b2[b2.size() - 2], m = b2.back();
  if (k != k2)
    return op + ": mat1 and mat2 shapes cannot be multiplied (" + dims_str(a) + " and " + dims_str(b) + ")";
  auto batch = broadcast_shapes({Ints(a2.begin(), a2.end() - 2), Ints(b2.begin(), b2.end() - 2)});
  if (!batch) return op + ": batch dimensions of " + shape_str(a) + " and " + shape_str(b) + " do not broadcast";
  out = *batch;
  if (a.size() >= 2) out.push_back(n);
  if (b.size() >= 2) out.push_back(m);
  return std::nullopt;
}

CaptureResult record_matmul_like(BindCall& c, const std::string& op, OpId id, ValueId x, ValueId y,
                                 int64_t need_dim_x, int64_t need_dim_y) {
  const TensorMeta &a = c.graph.meta(x), &b = c.graph.meta(y);
  if (need_dim_x && (a.dim() != need_dim_x || b.dim() != need_dim_y))
    return CaptureResult::fail(op + ": expected " + std::to_string(need_dim_x) + "-d and " +
                               std::to_string(need_dim_y) + "-d tensors, got " + std::to_string(a.dim()) + "-d and " +
                               std::to_string(b.dim()) + "-d");
  if (id == OpId::bmm && a.sizes[0] != b.sizes[0])
    return CaptureResult::fail(op + ": batch sizes differ (" + std::to_string(a.sizes[0]) + " and " +
                               std::to_string(b.sizes[0]) + ")");
  if (auto err = same_dtype(c, op, {x, y})) return CaptureResult::fail(*err);
  Ints shape;
  if (auto err = matmul_shape(op, a.sizes, b.sizes, shape)) return CaptureResult::fail(*err);
  return tensor_result(
      emit1(c.graph, id, {Arg::of_value(x), Arg::of_value(y)}, contiguous_out(c, a.dtype, a.device, shape, {x, y})));
}

}  // namespace

CaptureResult bind_matmul(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "matmul(Tensor input, Tensor other)");
  return record_matmul_like(c, "matmul", OpId::matmul, a.tensor("input"), a.tensor("other"), 0, 0);
}

CaptureResult bind_mm(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "mm(Tensor input, Tensor mat2)");
  return record_matmul_like(c, "mm", OpId::mm, a.tensor("input"), a.tensor("mat2"), 2, 2);
}

CaptureResult bind_bmm(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "bmm(Tensor input, Tensor mat2)");
  return record_matmul_like(c, "bmm", OpId::bmm, a.tensor("input"), a.tensor("mat2"), 3, 3);
}

CaptureResult bind_dot(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "dot(Tensor input, Tensor tensor)");
  ValueId x = a.tensor("input"), y = a.tensor("tensor");
  if (c.graph.meta(x).sizes != c.graph.meta(y).sizes)
    return CaptureResult::fail("dot: inconsistent tensor sizes " + shape_str(c.graph.meta(x).sizes) + " and " +
                               shape_str(c.graph.meta(y).sizes));
  return record_matmul_like(c, "dot", OpId::dot, x, y, 1, 1);
}

CaptureResult bind_outer(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "outer(Tensor input, Tensor vec2)");
  ValueId x = a.tensor("input"), y = a.tensor("vec2");
  const TensorMeta &m = c.graph.meta(x), &n = c.graph.meta(y);
  if (m.dim() != 1 || n.dim() != 1) return CaptureResult::fail("outer: expected 1-d tensors");
  if (auto err = same_dtype(c, "outer", {x, y})) return CaptureResult::fail(*err);
  return tensor_result(emit1(c.graph, OpId::outer, {Arg::of_value(x), Arg::of_value(y)},
                             contiguous_out(c, m.dtype, m.device, {m.sizes[0], n.sizes[0]}, {x, y})));
}

namespace {
// addmm / baddbmm: beta * input + alpha * (mat1 @ mat2); input broadcasts to the product's shape.
CaptureResult record_addmm_like(BindCall& c, const Signature& sig, OpId id, int64_t dims) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  const std::string& op = sig.name();
  ValueId in = a.tensor("input"), x = a.tensor(dims == 2 ? "mat1" : "batch1"), y = a.tensor(dims == 2 ? "mat2" : "batch2");
  const TensorMeta &mx = c.graph.meta(x), &my = c.graph.meta(y);
  if (mx.dim() != dims || my.dim() != dims)
    return CaptureResult::fail(op + ": expected " + std::to_string(dims) + "-d matrices");
  if (auto err = same_dtype(c, op, {in, x, y})) return CaptureResult::fail(*err);
  Ints shape;
  if (auto err = matmul_shape(op, mx.sizes, my.sizes, shape)) return CaptureResult::fail(*err);
  if (dims == 3 && mx.sizes[0] != my.sizes[0]) return CaptureResult::fail(op + ": batch sizes differ");
  auto b = broadcast_shapes({c.graph.meta(in).sizes, shape});
  if (!b || *b != shape)
    return CaptureResult::fail(op + ": 'input' of shape " + shape_str(c.graph.meta(in).sizes) +
                               " does not broadcast to " + shape_str(shape));
  return tensor_result(emit1(c.graph, id,
                             {Arg::of_value(in), Arg::of_value(x), Arg::of_value(y), scalar_arg(a.get("beta")),
                              scalar_arg(a.get("alpha"))},
                             contiguous_out(c, mx.dtype, mx.device, shape, {in, x, y})));
}
}  // namespace

CaptureResult bind_addmm(BindCall& c) {
  static const Signature sig("addmm(Tensor input, Tensor mat1, Tensor mat2, *, Number beta=1, Number alpha=1)");
  return record_addmm_like(c, sig, OpId::addmm, 2);
}

CaptureResult bind_baddbmm(BindCall& c) {
  static const Signature sig(
      "baddbmm(Tensor input, Tensor batch1, Tensor batch2, *, Number beta=1, Number alpha=1)");
  return record_addmm_like(c, sig, OpId::baddbmm, 3);
}

CaptureResult bind_linear(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "linear(Tensor input, Tensor weight, Tensor? bias=None)");
  ValueId x = a.tensor("input"), w = a.tensor("weight");
  const TensorMeta &mx = c.graph.meta(x), &mw = c.graph.meta(w);
  std::vector<ValueId> ins{x, w};
  if (!a.is_none("bias")) ins.push_back(a.tensor("bias"));
  if (auto err = same_dtype(c, "linear", ins)) return CaptureResult::fail(*err);
  if (mx.dim() == 0 || mw.dim() == 0 || mw.dim() > 2) return CaptureResult::fail("linear: bad input/weight ranks");
  int64_t in_features = mw.sizes.back();
  if (mx.sizes.back() != in_features)
    return CaptureResult::fail("linear: mat1 and mat2 shapes cannot be multiplied (" + dims_str(mx.sizes) + " and " +
                               std::to_string(in_features) + "x" + std::to_string(mw.dim() == 2 ? mw.sizes[0] : 1) +
                               ")");
  Ints shape(mx.sizes.begin(), mx.sizes.end() - 1);
  if (mw.dim() == 2) shape.push_back(mw.sizes[0]);
  if (ins.size() == 3) {
    auto b = broadcast_shapes({c.graph.meta(ins[2]).sizes, shape});
    if (!b || *b != shape) return CaptureResult::fail("linear: 'bias' does not broadcast to the output shape");
  }
  return tensor_result(emit1(c.graph, OpId::linear, {Arg::of_value(x), Arg::of_value(w), const_arg(a.get("bias"))},
                             contiguous_out(c, mx.dtype, mx.device, shape, ins)));
}

// ---- normalisation ----------------------------------------------------------------------------

namespace {
std::optional<std::string> check_normalized_shape(const std::string& op, const TensorMeta& m, const Ints& ns) {
  bool ok = static_cast<int64_t>(ns.size()) <= m.dim() && !ns.empty();
  for (size_t i = 0; ok && i < ns.size(); ++i) ok = m.sizes[m.sizes.size() - ns.size() + i] == ns[i];
  if (!ok)
    return op + ": given normalized_shape=" + shape_str(ns) + ", expected input with shape [*, " +
           shape_str(ns).substr(1) + ", but got input of size " + shape_str(m.sizes);
  return std::nullopt;
}

std::optional<std::string> check_affine(const BindCall& c, const std::string& op, const BoundArgs& a,
                                        const char* name, const Ints& expect, std::vector<ValueId>& ins) {
  if (a.is_none(name)) return std::nullopt;
  ValueId v = a.tensor(name);
  if (c.graph.meta(v).sizes != expect)
    return op + ": '" + name + "' of shape " + shape_str(c.graph.meta(v).sizes) + " does not match " +
           shape_str(expect);
  ins.push_back(v);
  return std::nullopt;
}
}  // namespace

CaptureResult bind_layer_norm(BindCall& c) {
  static const Signature sig(
      "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  Ints ns = a.ints("normalized_shape");
  if (auto err = check_normalized_shape("layer_norm", m, ns)) return CaptureResult::fail(*err);
  std::vector<ValueId> ins{x};
  for (const char* p : {"weight", "bias"})
    if (auto err = check_affine(c, "layer_norm", a, p, ns, ins)) return CaptureResult::fail(*err);
  if (!is_floating(m.dtype)) return CaptureResult::fail("layer_norm: not implemented for '" + dtype_name(m.dtype) + "'");
  return tensor_result(emit1(c.graph, OpId::layer_norm,
                             {Arg::of_value(x), ints_arg(ns, a.sym_ints("normalized_shape")), const_arg(a.get("weight")), const_arg(a.get("bias")),
                              Arg::of_double(a.number("eps")), Arg::of_bool(true)},
                             contiguous_out(c, m.dtype, m.device, m.sizes, ins)));
}

CaptureResult bind_rms_norm(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None)");
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  Ints ns = a.ints("normalized_shape");
  if (auto err = check_normalized_shape("rms_norm", m, ns)) return CaptureResult::fail(*err);
  std::vector<ValueId> ins{x};
  if (auto err = check_affine(c, "rms_norm", a, "weight", ns, ins)) return CaptureResult::fail(*err);
  if (!is_floating(m.dtype)) return CaptureResult::fail("rms_norm: not implemented for '" + dtype_name(m.dtype) + "'");
  ST out = m.dtype;
  if (ins.size() == 2) {
    std::vector<DtypeOperand> d{{m.dtype, false, false}, {c.graph.meta(ins[1]).dtype, false, false}};
    out = result_type(d, c.ctx.default_dtype);
  }
  return tensor_result(emit1(c.graph, OpId::rms_norm,
                             {Arg::of_value(x), ints_arg(ns, a.sym_ints("normalized_shape")), const_arg(a.get("weight")), const_arg(a.get("eps"))},
                             contiguous_out(c, out, m.device, m.sizes, ins)));
}

CaptureResult bind_group_norm(BindCall& c) {
  static const Signature sig(
      "group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1e-05)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  int64_t g = a.integer("num_groups");
  if (m.dim() < 2) return CaptureResult::fail("group_norm: expected an input of at least 2 dims");
  if (g <= 0 || m.sizes[1] % g != 0)
    return CaptureResult::fail("group_norm: expected number of channels in input to be divisible by num_groups, but "
                               "got input of shape " + shape_str(m.sizes) + " and num_groups=" + std::to_string(g));
  std::vector<ValueId> ins{x};
  for (const char* p : {"weight", "bias"})
    if (auto err = check_affine(c, "group_norm", a, p, {m.sizes[1]}, ins)) return CaptureResult::fail(*err);
  TensorMeta out = make_meta(m.dtype, m.device, m.sizes, suggested_format_strides(m, m.sizes),
                             any_requires_grad(c.graph, c.ctx, ins));
  return tensor_result(emit1(c.graph, OpId::group_norm,
                             {Arg::of_value(x), Arg::of_int(g), const_arg(a.get("weight")), const_arg(a.get("bias")),
                              Arg::of_double(a.number("eps")), Arg::of_bool(true)},
                             out));
}

namespace {
// Batch norm outside training, as eager's CPU kernel computes it: per channel
// alpha = weight * (1 / sqrt(running_var + eps)) and beta = bias - running_mean * alpha, then
// input * alpha + beta. Recorded as those ops, the per-point part fuses with what surrounds it
// (the ReLU and residual add after a convolution) instead of a pass of its own on ATen.
// (Used where the input is float or double like its parameters, and its layout is the one eager
// gives the output, so that the pointwise ops' output strides are eager's too.)
CaptureResult batch_norm_inference(BindCall& c, const BoundArgs& a, ValueId x) {
  const TensorMeta m = c.graph.meta(x);
  CaptureResult r;
  r.ok = true;
  auto op = [&](Family f, std::vector<CallArg> args) {  // after a failure, nothing more is recorded
    if (!r.ok) return CallArg::none();
    r = record_call(c.graph, c.ctx, f, args, {});
    if (!r.ok) r.reason = "batch_norm: " + r.reason;
    return r.ok ? CallArg::tensor(r.values.at(0)) : CallArg::none();
  };
  CallArg alpha = op(Family::reciprocal, {op(Family::sqrt, {op(Family::add, {a.get("running_var"), CallArg::of_double(a.number("eps"))})})});
  if (!a.is_none("weight")) alpha = op(Family::mul, {alpha, a.get("weight")});
  CallArg shift = op(Family::mul, {a.get("running_mean"), alpha});
  CallArg beta = a.is_none("bias") ? op(Family::rsub, {shift, CallArg::of_int(0)}) : op(Family::sub, {a.get("bias"), shift});
  std::vector<int64_t> per_channel(m.sizes.size() - 1, 1);  // [C, 1, ...]: channels along dim 1
  per_channel[0] = m.sizes[1];
  CallArg y = op(Family::mul, {CallArg::tensor(x), op(Family::view, {alpha, CallArg::of_ints(per_channel)})});
  op(Family::add, {y, op(Family::view, {beta, CallArg::of_ints(per_channel)})});
  return r;
}
}  // namespace

CaptureResult bind_batch_norm(BindCall& c) {
  static const Signature sig(
      "batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, Tensor? weight=None, Tensor? bias=None, "
      "bool training=False, float momentum=0.1, float eps=1e-05)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  if (m.dim() < 2) return CaptureResult::fail("batch_norm: expected an input of at least 2 dims");
  bool training = a.boolean("training");
  if (!training && (a.is_none("running_mean") || a.is_none("running_var")))
    return CaptureResult::fail("batch_norm: running_mean and running_var must be defined in evaluation mode");
  std::vector<ValueId> ins{x};
  for (const char* p : {"weight", "bias", "running_mean", "running_var"})
    if (auto err = check_affine(c, "batch_norm", a, p, {m.sizes[1]}, ins)) return CaptureResult::fail(*err);
  TensorMeta out = make_meta(m.dtype, m.device, m.sizes, suggested_format_strides(m, m.sizes),
                             any_requires_grad(c.graph, c.ctx, {x, a.is_none("weight") ? -1 : a.tensor("weight"),
                                                                a.is_none("bias") ? -1 : a.tensor("bias")}));
  if (!training && !out.requires_grad) {
    bool same_dtype = is_floating(m.dtype) && m.dtype != ST::BFloat16 && m.dtype != ST::Half;
    for (size_t i = 1; i < ins.size(); ++i) same_dtype = same_dtype && c.graph.meta(ins[i]).dtype == m.dtype;
    if (same_dtype && out.strides == m.strides) return batch_norm_inference(c, a, x);
  }
  return tensor_result(emit1(c.graph, OpId::batch_norm,
                             {Arg::of_value(x), const_arg(a.get("weight")), const_arg(a.get("bias")),
                              const_arg(a.get("running_mean")), const_arg(a.get("running_var")), Arg::of_bool(training),
                              Arg::of_double(a.number("momentum")), Arg::of_double(a.number("eps")),
                              Arg::of_bool(true)},
                             out));
}

// F.normalize is input / input.norm(p, dim, keepdim=True).clamp_min(eps).expand_as(input) in
// eager; the same ops are recorded so values match bit for bit.
CaptureResult bind_normalize(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "normalize(Tensor input, Number p=2.0, int dim=1, float eps=1e-12)");
  const CallArg& x = a.get("input");
  const TensorMeta m = c.graph.meta(x.value);
  CaptureResult n = record_call(c.graph, c.ctx, Family::vector_norm, {x, a.get("p"), CallArg::of_ints({a.integer("dim")})},
                                {{"keepdim", CallArg::of_bool(true)}});
  if (!n.ok) return CaptureResult::fail("normalize: " + n.reason);
  TensorMeta nm = c.graph.meta(n.values[0]);
  TensorMeta cm = nm;
  ValueId clamped = emit1(c.graph, OpId::clamp_min, {Arg::of_value(n.values[0]), Arg::of_double(a.number("eps"))}, cm);
  TensorMeta em = cm;
  em.sizes = m.sizes;
  for (size_t i = 0; i < em.sizes.size(); ++i)
    if (cm.sizes[i] != em.sizes[i]) em.strides[i] = 0;
  ValueId expanded =
      emit1(c.graph, OpId::expand, {Arg::of_value(clamped), Arg::of_ints(m.sizes), Arg::of_bool(false)}, em);
  CaptureResult r = record_call(c.graph, c.ctx, Family::div, {x, CallArg::tensor(expanded)}, {});
  if (!r.ok) return CaptureResult::fail("normalize: " + r.reason);
  return r;
}

// ---- dropout, embedding, pad ------------------------------------------------------------------

CaptureResult bind_dropout(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "dropout(Tensor input, float p=0.5, bool training=True, bool inplace=False)");
  ValueId x = a.tensor("input");
  double p = a.number("p");
  if (p < 0.0 || p > 1.0)
    return CaptureResult::fail("dropout: dropout probability has to be between 0 and 1, but got " + std::to_string(p));
  // NB: eager returns the input itself (no copy, no write: inplace=True too) outside training or
  // with p == 0.
  if (!a.boolean("training") || p == 0.0) return tensor_result(x);
  if (a.boolean("inplace")) return CaptureResult::fail("dropout: inplace=True in training is not supported");
  const TensorMeta& m = c.graph.meta(x);
  if (!is_floating(m.dtype)) return CaptureResult::fail("dropout: expected a floating point input");
  TensorMeta out = make_meta(m.dtype, m.device, m.sizes, preserve_format_strides(m), any_requires_grad(c.graph, c.ctx, {x}));
  return tensor_result(emit1(c.graph, OpId::dropout, {Arg::of_value(x), Arg::of_double(p), Arg::of_bool(true)}, out));
}

CaptureResult bind_embedding(BindCall& c) {
  static const Signature sig(
      "embedding(Tensor input, Tensor weight, int? padding_idx=None, float? max_norm=None, float norm_type=2.0, bool "
      "scale_grad_by_freq=False, bool sparse=False)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  ValueId idx = a.tensor("input"), w = a.tensor("weight");
  const TensorMeta &mi = c.graph.meta(idx), &mw = c.graph.meta(w);
  if (!a.is_none("max_norm")) return CaptureResult::fail("embedding: 'max_norm' (renormalises weight in place) is not supported");
  if (mi.dtype != ST::Long && mi.dtype != ST::Int)
    return CaptureResult::fail("embedding: expected 'input' of dtype Long or Int, got " + dtype_name(mi.dtype));
  if (mw.dim() != 2) return CaptureResult::fail("embedding: 'weight' must be 2-D");
  int64_t pad = -1;
  if (!a.is_none("padding_idx")) {
    pad = a.integer("padding_idx");
    if (pad >= mw.sizes[0] || pad < -mw.sizes[0])
      return CaptureResult::fail("embedding: padding_idx must be within num_embeddings");
    if (pad < 0) pad += mw.sizes[0];
  }
  Ints shape = mi.sizes;
  shape.push_back(mw.sizes[1]);
  return tensor_result(emit1(c.graph, OpId::embedding,
                             {Arg::of_value(w), Arg::of_value(idx), Arg::of_int(pad),
                              Arg::of_bool(a.boolean("scale_grad_by_freq")), Arg::of_bool(a.boolean("sparse"))},
                             contiguous_out(c, mw.dtype, mw.device, shape, {w})));
}

CaptureResult bind_pad(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "pad(Tensor input, int[] pad, str mode='constant', float? value=None)");
  ValueId x = a.tensor("input");
  const TensorMeta& m = c.graph.meta(x);
  Ints pad = a.ints("pad");
  if (a.str("mode") != "constant") return CaptureResult::fail("pad: mode '" + a.str("mode") + "' is not supported");
  if (pad.size() % 2 != 0 || static_cast<int64_t>(pad.size() / 2) > m.dim())
    return CaptureResult::fail("pad: padding length must be even and at most twice the input's dims, got " +
                               std::to_string(pad.size()));
  Ints shape = m.sizes;
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    int64_t& s = shape[shape.size() - 1 - i];
    s += pad[2 * i] + pad[2 * i + 1];
    if (s < 0) return CaptureResult::fail("pad: resulting padded dimension " + std::to_string(shape.size() - 1 - i) +
                                          " would have negative size");
  }
  TensorMeta out =
      make_meta(m.dtype, m.device, shape, suggested_format_strides(m, shape), any_requires_grad(c.graph, c.ctx, {x}));
  return tensor_result(emit1(c.graph, OpId::pad,
                             {Arg::of_value(x), Arg::of_ints(pad), Arg::of_string("constant"), const_arg(a.get("value"))},
                             out));
}

// ---- convolution ------------------------------------------------------------------------------

namespace {
CaptureResult record_conv(BindCall& c, const Signature& sig, int64_t nd, OpId op, OpId op_padding) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  const std::string& name = sig.name();
  ValueId x = a.tensor("input"), w = a.tensor("weight");
  const TensorMeta &mx = c.graph.meta(x), &mw = c.graph.meta(w);
  std::vector<ValueId> ins{x, w};
  if (!a.is_none("bias")) ins.push_back(a.tensor("bias"));
  if (auto err = same_dtype(c, name, ins)) return CaptureResult::fail(*err);
  bool batched = mx.dim() == nd + 2;
  if (!batched && mx.dim() != nd + 1)
    return CaptureResult::fail(name + ": expected " + std::to_string(nd + 1) + "-D (unbatched) or " +
                               std::to_string(nd + 2) + "-D (batched) input, but got input of size " +
                               shape_str(mx.sizes));
  if (mw.dim() != nd + 2) return CaptureResult::fail(name + ": 'weight' must be " + std::to_string(nd + 2) + "-D");
  Ints in = batched ? mx.sizes : Ints{1};
  if (!batched) in.insert(in.end(), mx.sizes.begin(), mx.sizes.end());
  int64_t groups = a.integer("groups");
  if (groups <= 0 || in[1] != mw.sizes[1] * groups || mw.sizes[0] % groups != 0)
    return CaptureResult::fail(name + ": expected input " + shape_str(mx.sizes) + " to have " +
                               std::to_string(mw.sizes[1] * groups) + " channels for weight " + shape_str(mw.sizes) +
                               " and groups=" + std::to_string(groups));
  auto expand = [&](const char* p) {
    Ints v = a.ints(p);
    if (v.size() == 1) v.assign(static_cast<size_t>(nd), v[0]);
    return v;
  };
  Ints stride = expand("stride"), dilation = expand("dilation");
  const CallArg& pad_arg = a.get("padding");
  Ints padding;
  bool same = false;
  if (pad_arg.kind == K::String) {
    if (pad_arg.str == "same") same = true;
    else if (pad_arg.str != "valid")
      return CaptureResult::fail(name + ": invalid padding string '" + pad_arg.str + "'");
    padding.assign(static_cast<size_t>(nd), 0);
    if (same)
      for (int64_t s : stride)
        if (s != 1) return CaptureResult::fail(name + ": padding='same' is not supported for strided convolutions");
  } else {
    padding = pad_arg.kind == K::Int ? Ints(static_cast<size_t>(nd), pad_arg.i) : pad_arg.ints;
  }
  if (static_cast<int64_t>(stride.size()) != nd || static_cast<int64_t>(padding.size()) != nd ||
      static_cast<int64_t>(dilation.size()) != nd)
    return CaptureResult::fail(name + ": stride/padding/dilation must have " + std::to_string(nd) + " elements");
  Ints shape{in[0], mw.sizes[0]};
  for (int64_t i = 0; i < nd; ++i) {
    int64_t k = dilation[i] * (mw.sizes[2 + i] - 1) + 1;
    int64_t o = same ? in[2 + i] : (in[2 + i] + 2 * padding[i] - k) / stride[i] + 1;
    if (o <= 0 || (!same && in[2 + i] + 2 * padding[i] < k))
      return CaptureResult::fail(name + ": kernel size can't be greater than actual input size");
    shape.push_back(o);
  }
  TensorMeta out;
  bool rg = any_requires_grad(c.graph, c.ctx, ins);
  if (!batched) {
    shape.erase(shape.begin());
    out = contiguous_meta(mx.dtype, mx.device, shape, rg);
  } else {
    out = make_meta(mx.dtype, mx.device, shape, suggested_format_strides(mx, shape), rg);
  }
  std::vector<Arg> args{Arg::of_value(x), Arg::of_value(w), const_arg(a.get("bias")), Arg::of_ints(stride)};
  args.push_back(pad_arg.kind == K::String ? Arg::of_string(pad_arg.str) : Arg::of_ints(padding));
  args.push_back(Arg::of_ints(dilation));
  args.push_back(Arg::of_int(groups));
  return tensor_result(emit1(c.graph, pad_arg.kind == K::String ? op_padding : op, std::move(args), out));
}
}  // namespace

CaptureResult bind_conv1d(BindCall& c) {
  static const Signature sig(
      "conv1d(Tensor input, Tensor weight, Tensor? bias=None, int[] stride=1, Any padding=0, int[] dilation=1, int "
      "groups=1)");
  return record_conv(c, sig, 1, OpId::conv1d, OpId::conv1d_padding);
}

CaptureResult bind_conv2d(BindCall& c) {
  static const Signature sig(
      "conv2d(Tensor input, Tensor weight, Tensor? bias=None, int[] stride=1, Any padding=0, int[] dilation=1, int "
      "groups=1)");
  return record_conv(c, sig, 2, OpId::conv2d, OpId::conv2d_padding);
}

// ---- pooling ----------------------------------------------------------------------------------

namespace {

// ATen's pooling_output_shape: the number of windows along a dim (ceil_mode: a last, partial
// window counts if it starts inside the input or its left padding).
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// The output of a pooling of x ([C, *spatial] or [N, C, *spatial]) to `spatial`: a 2-d pooling
// keeps the input's memory format (channels-last stays channels-last), as ATen allocates it; a
// 1-d pooling (ATen's 2-d kernel on an unsqueezed view, squeezed back) is contiguous.
TensorMeta pooled_meta(const BindCall& c, ValueId x, const Ints& spatial) {
  const TensorMeta& mx = c.graph.meta(x);
  Ints shape(mx.sizes.begin(), mx.sizes.end() - static_cast<std::ptrdiff_t>(spatial.size()));
  shape.insert(shape.end(), spatial.begin(), spatial.end());
  const bool rg = any_requires_grad(c.graph, c.ctx, {x});
  return mx.dim() == 4 && spatial.size() == 2 ? make_meta(mx.dtype, mx.device, shape, suggested_format_strides(mx, shape), rg)
                                              : contiguous_meta(mx.dtype, mx.device, shape, rg);
}

// `nd` spatial dims (1 or 2) after a channel dim and an optional batch dim.
std::optional<std::string> check_pool_input(const std::string& name, const TensorMeta& mx, int64_t nd = 2) {
  if (mx.dim() != nd + 1 && mx.dim() != nd + 2)
    return name + ": expected a " + std::to_string(nd + 1) + "D or " + std::to_string(nd + 2) +
           "D (batch mode) tensor, got input of size " + shape_str(mx.sizes);
  if (!is_floating(mx.dtype)) return name + ": not implemented for '" + dtype_name(mx.dtype) + "'";
  for (size_t d = mx.sizes.size() - static_cast<size_t>(nd); d < mx.sizes.size(); ++d)
    if (mx.sizes[d] <= 0) return name + ": empty spatial input " + shape_str(mx.sizes);
  return std::nullopt;
}

// max_pool2d and avg_pool2d: kernel_size, stride (empty: the kernel), padding (and dilation) as
// one int or two; ATen's argument checks, as errors that leave the call to eager.
CaptureResult record_pool(BindCall& c, const Signature& sig, OpId op, bool max, int64_t nd) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  const std::string& name = sig.name();
  const ValueId x = a.tensor("input");
  const TensorMeta& mx = c.graph.meta(x);
  if (auto err = check_pool_input(name, mx, nd)) return CaptureResult::fail(*err);
  const auto n = static_cast<size_t>(nd);
  auto pair = [&](const char* p, Ints fallback) -> std::optional<Ints> {
    Ints v = a.ints(p);
    if (v.empty()) v = std::move(fallback);
    if (v.size() == 1) v.assign(n, v[0]);
    if (v.size() != n) return std::nullopt;
    return v;
  };
  const std::optional<Ints> k = pair("kernel_size", {});
  if (!k) return CaptureResult::fail(name + ": kernel_size must be one int or " + std::to_string(nd));
  const std::optional<Ints> stride = pair("stride", *k), padding = pair("padding", {0});
  const std::optional<Ints> dilation = max ? pair("dilation", {1}) : std::optional<Ints>(Ints(n, 1));
  if (!stride || !padding || !dilation) return CaptureResult::fail(name + ": stride, padding and dilation must be one int or " + std::to_string(nd));
  const bool ceil_mode = a.boolean("ceil_mode");
  Ints out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t kk = (*k)[i], s = (*stride)[i], p = (*padding)[i], d = (*dilation)[i];
    if (kk <= 0 || s <= 0 || d <= 0 || p < 0) return CaptureResult::fail(name + ": kernel size, stride and dilation must be positive, padding non-negative");
    if (p > (max ? ((kk - 1) * d + 1) / 2 : kk / 2)) return CaptureResult::fail(name + ": pad should be at most half of effective kernel size");
    out[i] = pooled_size(mx.sizes[mx.sizes.size() - n + i], kk, p, s, d, ceil_mode);
    if (out[i] < 1) return CaptureResult::fail(name + ": output size is too small");
  }
  std::vector<Arg> args{Arg::of_value(x), Arg::of_ints(*k), Arg::of_ints(*stride), Arg::of_ints(*padding)};
  if (max) {
    args.push_back(Arg::of_ints(*dilation));
    args.push_back(Arg::of_bool(ceil_mode));
  } else {
    args.push_back(Arg::of_bool(ceil_mode));
    args.push_back(Arg::of_bool(a.boolean("count_include_pad")));
    if (nd == 2) args.push_back(const_arg(a.get("divisor_override")));
  }
  return tensor_result(emit1(c.graph, op, std::move(args), pooled_meta(c, x, out)));
}

}  // namespace

CaptureResult bind_max_pool2d(BindCall& c) {
  static const Signature sig(
      "max_pool2d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, int[] dilation=1, bool ceil_mode=False)");
  return record_pool(c, sig, OpId::max_pool2d, true, 2);
}

CaptureResult bind_avg_pool2d(BindCall& c) {
  static const Signature sig(
      "avg_pool2d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, bool ceil_mode=False, bool "
      "count_include_pad=True, int? divisor_override=None)");
  return record_pool(c, sig, OpId::avg_pool2d, false, 2);
}

namespace {
// adaptive_{avg,max}_pool{1,2}d(input, output_size): one int per spatial dim (or one for all);
// max pooling also returns the int64 indices, in the values' layout.
CaptureResult record_adaptive_pool(BindCall& c, const Signature& sig, OpId op, int64_t nd, bool with_indices) {
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  const std::string& name = sig.name();
  const ValueId x = a.tensor("input");
  if (auto err = check_pool_input(name, c.graph.meta(x), nd)) return CaptureResult::fail(*err);
  Ints size = a.ints("output_size");
  if (size.size() == 1) size.assign(static_cast<size_t>(nd), size[0]);
  bool valid = size.size() == static_cast<size_t>(nd);
  for (int64_t s : size) valid = valid && s >= 0;
  if (!valid) return CaptureResult::fail(name + ": output_size must be " + std::to_string(nd) + " non-negative int(s) or one");
  const TensorMeta values = pooled_meta(c, x, size);
  std::vector<Arg> args{Arg::of_value(x), Arg::of_ints(size)};
  if (!with_indices) return tensor_result(emit1(c.graph, op, std::move(args), values));
  TensorMeta indices = values;
  indices.dtype = ST::Long;
  indices.requires_grad = false;
  return tuple_result(emit(c.graph, op, std::move(args), {values, indices}));
}
}  // namespace

CaptureResult bind_adaptive_avg_pool2d(BindCall& c) {
  static const Signature sig("adaptive_avg_pool2d(Tensor input, int[] output_size)");
  return record_adaptive_pool(c, sig, OpId::adaptive_avg_pool2d, 2, false);
}

CaptureResult bind_max_pool1d(BindCall& c) {
  static const Signature sig(
      "max_pool1d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, int[] dilation=1, bool ceil_mode=False)");
  return record_pool(c, sig, OpId::max_pool1d, true, 1);
}

CaptureResult bind_avg_pool1d(BindCall& c) {
  static const Signature sig(
      "avg_pool1d(Tensor input, int[] kernel_size, int[] stride=[], int[] padding=0, bool ceil_mode=False, bool "
      "count_include_pad=True)");
  return record_pool(c, sig, OpId::avg_pool1d, false, 1);
}

namespace {
// torch._C._nn.upsample_*(input, output_size, [align_corners,] scale_factors), as F.interpolate
// calls them: `nd` spatial dims after batch and channels; output_size, or one scale per spatial
// dim giving floor(size * scale) (ATen's compute_output_size). Recorded as the op with the
// output size and the scales (ATen's own next step), so values match eager's.
CaptureResult record_upsample(BindCall& c, OpId op, int64_t nd, bool linear) {
  static const Signature plain("upsample(Tensor input, int[]? output_size, Any scale_factors)");
  static const Signature aligned("upsample(Tensor input, int[]? output_size, bool align_corners, Any scale_factors)");
  BoundArgs a;
  if (auto err = (linear ? aligned : plain).bind(c, a)) return CaptureResult::fail(*err);
  const std::string name = op_info(op).aten;
  const ValueId x = a.tensor("input");
  const TensorMeta& mx = c.graph.meta(x);
  const auto n = static_cast<size_t>(nd);
  if (mx.dim() != nd + 2) return CaptureResult::fail(name + ": expected a " + std::to_string(nd + 2) + "-D input, got " + shape_str(mx.sizes));
  if (!is_floating(mx.dtype)) return CaptureResult::fail(name + ": not implemented for '" + dtype_name(mx.dtype) + "'");
  if (mx.dim() == 5 && !is_contiguous(mx)) return CaptureResult::fail(name + ": a 5-D input that is not contiguous");
  const CallArg& sf = a.get("scale_factors");
  std::vector<double> scales;
  if (sf.kind == CallArg::Kind::IntList) {
    for (int64_t s : sf.ints) scales.push_back(static_cast<double>(s));
  } else if (sf.kind == CallArg::Kind::Tuple) {
    for (const CallArg& s : sf.items) {
      if (s.kind == CallArg::Kind::Double) scales.push_back(s.d);
      else if (s.kind == CallArg::Kind::Int) scales.push_back(static_cast<double>(s.i));
      else return CaptureResult::fail(name + ": scale_factors must be numbers");
    }
  } else if (sf.kind == CallArg::Kind::Double) {
    scales.assign(n, sf.d);
  } else if (sf.kind != CallArg::Kind::None) {
    return CaptureResult::fail(name + ": scale_factors must be a list of numbers or None");
  }
  const bool has_size = !a.is_none("output_size");
  if (has_size == !scales.empty()) return CaptureResult::fail(name + ": must specify exactly one of output_size and scale_factors");
  Ints size;
  if (has_size) {
    size = a.ints("output_size");
    if (size.size() != n) return CaptureResult::fail(name + ": output_size must have " + std::to_string(nd) + " elements");
  } else {
    if (scales.size() != n) return CaptureResult::fail(name + ": scale_factors must have " + std::to_string(nd) + " elements");
    for (size_t i = 0; i < n; ++i)
      size.push_back(static_cast<int64_t>(std::floor(static_cast<double>(mx.sizes[2 + i]) * scales[i])));
  }
  for (size_t i = 0; i < n; ++i)
    if (size[i] <= 0 || mx.sizes[2 + i] <= 0)
      return CaptureResult::fail(name + ": input and output sizes should be greater than 0, got input " + shape_str(mx.sizes) +
                                 " and output " + shape_str(size));
  std::vector<Arg> args{Arg::of_value(x), Arg::of_ints(size)};
  if (linear) args.push_back(Arg::of_bool(a.boolean("align_corners")));
  for (size_t i = 0; i < n; ++i) args.push_back(scales.empty() ? Arg::none() : Arg::of_double(scales[i]));
  return tensor_result(emit1(c.graph, op, std::move(args), pooled_meta(c, x, size)));
}
}  // namespace

CaptureResult bind_upsample_nearest1d(BindCall& c) { return record_upsample(c, OpId::upsample_nearest1d, 1, false); }
CaptureResult bind_upsample_nearest2d(BindCall& c) { return record_upsample(c, OpId::upsample_nearest2d, 2, false); }
CaptureResult bind_upsample_nearest3d(BindCall& c) { return record_upsample(c, OpId::upsample_nearest3d, 3, false); }
CaptureResult bind__upsample_nearest_exact1d(BindCall& c) { return record_upsample(c, OpId::_upsample_nearest_exact1d, 1, false); }
CaptureResult bind__upsample_nearest_exact2d(BindCall& c) { return record_upsample(c, OpId::_upsample_nearest_exact2d, 2, false); }
CaptureResult bind__upsample_nearest_exact3d(BindCall& c) { return record_upsample(c, OpId::_upsample_nearest_exact3d, 3, false); }
CaptureResult bind_upsample_linear1d(BindCall& c) { return record_upsample(c, OpId::upsample_linear1d, 1, true); }
CaptureResult bind_upsample_bilinear2d(BindCall& c) { return record_upsample(c, OpId::upsample_bilinear2d, 2, true); }
CaptureResult bind_upsample_bicubic2d(BindCall& c) { return record_upsample(c, OpId::upsample_bicubic2d, 2, true); }
CaptureResult bind_upsample_trilinear3d(BindCall& c) { return record_upsample(c, OpId::upsample_trilinear3d, 3, true); }

CaptureResult bind_adaptive_avg_pool1d(BindCall& c) {
  static const Signature sig("adaptive_avg_pool1d(Tensor input, int[] output_size)");
  return record_adaptive_pool(c, sig, OpId::adaptive_avg_pool1d, 1, false);
}

CaptureResult bind_adaptive_max_pool2d(BindCall& c) {
  static const Signature sig("adaptive_max_pool2d(Tensor input, int[] output_size)");
  return record_adaptive_pool(c, sig, OpId::adaptive_max_pool2d, 2, true);
}

// ---- losses -----------------------------------------------------------------------------------

namespace {
std::optional<int64_t> reduction_enum(const std::string& r) {
  if (r == "none") return 0;
  if (r == "mean") return 1;
  if (r == "sum") return 2;
  return std::nullopt;
}
}  // namespace

CaptureResult bind_mse_loss(BindCall& c) {
  static const Signature sig(
      "mse_loss(Tensor input, Tensor target, Any size_average=None, Any reduce=None, str reduction='mean')");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  if (!a.is_none("size_average") || !a.is_none("reduce"))
    return CaptureResult::fail("mse_loss: the deprecated 'size_average'/'reduce' arguments are not supported");
  auto red = reduction_enum(a.str("reduction"));
  if (!red) return CaptureResult::fail("mse_loss: " + a.str("reduction") + " is not a valid value for reduction");
  ValueId x = a.tensor("input"), t = a.tensor("target");
  const TensorMeta &mx = c.graph.meta(x), &mt = c.graph.meta(t);
  if (mx.sizes != mt.sizes)
    return CaptureResult::fail("mse_loss: input and target of different shapes (broadcasting) is not supported");
  if (!is_floating(mx.dtype) || mx.dtype != mt.dtype)
    return CaptureResult::fail("mse_loss: expected floating input and target of the same dtype");
  TensorMeta out;
  bool rg = any_requires_grad(c.graph, c.ctx, {x, t});
  if (*red == 0) out = make_meta(mx.dtype, mx.device, mx.sizes, tensor_iterator_strides(mx.sizes, {&mx, &mt}), rg);
  else out = contiguous_meta(mx.dtype, mx.device, {}, rg);
  return tensor_result(
      emit1(c.graph, OpId::mse_loss, {Arg::of_value(x), Arg::of_value(t), Arg::of_int(*red)}, out));
}

CaptureResult bind_cross_entropy(BindCall& c) {
  static const Signature sig(
      "cross_entropy(Tensor input, Tensor target, Tensor? weight=None, Any size_average=None, int ignore_index=-100, "
      "Any reduce=None, str reduction='mean', float label_smoothing=0.0)");
  BoundArgs a;
  if (auto err = sig.bind(c, a)) return CaptureResult::fail(*err);
  if (!a.is_none("size_average") || !a.is_none("reduce"))
    return CaptureResult::fail("cross_entropy: the deprecated 'size_average'/'reduce' arguments are not supported");
  auto red = reduction_enum(a.str("reduction"));
  if (!red) return CaptureResult::fail("cross_entropy: " + a.str("reduction") + " is not a valid value for reduction");
  ValueId x = a.tensor("input"), t = a.tensor("target");
  const TensorMeta &mx = c.graph.meta(x), &mt = c.graph.meta(t);
  if (!is_floating(mx.dtype)) return CaptureResult::fail("cross_entropy: expected a floating point input");
  if (mx.dim() < 1) return CaptureResult::fail("cross_entropy: input must have at least 1 dim");
  Ints no_class = mx.sizes;
  if (mx.dim() >= 2) no_class.erase(no_class.begin() + 1);
  else no_class.clear();
  bool probs = is_floating(mt.dtype);
  if (probs ? mt.sizes != mx.sizes : (mt.dtype != ST::Long || mt.sizes != no_class))
    return CaptureResult::fail("cross_entropy: target of shape " + shape_str(mt.sizes) + " and dtype " +
                               dtype_name(mt.dtype) + " does not fit input of shape " + shape_str(mx.sizes));
  std::vector<ValueId> ins{x, t};
  if (!a.is_none("weight")) ins.push_back(a.tensor("weight"));
  TensorMeta out =
      contiguous_meta(mx.dtype, mx.device, *red == 0 ? no_class : Ints{}, any_requires_grad(c.graph, c.ctx, ins));
  return tensor_result(emit1(c.graph, OpId::cross_entropy_loss,
                             {Arg::of_value(x), Arg::of_value(t), const_arg(a.get("weight")), Arg::of_int(*red),
                              Arg::of_int(a.integer("ignore_index")), Arg::of_double(a.number("label_smoothing"))},
                             out));
}

}  // namespace fastdyn::codegen

// ---- einsum -----------------------------------------------------------------------------------

namespace fastdyn::codegen {

// torch.einsum over two operands without repeated subscripts in one operand (those are diagonals:
// views whose layout we do not model). Such contractions run as one bmm, whose result eager
// returns contiguous in the requested output order.
namespace {

// einsum of one operand, as eager computes it: the operand permuted to (output dims, then the
// summed ones), then summed over the trailing summed dims, whose result is contiguous; with none
// to sum, the permuted view itself (it aliases the operand, as eager's does).
CaptureResult einsum_one(BindCall& c, const std::string& eq, ValueId op) {
  const TensorMeta m = c.graph.meta(op);
  const size_t arrow = eq.find("->");
  const std::string term = eq.substr(0, arrow);
  const size_t ell = term.find("...");
  const int64_t letters = static_cast<int64_t>(term.size()) - (ell == std::string::npos ? 0 : 3);
  const int64_t n_ell = m.dim() - letters;
  if (n_ell < 0 || (ell == std::string::npos && n_ell != 0))
    return CaptureResult::fail("einsum: subscripts '" + term + "' do not fit the operand of shape " + shape_str(m.sizes));
  std::map<char, int64_t> dim_of;  // label -> input dim
  for (size_t j = 0, d = 0; j < term.size(); ++j) {
    if (term.compare(j, 3, "...") == 0) { d += static_cast<size_t>(n_ell); j += 2; continue; }
    const char ch = term[j];
    if (!std::isalpha(static_cast<unsigned char>(ch))) return CaptureResult::fail(std::string("einsum: invalid subscript '") + ch + "'");
    if (!dim_of.emplace(ch, static_cast<int64_t>(d++)).second)
      return CaptureResult::fail(std::string("einsum: repeated subscript '") + ch + "' in one operand (a diagonal) is not supported");
  }
  std::string out;
  if (arrow != std::string::npos) {
    out = eq.substr(arrow + 2);
  } else {  // implicit: '...' first, then every label (each seen once), alphabetically
    out = ell == std::string::npos ? "" : "...";
    for (const auto& kv : dim_of) out += kv.first;
  }
  std::vector<int64_t> perm;
  std::vector<bool> used(static_cast<size_t>(m.dim()), false);
  for (size_t j = 0; j < out.size(); ++j) {
    if (out.compare(j, 3, "...") == 0) {
      if (ell == std::string::npos) return CaptureResult::fail("einsum: '...' in the output but not in the operand");
      for (int64_t e = 0; e < n_ell; ++e) perm.push_back(static_cast<int64_t>(ell) + e);
      j += 2;
      continue;
    }
    auto it = dim_of.find(out[j]);
    if (it == dim_of.end() || used[static_cast<size_t>(it->second)])
      return CaptureResult::fail(std::string("einsum: output subscript '") + out[j] + "' must appear once in the output and in the operand");
    perm.push_back(it->second);
    used[static_cast<size_t>(it->second)] = true;
  }
  for (int64_t e : perm) used[static_cast<size_t>(e)] = true;
  const int64_t n_out = static_cast<int64_t>(perm.size());
  for (int64_t d = 0; d < m.dim(); ++d)
    if (!used[static_cast<size_t>(d)]) perm.push_back(d);
  CaptureResult p = record_call(c.graph, c.ctx, Family::permute, {CallArg::tensor(op), CallArg::of_ints(perm)}, {});
  if (!p.ok || n_out == m.dim()) return p;
  std::vector<int64_t> summed;
  for (int64_t d = n_out; d < m.dim(); ++d) summed.push_back(d);
  return record_call(c.graph, c.ctx, Family::sum, {CallArg::tensor(p.values[0]), CallArg::of_ints(summed)}, {});
}

}  // namespace

CaptureResult bind_einsum(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "einsum(str equation, Tensor[] *operands)");
  std::string eq;
  for (char ch : a.str("equation"))
    if (ch != ' ') eq += ch;
  std::vector<ValueId> ops = a.tensors("operands");
  if (ops.size() == 1 && eq.find(',') == std::string::npos) return einsum_one(c, eq, ops[0]);
  // NB: three or more may come back permuted, depending on eager's contraction path. Only pairs
  // are known to be contiguous (one operand: einsum_one).
  if (ops.size() != 2)
    return CaptureResult::fail("einsum: only two operands are supported, got " + std::to_string(ops.size()));
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ops.size())
    return CaptureResult::fail("einsum: the equation has " + std::to_string(terms.size()) + " operands but " +
                               std::to_string(ops.size()) + " tensors were given");
  ST dt = c.graph.meta(ops[0]).dtype;
  std::map<char, int64_t> size;
  std::map<char, int> count;
  std::vector<Ints> ellipsis_shapes;
  for (size_t i = 0; i < terms.size(); ++i) {
    const TensorMeta& m = c.graph.meta(ops[i]);
    if (m.dtype != dt) return CaptureResult::fail("einsum: operands must have the same dtype");
    std::string t = terms[i];
    size_t ell = t.find("...");
    std::string letters = ell == std::string::npos ? t : t.substr(0, ell) + t.substr(ell + 3);
    int64_t n_ell = m.dim() - static_cast<int64_t>(letters.size());
    if (n_ell < 0 || (ell == std::string::npos && n_ell != 0))
      return CaptureResult::fail("einsum: subscripts '" + t + "' do not fit operand " + std::to_string(i) +
                                 " of shape " + shape_str(m.sizes));
    std::set<char> here;
    int64_t d = 0;
    for (size_t j = 0; j < t.size(); ++j) {
      if (t.compare(j, 3, "...") == 0) {
        ellipsis_shapes.emplace_back(m.sizes.begin() + d, m.sizes.begin() + d + n_ell);
        d += n_ell;
        j += 2;
        continue;
      }
      char ch = t[j];
      if (!std::isalpha(static_cast<unsigned char>(ch)))
        return CaptureResult::fail(std::string("einsum: invalid subscript '") + ch + "'");
      if (!here.insert(ch).second)
        return CaptureResult::fail(std::string("einsum: repeated subscript '") + ch + "' in one operand (a diagonal) is not supported");
      int64_t s = m.sizes[static_cast<size_t>(d++)];
      auto it = size.find(ch);
      if (it == size.end() || it->second == 1) size[ch] = s;
      else if (s != 1 && s != it->second)
        return CaptureResult::fail(std::string("einsum: subscript '") + ch + "' has size " + std::to_string(s) +
                                   " for operand " + std::to_string(i) + ", which does not broadcast with size " +
                                   std::to_string(it->second));
      ++count[ch];
    }
  }
  auto ell_shape = broadcast_shapes(ellipsis_shapes);
  if (!ell_shape) return CaptureResult::fail("einsum: the '...' dimensions do not broadcast");
  // Size of ellipsis dim `e` (of the broadcast ellipsis) in operand `op`: right-aligned, 1 if absent.
  auto ell_size = [&](size_t op, size_t e) -> int64_t {
    size_t pos = terms[op].find("...");
    if (pos == std::string::npos) return 1;
    int64_t n = c.graph.meta(ops[op]).dim() - static_cast<int64_t>(terms[op].size() - 3);
    int64_t skip = static_cast<int64_t>(ell_shape->size()) - n;
    if (static_cast<int64_t>(e) < skip) return 1;
    return c.graph.meta(ops[op]).sizes[pos + e - static_cast<size_t>(skip)];
  };
  std::string out = arrow == std::string::npos ? std::string("...") : eq.substr(arrow + 2);
  if (arrow == std::string::npos)
    for (const auto& [ch, n] : count)
      if (n == 1) out += ch;  // implicit output: subscripts seen once, alphabetically
  if (out.find("...") == std::string::npos && !ell_shape->empty())
    return CaptureResult::fail("einsum: summing over '...' dimensions is not supported");
  // Output dims in order; each remembers its size in either operand (1 where absent).
  struct OutDim { int64_t size, left, right; };
  std::vector<OutDim> dims;
  auto label_size = [&](size_t op, char ch) -> int64_t {
    const std::string& t = terms[op];
    size_t ell = t.find("...");
    int64_t n_ell = ell == std::string::npos ? 0 : static_cast<int64_t>(ell_shape->size());
    int64_t d = 0;
    for (size_t j = 0; j < t.size(); ++j) {
      if (t.compare(j, 3, "...") == 0) { d += n_ell; j += 2; continue; }
      if (t[j] == ch) return c.graph.meta(ops[op]).sizes[static_cast<size_t>(d)];
      ++d;
    }
    return 1;
  };
  std::set<char> seen_out;
  for (size_t j = 0; j < out.size(); ++j) {
    if (out.compare(j, 3, "...") == 0) {
      for (size_t e = 0; e < ell_shape->size(); ++e) dims.push_back({(*ell_shape)[e], ell_size(0, e), ell_size(1, e)});
      j += 2;
      continue;
    }
    if (!size.count(out[j]) || !seen_out.insert(out[j]).second)
      return CaptureResult::fail(std::string("einsum: output subscript '") + out[j] +
                                 "' must appear once in the output and in some operand");
    dims.push_back({size[out[j]], label_size(0, out[j]), label_size(1, out[j])});
  }
  // Eager sums subscripts contracted in one operand only before the product; the product is a
  // bmm when some contracted subscript is in both operands, else an elementwise mul whose
  // layout we do not model.
  bool contracts = false, presummed = false;
  for (const auto& [ch, n] : count) {
    if (seen_out.count(ch)) continue;
    if (label_size(0, ch) != 1 && label_size(1, ch) != 1) contracts = true;
    else presummed = true;
  }
  Ints shape;
  for (const auto& d : dims) {
    // NB: the strides eager leaves on size-1 output dims come from views of views; not modelled.
    if (d.size == 1) return CaptureResult::fail("einsum: size-1 output dims are not supported");
    shape.push_back(d.size);
  }
  Ints strides(shape.size());
  if (contracts) {
    // Eager aligns both operands to (output dims..., contracted dims...), sums the subscripts
    // contracted in one operand only (keeping them as size-1 dims), and runs one bmm over
    // (batch, left-only, right-only) dims; the result is dense in that order. Size-1 dims count
    // as right-only, so a pre-summed subscript ends the right-only list. When every right-only
    // dim precedes every left-only one the operands are swapped: dense in (batch, right-only,
    // left-only) order.
    Ints lro, lo, ro;
    for (size_t i = 0; i < dims.size(); ++i) {
      bool sl = dims[i].left != 1, sr = dims[i].right != 1;
      (sl && sr ? lro : sl ? lo : ro).push_back(static_cast<int64_t>(i));
    }
    if (!presummed && !lo.empty() && !ro.empty() && ro.back() < lo.front()) std::swap(lo, ro);
    Ints order = lro;
    order.insert(order.end(), lo.begin(), lo.end());
    order.insert(order.end(), ro.begin(), ro.end());
    int64_t acc = 1;
    for (size_t i = order.size(); i-- > 0;) {
      strides[static_cast<size_t>(order[i])] = acc;
      acc *= std::max<int64_t>(shape[static_cast<size_t>(order[i])], 1);
    }
  } else {
    // No subscript is contracted in both operands: eager multiplies the two aligned operands
    // (a TensorIterator op) and drops the size-1 contracted dims by a view.
    std::map<char, int64_t> aligned;
    int64_t total = 0, ell_pos = -1;
    for (size_t j = 0; j < out.size(); ++j) {
      if (out.compare(j, 3, "...") == 0) {
        ell_pos = total;
        total += static_cast<int64_t>(ell_shape->size());
        j += 2;
      } else {
        aligned[out[j]] = total++;
      }
    }
    const int64_t n_out = total;
    std::vector<char> contracted;
    for (const auto& [ch, n] : count)
      if (!seen_out.count(ch)) contracted.push_back(ch);
    auto label_order = [](char ch) { return std::isupper(static_cast<unsigned char>(ch)) ? ch - 'A' : 26 + ch - 'a'; };
    std::sort(contracted.begin(), contracted.end(), [&](char x, char y) { return label_order(x) < label_order(y); });
    for (char ch : contracted) aligned[ch] = total++;
    std::vector<TensorMeta> al(2);
    for (size_t i = 0; i < 2; ++i) {
      const TensorMeta& m = c.graph.meta(ops[i]);
      Ints sz = m.sizes, st = m.strides, perm(static_cast<size_t>(total), -1);
      int64_t d = 0;
      const std::string& t = terms[i];
      for (size_t j = 0; j < t.size(); ++j) {
        if (t.compare(j, 3, "...") == 0) {
          int64_t n = m.dim() - static_cast<int64_t>(t.size() - 3);
          int64_t e_total = static_cast<int64_t>(ell_shape->size());
          for (int64_t e = e_total - n; e < e_total; ++e) perm[static_cast<size_t>(ell_pos + e)] = d++;
          j += 2;
        } else {
          perm[static_cast<size_t>(aligned[t[j]])] = d++;
        }
      }
      for (auto& p : perm)
        if (p == -1) {  // a missing dim is unsqueezed at the end (stride 1), then permuted in
          sz.push_back(1);
          st.push_back(1);
          p = d++;
        }
      TensorMeta& x = al[i];
      x.dtype = m.dtype;
      for (int64_t k = 0; k < total; ++k) {
        x.sizes.push_back(sz[static_cast<size_t>(perm[static_cast<size_t>(k)])]);
        x.strides.push_back(st[static_cast<size_t>(perm[static_cast<size_t>(k)])]);
      }
      bool summed = false;
      for (char ch : contracted) {
        auto k = static_cast<size_t>(aligned[ch]);
        if (x.sizes[k] != 1) {
          x.sizes[k] = 1;
          summed = true;
        }
      }
      if (summed) x.strides = contiguous_strides(x.sizes);  // sum(keepdim=True) is contiguous
    }
    Ints al_shape(shape);
    al_shape.resize(static_cast<size_t>(total), 1);
    Ints al_strides = tensor_iterator_strides(al_shape, {&al[0], &al[1]});
    strides.assign(al_strides.begin(), al_strides.begin() + n_out);
  }
  const TensorMeta& m0 = c.graph.meta(ops[0]);
  return tensor_result(emit1(c.graph, OpId::einsum,
                             {Arg::of_string(a.str("equation")), Arg::of_values(ops), Arg::none()},
                             make_meta(dt, m0.device, shape, strides, any_requires_grad(c.graph, c.ctx, ops))));
}

}  // namespace fastdyn::codegen
