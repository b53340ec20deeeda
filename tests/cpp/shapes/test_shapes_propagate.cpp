// tests/cpp/shapes/test_shapes_propagate.cpp — sizes as symbols through capture
// (codegen/shapes/propagate.h): which rules keep a symbol, which pin it, and that a symbolic
// graph specialised to other sizes runs like eager at those sizes.
#include "codegen/aten/aten_backend.h"
#include "codegen/capture/capture.h"
#include "tests/cpp/capture/recorded_graphs.h"
#include "codegen/shapes/propagate.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace fastdyn::codegen {
namespace {

using shapes::SizeExpr;

using recorded::contiguous;
using recorded::record;

// A graph with input %0 of `sizes`, dim `dim` a symbol s0.
Graph dynamic_input(std::vector<int64_t> sizes, int64_t dim) {
  Graph g;
  g.add_input(contiguous(std::move(sizes)));
  EXPECT_TRUE(shapes::make_dynamic(g, 0, dim));
  return g;
}


std::string sizes_text(const TensorMeta& m) {
  std::string s;
  for (const SizeExpr& e : shapes::sizes_of(m)) s += (s.empty() ? "" : ", ") + e.str();
  return "[" + s + "]";
}

std::string strides_text(const TensorMeta& m) {
  std::string s;
  for (const SizeExpr& e : shapes::strides_of(m)) s += (s.empty() ? "" : ", ") + e.str();
  return "{" + s + "}";
}

TEST(ShapesPropagate, InputDimBecomesASymbolWithRowMajorStrides) {
  Graph g = dynamic_input({8, 4, 16}, 1);
  EXPECT_EQ(sizes_text(g.meta(0)), "[8, s0, 16]");
  EXPECT_EQ(strides_text(g.meta(0)), "{16*s0, 16, 1}");
  EXPECT_EQ(shapes::hints(g), std::vector<int64_t>{4});
  EXPECT_TRUE(shapes::is_dynamic(g));
}

TEST(ShapesPropagate, SizesZeroAndOneAndOtherLayoutsStaySpecialised) {
  Graph g;
  g.add_input(contiguous({1, 8}));
  TensorMeta t = contiguous({8, 4});
  t.strides = {1, 8};  // a transposed view
  g.add_input(t);
  EXPECT_FALSE(shapes::make_dynamic(g, 0, 0));
  EXPECT_FALSE(shapes::make_dynamic(g, 1, 0));
  EXPECT_FALSE(shapes::is_dynamic(g));
}

TEST(ShapesPropagate, PointwiseAndBroadcastKeepTheSymbol) {
  Graph g = dynamic_input({8, 256}, 0);
  ValueId b = g.add_input(contiguous({256}));
  ValueId y = record(g, Family::mul, {CallArg::tensor(0), CallArg::of_double(2.0)});
  ValueId z = record(g, Family::add, {CallArg::tensor(y), CallArg::tensor(b)});
  ValueId w = record(g, Family::sin, {CallArg::tensor(z)});
  EXPECT_EQ(sizes_text(g.meta(w)), "[s0, 256]");
  EXPECT_EQ(strides_text(g.meta(w)), "{256, 1}");
  EXPECT_TRUE(shapes::is_dynamic(g));
}

TEST(ShapesPropagate, BroadcastAgainstAStaticSizePinsTheSymbol) {
  Graph g = dynamic_input({8, 256}, 0);
  ValueId other = g.add_input(contiguous({8, 256}));
  ValueId y = record(g, Family::add, {CallArg::tensor(0), CallArg::tensor(other)});
  EXPECT_FALSE(g.meta(y).symbolic());
  EXPECT_TRUE(g.symbols.at(0).pinned);
  EXPECT_FALSE(g.meta(0).symbolic());  // pinned everywhere: the graph is static again
  EXPECT_FALSE(shapes::is_dynamic(g));
}

TEST(ShapesPropagate, ReductionsAndSoftmax) {
  Graph g = dynamic_input({8, 512}, 0);
  ValueId s = record(g, Family::sum, {CallArg::tensor(0), CallArg::of_int(-1)});
  EXPECT_EQ(sizes_text(g.meta(s)), "[s0]");
  ValueId m = record(g, Family::amax, {CallArg::tensor(0), CallArg::of_int(-1), CallArg::of_bool(true)});
  EXPECT_EQ(sizes_text(g.meta(m)), "[s0, 1]");
  ValueId sm = record(g, Family::softmax, {CallArg::tensor(0), CallArg::of_int(0)});
  EXPECT_EQ(sizes_text(g.meta(sm)), "[s0, 512]");
  ValueId all = record(g, Family::sum, {CallArg::tensor(0)});
  EXPECT_EQ(sizes_text(g.meta(all)), "[]");
  EXPECT_TRUE(shapes::is_dynamic(g));
}

TEST(ShapesPropagate, ViewsKeepSymbolsOrPin) {
  Graph g = dynamic_input({8, 256}, 0);
  ValueId v = record(g, Family::view, {CallArg::tensor(0), CallArg::of_ints({-1, 64})});
  EXPECT_EQ(sizes_text(g.meta(v)), "[4*s0, 64]");
  ValueId t = record(g, Family::transpose, {CallArg::tensor(0), CallArg::of_int(0), CallArg::of_int(1)});
  EXPECT_EQ(sizes_text(g.meta(t)), "[256, s0]");
  EXPECT_EQ(strides_text(g.meta(t)), "{1, 256}");
  ValueId u = record(g, Family::unsqueeze, {CallArg::tensor(0), CallArg::of_int(1)});
  EXPECT_EQ(sizes_text(g.meta(u)), "[s0, 1, 256]");
  ValueId n = record(g, Family::narrow, {CallArg::tensor(0), CallArg::of_int(1), CallArg::of_int(0), CallArg::of_int(128)});
  EXPECT_EQ(sizes_text(g.meta(n)), "[s0, 128]");
  EXPECT_EQ(strides_text(g.meta(n)), "{256, 1}");
  EXPECT_TRUE(shapes::is_dynamic(g));
  // A shape given as numbers where a symbol was: the graph is valid at the traced size only.
  record(g, Family::view, {CallArg::tensor(0), CallArg::of_ints({2048})});
  EXPECT_FALSE(shapes::is_dynamic(g));
}

TEST(ShapesPropagate, LayerNormOverASymbolicDimPinsIt) {
  Graph g = dynamic_input({4, 32}, 0);
  ValueId y = record(g, Family::layer_norm, {CallArg::tensor(0), CallArg::of_ints({32})});
  EXPECT_EQ(sizes_text(g.meta(y)), "[s0, 32]");
  Graph h = dynamic_input({4, 32}, 1);
  record(h, Family::layer_norm, {CallArg::tensor(0), CallArg::of_ints({32})});
  EXPECT_FALSE(shapes::is_dynamic(h));
}

TEST(ShapesPropagate, AnOpWithoutASymbolicRulePinsItsInputs) {
  Graph g = dynamic_input({2, 3, 8}, 2);
  record(g, Family::pad, {CallArg::tensor(0), CallArg::of_ints({1, 1})});
  EXPECT_TRUE(g.symbols.at(0).pinned);
  EXPECT_FALSE(shapes::is_dynamic(g));
}

TEST(ShapesPropagate, LinearKeepsTheBatchSymbol) {
  Graph g = dynamic_input({8, 16}, 0);
  ValueId w = g.add_input(contiguous({32, 16}));
  ValueId y = record(g, Family::linear, {CallArg::tensor(0), CallArg::tensor(w)});
  EXPECT_EQ(sizes_text(g.meta(y)), "[s0, 32]");
}

TEST(ShapesPropagate, TextFormRoundTripsSymbols) {
  Graph g = dynamic_input({8, 256}, 0);
  ValueId y = record(g, Family::view, {CallArg::tensor(0), CallArg::of_ints({-1, 64})});
  g.outputs.push_back(y);
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("symbols(s0 = %0[0])"), std::string::npos) << text;
  EXPECT_NE(text.find("sym[4*s0, 64]{64, 1}"), std::string::npos) << text;
  EXPECT_EQ(parse_graph(text), g);
}

