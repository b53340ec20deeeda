// tests/cpp/llvm/test_emit_modes.cpp — the llvm_cpu emitter's code-shape decisions, read from the
// LLVM IR it emits for a planned loop Program (before optimisation): streaming stores for outputs
// larger than the last-level cache, column mode for reductions over a strided dim (contiguous
// vectors, no gathers, no lane shuffles), split mode for full reductions (one parallel body per
// inner stage). Numerics are checked end to end in tests/python/test_llvm_cpu.py.
#include "codegen/graph/graph.h"
#include "codegen/llvm/emit.h"
#include "codegen/llvm/jit_engine.h"
#include "codegen/loop/passes.h"

#include <gtest/gtest.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

namespace fastdyn::codegen {
namespace {

std::string emitted_ir(const std::string& graph_text) {
  loop::Program p = loop::build_program(parse_graph(graph_text));
  llvm_jit::ModuleBuilder mb = llvm_jit::new_module("test");
  llvm_emit::emit_program(p, *mb.module, llvm_jit::host_target().vector_bits);
  std::string s;
  llvm::raw_string_ostream os(s);
  mb.module->print(os, nullptr);
  return os.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// 2^24 floats (64 MiB) is larger than the last-level cache of the machines we run on; 2^16 is not.
std::string pointwise(int64_t n) {
  const std::string shape = "f32[" + std::to_string(n) + "]{1}";
  return "graph(%0: " + shape + ", %1: " + shape + "):\n  %2: " + shape + " = aten::mul.Tensor(%0, %1)\n" +
         "  %3: " + shape + " = aten::relu(%2)\n  return (%3)\n";
}

TEST(EmitModes, LargeContiguousOutputStreamsAndFences) {
  std::string big = emitted_ir(pointwise(int64_t{1} << 24));
  EXPECT_GT(count(big, "!nontemporal"), 0) << big;
  EXPECT_EQ(count(big, "call void @llvm.x86.sse.sfence()"), 1) << big;
  std::string small = emitted_ir(pointwise(int64_t{1} << 16));
  EXPECT_EQ(count(small, "!nontemporal"), 0);
  EXPECT_EQ(count(small, "sfence"), 0);
}

TEST(EmitModes, ReductionOverRowsVectorisesAlongTheKeptDim) {
  // x.sum(0) of a row-major [4096, 1024]: row mode would gather one element per lane (scalar loads
  // at extractelement'ed offsets) and extract the result from the combined lanes at the end.
  std::string ir = emitted_ir(R"(graph(%0: f32[4096, 1024]{1024, 1}):
  %1: f32[1024]{1} = aten::sum.dim_IntList(%0, [0], False, None)
  return (%1)
)");
  EXPECT_EQ(count(ir, "extractelement"), 0) << ir;
  // The same sum over the contiguous dim stays in row mode: lanes are combined at the end.
  std::string rows = emitted_ir(R"(graph(%0: f32[1024, 4096]{4096, 1}):
  %1: f32[1024]{1} = aten::sum.dim_IntList(%0, [1], False, None)
  return (%1)
)");
  EXPECT_GT(count(rows, "extractelement"), 0);
}

TEST(EmitModes, FullReductionSplitsIntoChunkBodies) {
  std::string big = emitted_ir(R"(graph(%0: f32[16777216]{1}):
  %1: f32[]{} = aten::sum.dim_IntList(%0, None, False, None)
  return (%1)
)");
  EXPECT_EQ(count(big, "define internal void @k0.stage0("), 1) << big;
  EXPECT_EQ(count(big, "@k0.body"), 0);
  // softmax over one long row: three inner stages, each its own parallel body
  std::string softmax = emitted_ir(R"(graph(%0: f32[1048576]{1}):
  %1: f32[1048576]{1} = aten::softmax.int(%0, 0, None)
  return (%1)
)");
  EXPECT_EQ(count(softmax, "define internal void @k0.stage"), 3) << softmax;
  std::string small = emitted_ir(R"(graph(%0: f32[1024]{1}):
  %1: f32[]{} = aten::sum.dim_IntList(%0, None, False, None)
  return (%1)
)");
  EXPECT_EQ(count(small, ".stage0"), 0);
}

}  // namespace
}  // namespace fastdyn::codegen
