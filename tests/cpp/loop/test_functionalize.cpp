// tests/cpp/loop/test_functionalize.cpp — functionalize (in-place ops → out-of-place twins plus
// write-backs) and how the scheduler stores the write-backs: graph text in, functional graph and
// planned kernels checked.
#include "codegen/graph/graph.h"
#include "codegen/loop/passes.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fastdyn::codegen::loop {
namespace {

std::string unsupported_reason(const char* text) {
  try {
    build_program(parse_graph(text));
  } catch (const Unsupported& e) {
    return e.what();
  }
  return "";
}

TEST(Functionalize, InPlaceOpsBecomeTwinsAndOutputsNameTheInput) {
  Functional f = functionalize(parse_graph(R"(graph(%0: f32[4]{1}, %1: f32[4]{1}):
  %2: f32[4]{1} = aten::add_.Tensor(%0, %1, 1)
  %3: f32[4]{1} = aten::relu_(%0)
  %4: f32[4]{1} = aten::mul.Scalar(%0, 3)
  return (%3, %4, %0)
)"));
  EXPECT_EQ(print_graph(f.graph), R"(graph(%0: f32[4]{1}, %1: f32[4]{1}):
  %2: f32[4]{1} = aten::add.Tensor(%0, %1, 1)
  %3: f32[4]{1} = aten::relu(%2)
  %4: f32[4]{1} = aten::mul.Scalar(%3, 3)
  return (%0, %4, %0)
)");
  ASSERT_EQ(f.writebacks.size(), 1u);
  EXPECT_EQ(f.writebacks[0].input, 0);
  EXPECT_EQ(f.writebacks[0].value, 3);
  EXPECT_EQ(f.writebacks[0].bumps, 2);
}

TEST(Functionalize, CopyBroadcastsAndCastsIntoTheDestination) {
  Functional f = functionalize(parse_graph(R"(graph(%0: f64[3, 4]{4, 1}, %1: f32[4]{1}):
  %2: f64[3, 4]{4, 1} = aten::copy_(%0, %1, False)
  return (%2)
)"));
  EXPECT_EQ(print_graph(f.graph), R"(graph(%0: f64[3, 4]{4, 1}, %1: f32[4]{1}):
  %3: f32[3, 4]{0, 1} = aten::expand(%1, [3, 4], False)
  %2: f64[3, 4]{4, 1} = aten::_to_copy(%3, torch.float64, None, None, None, False, None)
  return (%0)
)");
}

TEST(Functionalize, FillIsACopyOfTheValueAsA0DimTensorOfTheDestinationsDtype) {
  Functional f = functionalize(parse_graph(R"(graph(%0: i64[3, 4]{4, 1}, %1: f32[]{}):
  %2: i64[3, 4]{4, 1} = aten::fill_.Scalar(%0, 2.5)
  %3: i64[3, 4]{4, 1} = aten::add.Tensor(%2, %2, 1)
  %4: i64[3, 4]{4, 1} = aten::fill_.Tensor(%0, %1)
  return (%3)
)"));
  EXPECT_EQ(print_graph(f.graph), R"(graph(%0: i64[3, 4]{4, 1}, %1: f32[]{}):
  %5: i64[]{} = aten::scalar_tensor(2.5, torch.int64, None, device("cpu"), None)
  %6: i64[3, 4]{0, 0} = aten::expand(%5, [3, 4], False)
  %2: i64[3, 4]{4, 1} = aten::_to_copy(%6, torch.int64, None, None, None, False, None)
  %3: i64[3, 4]{4, 1} = aten::add.Tensor(%2, %2, 1)
  %7: f32[3, 4]{0, 0} = aten::expand(%1, [3, 4], False)
  %4: i64[3, 4]{4, 1} = aten::_to_copy(%7, torch.int64, None, None, None, False, None)
  return (%3)
)");
  ASSERT_EQ(f.writebacks.size(), 1u);
  EXPECT_EQ(f.writebacks[0].value, 4);
}

TEST(Functionalize, AMutatedIntermediateNeedsNoWriteBack) {
  Functional f = functionalize(parse_graph(R"(graph(%0: f32[4]{1}):
  %1: f32[4]{1} = aten::mul.Scalar(%0, 2)
  %2: f32[4]{1} = aten::add_.Scalar(%1, 1, 1)
  return (%1)
)"));
  EXPECT_TRUE(f.writebacks.empty());
  EXPECT_EQ(f.graph.outputs, std::vector<ValueId>{2});
  EXPECT_EQ(f.graph.nodes[1].op, OpId::add_Scalar);
}

TEST(Functionalize, AWriteIntoASelectOfASliceRebuildsTheTensorAroundIt) {
  // x[1][2:4] = y: the copy into the view, the row rebuilt around it, then x around the row.
  Functional f = functionalize(parse_graph(R"(graph(%0: f32[3, 5]{5, 1}, %1: f32[2]{1}):
  %2: f32[5]{1}+5 = aten::select.int(%0, 0, 1)
  %3: f32[2]{1}+7 = aten::slice.Tensor(%2, 0, 2, 4, 1)
  %4: f32[2]{1}+7 = aten::copy_(%3, %1, False)
  %5: f32[3, 5]{5, 1} = aten::mul.Scalar(%0, 2)
  return (%5)
)"));
  EXPECT_EQ(print_graph(f.graph), R"(graph(%0: f32[3, 5]{5, 1}, %1: f32[2]{1}):
  %2: f32[5]{1}+5 = aten::select.int(%0, 0, 1)
  %3: f32[2]{1}+7 = aten::slice.Tensor(%2, 0, 2, 4, 1)
  %6: f32[2]{1} = aten::_to_copy(%1, torch.float32, None, None, None, False, None)
  %7: f32[2]{1}+5 = aten::slice.Tensor(%2, 0, 0, 2, 1)
  %8: f32[1]{1}+9 = aten::slice.Tensor(%2, 0, 4, 5, 1)
  %9: f32[5]{1} = aten::cat([%7, %6, %8], 0)
  %10: f32[1, 5]{5, 1} = aten::unsqueeze(%9, 0)
  %11: f32[1, 5]{5, 1} = aten::slice.Tensor(%0, 0, 0, 1, 1)
  %12: f32[1, 5]{5, 1}+10 = aten::slice.Tensor(%0, 0, 2, 3, 1)
  %13: f32[3, 5]{5, 1} = aten::cat([%11, %10, %12], 0)
  %14: f32[5]{1}+5 = aten::select.int(%13, 0, 1)
  %15: f32[2]{1}+7 = aten::slice.Tensor(%14, 0, 2, 4, 1)
  %5: f32[3, 5]{5, 1} = aten::mul.Scalar(%13, 2)
  return (%5)
)");
  ASSERT_EQ(f.writebacks.size(), 1u);
  EXPECT_EQ(f.writebacks[0].input, 0);
  EXPECT_EQ(f.writebacks[0].value, 13);
}

TEST(Functionalize, WhatTheLoopsCannotExpressIsRefusedWithAReason) {
  EXPECT_NE(unsupported_reason(R"(graph(%0: f32[4, 5]{5, 1}):
  %1: f32[5, 4]{1, 5} = aten::transpose.int(%0, 0, 1)
  %2: f32[5, 4]{1, 5} = aten::add_.Scalar(%1, 1, 1)
  return (%0)
)").find("writes into a view"), std::string::npos);
  EXPECT_NE(unsupported_reason(R"(graph(%0: f32[6]{1}):
  %1: f32[3]{2} = aten::slice.Tensor(%0, 0, 0, None, 2)
  %2: f32[3]{2} = aten::mul_.Scalar(%1, 2)
  return (%0)
)").find("writes into a view"), std::string::npos);
  EXPECT_NE(unsupported_reason(R"(graph(%0: f32[6]{1}):
  %1: f32[5]{1} = aten::slice.Tensor(%0, 0, 1, None, 1)
  %2: f32[6]{1} = aten::mul_.Scalar(%0, 2)
  %3: f32[5]{1} = aten::add.Scalar(%1, 1, 1)
  return (%3)
)").find("read after the tensor is mutated"), std::string::npos);
  EXPECT_NE(unsupported_reason(R"(graph(%0: f32[4, 4]{4, 1}):
  %1: f32[4, 4]{1, 4} = aten::transpose.int(%0, 0, 1)
  %2: f32[4, 4]{4, 1} = aten::add_.Tensor(%0, %1, 1)
  return (%2)
)").find("reads a view of what it writes"), std::string::npos);
  // int64 += 0.5 computes in float and truncates: the twin would compute in int64.
  EXPECT_NE(unsupported_reason(R"(graph(%0: i64[4]{1}):
  %1: i64[4]{1} = aten::mul_.Scalar(%0, 0.5)
  return (%1)
)").find("no out-of-place form"), std::string::npos);
  EXPECT_NE(unsupported_reason(R"(graph(%0: f32[4, 3]{0, 1}):
  %1: f32[4, 3]{0, 1} = aten::add_.Scalar(%0, 1, 1)
  return (%1)
)").find("expanded"), std::string::npos);
}

TEST(Functionalize, AViewReadBeforeTheMutationIsFine) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[6]{1}):
  %1: f32[5]{1} = aten::slice.Tensor(%0, 0, 1, None, 1)
  %2: f32[5]{1} = aten::mul.Scalar(%1, 2)
  %3: f32[6]{1} = aten::mul_.Scalar(%0, 2)
  return (%2, %3)
)"));
  EXPECT_EQ(p.writebacks.size(), 1u);
}

// The write-back kernel is the last step and stores the input itself.
const Store* only_store(const Kernel& k) {
  if (k.stages.size() != 1 || k.stages[0].stores.size() != 1) return nullptr;
  return &k.stages[0].stores[0];
}

TEST(WriteBacks, AnElementwiseUpdateIsComputedInTheWriteBackKernel) {
  Program p = build_program(parse_graph(R"(graph(%0: f32[4, 8]{8, 1}, %1: f32[8]{1}):
  %2: f32[4, 8]{8, 1} = aten::add_.Tensor(%0, %1, 1)
  return (%2)
)"));
  ASSERT_EQ(p.kernels.size(), 1u);
  const Store* st = only_store(p.kernels[0]);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->dst.value, 0);
  EXPECT_EQ(p.plans[0].kind, ValuePlan::Kind::Input);
  EXPECT_EQ(p.kernels[0].stages[0].loads.size(), 2u);  // x and y, each once: x + y into x
}

TEST(WriteBacks, ReadingAnotherMutatedInputMaterialisesTheValueFirst) {
  // a += b; b *= a: b's final value reads a's new value, which a's write-back overwrites.
  Program p = build_program(parse_graph(R"(graph(%0: f32[16]{1}, %1: f32[16]{1}):
  %2: f32[16]{1} = aten::add_.Tensor(%0, %1, 1)
  %3: f32[16]{1} = aten::mul_.Tensor(%1, %0)
  return (%2, %3)
)"));
  ASSERT_EQ(p.writebacks.size(), 2u);
  ASSERT_GE(p.kernels.size(), 3u);
  const size_t n = p.kernels.size();
  for (size_t k = n - 2; k < n; ++k) {  // the two write-backs: each loads one buffer and stores an input
    const Store* st = only_store(p.kernels[k]);
    ASSERT_NE(st, nullptr);
    EXPECT_TRUE(st->dst.value == 0 || st->dst.value == 1);
    for (const Access& a : p.kernels[k].stages[0].loads)
      EXPECT_TRUE(a.value == st->dst.value || (a.value != 0 && a.value != 1)) << print_program(p);
  }
  EXPECT_EQ(p.steps.back().kind, Step::Kind::Kernel);
}

TEST(WriteBacks, AValueWithOtherReadersIsStoredIntoItsInputDirectly) {
  // SGD with momentum: buf = buf * 0.9 + grad; param += -0.1 * buf. The new buf is read by the
  // parameter's update too, so one kernel computes it and stores it into buf itself (nothing else
  // reads buf's old contents); the parameter's new value, read only by its write-back and reading
  // that stored value, joins the same kernel and is stored into the parameter: one pass over the
  // three tensors, no buffer, no copy kernel.
  Program p = build_program(parse_graph(R"(graph(%0: f32[16]{1}, %1: f32[16]{1}, %2: f32[16]{1}):
  %3: f32[16]{1} = aten::mul_.Scalar(%1, 0.9)
  %4: f32[16]{1} = aten::add_.Tensor(%3, %2, 1)
  %5: f32[16]{1} = aten::add_.Tensor(%0, %4, -0.1)
  return ()
)"));
  ASSERT_EQ(p.writebacks.size(), 2u);
  ASSERT_EQ(p.kernels.size(), 1u) << print_program(p);
  for (const ValuePlan& pl : p.plans) EXPECT_NE(pl.kind, ValuePlan::Kind::Buffer) << print_program(p);
  const std::vector<Store>& stores = p.kernels[0].stages.at(0).stores;
  ASSERT_EQ(stores.size(), 2u) << print_program(p);
  std::vector<ValueId> roots;
  for (const Store& st : stores) {
    const ValuePlan& pl = p.plans[static_cast<size_t>(st.dst.value)];
    roots.push_back(pl.kind == ValuePlan::Kind::Alias ? pl.root : st.dst.value);
  }
  std::sort(roots.begin(), roots.end());
  EXPECT_EQ(roots, (std::vector<ValueId>{0, 1})) << print_program(p);
}

TEST(WriteBacks, AnInputReadAfterTheValueIsComputedKeepsItsCopyKernel) {
  // y = x * 2 + 1 is read by the sum and written back, but z reads x's old contents after y's
  // kernel: y stays a buffer, copied into x by the last kernel.
  Program p = build_program(parse_graph(R"(graph(%0: f32[16]{1}, %1: f32[16]{1}):
  %2: f32[16]{1} = aten::mul.Scalar(%0, 2)
  %3: f32[16]{1} = aten::add.Scalar(%2, 1, 1)
  %4: f32[16]{1} = aten::exp(%3)
  %5: f32[16]{1} = aten::flip(%0, [0])
  %6: f32[16]{1} = aten::add.Tensor(%4, %5, 1)
  %7: f32[16]{1} = aten::copy_(%0, %3, False)
  return (%6)
)"));
  ASSERT_EQ(p.writebacks.size(), 1u);
  const Store* last = only_store(p.kernels.back());
  ASSERT_NE(last, nullptr) << print_program(p);
  EXPECT_EQ(last->dst.value, 0) << print_program(p);
}

}  // namespace
}  // namespace fastdyn::codegen::loop

namespace fastdyn::codegen::loop {
namespace {

// index_copy_ (ops.def: InPlace, lowered Extern) stays in place on a graph input nothing before it
// reads: later reads read its result, the input gets no write-back, and the step is an ATen call.
TEST(Functionalize, AnInPlaceExternWritesItsInputWhereItLies) {
  const char* text = R"(graph(%0: f32[1, 2, 8, 4]{64, 32, 4, 1}, %1: i64[1]{1}, %2: f32[1, 2, 1, 4]{8, 4, 4, 1}):
  %3: f32[1, 2, 8, 4]{64, 32, 4, 1} = aten::index_copy_(%0, 2, %1, %2)
  %4: f32[1, 2, 8, 4]{64, 32, 4, 1} = aten::mul.Scalar(%0, 2)
  return (%4, %0)
)";
  Functional f = functionalize(parse_graph(text));
  EXPECT_EQ(print_graph(f.graph), R"(graph(%0: f32[1, 2, 8, 4]{64, 32, 4, 1}, %1: i64[1]{1}, %2: f32[1, 2, 1, 4]{8, 4, 4, 1}):
  %3: f32[1, 2, 8, 4]{64, 32, 4, 1} = aten::index_copy_(%0, 2, %1, %2)
  %4: f32[1, 2, 8, 4]{64, 32, 4, 1} = aten::mul.Scalar(%3, 2)
  return (%4, %0)
)");
  EXPECT_TRUE(f.writebacks.empty());
  ASSERT_EQ(f.extern_writes.size(), 1u);
  EXPECT_EQ(f.extern_writes[0], 0);
  Program p = build_program(parse_graph(text));
  EXPECT_TRUE(p.mutates_inputs());
  ASSERT_FALSE(p.steps.empty());
  EXPECT_EQ(p.steps.front().kind, Step::Kind::Extern);  // the write first, then the kernel reading it
  // Its old contents read first, or a second writer: the graph goes to ATen.
  EXPECT_NE(unsupported_reason(R"(graph(%0: f32[8]{1}, %1: i64[1]{1}, %2: f32[1]{1}):
  %3: f32[8]{1} = aten::mul.Scalar(%0, 2)
  %4: f32[8]{1} = aten::index_copy_(%0, 0, %1, %2)
  return (%3)
)").find("its old contents are read"), std::string::npos);
  EXPECT_NE(unsupported_reason(R"(graph(%0: f32[8]{1}, %1: i64[1]{1}, %2: f32[1]{1}):
  %3: f32[8]{1} = aten::index_copy_(%0, 0, %1, %2)
  %4: f32[8]{1} = aten::add_.Scalar(%0, 1, 1)
  return (%4)
)").find("written by other ops"), std::string::npos);
}

}  // namespace
}  // namespace fastdyn::codegen::loop