// x + y with both lengths symbols of one size: one symbol (the later unified into the earlier),
// which the text form keeps; pinning either pins both.
TEST(ShapesPropagate, SizesAnOpNeedsEqualAreUnified) {
  Graph g = dynamic_input({6, 4}, 0);
  g.add_input(contiguous({6, 4}));
  ASSERT_TRUE(shapes::make_dynamic(g, 1, 0));
  ValueId y = record(g, Family::add, {CallArg::tensor(0), CallArg::tensor(1)});
  EXPECT_EQ(sizes_text(g.meta(y)), "[s0, 4]");
  EXPECT_EQ(g.symbols.at(1).same_as, 0);
  EXPECT_FALSE(g.symbols.at(1).pinned);
  EXPECT_EQ(shapes::root(g, 1), 0);
  EXPECT_TRUE(shapes::is_dynamic(g));
  g.outputs.push_back(y);
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("s1 = %1[0] same s0"), std::string::npos) << text;
  EXPECT_EQ(parse_graph(text), g);
  shapes::pin(g, 1, "test");
  EXPECT_TRUE(g.symbols.at(0).pinned);
  EXPECT_FALSE(shapes::is_dynamic(g));
}

// Different sizes at the traced call cannot be one symbol: both pin, as before.
TEST(ShapesPropagate, SizesOfDifferentHintsPinInsteadOfUnifying) {
  Graph g = dynamic_input({6, 4}, 0);
  g.add_input(contiguous({1, 4}));
  ValueId y = record(g, Family::add, {CallArg::tensor(0), CallArg::tensor(1)});
  EXPECT_EQ(sizes_text(g.meta(y)), "[s0, 4]");  // broadcasting against 1 keeps it
  Graph h = dynamic_input({6, 4}, 0);
  h.add_input(contiguous({5, 4}));
  ASSERT_TRUE(shapes::make_dynamic(h, 1, 0));
  CaptureResult r = record_call(h, CaptureContext{}, Family::add, {CallArg::tensor(0), CallArg::tensor(1)}, {});
  EXPECT_FALSE(r.ok);  // eager raises: 6 vs 5
}

