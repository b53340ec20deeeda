// codegen/autograd/derivatives.cpp — the derivative rows (see derivatives.h).
//
// Each formula states eager autograd's derivative (tools/autograd/derivatives.yaml) with the ops
// a graph has; argument positions are the ATen schema's, as the node holds them. The gradient
// sweep (tests/python/test_autograd_sweep.py) checks every row against ATen's autograd.
#include "codegen/autograd/derivatives.h"

#include "codegen/autograd/grad_builder.h"
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <unordered_map>

namespace fastdyn::codegen::autograd {
namespace {

using B = GradBuilder;
using Ints = std::vector<int64_t>;

int64_t wrap(int64_t d, int64_t nd) { return d < 0 ? d + std::max<int64_t>(nd, 1) : d; }

// The dims a reduction's `dim` argument names (None or [] = all), ascending.
Ints reduced_dims(const B& b, size_t pos, int64_t nd) {
  const Arg& a = b.arg(pos);
  Ints dims;
  if (a.kind == Arg::Kind::IntList && !a.ints.empty())
    for (int64_t d : a.ints) dims.push_back(wrap(d, nd));
  else if (a.kind == Arg::Kind::Int)
    dims.push_back(wrap(a.i, nd));
  else
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  std::sort(dims.begin(), dims.end());
  return dims;
}

// A reduction's gradient back at the input's shape: the reduced dims put back as 1, then expanded.
ValueId unreduce(B& b, ValueId g, ValueId x, const Ints& dims) {
  Ints kept = b.sizes(x);
  for (int64_t d : dims)
    if (d < static_cast<int64_t>(kept.size())) kept[static_cast<size_t>(d)] = 1;
  if (b.sizes(g) != kept) g = b.reshape(g, kept);
  return b.expand(g, b.sizes(x));
}

ValueId where0(B& b, ValueId cond, ValueId g) { return b.call(Family::where, {B::t(cond), B::t(g), B::n(0.0)}); }

// ---- pointwise ----
// add/sub/rsub's alpha (argument 2; 1 where the overload has none).
double alpha(const B& b) { return b.node().args.size() > 2 ? b.number(2) : 1.0; }
void d_add(B& b) {
  const ValueId g = b.grad();
  b.give(0, g);
  if (b.needs(1)) b.give(1, b.scale(g, alpha(b)));
}
void d_first_only(B& b) { b.give(0, b.grad()); }  // add/sub .Scalar, clone, alias, expand, _to_copy
void d_sub(B& b) {
  const ValueId g = b.grad();
  b.give(0, g);
  if (b.needs(1)) b.give(1, b.scale(g, -alpha(b)));
}
void d_rsub_Scalar(B& b) { b.give(0, b.scale(b.grad(), -alpha(b))); }
void d_mul_Tensor(B& b) {
  const ValueId g = b.grad();
  if (b.needs(0)) b.give(0, b.mul(g, b.in(1)));
  if (b.needs(1)) b.give(1, b.mul(g, b.in(0)));
}
void d_mul_Scalar(B& b) { b.give(0, b.scale(b.grad(), b.number(1))); }
void d_div_Tensor(B& b) {
  const ValueId g = b.grad();
  if (b.needs(0)) b.give(0, b.div(g, b.in(1)));
  if (b.needs(1)) b.give(1, b.neg(b.div(b.mul(g, b.out()), b.in(1))));  // -g * self / other^2
}
void d_div_Scalar(B& b) { b.give(0, b.call(Family::div, {B::t(b.grad()), B::n(b.number(1))})); }
void d_neg(B& b) { b.give(0, b.neg(b.grad())); }
void d_exp(B& b) { b.give(0, b.mul(b.grad(), b.out())); }
void d_log(B& b) { b.give(0, b.div(b.grad(), b.in(0))); }
void d_log1p(B& b) { b.give(0, b.div(b.grad(), b.plus(b.in(0), 1.0))); }
void d_expm1(B& b) { b.give(0, b.mul(b.grad(), b.plus(b.out(), 1.0))); }
void d_tanh(B& b) { b.give(0, b.mul(b.grad(), b.rsub(1.0, b.mul(b.out(), b.out())))); }
void d_sigmoid(B& b) { b.give(0, b.mul(b.mul(b.grad(), b.rsub(1.0, b.out())), b.out())); }
void d_relu(B& b) { b.give(0, where0(b, b.call(Family::gt, {B::t(b.out()), B::n(0.0)}), b.grad())); }
void d_sqrt(B& b) { b.give(0, b.div(b.grad(), b.scale(b.out(), 2.0))); }
void d_rsqrt(B& b) {
  const ValueId y = b.out();
  b.give(0, b.mul(b.scale(b.grad(), -0.5), b.mul(b.mul(y, y), y)));
}
void d_square(B& b) { b.give(0, b.mul(b.scale(b.grad(), 2.0), b.in(0))); }
void d_reciprocal(B& b) { b.give(0, b.mul(b.neg(b.grad()), b.mul(b.out(), b.out()))); }
void d_pow_Tensor_Scalar(B& b) {
  const double e = b.number(1);
  const ValueId x = b.in(0);
  if (e == 0.0) {
    b.give(0, b.scale(b.grad(), 0.0));
    return;
  }
  b.give(0, b.mul(b.scale(b.grad(), e), b.call(Family::pow, {B::t(x), B::n(e - 1.0)})));
}
void d_sin(B& b) { b.give(0, b.mul(b.grad(), b.unary(Family::cos, b.in(0)))); }
void d_cos(B& b) { b.give(0, b.mul(b.neg(b.grad()), b.unary(Family::sin, b.in(0)))); }
void d_abs(B& b) { b.give(0, b.mul(b.grad(), b.unary(Family::sign, b.in(0)))); }
void d_erf(B& b) {
  const ValueId x = b.in(0);
  b.give(0, b.mul(b.scale(b.grad(), 2.0 / std::sqrt(M_PI)), b.unary(Family::exp, b.neg(b.mul(x, x)))));
}
void d_silu(B& b) {
  const ValueId x = b.in(0), s = b.unary(Family::sigmoid, x);
  b.give(0, b.mul(b.mul(b.grad(), s), b.plus(b.mul(x, b.rsub(1.0, s)), 1.0)));  // s * (1 + x * (1 - s))
}
void d_gelu(B& b) {
  const ValueId x = b.in(0), g = b.grad();
  if (b.arg(1).kind == Arg::Kind::String && b.arg(1).str == "tanh") {
    const double k = std::sqrt(2.0 / M_PI), c = 0.044715;
    const ValueId x2 = b.mul(x, x);
    const ValueId inner = b.scale(b.add(x, b.scale(b.mul(x2, x), c)), k);
    const ValueId th = b.unary(Family::tanh, inner);
    const ValueId left_d = b.scale(b.plus(th, 1.0), 0.5);                       // 0.5 * (1 + t)
    const ValueId right_d = b.mul(b.rsub(1.0, b.mul(th, th)), b.scale(b.plus(b.scale(x2, 3.0 * c), 1.0), k));
    b.give(0, b.mul(g, b.add(left_d, b.mul(b.scale(x, 0.5), right_d))));
    return;
  }
  const ValueId cdf = b.scale(b.plus(b.unary(Family::erf, b.scale(x, M_SQRT1_2)), 1.0), 0.5);
  const ValueId pdf = b.scale(b.unary(Family::exp, b.scale(b.mul(x, x), -0.5)), 1.0 / std::sqrt(2.0 * M_PI));
  b.give(0, b.mul(g, b.add(cdf, b.mul(x, pdf))));
}
void d_leaky_relu(B& b) {
  const ValueId x = b.in(0), g = b.grad();
  const double slope = b.node().args.size() > 1 && b.arg(1).kind != Arg::Kind::None ? b.number(1) : 0.01;
  b.give(0, b.call(Family::where, {B::t(b.call(Family::gt, {B::t(x), B::n(0.0)})), B::t(g), B::t(b.scale(g, slope))}));
}
// hardtanh(self, min_val, max_val) and relu6: the gradient where min < x < max (eager's
// hardtanh_backward, strict at both ends).
ValueId inside(B& b, ValueId x, double lo, double hi) {
  return b.call(Family::logical_and, {B::t(b.call(Family::gt, {B::t(x), B::n(lo)})), B::t(b.call(Family::lt, {B::t(x), B::n(hi)}))});
}
void d_hardtanh(B& b) {
  const bool relu6 = b.node().op == OpId::relu6;
  const double lo = relu6 ? 0.0 : b.node().args.size() > 1 ? b.number(1) : -1.0;
  const double hi = relu6 ? 6.0 : b.node().args.size() > 2 ? b.number(2) : 1.0;
  b.give(0, where0(b, inside(b, b.in(0), lo, hi), b.grad()));
}
// NB: eager's hardsigmoid_backward multiplies by 1/6 rounded to float, in double too.
void d_hardsigmoid(B& b) {
  b.give(0, where0(b, inside(b, b.in(0), -3.0, 3.0), b.scale(b.grad(), static_cast<double>(1.0f / 6.0f))));
}
// hardswish: 0 below -3, g * (x / 3 + 1/2) up to 3, g above (eager's hardswish_backward).
void d_hardswish(B& b) {
  const ValueId x = b.in(0), g = b.grad();
  const ValueId mid = b.mul(g, b.plus(b.scale(x, 1.0 / 3.0), 0.5));
  const ValueId upper = b.call(Family::where, {B::t(b.call(Family::le, {B::t(x), B::n(3.0)})), B::t(mid), B::t(g)});
  b.give(0, b.call(Family::where, {B::t(b.call(Family::lt, {B::t(x), B::n(-3.0)})), B::n(0.0), B::t(upper)}));
}
// clamp(self, min?, max?) and clamp_min(self, min): the gradient passes where the input was kept.
void d_clamp(B& b) {
  const ValueId x = b.in(0);
  std::optional<ValueId> keep;
  auto bound = [&](size_t pos, Family cmp) {
    if (pos >= b.node().args.size() || b.arg(pos).kind == Arg::Kind::None) return;
    const ValueId m = b.call(cmp, {B::t(x), b.arg(pos).kind == Arg::Kind::Value ? B::t(b.arg(pos).value) : B::n(b.number(pos))});
    keep = keep ? b.call(Family::logical_and, {B::t(*keep), B::t(m)}) : m;
  };
  bound(1, Family::ge);
  bound(2, Family::le);
  b.give(0, keep ? where0(b, *keep, b.grad()) : b.grad());
}
void d_where_self(B& b) {
  const ValueId c = b.in(0), g = b.grad();
  if (b.needs(1)) b.give(1, where0(b, c, g));
  if (b.needs(2)) b.give(2, b.call(Family::where, {B::t(c), B::n(0.0), B::t(g)}));
}
void d_masked_fill(B& b) {
  const ValueId mask = b.in(1), g = b.grad();
  b.give(0, b.call(Family::masked_fill, {B::t(g), B::t(mask), B::n(0.0)}));
  if (b.needs(2)) b.give(2, b.sum(where0(b, mask, g), {}, false));
}

// ---- reductions and normalisations ----
void d_sum(B& b) {
  const ValueId x = b.in(0);
  b.give(0, unreduce(b, b.grad(), x, reduced_dims(b, 1, b.dim(x))));
}
void d_mean(B& b) {
  const ValueId x = b.in(0);
  const Ints dims = reduced_dims(b, 1, b.dim(x));
  double count = 1;
  for (int64_t d : dims) count *= static_cast<double>(b.sizes(x)[static_cast<size_t>(d)]);
  b.give(0, b.call(Family::div, {B::t(unreduce(b, b.grad(), x, dims)), B::n(count)}));
}
// linalg_vector_norm(self, ord, dim, keepdim, dtype) for ord 2: g * x / norm (0 where the norm is 0).
void d_vector_norm(B& b) {
  if (b.number(1) != 2.0) b.refuse("a vector norm of order other than 2");
  const ValueId x = b.in(0);
  const Ints dims = reduced_dims(b, 2, b.dim(x));
  Ints kept = b.sizes(x);
  for (int64_t d : dims) kept[static_cast<size_t>(d)] = 1;
  const ValueId y = b.sizes(b.out()) == kept ? b.out() : b.reshape(b.out(), kept);
  const ValueId g = b.sizes(b.grad()) == kept ? b.grad() : b.reshape(b.grad(), kept);
  const ValueId r = b.div(b.mul(x, g), y);
  b.give(0, b.call(Family::masked_fill, {B::t(r), B::t(b.call(Family::eq, {B::t(y), B::n(0.0)})), B::n(0.0)}));
}
// The gradient through softmax's output y along `dim`: g * y - y * sum(g * y).
ValueId softmax_grad(B& b, ValueId y, ValueId g, int64_t dim) {
  const ValueId gy = b.mul(g, y);
  return b.sub(gy, b.mul(y, b.sum(gy, {dim}, true)));
}
void d_softmax(B& b) { b.give(0, softmax_grad(b, b.out(), b.grad(), wrap(b.arg(1).i, b.dim(b.out())))); }
void d_log_softmax(B& b) {
  const ValueId y = b.out(), g = b.grad();
  const int64_t d = wrap(b.arg(1).i, b.dim(y));
  b.give(0, b.sub(g, b.mul(b.unary(Family::exp, y), b.sum(g, {d}, true))));
}
// Normalisation in float32 at least, as ATen computes half-precision norms.
c10::ScalarType compute_dtype(c10::ScalarType t) { return t == c10::kHalf || t == c10::kBFloat16 ? c10::kFloat : t; }
// The last k of nd dims: what layer_norm and rms_norm normalise over.
Ints last_dims(int64_t nd, int64_t k) {
  Ints dims;
  for (int64_t d = nd - k; d < nd; ++d) dims.push_back(d);
  return dims;
}
// A normalisation's input gradient over `dims`, from the gradient at x̂ (weight applied), x̂ and
// 1/std: rstd * (gxhat - mean(gxhat) - x̂ * mean(gxhat * x̂)); `centred` norms (layer, batch) subtract
// the mean, rms_norm does not.
ValueId normalised_grad(B& b, ValueId gxhat, ValueId xhat, ValueId rstd, const Ints& dims, bool centred) {
  const ValueId g = centred ? b.sub(gxhat, b.mean(gxhat, dims, true)) : gxhat;
  return b.mul(rstd, b.sub(g, b.mul(xhat, b.mean(b.mul(gxhat, xhat), dims, true))));
}
void d_layer_norm(B& b) {
  const ValueId x0 = b.in(0);
  const Ints dims = last_dims(b.dim(x0), static_cast<int64_t>(b.arg(1).ints.size()));
  const c10::ScalarType ct = compute_dtype(b.meta(x0).dtype);
  const ValueId x = b.to(x0, ct), g = b.to(b.grad(), ct);
  const ValueId xc = b.sub(x, b.mean(x, dims, true));
  const ValueId rstd = b.unary(Family::rsqrt, b.plus(b.mean(b.mul(xc, xc), dims, true), b.number(4)));
  const ValueId xhat = b.mul(xc, rstd);
  const ValueId gxhat = b.arg(2).kind == Arg::Kind::Value ? b.mul(g, b.in(2)) : g;
  if (b.needs(0)) b.give(0, normalised_grad(b, gxhat, xhat, rstd, dims, /*centred=*/true));
  if (b.needs(2)) b.give(2, b.mul(g, xhat));
  if (b.needs(3)) b.give(3, g);
}
double finfo_eps(c10::ScalarType t) {
  switch (t) {
    case c10::kDouble: return 2.220446049250313e-16;
    case c10::kHalf: return 0.0009765625;
    case c10::kBFloat16: return 0.0078125;
    default: return 1.1920928955078125e-07;
  }
}
void d_rms_norm(B& b) {
  const ValueId x0 = b.in(0);
  const Ints dims = last_dims(b.dim(x0), static_cast<int64_t>(b.arg(1).ints.size()));
  const c10::ScalarType ct = compute_dtype(b.meta(x0).dtype);
  const double eps = b.arg(3).kind == Arg::Kind::None ? finfo_eps(b.meta(x0).dtype) : b.number(3);
  const ValueId x = b.to(x0, ct), g = b.to(b.grad(), ct);
  const ValueId rstd = b.unary(Family::rsqrt, b.plus(b.mean(b.mul(x, x), dims, true), eps));
  const ValueId xhat = b.mul(x, rstd);
  const ValueId gxhat = b.arg(2).kind == Arg::Kind::Value ? b.mul(g, b.in(2)) : g;
  if (b.needs(0)) b.give(0, normalised_grad(b, gxhat, xhat, rstd, dims, /*centred=*/false));
  if (b.needs(2)) b.give(2, b.mul(g, xhat));
}
void d_mse_loss(B& b) {
  const ValueId diff = b.sub(b.in(0), b.in(1));
  const int64_t reduction = b.arg(2).i;  // 0 none, 1 mean, 2 sum
  double s = 2.0;
  if (reduction == 1) s /= static_cast<double>(b.meta(b.in(0)).numel());
  const ValueId gx = b.mul(b.scale(b.grad(), s), diff);
  b.give(0, gx);
  if (b.needs(1)) b.give(1, b.neg(gx));
}

// cross_entropy_loss(self [N, C], target [N] class indices, weight, reduction, ignore_index,
// label_smoothing): (softmax(x) - one_hot(target)) over the rows not ignored, times the gradient,
// divided by their count for 'mean'.
void d_cross_entropy(B& b) {
  const ValueId x = b.in(0), target = b.in(1);
  if (b.dim(x) != 2) b.refuse("an input that is not [N, C]");
  if (b.meta(target).dtype != c10::kLong) b.refuse("probability targets");
  if (b.arg(2).kind != Arg::Kind::None) b.refuse("class weights");
  if (b.number(5) != 0.0) b.refuse("label smoothing");
  const int64_t reduction = b.arg(3).i, classes = b.sizes(x)[1];
  const c10::Device dev = b.meta(x).device;
  const ValueId p = b.call(Family::softmax, {B::t(x), B::i(1)});
  const ValueId t1 = b.call(Family::unsqueeze, {B::t(target), B::i(1)});
  const ValueId cls = b.call(Family::arange, {B::i(classes)}, {{"device", CallArg::of_device(dev)}});
  const ValueId one_hot = b.to(b.call(Family::eq, {B::t(t1), B::t(cls)}), b.meta(p).dtype);
  const ValueId valid = b.call(Family::ne, {B::t(t1), B::i(b.arg(4).i)});
  ValueId d = b.mul(b.sub(p, one_hot), valid);
  const ValueId g = b.grad();
  if (reduction == 0) {
    d = b.mul(d, b.call(Family::unsqueeze, {B::t(g), B::i(1)}));
  } else {
    d = b.mul(d, g);
    if (reduction == 1) d = b.div(d, b.sum(valid, {}, false));
  }
  b.give(0, d);
}

// native_dropout(input, p, train) -> (output, mask): grad * mask / (1 - p).
void d_native_dropout(B& b) {
  const double p = b.number(1);
  b.give(0, b.scale(b.mul(b.grad(0), b.out(1)), p >= 1.0 ? 0.0 : 1.0 / (1.0 - p)));
}

// batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn):
// layer_norm's formula over every dim but the channels, with the batch's statistics in training
// and the running ones outside it.
void d_batch_norm(B& b) {
  const ValueId x0 = b.in(0);
  const int64_t nd = b.dim(x0), C = b.sizes(x0)[1];
  Ints dims{0}, per_channel(static_cast<size_t>(nd), 1);
  for (int64_t d = 2; d < nd; ++d) dims.push_back(d);
  per_channel[1] = C;
  const bool training = b.arg(5).kind == Arg::Kind::Bool && b.arg(5).b;
  const double eps = b.number(7);
  const c10::ScalarType ct = compute_dtype(b.meta(x0).dtype);
  const ValueId x = b.to(x0, ct), g = b.to(b.grad(), ct);
  auto channel = [&](size_t pos) { return b.reshape(b.to(b.in(pos), ct), per_channel); };
  ValueId xc, rstd;
  if (training) {
    xc = b.sub(x, b.mean(x, dims, true));
    rstd = b.unary(Family::rsqrt, b.plus(b.mean(b.mul(xc, xc), dims, true), eps));
  } else {
    xc = b.sub(x, channel(3));
    rstd = b.unary(Family::rsqrt, b.plus(channel(4), eps));
  }
  const ValueId xhat = b.mul(xc, rstd);
  const ValueId gxhat = b.arg(1).kind == Arg::Kind::Value ? b.mul(g, channel(1)) : g;
  if (b.needs(0)) b.give(0, training ? normalised_grad(b, gxhat, xhat, rstd, dims, /*centred=*/true) : b.mul(gxhat, rstd));
  if (b.needs(1)) b.give(1, b.sum(b.mul(g, xhat), dims, false));
  if (b.needs(2)) b.give(2, b.sum(g, dims, false));
}

// native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps) ->
// (out, save_mean, save_invstd), which joint.cpp records for an affine batch norm in training
// where eager does not run cuDNN: ATen's own backward kernel, from the saved statistics.
void d_native_batch_norm(B& b) {
  const TensorMeta mx = b.meta(b.in(0)), mw = b.meta(b.in(1)), mb = b.meta(b.in(2));
  const std::vector<ValueId> grads = emit(
      b.graph(), OpId::native_batch_norm_backward,
      {Arg::of_value(b.grad(0)), b.arg(0), b.arg(1), b.arg(3), b.arg(4), Arg::of_value(b.out(1)), Arg::of_value(b.out(2)),
       Arg::of_bool(true), b.arg(7), Arg::of_ints({1, 1, 1})},
      {contiguous_meta(mx.dtype, mx.device, mx.sizes, false), contiguous_meta(mw.dtype, mw.device, mw.sizes, false),
       contiguous_meta(mb.dtype, mb.device, mb.sizes, false)});
  for (size_t k = 0; k < 3; ++k) b.give(k, grads[k]);
}

// cudnn_batch_norm(input, weight, bias, running_mean, running_var, training, factor, eps) ->
// (out, save_mean, save_var, reserve), which joint.cpp records where eager's batch norm runs cuDNN:
// cuDNN's backward from the saved statistics and reserve space, as eager's autograd runs it.
void d_cudnn_batch_norm(B& b) {
  const TensorMeta mx = b.meta(b.in(0)), mw = b.meta(b.in(1)), mb = b.meta(b.in(2));
  const std::vector<ValueId> grads = emit(
      b.graph(), OpId::cudnn_batch_norm_backward,
      {b.arg(0), Arg::of_value(b.grad(0)), b.arg(1), b.arg(3), b.arg(4), Arg::of_value(b.out(1)), Arg::of_value(b.out(2)),
       b.arg(7), Arg::of_value(b.out(3))},
      {contiguous_meta(mx.dtype, mx.device, mx.sizes, false), contiguous_meta(mw.dtype, mw.device, mw.sizes, false),
       contiguous_meta(mb.dtype, mb.device, mb.sizes, false)});
  for (size_t k = 0; k < 3; ++k)
    if (b.needs(k)) b.give(k, grads[k]);
}

// conv1d/conv2d(input, weight, bias?, stride, padding, dilation, groups): ATen's convolution_backward.
void d_conv(B& b) {
  const ValueId x = b.in(0), w = b.in(1), g = b.grad();
  if (b.dim(x) != b.dim(w)) b.refuse("an unbatched input");
  const bool has_bias = b.arg(2).kind == Arg::Kind::Value;
  const int64_t nd = b.dim(w) - 2, out_channels = b.sizes(w)[0];
  const TensorMeta mx = b.meta(x), mw = b.meta(w);
  const std::vector<ValueId> grads = emit(
      b.graph(), OpId::convolution_backward,
      {Arg::of_value(g), Arg::of_value(x), Arg::of_value(w), has_bias ? Arg::of_ints({out_channels}) : Arg::none(),
       b.arg(3), b.arg(4), b.arg(5), Arg::of_bool(false), Arg::of_ints(Ints(static_cast<size_t>(nd), 0)), b.arg(6),
       Arg::of_ints({b.needs(0), b.needs(1), has_bias && b.needs(2)})},
      {contiguous_meta(mx.dtype, mx.device, mx.sizes, false), contiguous_meta(mw.dtype, mw.device, mw.sizes, false),
       contiguous_meta(mw.dtype, mw.device, {out_channels}, false)});
  // Only what is needed, as eager asks: a network's first convolution has no input gradient to
  // compute (the images need none; cuDNN's data-gradient kernel for a 7x7 stride-2 convolution of
  // 3 channels was 0.5 ms of a ResNet-18 step on an H200), and a convolution without bias no bias
  // gradient (ATen sums grad_output for it whenever the mask asks: 20 sums, another 0.5 ms).
  if (b.needs(0)) b.give(0, grads[0]);
  if (b.needs(1)) b.give(1, grads[1]);
  if (has_bias && b.needs(2)) b.give(2, grads[2]);
}

// max_pool2d(self, kernel, stride, padding, dilation, ceil_mode): the indices recomputed from the
// saved input, then ATen's backward kernel.
void d_max_pool2d(B& b) {
  const ValueId x = b.in(0), g = b.grad();
  if (b.dim(x) != 4) b.refuse("an unbatched input");
  const TensorMeta mx = b.meta(x), mo = b.meta(b.out());
  std::vector<Arg> pool{b.arg(1), b.arg(2), b.arg(3), b.arg(4), b.arg(5)};
  std::vector<Arg> args{Arg::of_value(x)};
  args.insert(args.end(), pool.begin(), pool.end());
  const std::vector<ValueId> r = emit(b.graph(), OpId::max_pool2d_with_indices, args,
                                      {contiguous_meta(mx.dtype, mx.device, mo.sizes, false),
                                       contiguous_meta(c10::kLong, mx.device, mo.sizes, false)});
  std::vector<Arg> bargs{Arg::of_value(g), Arg::of_value(x)};
  bargs.insert(bargs.end(), pool.begin(), pool.end());
  bargs.push_back(Arg::of_value(r[1]));
  b.give(0, emit1(b.graph(), OpId::max_pool2d_with_indices_backward, bargs,
                  contiguous_meta(mx.dtype, mx.device, mx.sizes, false)));
}

// adaptive_avg_pool2d(self, output_size): to 1x1 a mean (written out); else ATen's backward kernel.
void d_adaptive_avg_pool2d(B& b) {
  const ValueId x = b.in(0), g = b.grad();
  const Ints xs = b.sizes(x);
  const Ints& os = b.arg(1).ints;
  if (xs.size() == 4 && os.size() == 2 && os[0] == 1 && os[1] == 1) {
    b.give(0, b.call(Family::div, {B::t(b.expand(g, xs)), B::n(static_cast<double>(xs[2] * xs[3]))}));
    return;
  }
  const TensorMeta mx = b.meta(x);
  b.give(0, emit1(b.graph(), OpId::_adaptive_avg_pool2d_backward, {Arg::of_value(g), Arg::of_value(x)},
                  contiguous_meta(mx.dtype, mx.device, xs, false)));
}

// ---- linear algebra ----
void d_matmul(B& b) {
  const ValueId a = b.in(0), m = b.in(1), g = b.grad();
  const int64_t da = b.dim(a), dm = b.dim(m);
  if (da == 1 && dm == 1) {  // a dot product: g is 0-d
    if (b.needs(0)) b.give(0, b.mul(g, m));
    if (b.needs(1)) b.give(1, b.mul(g, a));
    return;
  }
  auto unsq = [&](ValueId v, int64_t d) { return b.call(Family::unsqueeze, {B::t(v), B::i(d)}); };
  auto sq = [&](ValueId v, int64_t d) { return b.call(Family::squeeze, {B::t(v), B::i(d)}); };
  const ValueId A = da == 1 ? unsq(a, 0) : a, M = dm == 1 ? unsq(m, -1) : m;
  ValueId G = g;
  if (da == 1) G = unsq(G, -2);
  if (dm == 1) G = unsq(G, -1);
  if (b.needs(0)) {
    ValueId ga = b.matmul(G, b.mT(M));
    b.give(0, da == 1 ? sq(ga, -2) : ga);
  }
  if (b.needs(1)) {
    ValueId gm = b.matmul(b.mT(A), G);
    b.give(1, dm == 1 ? sq(gm, -1) : gm);
  }
}
void d_addmm(B& b) {  // addmm / baddbmm(self, mat1, mat2, beta, alpha)
  const ValueId g = b.grad();
  if (b.needs(0)) b.give(0, b.scale(g, b.number(3)));
  if (b.needs(1)) b.give(1, b.scale(b.matmul(g, b.mT(b.in(2))), b.number(4)));
  if (b.needs(2)) b.give(2, b.scale(b.matmul(b.mT(b.in(1)), g), b.number(4)));
}
void d_linear(B& b) {  // linear(input, weight, bias?)
  const ValueId x = b.in(0), w = b.in(1), g = b.grad();
  if (b.needs(0)) b.give(0, b.matmul(g, w));
  if (b.needs(1)) {
    if (b.dim(x) == 1) {
      b.give(1, b.call(Family::outer, {B::t(g), B::t(x)}));
    } else {
      const int64_t out_f = b.sizes(w)[0], in_f = b.sizes(w)[1];
      b.give(1, b.matmul(b.mT(b.reshape(g, {-1, out_f})), b.reshape(x, {-1, in_f})));
    }
  }
  if (b.arg(2).kind == Arg::Kind::Value && b.needs(2)) b.give(2, g);
}
// scaled_dot_product_attention(q, k, v, attn_mask?, dropout_p, is_causal, scale?, enable_gqa):
// the attention weights recomputed from q and k (attention_weights, derivatives.h).
void d_sdpa(B& b) {
  // On the CPU joint.cpp writes an sdpa with dropout out first; a GPU's fused kernels draw their own way.
  if (b.number(4) != 0.0) b.refuse("dropout_p > 0 on a GPU draws random numbers as the fused kernel does");
  if (b.arg(7).kind == Arg::Kind::Bool && b.arg(7).b) b.refuse("enable_gqa");
  const ValueId q = b.in(0), k = b.in(1), v = b.in(2), g = b.grad();
  const double scale = attention_scale(b);
  const ValueId p = attention_weights(b);
  if (b.needs(2)) b.give(2, b.matmul(b.mT(p), g));
  if (b.needs(0) || b.needs(1)) {
    const ValueId ds = softmax_grad(b, p, b.matmul(g, b.mT(v)), -1);
    if (b.needs(0)) b.give(0, b.scale(b.matmul(ds, k), scale));
    if (b.needs(1)) b.give(1, b.scale(b.matmul(b.mT(ds), q), scale));
  }
}
// _scaled_dot_product_efficient_attention(q, k, v, attn_bias, compute_log_sumexp, dropout_p,
// is_causal, scale) -> (out, logsumexp, philox_seed, philox_offset), which joint.cpp records for
// attention in training on a GPU: the kernel's own backward, from the saved output and log-sum-exp.
void d_efficient_attention(B& b) {
  // q, k, v's gradients come out of the kernel in its [B, L, H, E] layout, transposed.
  auto bhle = [&](size_t pos) {
    TensorMeta m = b.meta(b.in(pos));
    const int64_t B = m.sizes[0], H = m.sizes[1], L = m.sizes[2], E = m.sizes[3];
    m = contiguous_meta(m.dtype, m.device, m.sizes, false);
    m.strides = {L * H * E, E, H * E, 1};
    return m;
  };
  const std::vector<ValueId> grads = emit(
      b.graph(), OpId::_scaled_dot_product_efficient_attention_backward,
      {Arg::of_value(b.grad(0)), b.arg(0), b.arg(1), b.arg(2), b.arg(3), Arg::of_value(b.out(0)), Arg::of_value(b.out(1)),
       Arg::of_value(b.out(2)), Arg::of_value(b.out(3)), Arg::of_double(0.0),
       Arg::of_ints({b.needs(0), b.needs(1), b.needs(2), false}), b.arg(6), b.arg(7)},
      {bhle(0), bhle(1), bhle(2), contiguous_meta(b.meta(b.in(0)).dtype, b.meta(b.in(0)).device, {0}, false)});
  for (size_t k = 0; k < 3; ++k)
    if (b.needs(k)) b.give(k, grads[k]);
}
void d_embedding(B& b) {  // embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
  if (b.arg(4).kind == Arg::Kind::Bool && b.arg(4).b) b.refuse("sparse gradients");
  const ValueId w = b.in(0), g = b.grad();
  const TensorMeta& gm = b.meta(g);
  b.give(0, emit1(b.graph(), OpId::embedding_dense_backward,
                  {Arg::of_value(g), Arg::of_value(b.in(1)), Arg::of_int(b.sizes(w)[0]), Arg::of_int(b.arg(2).i),
                   Arg::of_bool(b.arg(3).kind == Arg::Kind::Bool && b.arg(3).b)},
                  contiguous_meta(gm.dtype, gm.device, b.sizes(w), false)));
}

// ---- views and copies ----
void d_view(B& b) { b.give(0, b.reshape(b.grad(), b.sizes(b.in(0)))); }  // view, unsqueeze, squeeze*
void d_permute(B& b) {
  const Ints& dims = b.arg(1).ints;
  Ints inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inv[static_cast<size_t>(wrap(dims[i], static_cast<int64_t>(dims.size())))] = static_cast<int64_t>(i);
  b.give(0, b.call(Family::permute, {B::t(b.grad()), B::ints(inv)}));
}
void d_transpose(B& b) { b.give(0, b.call(Family::transpose, {B::t(b.grad()), B::i(b.arg(1).i), B::i(b.arg(2).i)})); }
// g put back into zeros of the input's shape along `dim` at [lo, size - hi): constant padding.
ValueId pad_along(B& b, ValueId g, int64_t dim, int64_t lo, int64_t hi) {
  Ints pad;
  for (int64_t d = b.dim(g) - 1; d > dim; --d) pad.insert(pad.end(), {0, 0});
  pad.insert(pad.end(), {lo, hi});
  return b.call(Family::pad, {B::t(g), B::ints(pad)});
}
void d_select(B& b) {
  const ValueId x = b.in(0);
  const int64_t dim = wrap(b.arg(1).i, b.dim(x)), size = b.sizes(x)[static_cast<size_t>(dim)];
  int64_t idx = b.arg(2).i;
  if (idx < 0) idx += size;
  b.give(0, pad_along(b, b.call(Family::unsqueeze, {B::t(b.grad()), B::i(dim)}), dim, idx, size - idx - 1));
}
void d_slice(B& b) {
  const ValueId x = b.in(0);
  const int64_t dim = wrap(b.arg(1).i, b.dim(x)), size = b.sizes(x)[static_cast<size_t>(dim)];
  if (b.arg(4).i != 1) b.refuse("a slice with a step");
  auto clamp_index = [&](const Arg& a, int64_t dflt) {
    if (a.kind == Arg::Kind::None) return dflt;
    int64_t v = a.i < 0 ? a.i + size : a.i;
    return std::clamp<int64_t>(v, 0, size);
  };
  const int64_t start = clamp_index(b.arg(2), 0), end = std::max(start, clamp_index(b.arg(3), size));
  b.give(0, pad_along(b, b.grad(), dim, start, size - end));
}
// split / split_with_sizes / tensor_split / unbind: the pieces' gradients joined again.
void d_split(B& b) {
  const ValueId x = b.in(0);
  const bool unbind = b.node().op == OpId::unbind_int;
  const int64_t dim = wrap(unbind ? b.arg(1).i : b.arg(2).i, b.dim(x));
  std::vector<ValueId> gs;
  for (size_t k = 0; k < b.node().outputs.size(); ++k) gs.push_back(b.grad(k));
  b.give(0, b.call(unbind ? Family::stack : Family::cat, {CallArg::of_tensors(gs), B::i(dim)}));
}
void d_cat(B& b) {
  const Arg& list = b.arg(0);
  const ValueId g = b.grad();
  const int64_t dim = wrap(b.arg(1).i, b.dim(g));
  int64_t offset = 0;
  for (size_t e = 0; e < list.values.size(); ++e) {
    const Ints& s = b.sizes(list.values[e]);
    if (s.size() == 1 && s[0] == 0 && b.dim(g) != 1) continue;  // a legacy empty tensor cat skips
    const int64_t len = s[static_cast<size_t>(dim)];
    if (b.needs(0, static_cast<int>(e)))
      b.give(0, b.call(Family::narrow, {B::t(g), B::i(dim), B::i(offset), B::i(len)}), static_cast<int>(e));
    offset += len;
  }
}
void d_stack(B& b) {
  const Arg& list = b.arg(0);
  const ValueId g = b.grad();
  const int64_t dim = wrap(b.arg(1).i, b.dim(g));
  for (size_t e = 0; e < list.values.size(); ++e)
    if (b.needs(0, static_cast<int>(e)))
      b.give(0, b.call(Family::select, {B::t(g), B::i(dim), B::i(static_cast<int64_t>(e))}), static_cast<int>(e));
}
void d_to_copy(B& b) {
  if (b.arg(3).kind == Arg::Kind::Device && b.arg(3).device != b.meta(b.in(0)).device) b.refuse("a copy to another device");
  b.give(0, b.grad());
}

const std::unordered_map<OpId, Formula>& table() {
  static const std::unordered_map<OpId, Formula> t = {
      {OpId::add_Tensor, d_add},         {OpId::add_Scalar, d_first_only},   {OpId::sub_Tensor, d_sub},
      {OpId::sub_Scalar, d_first_only},  {OpId::rsub_Scalar, d_rsub_Scalar}, {OpId::mul_Tensor, d_mul_Tensor},
      {OpId::mul_Scalar, d_mul_Scalar},  {OpId::div_Tensor, d_div_Tensor},   {OpId::div_Scalar, d_div_Scalar},
      {OpId::neg, d_neg},                {OpId::exp, d_exp},                 {OpId::log, d_log},
      {OpId::log1p, d_log1p},            {OpId::expm1, d_expm1},             {OpId::tanh, d_tanh},
      {OpId::sigmoid, d_sigmoid},        {OpId::relu, d_relu},               {OpId::sqrt, d_sqrt},
      {OpId::rsqrt, d_rsqrt},            {OpId::square, d_square},           {OpId::reciprocal, d_reciprocal},
      {OpId::pow_Tensor_Scalar, d_pow_Tensor_Scalar},                        {OpId::sin, d_sin},
      {OpId::cos, d_cos},                {OpId::abs, d_abs},                 {OpId::erf, d_erf},
      {OpId::silu, d_silu},              {OpId::gelu, d_gelu},               {OpId::leaky_relu, d_leaky_relu},
      {OpId::hardtanh, d_hardtanh},      {OpId::relu6, d_hardtanh},          {OpId::hardsigmoid, d_hardsigmoid},
      {OpId::hardswish, d_hardswish},
      {OpId::clamp, d_clamp},            {OpId::clamp_Tensor, d_clamp},      {OpId::clamp_min, d_clamp},
      {OpId::where_self, d_where_self},  {OpId::where_ScalarOther, d_where_self}, {OpId::where_ScalarSelf, d_where_self},
      {OpId::masked_fill_Scalar, d_masked_fill}, {OpId::masked_fill_Tensor, d_masked_fill},
      {OpId::sum_dim_IntList, d_sum},    {OpId::mean_dim, d_mean},           {OpId::linalg_vector_norm, d_vector_norm},           {OpId::softmax_int, d_softmax},
      {OpId::log_softmax_int, d_log_softmax}, {OpId::layer_norm, d_layer_norm}, {OpId::rms_norm, d_rms_norm},
      {OpId::native_dropout, d_native_dropout}, {OpId::mse_loss, d_mse_loss},      {OpId::batch_norm, d_batch_norm},  {OpId::native_batch_norm, d_native_batch_norm},  {OpId::cudnn_batch_norm, d_cudnn_batch_norm},  {OpId::conv1d, d_conv},
      {OpId::conv2d, d_conv},            {OpId::max_pool2d, d_max_pool2d},  {OpId::adaptive_avg_pool2d, d_adaptive_avg_pool2d},
            {OpId::cross_entropy_loss, d_cross_entropy},      {OpId::matmul, d_matmul},           {OpId::mm, d_matmul},
      {OpId::bmm, d_matmul},             {OpId::addmm, d_addmm},             {OpId::baddbmm, d_addmm},
      {OpId::linear, d_linear},          {OpId::scaled_dot_product_attention, d_sdpa},  {OpId::_scaled_dot_product_efficient_attention, d_efficient_attention},
      {OpId::embedding, d_embedding},    {OpId::view, d_view},               {OpId::unsqueeze, d_view},
      {OpId::squeeze, d_view},           {OpId::squeeze_dim, d_view},        {OpId::squeeze_dims, d_view},
      {OpId::alias, d_first_only},       {OpId::expand, d_first_only},       {OpId::permute, d_permute},
      {OpId::transpose_int, d_transpose}, {OpId::select_int, d_select},      {OpId::slice_Tensor, d_slice},
      {OpId::split_Tensor, d_split},     {OpId::split_with_sizes, d_split},  {OpId::unbind_int, d_split},
      {OpId::tensor_split_sections, d_split}, {OpId::tensor_split_indices, d_split},
      {OpId::cat, d_cat},                {OpId::stack, d_stack},             {OpId::clone, d_first_only},
      {OpId::_to_copy, d_to_copy},
  };
  return t;
}

}  // namespace

double attention_scale(const GradBuilder& b) {
  const std::vector<int64_t> qs = b.sizes(b.in(0));
  return b.arg(6).kind == Arg::Kind::None ? 1.0 / std::sqrt(static_cast<double>(qs.back())) : b.number(6);
}

ValueId attention_weights(GradBuilder& b) {
  const ValueId q = b.in(0), k = b.in(1);
  const std::vector<int64_t> qs = b.sizes(q), ks = b.sizes(k);
  const int64_t L = qs[qs.size() - 2], S = ks[ks.size() - 2];
  const double root = std::sqrt(attention_scale(b));
  ValueId att = b.matmul(b.scale(q, root), b.mT(b.scale(k, root)));
  auto masked = [&](ValueId keep) {
    return b.call(Family::masked_fill, {B::t(att), B::t(b.call(Family::logical_not, {B::t(keep)})),
                                        B::n(-std::numeric_limits<double>::infinity())});
  };
  if (b.arg(5).kind == Arg::Kind::Bool && b.arg(5).b)
    att = masked(b.call(Family::tril, {B::t(b.call(Family::ones, {B::ints({L, S})},
                                                       {{"dtype", CallArg::of_dtype(c10::kBool)},
                                                        {"device", CallArg::of_device(b.meta(q).device)}}))}));
  if (b.arg(3).kind == Arg::Kind::Value)
    att = b.meta(b.arg(3).value).dtype == c10::kBool ? masked(b.arg(3).value) : b.add(att, b.arg(3).value);
  return b.call(Family::softmax, {B::t(att), B::i(-1)});
}

Formula derivative(OpId op) {
  auto it = table().find(op);
  return it == table().end() ? nullptr : it->second;
}

std::vector<OpId> differentiable_ops() {
  std::vector<OpId> ops;
  for (const auto& [op, f] : table()) ops.push_back(op);
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace fastdyn::codegen::autograd
