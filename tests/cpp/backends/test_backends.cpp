// tests/cpp/backends/test_backends.cpp — the backend table and the one compile entry
// (codegen/backends/backends.h) with the graph-pass list (codegen/passes/graph_passes.h): names parse
// both ways, a request resolves by device and by what this build has, the graph passes rewrite
// what they promise, and prepare_graph's executable computes eager's values on every backend.
#include "codegen/backends/backends.h"
#include "runtime/cuda/cuda_api.h"
#include "codegen/passes/graph_passes.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace fastdyn::codegen {
namespace {

TEST(Backends, NamesParseBothWaysAndUnknownOnesDoNot) {
  for (const BackendInfo& b : backend_table()) {
    ASSERT_TRUE(parse_backend(b.name).has_value()) << b.name;
    EXPECT_EQ(*parse_backend(b.name), b.id);
    EXPECT_STREQ(backend_name(b.id), b.name);
    EXPECT_NE(backend_choices().find(std::string("'") + b.name + "'"), std::string::npos);
  }
  EXPECT_FALSE(parse_backend("llvm").has_value());
  EXPECT_FALSE(parse_backend("").has_value());
  EXPECT_FALSE(parse_backend("Aten").has_value());
}

const char* kPointwise =
    "graph(%0: f32[4, 8]{8, 1}):\n"
    "  %1: f32[4, 8]{8, 1} = aten::mul.Scalar(%0, 2)\n"
    "  %2: f32[4, 8]{8, 1} = aten::relu(%1)\n"
    "  return (%2)\n";

bool built(Backend b) {
  for (const BackendInfo& i : backend_table())
    if (i.id == b) return i.built;
  return false;
}

TEST(Backends, RequestsResolveByDeviceAndBuild) {
  Graph cpu = parse_graph(kPointwise);
  const Backend native = resolve_backend(Backend::Native, cpu);
  EXPECT_EQ(native, built(Backend::LlvmCpu) ? Backend::LlvmCpu : Backend::Aten);
  EXPECT_EQ(resolve_backend(Backend::LlvmCpu, cpu), native);  // unbuilt: aten runs it
  EXPECT_EQ(resolve_backend(Backend::Aten, cpu), Backend::Aten);
  Graph gpu = cpu;
  for (TensorMeta& m : gpu.values) m.device = c10::Device(c10::DeviceType::CUDA, 0);
  const Backend gpu_native = runtime::cuda::available() ? Backend::Cuda : Backend::Aten;
  EXPECT_EQ(resolve_backend(Backend::Native, gpu), gpu_native) << "cuda where NVRTC and a GPU load, else aten";
  EXPECT_EQ(resolve_backend(Backend::Cuda, gpu), gpu_native);
  EXPECT_EQ(resolve_backend(Backend::Cuda, cpu), Backend::Aten) << "cuda takes no CPU graph";
  EXPECT_EQ(resolve_backend(Backend::LlvmCpu, gpu), Backend::Aten);
}

TEST(Backends, EveryBuiltBackendComputesEagersValues) {
  Graph g = parse_graph(kPointwise);
  at::Tensor x = at::randn({4, 8});
  at::Tensor want = (x * 2).relu();
  for (const BackendInfo& b : backend_table()) {
    if (!b.built) continue;
    PreparedGraph p = prepare_graph(g, resolve_backend(b.id, g));
    ASSERT_TRUE(p.finish) << b.name;
    EXPECT_EQ(p.backend, resolve_backend(b.id, g)) << b.name;
    EXPECT_EQ(p.program.rfind(std::string("backend ") + backend_name(p.backend), 0), 0u) << b.name << ": " << p.program;
    std::vector<at::Tensor> got = p.finish()->run({x});
    ASSERT_EQ(got.size(), 1u) << b.name;
    EXPECT_TRUE(at::equal(got[0], want)) << b.name;
  }
}

TEST(GraphPasses, FoldConstantsAndLeaveTheRestToTheLoopPipeline) {
  // arange depends on no input: folded, evaluated once, passed as a trailing input.
  Graph g = parse_graph(
      "graph(%0: f32[4]{1}):\n"
      "  %1: f32[4]{1} = aten::arange.start_step(0, 4.0, 1, torch.float32, None, None, None)\n"
      "  %2: f32[4]{1} = aten::add.Tensor(%0, %1, 1)\n"
      "  return (%2)\n");
  RewrittenGraph r = rewrite_graph(g);
  ASSERT_EQ(r.constants.size(), 1u);
  EXPECT_TRUE(at::equal(r.constants[0], at::arange(4.0)));
  EXPECT_EQ(r.graph.nodes.size(), 1u) << print_graph(r.graph);
  EXPECT_EQ(r.graph.inputs.size(), 2u) << print_graph(r.graph);
  EXPECT_EQ(r.folded.nodes.size(), 1u) << print_graph(r.folded);
  // Nothing to fold: the graph as it was.
  RewrittenGraph same = rewrite_graph(parse_graph(kPointwise));
  EXPECT_TRUE(same.constants.empty());
  EXPECT_TRUE(same.graph == parse_graph(kPointwise));
}

}  // namespace
}  // namespace fastdyn::codegen
