// tests/cpp/aten/test_aten_backend.cpp — compile_aten against direct ATen calls.
//
// Graphs are written in the text form (parse_graph) where that reads best, and built by hand
// where the test is about the Graph structure itself.
#include "codegen/aten/aten_backend.h"
#include "codegen/graph/graph.h"
#include "runtime/errors.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <gtest/gtest.h>

namespace fastdyn::codegen {
namespace {

std::vector<at::Tensor> run_text(const std::string& text, const std::vector<at::Tensor>& inputs) {
  return compile_aten(parse_graph(text))->run(inputs);
}

void expect_same(const at::Tensor& got, const at::Tensor& want) {
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.scalar_type(), want.scalar_type());
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.strides(), want.strides());
  EXPECT_TRUE(at::equal(got, want)) << got << "\nwant\n" << want;
}

// Expects compile_aten to throw InternalError whose message contains every string of `parts`.
void expect_compile_error(const Graph& g, const std::vector<std::string>& parts) {
  try {
    compile_aten(g);
    FAIL() << "compiled without error:\n" << print_graph(g);
  } catch (const InternalError& e) {
    std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(AtenBackend, AddMulReluMatchesEager) {
  const char* text =
      "graph(%0: f32[4, 8]{8, 1}, %1: f32[8]{1}):\n"
      "  %2: f32[4, 8]{8, 1} = aten::add.Tensor(%0, %1, 2)\n"
      "  %3: f32[4, 8]{8, 1} = aten::mul.Tensor(%2, %1)\n"
      "  %4: f32[4, 8]{8, 1} = aten::relu(%3)\n"
      "  return (%4, %2)\n";
  at::Tensor x = at::randn({4, 8});
  at::Tensor y = at::randn({8});
  auto exe = compile_aten(parse_graph(text));
  for (int repeat = 0; repeat < 2; ++repeat) {  // the program is reusable
    auto out = exe->run({x, y});
    ASSERT_EQ(out.size(), 2u);
    expect_same(out[0], at::relu(at::mul(at::add(x, y, 2), y)));
    expect_same(out[1], at::add(x, y, 2));
  }
}

TEST(AtenBackend, DoubleAlphaAndOmittedDefaultArguments) {
  const char* text =
      "graph(%0: f32[3]{1}, %1: f32[3]{1}):\n"
      "  %2: f32[3]{1} = aten::add.Tensor(%0, %1, 0.5)\n"
      "  %3: f32[3]{1} = aten::add.Tensor(%2, %1)\n"  // alpha left out: the schema's default 1
      "  return (%3)\n";
  at::Tensor x = at::randn({3});
  at::Tensor y = at::randn({3});
  expect_same(run_text(text, {x, y})[0], at::add(at::add(x, y, 0.5), y));
}

TEST(AtenBackend, TensorListReturnExpandsToOutputs) {
  const char* text =
      "graph(%0: f32[6, 4]{4, 1}):\n"
      "  %1: f32[1, 4]{4, 1}, %2: f32[2, 4]{4, 1}+4, %3: f32[3, 4]{4, 1}+12 = aten::split_with_sizes(%0, [1, 2, 3], 0)\n"
      "  return (%3, %1, %2)\n";
  at::Tensor x = at::randn({6, 4});
  auto out = run_text(text, {x});
  auto want = at::split_with_sizes(x, {1, 2, 3}, 0);
  ASSERT_EQ(out.size(), 3u);
  expect_same(out[0], want[2]);
  expect_same(out[1], want[0]);
  expect_same(out[2], want[1]);
  EXPECT_EQ(out[0].storage_offset(), 12);  // views of the input, as in eager mode
  EXPECT_TRUE(out[0].is_alias_of(x));
}

TEST(AtenBackend, TensorListInputMayRepeatValues) {
  Graph g = parse_graph(
      "graph(%0: f32[6, 4]{4, 1}):\n"
      "  %1: f32[5, 4]{4, 1}, %2: f32[1, 4]{4, 1}+20 = aten::split_with_sizes(%0, [5, 1], 0)\n"
      "  %3: f32[16, 4]{4, 1} = aten::cat([%1, %0, %1], 0)\n"
      "  return (%3)\n");
  at::Tensor x = at::randn({6, 4});
  auto out = compile_aten(g)->run({x});
  auto parts = at::split_with_sizes(x, {5, 1}, 0);
  expect_same(out[0], at::cat({parts[0], x, parts[0]}, 0));
}

TEST(AtenBackend, TupleReturnsUnpackInOrder) {
  const char* text =
      "graph(%0: f32[3, 5]{5, 1}):\n"
      "  %1: f32[3]{1}, %2: f32[3]{1} = aten::var_mean.correction(%0, [1], 0, False)\n"
      "  %3: f32[5]{1}, %4: i64[5]{1} = aten::max.dim(%0, 0, False)\n"
      "  return (%2, %1, %4, %3)\n";
  at::Tensor x = at::randn({3, 5});
  auto out = run_text(text, {x});
  auto vm = at::var_mean(x, at::IntArrayRef{1}, /*correction=*/0, /*keepdim=*/false);
  auto mx = at::max(x, 0, false);
  ASSERT_EQ(out.size(), 4u);
  expect_same(out[0], std::get<1>(vm));
  expect_same(out[1], std::get<0>(vm));
  expect_same(out[2], std::get<1>(mx));
  expect_same(out[3], std::get<0>(mx));
}

TEST(AtenBackend, OptionalTensorsAndIntForFloatArguments) {
  // layer_norm's eps is a float: an Int constant must reach it as a double.
  const char* text =
      "graph(%0: f32[2, 4]{4, 1}, %1: f32[4]{1}):\n"
      "  %2: f32[2, 4]{4, 1} = aten::layer_norm(%0, [4], %1, None, 1, True)\n"
      "  %3: f32[2, 4]{4, 1} = aten::layer_norm(%0, [4], None, %1, 1e-05, True)\n"
      "  return (%2, %3)\n";
  at::Tensor x = at::randn({2, 4});
  at::Tensor w = at::randn({4});
  auto out = run_text(text, {x, w});
  EXPECT_TRUE(at::allclose(out[0], at::layer_norm(x, {4}, w, {}, 1.0)));
  EXPECT_FALSE(at::allclose(out[0], at::layer_norm(x, {4}, w, {}, 1e-5)));  // eps really was 1
  EXPECT_TRUE(at::allclose(out[1], at::layer_norm(x, {4}, {}, w, 1e-5)));
}

TEST(AtenBackend, OptionalTensorListWithNoneIndexes) {
  const char* text =
      "graph(%0: f32[4, 5]{5, 1}, %1: i64[3]{1}):\n"
      "  %2: f32[4, 3]{3, 1} = aten::index.Tensor(%0, [None, %1])\n"
      "  return (%2)\n";
  at::Tensor x = at::randn({4, 5});
  at::Tensor idx = at::tensor(std::vector<int64_t>{4, 0, 2});
  c10::List<std::optional<at::Tensor>> indices;
  indices.push_back(std::nullopt);
  indices.push_back(idx);
  expect_same(run_text(text, {x, idx})[0], at::index(x, indices));
}

TEST(AtenBackend, ConstantsOfEveryKindReachTheOperator) {
  const char* text =
      "graph(%0: f32[2, 3]{3, 1}):\n"
      "  %1: f64[2, 3]{3, 1} = aten::_to_copy(%0, torch.float64, None, device(\"cpu\"), None, False, None)\n"
      "  %2: i32[2, 3]{3, 1} = aten::full([2, 3], 7, torch.int32, None, None, None)\n"
      "  %3: f32[3, 2]{2, 1} = aten::view(%0, [3, 2])\n"
      "  %4: b8[2]{1} = aten::full([2], True, None, None, None, None)\n"
      "  return (%1, %2, %3, %4)\n";
  at::Tensor x = at::randn({2, 3});
  auto out = run_text(text, {x});
  expect_same(out[0], x.to(at::kDouble));
  expect_same(out[1], at::full({2, 3}, 7, at::kInt));
  expect_same(out[2], x.view({3, 2}));
  expect_same(out[3], at::full({2}, true));
  EXPECT_TRUE(out[2].is_alias_of(x));
}

TEST(AtenBackend, StringAndOptionalStringArguments) {
  const char* text =
      "graph(%0: f32[6]{1}, %1: f32[6]{1}):\n"
      "  %2: f32[6]{1} = aten::gelu(%0, \"tanh\")\n"
      "  %3: f32[6]{1} = aten::div.Tensor_mode(%0, %1, \"floor\")\n"
      "  %4: f32[6]{1} = aten::div.Tensor_mode(%0, %1, None)\n"
      "  return (%2, %3, %4)\n";
  at::Tensor x = at::randn({6});
  at::Tensor y = at::randn({6});
  auto out = run_text(text, {x, y});
  expect_same(out[0], at::gelu(x, "tanh"));
  EXPECT_FALSE(at::equal(out[0], at::gelu(x)));  // the string really reached the kernel
  expect_same(out[1], at::div(x, y, "floor"));
  expect_same(out[2], at::div(x, y));
}

TEST(AtenBackend, InPlaceOpMutatesItsInputAndAliasesIt) {
  const char* text =
      "graph(%0: f32[5]{1}, %1: f32[5]{1}):\n"
      "  %2: f32[5]{1} = aten::add_.Tensor(%0, %1, 3)\n"
      "  %3: f32[5]{1} = aten::mul.Tensor(%2, %2)\n"
      "  return (%2, %3)\n";
  at::Tensor x = at::randn({5});
  at::Tensor y = at::randn({5});
  at::Tensor before = x.clone();
  auto out = run_text(text, {x, y});
  at::Tensor want = before + 3 * y;
  // x + 3 * y in one op against two: a rounding apart, which near 0 exceeds allclose's default
  // absolute tolerance (1e-8; a 1-in-~50 failure with random inputs).
  EXPECT_TRUE(at::allclose(x, want, 1e-5, 1e-6));  // the caller's tensor changed
  EXPECT_TRUE(out[0].is_same(x));
  EXPECT_TRUE(at::allclose(out[1], want * want, 1e-5, 1e-6));
}

TEST(AtenBackend, OutputsMayNameInputsAndRepeat) {
  const char* text =
      "graph(%0: f32[3]{1}, %1: f32[3]{1}):\n"
      "  %2: f32[3]{1} = aten::relu(%1)\n"
      "  return (%0, %2, %0, %2)\n";
  at::Tensor x = at::randn({3});
  at::Tensor y = at::randn({3});
  auto out = run_text(text, {x, y});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_TRUE(out[0].is_same(x));
  EXPECT_TRUE(out[2].is_same(x));
  EXPECT_TRUE(out[1].is_same(out[3]));
  expect_same(out[1], at::relu(y));
}

TEST(AtenBackend, RequiresGradPropagatesAndBackwardWorks) {
  const char* text =
      "graph(%0: f32[4]{1} requires_grad, %1: f32[4]{1}):\n"
      "  %2: f32[4]{1} requires_grad = aten::mul.Tensor(%0, %1)\n"
      "  %3: f32[4]{1} requires_grad = aten::relu(%2)\n"
      "  %4: f32[1, 4]{4, 1} requires_grad, %5: f32[3, 4]{4, 1}+4 requires_grad = aten::split_with_sizes(%3, [1, 3], 0)\n"
      "  return (%3)\n";
  at::Tensor x = at::randn({4}).requires_grad_(true);
  at::Tensor y = at::randn({4});
  auto out = run_text(text, {x, y});
  ASSERT_TRUE(out[0].requires_grad());
  ASSERT_TRUE(out[0].grad_fn() != nullptr);
  out[0].sum().backward();
  ASSERT_TRUE(x.grad().defined());
  at::Tensor want = y * (x.detach() * y > 0).to(at::kFloat);
  EXPECT_TRUE(at::allclose(x.grad(), want)) << x.grad() << want;
  EXPECT_FALSE(y.grad().defined());
}

TEST(AtenBackend, TensorListOfUnexpectedLengthIsABackendErrorNamingTheNode) {
  Graph g = parse_graph(
      "graph(%0: f32[6]{1}):\n"
      "  %1: f32[1]{1}, %2: f32[2]{1}+1 = aten::split_with_sizes(%0, [1, 2, 3], 0)\n"
      "  return (%1)\n");
  auto exe = compile_aten(g);
  try {
    exe->run({at::randn({6})});
    FAIL() << "ran without error";
  } catch (const BackendError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("aten::split_with_sizes(%0, [1, 2, 3], 0)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("returned 3 tensors"), std::string::npos) << msg;
  }
}

TEST(AtenBackend, WrongInputCountIsAUserError) {
  auto exe = compile_aten(parse_graph("graph(%0: f32[1]{1}):\n  return (%0)\n"));
  EXPECT_THROW(exe->run({}), UserError);
}

TEST(AtenBackend, DescribeNamesTheBackendAndPrintsTheGraph) {
  Graph g = parse_graph("graph(%0: f32[1]{1}):\n  %1: f32[1]{1} = aten::relu(%0)\n  return (%1)\n");
  EXPECT_EQ(compile_aten(g)->describe(), "backend aten\n" + print_graph(g));
}

// ---- schema mismatches: InternalError naming the node's text and the culprit ---------------

TEST(AtenBackendErrors, TensorWhereScalarExpectedNamesNodeAndArgument) {
  Graph g = parse_graph(
      "graph(%0: f32[3]{1}, %1: f32[3]{1}):\n"
      "  %2: f32[3]{1} = aten::add.Tensor(%0, %1, %0)\n"
      "  return (%2)\n");
  expect_compile_error(g, {"aten::add.Tensor(%0, %1, %0)", "argument 2", "alpha", "a tensor value"});
}

TEST(AtenBackendErrors, TooManyArgumentsNamesNode) {
  Graph g = parse_graph(
      "graph(%0: f32[3]{1}):\n"
      "  %1: f32[3]{1} = aten::relu(%0, 1)\n"
      "  return (%1)\n");
  expect_compile_error(g, {"aten::relu(%0, 1)", "2 arguments"});
}

TEST(AtenBackendErrors, MissingRequiredArgumentNamesIt) {
  Graph g = parse_graph(
      "graph(%0: f32[3]{1}):\n"
      "  %1: f32[3]{1} = aten::mul.Tensor(%0)\n"
      "  return (%1)\n");
  expect_compile_error(g, {"aten::mul.Tensor(%0)", "'other'", "missing"});
}

TEST(AtenBackendErrors, NoneForNonOptionalAndIntListForTensorListAreRejected) {
  expect_compile_error(parse_graph("graph(%0: f32[3]{1}):\n"
                                   "  %1: f32[3]{1} = aten::mul.Tensor(%0, None)\n"
                                   "  return (%1)\n"),
                       {"argument 1", "None"});
  expect_compile_error(parse_graph("graph(%0: f32[3]{1}):\n"
                                   "  %1: f32[3]{1} = aten::cat([1, 2], 0)\n"
                                   "  return (%1)\n"),
                       {"aten::cat([1, 2], 0)", "an int list"});
  expect_compile_error(parse_graph("graph(%0: f32[3]{1}):\n"
                                   "  %1: f32[3]{1} = aten::cat([%0, None], 0)\n"
                                   "  return (%1)\n"),
                       {"argument 0", "a tensor list"});
}

// ATen's backward kernels take undefined tensors where the forward had no such input (ATen's own
// autograd passes them so): None there compiles; the same None for mul's tensor above does not.
TEST(AtenBackendErrors, NoneForABackwardKernelsTensorArgumentIsAnUndefinedTensor) {
  const Graph g = parse_graph("graph(%0: f32[2, 3, 4, 4]{48, 16, 4, 1}):\n"
                              "  %1: f32[2, 3, 2, 2]{12, 4, 2, 1} = aten::_adaptive_avg_pool2d_backward(%0, None)\n"
                              "  return (%1)\n");
  EXPECT_NO_THROW(compile_aten(g));
}

TEST(AtenBackendErrors, OutputCountMustMatchReturns) {
  expect_compile_error(parse_graph("graph(%0: f32[3]{1}):\n"
                                   "  %1: f32[3]{1}, %2: f32[3]{1} = aten::relu(%0)\n"
                                   "  return (%1)\n"),
                       {"aten::relu(%0)", "2 outputs"});
}

TEST(AtenBackendErrors, UseBeforeDefinitionInHandBuiltGraph) {
  Graph g;
  TensorMeta m;
  m.sizes = {3};
  m.strides = {1};
  ValueId x = g.add_input(m);
  ValueId a = g.add_value(m);
  ValueId b = g.add_value(m);
  Node first;
  first.op = OpId::relu;
  first.args = {Arg::of_value(b)};  // b is produced only by the next node
  first.outputs = {a};
  Node second;
  second.op = OpId::relu;
  second.args = {Arg::of_value(x)};
  second.outputs = {b};
  g.nodes = {first, second};
  g.outputs = {a};
  expect_compile_error(g, {"aten::relu(%2)", "before it is defined"});
}

}  // namespace
}  // namespace fastdyn::codegen
