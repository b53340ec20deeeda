// tests/cpp/loop/test_lowering_coverage.cpp — ops.def's Lower column against the lowering tables:
// every row names how the loop IR computes it, and the tables agree with the column one for one
// (a Pointwise row has a pointwise rule, a Kernel row a kernel rule, and no rule exists for any
// other row). Prints what each backend computes, op by op kind: the loop IR backends (llvm_cpu)
// by the column, the aten backend every row (each must be an operator of ATen's dispatcher).
#include "codegen/graph/graph.h"
#include "codegen/loop/lowering_rules.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

namespace fastdyn::codegen {
namespace {

TEST(LoweringCoverage, EveryRowHasTheLoweringItsLowerColumnNames) {
  std::map<Lowering, int> count;
  std::map<Lowering, std::string> names;
  std::string twins_extern;  // in-place ops whose twin runs as an ATen call
  const size_t n = static_cast<size_t>(OpId::kCount);
  for (size_t i = 0; i < n; ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    const std::string name = qualified_name(op);
    ++count[info.lowering];
    names[info.lowering] += " " + name;
    EXPECT_EQ(loop::lowering::find_pointwise(op) != nullptr, info.lowering == Lowering::Pointwise)
        << name << ": ops.def says " << lowering_name(info.lowering) << ", the pointwise table disagrees";
    EXPECT_EQ(loop::lowering::find_kernel(op) != nullptr, info.lowering == Lowering::Kernel)
        << name << ": ops.def says " << lowering_name(info.lowering) << ", the kernel table disagrees";
    EXPECT_EQ(info.category == OpCategory::View, info.lowering == Lowering::View) << name;
    // An in-place row is lowered through its twin, runs in place as an ATen call (a twinless one:
    // codegen/loop/functionalize.cpp), or sends its graph to aten.
    if (info.category == OpCategory::InPlace) {
      EXPECT_TRUE(info.lowering == Lowering::Twin || info.lowering == Lowering::Extern || info.lowering == Lowering::Unlowered)
          << name;
      if (info.lowering == Lowering::Extern) EXPECT_EQ(info.twin, OpId::NoTwin) << name << " runs in place yet has a twin";
    }
    if (info.lowering == Lowering::Twin) {
      EXPECT_EQ(info.category, OpCategory::InPlace) << name;
      // copy_ and fill_ have functional forms of their own (expand + _to_copy; a scalar_tensor first).
      if (op != OpId::copy_ && op != OpId::fill__Scalar && op != OpId::fill__Tensor) {
        ASSERT_NE(info.twin, OpId::NoTwin) << name << " is lowered through a twin it does not have";
        // The twin is a functional op: a kernel computes it, or it runs as an ATen call.
        const Lowering t = op_info(info.twin).lowering;
        EXPECT_TRUE(t == Lowering::Pointwise || t == Lowering::Kernel || t == Lowering::Extern)
            << name << ": its twin " << qualified_name(info.twin) << " is " << lowering_name(t);
        if (t == Lowering::Extern) twins_extern += " " + name;
      }
    }
    if (info.lowering == Lowering::Unlowered) EXPECT_EQ(info.twin, OpId::NoTwin) << name << " has a twin to lower through";
    // The aten backend runs every row through the dispatcher.
    EXPECT_TRUE(c10::Dispatcher::singleton().findSchema({std::string("aten::") + info.aten, info.overload}).has_value())
        << name << " is not an operator of ATen's dispatcher";
  }
  std::printf("llvm_cpu (loop IR): %d pointwise, %d kernels, %d views, %d in-place through their twin;\n"
              "  as ATen calls between kernels (%d):%s\n  in-place, twin an ATen call:%s\n"
              "  graph on aten (%d):%s\naten: all %zu rows\n",
              count[Lowering::Pointwise], count[Lowering::Kernel], count[Lowering::View], count[Lowering::Twin],
              count[Lowering::Extern], names[Lowering::Extern].c_str(), twins_extern.c_str(),
              count[Lowering::Unlowered], names[Lowering::Unlowered].c_str(), n);
  EXPECT_GE(count[Lowering::Pointwise] + count[Lowering::Kernel], 130);
}

}  // namespace
}  // namespace fastdyn::codegen
