// tests/cpp/loop/test_interpret.cpp — loop kernels run on the host by interpretation
// (codegen/loop/interpret.h): the scalar arithmetic of an Adam step (step counts incremented in
// place, bias corrections, a stack of step sizes) run through the runtime's program executor with
// every kernel interpreted, against the same graph op by op on ATen.
#include "codegen/aten/aten_backend.h"
#include "codegen/graph/graph.h"
#include "codegen/loop/interpret.h"
#include "codegen/loop/kernel_input.h"
#include "codegen/loop/passes.h"
#include "codegen/loop/runtime_program.h"
#include "runtime/program_executable.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace fastdyn::codegen::loop {
namespace {

// g's loop program with every kernel interpreted and every extern on ATen.
runtime::ExecutablePtr interpreted(const Graph& g) {
  Program p = build_program(g);
  std::vector<Extern> externs;
  for (const Step& s : p.steps)
    if (s.kind == Step::Kind::Extern) externs.push_back(compile_extern(p.graph, p.graph.nodes[static_cast<size_t>(s.index)]));
  runtime::Program r = runtime_program(p, "interpreted", print_program(p), std::move(externs), {},
                                       p.mutates_inputs() ? compile_aten(g) : nullptr);
  int kernels = 0;
  for (size_t i = 0; i < p.steps.size(); ++i)
    if (p.steps[i].kind == Step::Kind::Kernel) {
      std::get<runtime::KernelLaunch>(r.steps[i]).kernel =
          std::make_shared<InterpretedKernel>(kernel_input(p, p.kernels[static_cast<size_t>(p.steps[i].index)]));
      ++kernels;
    }
  EXPECT_GT(kernels, 0) << print_program(p);
  return std::make_shared<runtime::ProgramExecutable>(std::move(r));
}

TEST(Interpret, AdamsScalarArithmeticMatchesAten) {
  const Graph g = parse_graph(R"(graph(%0: f32[]{}, %1: f32[]{}, %2: f64[]{}):
  %3: f32[]{} = aten::add_.Scalar(%0, 1, 1)
  %4: f32[]{} = aten::add_.Scalar(%1, 1, 1)
  %5: f32[]{} = aten::pow.Scalar(0.9, %0)
  %6: f32[]{} = aten::rsub.Scalar(%5, 1, 1)
  %7: f32[]{} = aten::pow.Scalar(0.999, %1)
  %8: f32[]{} = aten::rsub.Scalar(%7, 1, 1)
  %9: f32[]{} = aten::reciprocal(%6)
  %10: f32[]{} = aten::mul.Scalar(%9, 0.001)
  %11: f32[]{} = aten::neg(%10)
  %12: f32[]{} = aten::reciprocal(%8)
  %13: f32[]{} = aten::mul.Scalar(%12, 0.001)
  %14: f32[2]{1} = aten::stack([%11, %13], 0)
  %15: f32[]{} = aten::sqrt(%8)
  %16: f64[]{} = aten::mul.Scalar(%2, 3)
  %17: f64[]{} = aten::maximum(%16, %2)
  return (%14, %15, %17)
)");
  auto make_inputs = [] {
    return std::vector<at::Tensor>{at::full({}, 3.0f), at::full({}, 7.0f), at::full({}, 0.1, at::kDouble)};
  };
  std::vector<at::Tensor> mine = make_inputs(), theirs = make_inputs();
  const std::vector<at::Tensor> got = interpreted(g)->run(mine);
  const std::vector<at::Tensor> want = compile_aten(g)->run(theirs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].sizes(), want[i].sizes()) << i;
    EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << i;
    EXPECT_TRUE(at::allclose(got[i], want[i], 1e-6, 0)) << i << ": " << got[i] << " vs " << want[i];
  }
  // The step counts were incremented in place, once, as ATen did.
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(mine[i].item<float>(), theirs[i].item<float>()) << i;
  EXPECT_EQ(mine[0].item<float>(), 4.0f);
}

TEST(Interpret, RefusesReductionsAndLargeTensors) {
  const Graph g = parse_graph(R"(graph(%0: f32[8]{1}, %1: f32[8192]{1}):
  %2: f32[]{} = aten::sum.dim_IntList(%0, None, False, None)
  %3: f32[8192]{1} = aten::mul.Scalar(%1, 2)
  return (%2, %3)
)");
  Program p = build_program(g);
  int refused = 0;
  for (const Kernel& k : p.kernels) {
    try {
      InterpretedKernel kernel(kernel_input(p, k));
    } catch (const Unsupported& e) {
      ++refused;
      EXPECT_NE(std::string(e.what()).find("CPU"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(refused, static_cast<int>(p.kernels.size())) << print_program(p);
}

}  // namespace
}  // namespace fastdyn::codegen::loop
