// codegen/capture/view_helpers.cpp — see view_helpers.h.
#include "codegen/capture/view_helpers.h"

#include "codegen/capture/meta_views.h"

namespace fastdyn::codegen::views {

bool differentiable(c10::ScalarType t) { return c10::isFloatingType(t) || c10::isComplexType(t); }

TensorMeta derived(const BindCall& c, TensorMeta out, const std::vector<ValueId>& from) {
  bool any = false;
  for (ValueId v : from) any = any || c.graph.meta(v).requires_grad;
  out.requires_grad = any && c.ctx.grad_enabled && differentiable(out.dtype);
  return out;
}

CaptureResult fail(const char* op, const std::string& why) { return CaptureResult::fail(std::string(op) + ": " + why); }

bool bind_sig(const Signature& sig, const BindCall& call, BoundArgs& a, CaptureResult& err) {
  if (auto e = sig.bind(call, a)) {
    err = CaptureResult::fail(*e);
    return false;
  }
  return true;
}

Arg opt_int(const std::optional<int64_t>& v) { return v ? Arg::of_int(*v) : Arg::none(); }

ValueId emit_unsqueeze(BindCall& c, ValueId self, int64_t dim) {
  TensorMeta out = meta::unsqueeze(c.graph.meta(self), dim);
  return emit1(c.graph, OpId::unsqueeze, {Arg::of_value(self), Arg::of_int(dim)}, out);
}

ValueId emit_slice(BindCall& c, ValueId self, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                   int64_t step) {
  TensorMeta out = meta::slice(c.graph.meta(self), dim, start, end, step);
  return emit1(c.graph, OpId::slice_Tensor,
               {Arg::of_value(self), Arg::of_int(dim), opt_int(start), opt_int(end), Arg::of_int(step)}, out);
}

bool is_index_dtype(c10::ScalarType t) { return t == c10::ScalarType::Long || t == c10::ScalarType::Int; }

}  // namespace fastdyn::codegen::views