// x[:, -1:] and x[:, -1] along a symbolic dim: the views' storage offsets are symbolic, and the
// specialised graphs read the last column at every size.
TEST(ShapesPropagate, TheLastIndexGivesASymbolicOffset) {
  Graph g = dynamic_input({3, 8}, 1);
  ValueId tail = record(g, Family::getitem, {CallArg::tensor(0), CallArg::tuple({CallArg::slice(std::nullopt, std::nullopt, std::nullopt),
                                                                                   CallArg::slice(-1, std::nullopt, std::nullopt)})});
  ValueId last = record(g, Family::select, {CallArg::tensor(0), CallArg::of_int(1), CallArg::of_int(-1)});
  ASSERT_TRUE(shapes::is_dynamic(g));
  ASSERT_EQ(g.meta(last).sym_offset.size(), 1u);
  EXPECT_EQ(g.meta(last).sym_offset[0].str(), "s0 - 1");
  ValueId a = record(g, Family::mul, {CallArg::tensor(tail), CallArg::of_double(2.0)});
  ValueId b = record(g, Family::add, {CallArg::tensor(last), CallArg::of_double(1.0)});
  g.outputs = {a, b};
  EXPECT_EQ(parse_graph(print_graph(g)), g);
  for (int64_t n : {2, 5, 11}) {
    Graph sg = shapes::specialize(g, {n});
    EXPECT_EQ(sg.meta(last).storage_offset, n - 1);
    at::Tensor x = at::randn({3, n});
    std::vector<at::Tensor> out = compile_aten(sg)->run({x});
    EXPECT_TRUE(at::equal(out.at(0), x.narrow(1, -1, 1) * 2));
    EXPECT_TRUE(at::equal(out.at(1), x.select(1, -1) + 1));
  }
}

// One symbolic graph, specialised to several sizes, computes what eager does at each.
TEST(ShapesPropagate, SpecialisedGraphsRunLikeEagerAtEverySize) {
  Graph g = dynamic_input({8, 64}, 0);
  ValueId y = record(g, Family::mul, {CallArg::tensor(0), CallArg::of_double(2.0)});
  ValueId s = record(g, Family::softmax, {CallArg::tensor(y), CallArg::of_int(-1)});
  ValueId v = record(g, Family::view, {CallArg::tensor(s), CallArg::of_ints({-1, 32})});
  g.outputs.push_back(v);
  ASSERT_TRUE(shapes::is_dynamic(g));
  for (int64_t n : {2, 5, 8, 37}) {
    Graph sg = shapes::specialize(g, {n});
    EXPECT_TRUE(sg.symbols.empty());
    EXPECT_EQ(sg.meta(v).sizes, (std::vector<int64_t>{2 * n, 32}));
    at::Tensor x = at::randn({n, 64});
    std::vector<at::Tensor> out = compile_aten(sg)->run({x});
    EXPECT_TRUE(at::allclose(out.at(0), at::softmax(x * 2, -1).view({-1, 32})));
  }
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// x.view(n, -1) with n = x.shape[0]: the node records n's expression; specialising the graph
// evaluates it, so an op-by-op backend runs the view at the call's size.
TEST(ShapesPropagate, SymbolicIntArgumentsAreRecordedPrintedAndSpecialised) {
  Graph g = dynamic_input({6, 4, 8}, 0);
  CallArg n = CallArg::of_int(6);
  n.sym = {SizeExpr::symbol(0)};
  CallArg shape = CallArg::of_ints({6, -1});
  shape.sym = {SizeExpr::symbol(0), SizeExpr(-1)};
  ValueId v = record(g, Family::view, {CallArg::tensor(0), shape});
  EXPECT_EQ(sizes_text(g.meta(v)), "[s0, 32]");
  ValueId w = record(g, Family::layer_norm, {CallArg::tensor(v), CallArg::of_ints({32})});
  g.outputs.push_back(w);
  ASSERT_TRUE(shapes::is_dynamic(g));
  const std::string text = print_graph(g);
  EXPECT_NE(text.find("aten::view(%0, [s0, -1])"), std::string::npos) << text;
  EXPECT_EQ(parse_graph(text), g);
  Graph sg = shapes::specialize(g, {3});
  EXPECT_EQ(sg.nodes.at(0).args.at(1).ints, (std::vector<int64_t>{3, -1}));
  at::Tensor x = at::randn({3, 4, 8});
  at::Tensor out = compile_aten(sg)->run({x}).at(0);
  EXPECT_TRUE(at::allclose(out, at::layer_norm(x.view({3, -1}), {32})));
  // A symbolic int passed where no binder takes one is read as a number: its size is pinned.
  record(g, Family::narrow, {CallArg::tensor(0), CallArg::of_int(0), CallArg::of_int(0), n});
  EXPECT_FALSE(shapes::is_dynamic(g));
}

}  // namespace
}  // namespace fastdyn::codegen
