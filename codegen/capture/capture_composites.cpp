// codegen/capture/capture_composites.cpp — binders of families that eager implements as a composite of
// other ATen ops (CompositeImplicitAutograd): torch.diff; and torch.diag_embed, whose values are
// a select between its input and zeros (see bind_diag_embed).
//
// Such a family is recorded as the very ops eager's composite runs, through the binders of those
// ops (record_call of cat, narrow, sub...). Nothing here computes metadata itself: every output's
// dtype, sizes and strides come from rules that are already cross-checked against ATen, the
// values match eager's bit for bit, and the graph stays made of primitive ops that the codegen
// backends lower and fuse like any other.
#include "codegen/capture/binder.h"
#include "codegen/capture/view_helpers.h"
#include "codegen/shapes/propagate.h"
#include "codegen/capture/meta_rules.h"

#include <algorithm>

namespace fastdyn::codegen {

namespace {

// Records `family(args...)` and returns its single tensor, or the failure prefixed by `op`.
CaptureResult sub_call(BindCall& c, const std::string& op, Family family, std::vector<CallArg> args,
                       std::vector<std::pair<std::string, CallArg>> kwargs = {}) {
  CaptureResult r = record_call(c.graph, c.ctx, family, args, kwargs);
  if (!r.ok) return CaptureResult::fail(op + ": " + r.reason);
  return r;
}

}  // namespace

// torch.diff(input, n=1, dim=-1, prepend=None, append=None): prepend/append are concatenated
// along `dim` first, then n times `x[1:] - x[:-1]` along `dim` (logical_xor for bool), as eager's
// composite does. n == 0 returns a copy of `input` alone (eager ignores prepend/append then), and
// n is capped at the length of `dim` (so an empty dim returns the concatenation itself).
CaptureResult bind_diff(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "diff(Tensor input, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None)");
  const CallArg& input = a.get("input");
  const TensorMeta m = c.graph.meta(input.value);
  if (m.dim() < 1) return CaptureResult::fail("diff: diff expects input to be at least one-dimensional");
  int64_t n = a.integer("n");
  if (n < 0) return CaptureResult::fail("diff: order must be non-negative but got " + std::to_string(n));
  auto dim = wrap_dim(a.integer("dim"), m.dim());
  if (!dim)
    return CaptureResult::fail("diff: dimension " + std::to_string(a.integer("dim")) + " is out of range for a " +
                               std::to_string(m.dim()) + "-d input");
  std::vector<ValueId> parts;
  for (const char* name : {"prepend", "input", "append"}) {
    if (a.is_none(name)) continue;
    ValueId v = a.tensor(name);
    if (c.graph.meta(v).dim() != m.dim())
      return CaptureResult::fail(std::string("diff: diff expects prepend or append to be the same dimension as "
                                             "input ('") + name + "' has " + std::to_string(c.graph.meta(v).dim()) +
                                 " dims, input " + std::to_string(m.dim()) + ")");
    parts.push_back(v);
  }
  if (n == 0) return sub_call(c, "diff", Family::clone, {input});
  CallArg x = input;
  if (parts.size() > 1) {
    CaptureResult joined = sub_call(c, "diff", Family::cat, {CallArg::of_tensors(parts), CallArg::of_int(*dim)});
    if (!joined.ok) return joined;
    x = CallArg::tensor(joined.values[0]);
  }
  const int64_t len = c.graph.meta(x.value).sizes[static_cast<size_t>(*dim)];
  if (n > 2)  // min(n, len) steps: with len a symbol (2 or more) only n <= 2 is known
    shapes::pin_value(c.graph, x.value, *dim, "diff() with n > 2 takes the length as a number");
  const Family step = m.dtype == c10::ScalarType::Bool ? Family::logical_xor : Family::sub;
  CaptureResult result = tensor_result(x.value);
  // NB: x[1:] and x[:-1] as open-ended slices, not narrows of a computed length: with sizes as
  // symbols they keep the length symbolic (codegen/shapes/propagate.cpp).
  for (int64_t i = 0; i < std::min(n, len); ++i) {
    const ValueId hi = views::emit_slice(c, x.value, *dim, 1, std::nullopt, 1);
    const ValueId lo = views::emit_slice(c, x.value, *dim, 0, -1, 1);
    result = sub_call(c, "diff", step, {CallArg::tensor(hi), CallArg::tensor(lo)});
    if (!result.ok) return result;
    x = CallArg::tensor(result.values[0]);
  }
  return result;
}

// torch.diag_embed(input, offset=0, dim1=-2, dim2=-1): the last dim of `input` on the diagonal
// of two new last dims, zeros elsewhere. Recorded as where(eye(n), input.unsqueeze(-2), 0): the
// same values bit for bit (a select, no arithmetic: NaN and inf stay on the diagonal only) and the
// same dtype (a zero of the input's kind is a wrapped number). Other offsets and dims are left
// to eager (a clear failure: the frame breaks there and runs it).
CaptureResult bind_diag_embed(BindCall& c) {
  FD_BIND_OR_RETURN(c, a, "diag_embed(Tensor input, int offset=0, int dim1=-2, int dim2=-1)");
  const CallArg& input = a.get("input");
  const TensorMeta m = c.graph.meta(input.value);
  if (m.dim() < 1) return CaptureResult::fail("diag_embed: the input must have at least one dimension");
  const int64_t out_dim = m.dim() + 1;
  auto d1 = wrap_dim(a.integer("dim1"), out_dim), d2 = wrap_dim(a.integer("dim2"), out_dim);
  if (a.integer("offset") != 0 || !d1 || !d2 || *d1 != out_dim - 2 || *d2 != out_dim - 1)
    return CaptureResult::fail("diag_embed: only offset=0 onto the last two dims is recorded");
  if (c10::isComplexType(m.dtype)) return CaptureResult::fail("diag_embed: complex inputs are not recorded");
  shapes::pin_value(c.graph, input.value, m.dim() - 1, "diag_embed() builds its eye mask at the length as a number");
  const int64_t n = c.graph.meta(input.value).sizes.back();
  CaptureResult mask = sub_call(c, "diag_embed", Family::eye, {CallArg::of_int(n)},
                                {{"dtype", CallArg::of_dtype(c10::ScalarType::Bool)}, {"device", CallArg::of_device(m.device)}});
  if (!mask.ok) return mask;
  CaptureResult row = sub_call(c, "diag_embed", Family::unsqueeze, {input, CallArg::of_int(-2)});
  if (!row.ok) return row;
  const CallArg zero = m.dtype == c10::ScalarType::Bool ? CallArg::of_bool(false)
                       : c10::isIntegralType(m.dtype, false) ? CallArg::of_int(0) : CallArg::of_double(0.0);
  return sub_call(c, "diag_embed", Family::where, {CallArg::tensor(mask.values[0]), CallArg::tensor(row.values[0]), zero});
}

}  // namespace fastdyn::codegen
