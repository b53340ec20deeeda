// codegen/autograd/grad_builder.cpp — see grad_builder.h.
#include "codegen/autograd/grad_builder.h"

#include "runtime/errors.h"

namespace fastdyn::codegen::autograd {

GradBuilder::GradBuilder(Graph& j, Node node, std::vector<ValueId> grads, bool forward)
    : j_(j), node_(std::move(node)), grads_(std::move(grads)), forward_(forward) {}

const Arg& GradBuilder::arg(size_t pos) const {
  if (pos >= node_.args.size()) throw InternalError("derivative of " + print_node(j_, node_) + " reads argument " + std::to_string(pos));
  return node_.args[pos];
}

ValueId GradBuilder::in(size_t pos) const {
  const Arg& a = arg(pos);
  if (a.kind != Arg::Kind::Value) throw InternalError("derivative of " + print_node(j_, node_) + ": argument " + std::to_string(pos) + " is not a tensor");
  return a.value;
}

bool GradBuilder::needs(size_t pos, int elem) const {
  if (pos >= node_.args.size()) return false;
  const Arg& a = node_.args[pos];
  if (elem >= 0) {
    if (a.kind != Arg::Kind::ValueList || elem >= static_cast<int>(a.values.size())) return false;
    const ValueId v = a.values[static_cast<size_t>(elem)];
    return v >= 0 && j_.meta(v).requires_grad;
  }
  return a.kind == Arg::Kind::Value && j_.meta(a.value).requires_grad;
}

double GradBuilder::number(size_t pos) const {
  if (const std::optional<double> v = arg(pos).number()) return *v;
  throw InternalError("derivative of " + print_node(j_, node_) + ": argument " + std::to_string(pos) + " is not a number");
}

ValueId GradBuilder::grad(size_t k) {
  if (grads_.at(k) < 0) {
    const TensorMeta m = j_.meta(out(k));
    grads_[k] = zeros(m.sizes, m.dtype, m.device);
  }
  return grads_[k];
}

void GradBuilder::refuse(const std::string& why) const {
  throw NoDerivative("no derivative for " + qualified_name(node_.op) + ": " + why);
}

ValueId GradBuilder::call(Family f, std::vector<CallArg> args, std::vector<std::pair<std::string, CallArg>> kwargs) {
  std::vector<ValueId> r = call_tuple(f, std::move(args), std::move(kwargs));
  if (r.size() != 1) throw InternalError(std::string("derivative formula: ") + family_name(f) + " gave " + std::to_string(r.size()) + " values");
  return r[0];
}

std::vector<ValueId> GradBuilder::call_tuple(Family f, std::vector<CallArg> args,
                                             std::vector<std::pair<std::string, CallArg>> kwargs) {
  CaptureContext ctx;
  ctx.grad_enabled = forward_;  // the backward is computed, not differentiated again
  CaptureResult r = record_call(j_, ctx, f, args, kwargs);
  // A binder's refusal here is a formula that does not fit this case (a dtype the op rejects):
  // the graph keeps ATen's autograd.
  if (!r.ok) refuse(std::string(family_name(f)) + ": " + r.reason);
  return r.values;
}

ValueId GradBuilder::zeros(const std::vector<int64_t>& sizes, c10::ScalarType dt, c10::Device dev) {
  return call(Family::zeros, {ints(sizes)}, {{"dtype", CallArg::of_dtype(dt)}, {"device", CallArg::of_device(dev)}});
}

ValueId GradBuilder::sum_to(ValueId g, const std::vector<int64_t>& sizes) {
  const std::vector<int64_t> gs = j_.meta(g).sizes;
  if (gs == sizes) return g;
  const size_t lead = gs.size() - sizes.size();
  if (gs.size() < sizes.size()) throw InternalError("sum_to: a gradient of fewer dims than its input");
  std::vector<int64_t> dims;
  for (size_t d = 0; d < gs.size(); ++d)
    if (d < lead || (sizes[d - lead] == 1 && gs[d] != 1)) dims.push_back(static_cast<int64_t>(d));
  ValueId r = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  return j_.meta(r).sizes == sizes ? r : reshape(r, sizes);
}

void GradBuilder::give(size_t pos, ValueId g, int elem) {
  if (!needs(pos, elem)) return;
  const Arg& a = arg(pos);
  const ValueId x = elem >= 0 ? a.values[static_cast<size_t>(elem)] : a.value;
  const std::vector<int64_t> sizes = j_.meta(x).sizes;  // copies: recording grows j_.values
  const c10::ScalarType dtype = j_.meta(x).dtype;
  g = sum_to(g, sizes);
  g = to(g, dtype);
  given_.push_back({pos, elem, g});
}

}  // namespace fastdyn::codegen::autograd
