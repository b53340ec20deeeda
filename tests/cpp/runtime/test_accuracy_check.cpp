// Accuracy mode (runtime/accuracy_check.h): the comparison's dtype-aware tolerances, and a checked
// call of a hand-made program whose reference is a C++ function (no graph, no LLVM).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "runtime/accuracy_check.h"
#include "runtime/host_kernel.h"
#include "runtime/program_executable.h"

namespace fastdyn::runtime {
namespace {

at::Tensor f32(std::vector<float> v) { return at::tensor(v, at::kFloat); }

TEST(AccuracyCheck, Float32WithinItsToleranceOfTheReferencePasses) {
  const at::Tensor ref = at::tensor({1.0, -2.0, 1000.0}, at::kDouble);
  const Comparison c = compare_values(f32({1.00005f, -2.0001f, 1000.05f}), ref, f32({1, -2, 1000}));
  EXPECT_TRUE(c.ok) << c.detail;
  EXPECT_GT(c.max_abs_err, 0.0);
}

TEST(AccuracyCheck, Float32BeyondItsToleranceFailsNamingTheFirstElement) {
  const at::Tensor ref = at::tensor({1.0, 2.0, 3.0, 4.0}, at::kDouble).reshape({2, 2});
  const at::Tensor got = at::tensor({1.0f, 2.0f, 3.01f, 4.5f}, at::kFloat).reshape({2, 2});
  const Comparison c = compare_values(got, ref, ref.to(at::kFloat));
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.detail.find("at [1, 0]: got 3.00999999"), std::string::npos) << c.detail;
  EXPECT_NEAR(c.max_abs_err, 0.5, 1e-6);
  EXPECT_NEAR(c.max_rel_err, 0.125, 1e-6);
  EXPECT_EQ(c.tol.rtol, dtype_tolerance(at::kFloat).rtol);
}

// A float16 value's error is what eager's own float16 rounding makes it, never less.
TEST(AccuracyCheck, ToleranceIsNeverTighterThanEagersOwnError) {
  const at::Tensor ref = at::tensor({100.0, 0.0}, at::kDouble);
  const at::Tensor eager = at::tensor({100.25, 0.0}, at::kDouble).to(at::kHalf);  // eager is off by 0.25
  const Comparison c = compare_values(at::tensor({99.75, 0.5}, at::kDouble).to(at::kHalf), ref, eager);
  EXPECT_TRUE(c.ok) << c.detail;
  EXPECT_DOUBLE_EQ(c.tol.atol, 1.0);
  // Without eager's error, the dtype's tolerance alone: 0.5 at a reference of 0 is too far.
  EXPECT_FALSE(compare_values(at::tensor({99.75, 0.5}, at::kDouble).to(at::kHalf), ref, at::Tensor()).ok);
}

TEST(AccuracyCheck, NanAndInfinityMustBeWhereEagersAre) {
  const double nan = std::nan(""), inf = INFINITY;
  const at::Tensor ref = at::tensor({nan, inf, 1.0}, at::kDouble);
  const at::Tensor eager = ref.to(at::kFloat);
  EXPECT_TRUE(compare_values(eager.clone(), ref, eager).ok);
  const Comparison moved = compare_values(f32({1.0f, INFINITY, NAN}), ref, eager);
  EXPECT_FALSE(moved.ok);
  EXPECT_EQ(moved.max_abs_err, inf);
  EXPECT_NE(moved.detail.find("at [0]: got 1, expected nan"), std::string::npos) << moved.detail;
  EXPECT_FALSE(compare_values(f32({NAN, -INFINITY, 1.0f}), ref, eager).ok);
}

TEST(AccuracyCheck, IntegersAndBoolsAreExact) {
  const at::Tensor i = at::tensor({1, 2, 3}, at::kLong);
  EXPECT_TRUE(compare_values(i.clone(), i, i).ok);
  const Comparison c = compare_values(at::tensor({1, 2, 4}, at::kLong), i, i);
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.max_abs_err, 1.0);
  EXPECT_EQ(c.tol.atol, 0.0);
  const at::Tensor b = at::tensor({1, 0}, at::kLong).to(at::kBool);
  EXPECT_FALSE(compare_values(b.logical_not(), b, b).ok);
}

// A reference that returns f(inputs), whatever their dtype.
class FunctionExecutable final : public Executable {
 public:
  explicit FunctionExecutable(std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> fn) : fn_(std::move(fn)) {}
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) override { return fn_(inputs); }
  std::string describe() const override { return "reference\n"; }

 private:
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> fn_;
};

void add_kernel(void** args, int32_t* /*status*/, const int64_t* /*sizes*/) {
  const auto* a = static_cast<const float*>(args[0]);
  const auto* b = static_cast<const float*>(args[1]);
  auto* out = static_cast<float*>(args[2]);
  for (int i = 0; i < 4; ++i) out[i] = a[i] + b[i];
}

// out = a + b by kernel "k0" into slot 2 (graph value 7), checked against ATen's a + b.
Program checked_add() {
  Program p;
  p.backend = "llvm_cpu";
  p.num_slots = 3;
  p.input_slots = {0, 1};
  p.buffers = {{2, {4}, {1}, at::TensorOptions().dtype(at::kFloat)}};
  p.steps.emplace_back(KernelLaunch{std::make_shared<HostKernel>(add_kernel, nullptr, "llvm_cpu"), {0, 1, 2}});
  SlotTensor out;
  out.slot = 2;
  p.outputs = {out};
  auto plan = std::make_shared<CheckPlan>();
  plan->steps = {{"k0", {{7, out, 0}}}};
  plan->input_slots = {0, 1};
  plan->reference = std::make_shared<FunctionExecutable>([](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{in.at(0) + in.at(1)};
  });
  p.check = plan;
  return p;
}

TEST(AccuracyCheck, ACheckedCallRecordsTheWrongKernelWithItsInputsAndReturnsWhatItComputed) {
  set_check_enabled(true);
  clear_divergences();
  ProgramExecutable exe(checked_add());
  const at::Tensor a = at::arange(4, at::kFloat), b = at::full({4}, 0.5, at::kFloat);
  EXPECT_TRUE(at::equal(exe.run({a, b}).at(0), a + b));
  EXPECT_TRUE(divergences().empty());
  EXPECT_EQ(checked_graphs(), 1);

  set_corrupt_kernel_for_testing("k0");
  const at::Tensor out = exe.run({a, b}).at(0);
  set_corrupt_kernel_for_testing("");
  set_check_enabled(false);
  EXPECT_EQ(out[0].item<float>(), 1.5f);  // the mode observes: the wrong result is returned
  std::vector<Divergence> d = divergences();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].kernel, "k0");
  EXPECT_EQ(d[0].value, 7);
  EXPECT_EQ(d[0].dtype, "float32");
  EXPECT_NEAR(d[0].max_abs_err, 1.0, 1e-6);
  EXPECT_NE(d[0].detail.find("at [0]: got 1.5, expected 0.5"), std::string::npos) << d[0].detail;
  ASSERT_EQ(d[0].inputs.size(), 2u);
  EXPECT_TRUE(at::equal(d[0].inputs[1], b));
  EXPECT_EQ(checked_graphs(), 2);

  exe.run({a, b});  // the mode off: no check
  EXPECT_EQ(checked_graphs(), 2);
  clear_divergences();
}

}  // namespace
}  // namespace fastdyn::runtime
