// tests/cpp/capture/test_autocast.cpp — record_call under torch.autocast (codegen/capture/autocast.h)
// against eager ATen under the same autocast state (CPU, bfloat16).
//
// Each case records one family call with CaptureContext::autocast on, then checks that
//   (1) the recorded outputs have eager's dtypes and sizes (eager run with ATen's autocast on);
//   (2) the graph, run by compile_aten with autocast off, gives eager's values: the casts are in
//       the graph, not in the dispatcher;
//   (3) or, where fastdyn has no rule, the call is refused (a graph break), never mis-recorded.
#include "codegen/aten/aten_backend.h"
#include "codegen/capture/binder.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace fastdyn::codegen {
namespace {

using Tensors = std::vector<at::Tensor>;

TensorMeta meta_of(const at::Tensor& t) {
  TensorMeta m;
  m.dtype = t.scalar_type();
  m.device = t.device();
  m.sizes = t.sizes().vec();
  m.strides = t.strides().vec();
  m.storage_offset = t.storage_offset();
  return m;
}

// Eager ATen with CPU autocast on (bfloat16), as inside `with torch.autocast("cpu", torch.bfloat16)`.
struct AutocastOn {
  AutocastOn() {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  }
  ~AutocastOn() {
    at::autocast::set_autocast_enabled(at::kCPU, false);
    at::autocast::clear_cache();
  }
};

struct Case {
  const char* name;
  Family family;
  Tensors inputs;
  std::function<std::vector<CallArg>(const std::vector<ValueId>&)> args;
  std::function<Tensors(const Tensors&)> eager;  // empty: fastdyn must refuse the call
};

void run(const Case& c) {
  SCOPED_TRACE(c.name);
  Graph g;
  std::vector<ValueId> ids;
  for (const at::Tensor& t : c.inputs) ids.push_back(g.add_input(meta_of(t)));
  CaptureContext ctx;
  ctx.grad_enabled = false;
  ctx.autocast.cpu = true;
  ctx.autocast.cpu_dtype = c10::ScalarType::BFloat16;
  CaptureResult r = record_call(g, ctx, c.family, c.args(ids), {});
  if (!c.eager) {
    EXPECT_FALSE(r.ok) << print_graph(g);
    EXPECT_NE(r.reason.find("autocast"), std::string::npos) << r.reason;
    return;
  }
  ASSERT_TRUE(r.ok) << r.reason;
  Tensors want;
  {
    AutocastOn on;
    at::NoGradGuard no_grad;
    want = c.eager(c.inputs);
  }
  ASSERT_EQ(r.values.size(), want.size());
  g.outputs = r.values;
  Tensors got = compile_aten(g)->run(c.inputs);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(g.meta(r.values[i]).dtype, want[i].scalar_type()) << "output " << i << "\n" << print_graph(g);
    EXPECT_EQ(g.meta(r.values[i]).sizes, want[i].sizes().vec());
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type());
    EXPECT_TRUE(at::equal(got[i], want[i])) << "output " << i << " differs\n" << print_graph(g);
  }
}

CallArg T(ValueId v) { return CallArg::tensor(v); }

TEST(Autocast, CastsAsEagersAutocastOnTheCpu) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({4, 8}), w = at::randn({6, 8}), b = at::randn({6}), m = at::randn({8, 5});
  const at::Tensor xb = x.to(at::kBFloat16), xd = x.to(at::kDouble), md = m.to(at::kDouble);
  const std::vector<Case> cases = {
      {"linear f32", Family::linear, {x, w, b}, [](auto& v) { return std::vector<CallArg>{T(v[0]), T(v[1]), T(v[2])}; },
       [](const Tensors& t) { return Tensors{at::linear(t[0], t[1], t[2])}; }},
      {"matmul bf16 @ f32", Family::matmul, {xb, m}, [](auto& v) { return std::vector<CallArg>{T(v[0]), T(v[1])}; },
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"matmul f64 stays f64", Family::matmul, {xd, md}, [](auto& v) { return std::vector<CallArg>{T(v[0]), T(v[1])}; },
       [](const Tensors& t) { return Tensors{at::matmul(t[0], t[1])}; }},
      {"cat promotes", Family::cat, {xb, x}, [](auto& v) { return std::vector<CallArg>{CallArg::of_tensors({v[0], v[1]})}; },
       [](const Tensors& t) { return Tensors{at::cat({t[0], t[1]})}; }},
      {"relu is left alone", Family::relu, {xb}, [](auto& v) { return std::vector<CallArg>{T(v[0])}; },
       [](const Tensors& t) { return Tensors{at::relu(t[0])}; }},
      {"prod runs in float32", Family::prod, {xb}, [](auto& v) { return std::vector<CallArg>{T(v[0]), CallArg::of_int(1)}; },
       [](const Tensors& t) { return Tensors{at::prod(t[0], 1)}; }},
      // On the CPU einsum has no autocast kernel but calls bmm, which casts: refused.
      {"einsum refused", Family::einsum, {x, m},
       [](auto& v) { return std::vector<CallArg>{CallArg::of_string("ij,jk->ik"), CallArg::of_tensors({v[0], v[1]})}; },
       nullptr},
  };
  for (const Case& c : cases) run(c);
}

}  // namespace
}  // namespace fastdyn::codegen
