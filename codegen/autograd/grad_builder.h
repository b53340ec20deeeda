// codegen/autograd/grad_builder.h — what a derivative formula writes with (codegen/ layer).
//
// A formula (codegen/autograd/derivatives.cpp) sees one forward node of the joint graph and the
// gradients reaching its outputs, and records the ops that give its inputs their gradients. It
// records them as Python-level calls through the capture binders (record_call), so every backward
// value gets its dtype, sizes and strides from the same rules as a traced op, and a formula reads
// like the PyTorch code it stands for: `b.mul(b.grad(), b.in(1))` is `grad * other`.
// give() makes a gradient the input's own: summed over the dims it was broadcast along and cast to
// its dtype, as autograd's engine would.
// A formula that meets a case it does not cover (a slice with a step, say) calls refuse(): the
// whole graph then keeps ATen's autograd, never a wrong gradient.
#pragma once
#include "codegen/capture/capture.h"
#include "codegen/graph/graph.h"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace fastdyn::codegen::autograd {

// A formula's refusal: the graph runs on ATen with eager autograd. what() names the op and why.
struct NoDerivative : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class GradBuilder {
 public:
  // `node` is a copy (formulas append to j.nodes); grads[k] is output k's gradient or -1.
  // `forward`: what it records is forward computation (a rewrite before differentiating), whose
  // outputs require grad where their inputs do; otherwise backward values, which never do.
  GradBuilder(Graph& j, Node node, std::vector<ValueId> grads, bool forward = false);
  // Records backward ops with no forward node (gradient accumulation).
  explicit GradBuilder(Graph& j) : GradBuilder(j, Node{OpId::add_Tensor, {}, {}}, {}) {}

  // ---- the forward node ----
  const Node& node() const { return node_; }
  Graph& graph() { return j_; }  // for a formula that emits a node the binders do not record
  const Arg& arg(size_t pos) const;
  ValueId in(size_t pos) const;            // the tensor at argument `pos`
  ValueId out(size_t k = 0) const { return node_.outputs.at(k); }
  // NB: recording grows j.values: a reference from meta() is good until the next call().
  const TensorMeta& meta(ValueId v) const { return j_.meta(v); }
  std::vector<int64_t> sizes(ValueId v) const { return j_.meta(v).sizes; }
  int64_t dim(ValueId v) const { return j_.meta(v).dim(); }
  // Whether the input at `pos` (element `elem` of a Tensor[]) wants a gradient.
  bool needs(size_t pos, int elem = -1) const;
  bool has_grad(size_t k) const { return grads_.at(k) >= 0; }
  // Output k's gradient; zeros of its shape when none reached it (multi-output ops).
  ValueId grad(size_t k = 0);
  double number(size_t pos) const;         // an Int/Double/Bool argument as a double
  // Gives the input at `pos` the gradient g (summed to its shape, cast to its dtype).
  void give(size_t pos, ValueId g, int elem = -1);
  [[noreturn]] void refuse(const std::string& why) const;

  // ---- recording ----
  ValueId call(Family f, std::vector<CallArg> args, std::vector<std::pair<std::string, CallArg>> kwargs = {});
  std::vector<ValueId> call_tuple(Family f, std::vector<CallArg> args,
                                  std::vector<std::pair<std::string, CallArg>> kwargs = {});
  static CallArg t(ValueId v) { return CallArg::tensor(v); }
  static CallArg n(double d) { return CallArg::of_double(d); }
  static CallArg i(int64_t v) { return CallArg::of_int(v); }
  static CallArg ints(std::vector<int64_t> v) { return CallArg::of_ints(std::move(v)); }
  ValueId add(ValueId a, ValueId b) { return call(Family::add, {t(a), t(b)}); }
  ValueId sub(ValueId a, ValueId b) { return call(Family::sub, {t(a), t(b)}); }
  ValueId mul(ValueId a, ValueId b) { return call(Family::mul, {t(a), t(b)}); }
  ValueId div(ValueId a, ValueId b) { return call(Family::div, {t(a), t(b)}); }
  ValueId scale(ValueId a, double s) { return s == 1.0 ? a : call(Family::mul, {t(a), n(s)}); }
  ValueId plus(ValueId a, double s) { return call(Family::add, {t(a), n(s)}); }
  ValueId rsub(double s, ValueId a) { return call(Family::rsub, {t(a), n(s)}); }  // s - a
  ValueId neg(ValueId a) { return call(Family::neg, {t(a)}); }
  ValueId unary(Family f, ValueId a) { return call(f, {t(a)}); }
  ValueId sum(ValueId a, std::vector<int64_t> dims, bool keepdim) {
    return call(Family::sum, {t(a), ints(std::move(dims)), CallArg::of_bool(keepdim)});
  }
  ValueId mean(ValueId a, std::vector<int64_t> dims, bool keepdim) {
    return call(Family::mean, {t(a), ints(std::move(dims)), CallArg::of_bool(keepdim)});
  }
  ValueId reshape(ValueId a, std::vector<int64_t> sizes) { return call(Family::reshape, {t(a), ints(std::move(sizes))}); }
  ValueId expand(ValueId a, std::vector<int64_t> sizes) { return call(Family::expand, {t(a), ints(std::move(sizes))}); }
  ValueId matmul(ValueId a, ValueId b) { return call(Family::matmul, {t(a), t(b)}); }
  ValueId mT(ValueId a) { return call(Family::transpose, {t(a), i(-2), i(-1)}); }
  ValueId to(ValueId a, c10::ScalarType dt) { return meta(a).dtype == dt ? a : call(Family::to, {t(a), CallArg::of_dtype(dt)}); }
  ValueId zeros(const std::vector<int64_t>& sizes, c10::ScalarType dt, c10::Device dev);
  // g summed over the dims along which `sizes` was broadcast to g's shape, then viewed as `sizes`.
  ValueId sum_to(ValueId g, const std::vector<int64_t>& sizes);

  // What the formula gave: (argument position, Tensor[] element or -1, gradient).
  struct Given {
    size_t pos;
    int elem;
    ValueId grad;
  };
  const std::vector<Given>& given() const { return given_; }

 private:
  Graph& j_;
  Node node_;
  std::vector<ValueId> grads_;
  std::vector<Given> given_;
  bool forward_ = false;
};

}  // namespace fastdyn::codegen::autograd
