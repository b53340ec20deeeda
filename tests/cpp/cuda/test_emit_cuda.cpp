// tests/cpp/cuda/test_emit_cuda.cpp — the cuda backend without a GPU (codegen/cuda/): the CUDA C++
// each kernel shape gets, that NVRTC compiles it for sm_90 (where NVRTC loads: the
// nvidia-cuda-nvrtc wheel of requirements.txt), that a symbolic kernel's source is the same at
// every size, and a golden softmax kernel. Running the kernels is tests/python/test_cuda.py's
// job, on the accelerator machine (scripts/device_test.sh).
#include "codegen/cuda/backend.h"
#include "codegen/cuda/emit_cuda.h"
#include "codegen/loop/passes.h"
#include "codegen/shapes/propagate.h"
#include "runtime/cuda/cuda_api.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fastdyn::codegen {
namespace {

// The graph of `text` with every tensor on cuda:0 (the text form has no device).
Graph on_gpu(const std::string& text) {
  Graph g = parse_graph(text);
  for (TensorMeta& m : g.values) m.device = c10::Device(c10::DeviceType::CUDA, 0);
  return g;
}

bool have_nvrtc() {
  static const bool ok = [] {
    std::stringstream dirs(FASTDYN_TEST_NVIDIA_LIB_DIRS);
    for (std::string d; std::getline(dirs, d, ':');)
      if (!d.empty()) runtime::cuda::add_library_dir(d);
    return runtime::cuda::nvrtc_available();
  }();
  return ok;
}

// Every kernel of g compiles to PTX for an H100 with an entry named fastdyn_kernel.
void expect_compiles(const std::vector<std::string>& sources) {
  if (!have_nvrtc()) {
    // CI installs the wheel (requirements.txt): a missing NVRTC there is a failure, not a skip.
    if (std::getenv("CI")) ADD_FAILURE() << "NVRTC did not load: " << runtime::cuda::nvrtc_origin();
    GTEST_SKIP() << "NVRTC not found: " << runtime::cuda::nvrtc_origin();
  }
  for (const std::string& src : sources) {
    std::string ptx;
    try {
      ptx = runtime::cuda::nvrtc_compile(src, "test.cu", 90, false);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << src;
      continue;
    }
    EXPECT_NE(ptx.find(".entry fastdyn_kernel"), std::string::npos) << ptx.substr(0, 2000);
  }
}

const char* kPointwise = R"(graph(%0: f32[64, 128]{128, 1}, %1: f32[128]{1}, %2: bf16[64, 128]{128, 1}):
  %3: f32[64, 128]{128, 1} = aten::add.Tensor(%0, %1, 1)
  %4: f32[64, 128]{128, 1} = aten::gelu(%3, "tanh")
  %5: bf16[64, 128]{128, 1} = aten::mul.Tensor(%2, %2)
  %6: f32[64, 128]{128, 1} = aten::sigmoid(%4)
  return (%6, %5)
)";

TEST(CudaEmit, PointwiseIsAGridStrideLoopWithAVectorPath) {
  std::vector<std::string> src = cuda_sources(on_gpu(kPointwise));
  ASSERT_FALSE(src.empty());
  for (const std::string& s : src) {
    EXPECT_NE(s.find("gridDim.x"), std::string::npos) << s;
    EXPECT_NE(s.find("fd_vec<unsigned short, 8>"), std::string::npos) << "16 bytes of the narrowest type (bf16) at a time\n" << s;
    EXPECT_EQ(s.find("fd_block_reduce(acc"), std::string::npos) << s;
  }
  expect_compiles(src);
}

// A grid-stride loop is not unrolled: a thread mostly runs it once, and NVVM's run-time unrolling
// by 4 copied the whole body (exp included) into twice the PTX, for about 40% more NVRTC time.
// The PTX holds one exp per element of the vector path (4 float32s) and one for the scalar path.
TEST(CudaEmit, GridStrideLoopsAreNotUnrolled) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: f32[64, 128]{128, 1}):
  %1: f32[64, 128]{128, 1} = aten::exp(%0)
  return (%1)
)"));
  ASSERT_EQ(src.size(), 1u);
  expect_compiles(src);
  if (have_nvrtc()) {
    const std::string ptx = runtime::cuda::nvrtc_compile(src[0], "test.cu", 90, false);
    size_t exps = 0;
    for (size_t at = ptx.find("ex2.approx"); at != std::string::npos; at = ptx.find("ex2.approx", at + 1)) ++exps;
    EXPECT_EQ(exps, 5u) << ptx;
  }
}

// Exact GELU in bfloat16 (a transformer MLP's epilogue): erf is CUDA's erff, not the CPU
// backend's rational fit (whose IEEE division and NaN-propagating clamps made the kernel
// compute-bound on an H200: 117 us against inductor's 68 us in ncu), and bfloat16 results are
// rounded by the sm_80+ conversion instruction.
TEST(CudaEmit, ErfIsTheLibrarysAndBfloat16RoundsInOneInstruction) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: bf16[64, 128]{128, 1}, %1: bf16[128]{1}):
  %2: bf16[64, 128]{128, 1} = aten::add.Tensor(%0, %1, 1)
  %3: bf16[64, 128]{128, 1} = aten::gelu(%2, "none")
  return (%3)
)"));
  ASSERT_EQ(src.size(), 1u);
  EXPECT_NE(src[0].find("erff("), std::string::npos) << src[0];
  EXPECT_EQ(src[0].find("0x3f906ebb"), std::string::npos) << "the rational fit's coefficients\n" << src[0];
  expect_compiles(src);
  if (have_nvrtc()) {
    const std::string ptx = runtime::cuda::nvrtc_compile(src[0], "test.cu", 90, false);
    EXPECT_NE(ptx.find("cvt.rn.bf16.f32"), std::string::npos) << ptx;
  }
}

TEST(CudaEmit, ReductionsAreOneBlockPerRow) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: f32[5, 300]{300, 1}, %1: f32[300]{1}, %2: f32[300]{1}):
  %3: f32[5, 300]{300, 1} = aten::layer_norm(%0, [300], %1, %2, 1e-05, True)
  %4: f32[5, 300]{300, 1} = aten::softmax.int(%3, -1, None)
  %5: f32[5]{1} = aten::sum.dim_IntList(%4, [-1], False, None)
  %6: f32[5, 1]{1, 1} = aten::amax(%0, [-1], True)
  %7: f32[5]{1} = aten::var.correction(%0, [1], None, False)
  %8: i64[5]{1} = aten::argmax(%0, -1, False)
  return (%4, %5, %6, %7, %8)
)"));
  ASSERT_FALSE(src.empty());
  bool arg = false, block = false;
  for (const std::string& s : src) {
    EXPECT_NE(s.find("for (i64 o = blockIdx.x; o < outer_n; o += gridDim.x)"), std::string::npos) << s;
    arg = arg || s.find("fd_arg_block_reduce<true>") != std::string::npos;
    block = block || s.find("fd_block_reduce(acc") != std::string::npos;
  }
  EXPECT_TRUE(arg);
  EXPECT_TRUE(block);
  expect_compiles(src);
}

TEST(CudaEmit, DtypesGathersAndComparisons) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: i64[3, 5]{5, 1}, %1: f64[5]{1}, %2: f16[3, 5]{5, 1}, %3: f32[10, 6]{6, 1}, %4: i64[2, 3]{3, 1}):
  %5: b8[3, 5]{5, 1} = aten::gt.Scalar(%0, 1)
  %6: f64[3, 5]{5, 1} = aten::where.self(%5, %1, %0)
  %7: f16[3, 5]{5, 1} = aten::mul.Tensor(%2, %2)
  %8: i64[3, 5]{5, 1} = aten::add.Tensor(%0, %0, 2)
  %9: f32[2, 3, 6]{18, 6, 1} = aten::embedding(%3, %4, -1, False, False)
  %10: f32[2, 3, 6]{18, 6, 1} = aten::mul.Scalar(%9, 2)
  return (%5, %6, %7, %8, %10)
)"));
  std::string all;
  for (const std::string& s : src) all += s;
  EXPECT_NE(all.find("fd_index("), std::string::npos) << "a gathered index is checked (a trap, as ATen's assert)";
  EXPECT_NE(all.find("fd_f2h("), std::string::npos);
  expect_compiles(src);
}

TEST(CudaEmit, ScansAreRefusedSoTheGraphRunsOnAten) {
  EXPECT_THROW(cuda_sources(on_gpu(R"(graph(%0: f32[4, 8]{8, 1}):
  %1: f32[4, 8]{8, 1} = aten::cumsum(%0, 1, None)
  return (%1)
)")),
               loop::Unsupported);
}

// One source for every length of a symbolic dim: the length is a kernel argument.
TEST(CudaEmit, SymbolicSizesAreArgumentsAndTheSourceIsTheSameAtEverySize) {
  Graph g = on_gpu(R"(graph(%0: f32[9, 64]{64, 1}):
  %1: f32[9, 64]{64, 1} = aten::softmax.int(%0, -1, None)
  %2: f32[9, 64]{64, 1} = aten::mul.Scalar(%1, 3)
  return (%2)
)");
  ASSERT_TRUE(shapes::make_dynamic(g, 0, 0));
  shapes::propagate(g, 0);
  ASSERT_TRUE(shapes::is_dynamic(g));
  std::vector<std::string> at9 = cuda_sources(shapes::specialize(g, {9}));
  std::vector<std::string> at37 = cuda_sources(shapes::specialize(g, {37}));
  ASSERT_FALSE(at9.empty());
  EXPECT_EQ(at9, at37);
  EXPECT_NE(at9[0].find("i64 z0"), std::string::npos) << at9[0];
  expect_compiles(at9);
}

// A softmax kernel's source past the fixed prelude, against tests/golden/cuda/softmax.cu
// (FASTDYN_UPDATE_GOLDEN=1 rewrites it).
TEST(CudaEmit, GoldenSoftmax) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: f32[8, 1000]{1000, 1}):
  %1: f32[8, 1000]{1000, 1} = aten::softmax.int(%0, -1, None)
  return (%1)
)"));
  ASSERT_EQ(src.size(), 1u);
  const std::string kernel = src[0].substr(src[0].find("extern \"C\""));
  const std::string path = std::string(FASTDYN_GOLDEN_DIR) + "/cuda/softmax.cu";
  if (std::getenv("FASTDYN_UPDATE_GOLDEN")) std::ofstream(path) << kernel;
  std::ifstream f(path);
  std::stringstream want;
  want << f.rdbuf();
  EXPECT_EQ(kernel, want.str()) << "FASTDYN_UPDATE_GOLDEN=1 rewrites " << path;
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// prepare_cuda's half that needs no GPU: the loop program, the sources and the runtime program.
TEST(CudaBackend, PreparesWithoutAGpu) {
  Graph g = on_gpu(kPointwise);
  PreparedCuda p = prepare_cuda(g, rewrite_graph(g));
  EXPECT_EQ(p.program.rfind("backend cuda\n", 0), 0u) << p.program;
  EXPECT_NE(p.program.find("kernel "), std::string::npos) << p.program;
  EXPECT_TRUE(p.finish);
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// Few long rows take several blocks each; the last block of a row combines and runs the epilogue.
TEST(CudaEmit, FewLongRowsAreSplitAcrossBlocks) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: f32[1048576]{1}, %1: f32[4, 100000]{100000, 1}):
  %2: f32[]{} = aten::sum.dim_IntList(%0, None, False, None)
  %3: f32[4]{1} = aten::mean.dim(%1, [1], False, None)
  return (%2, %3)
)"));
  ASSERT_EQ(src.size(), 2u);
  EXPECT_NE(src[0].find("atomicAdd(&counters[o]"), std::string::npos) << src[0];
  EXPECT_NE(src[1].find("atomicAdd(&counters[o]"), std::string::npos) << src[1];
  std::vector<std::string> var = cuda_sources(on_gpu(R"(graph(%0: f32[4, 100000]{100000, 1}):
  %1: f32[4]{1} = aten::var.correction(%0, [1], None, False)
  return (%1)
)"));
  ASSERT_EQ(var.size(), 1u);
  EXPECT_EQ(var[0].find("atomicAdd"), std::string::npos) << "two inner stages: one block per row\n" << var[0];
  src.push_back(var[0]);
  expect_compiles(src);
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// Reductions over dim 0 of a row-major matrix (a bias's gradient, a layer norm weight's, with the
// pointwise work before them fused): a lane per row so that loads coalesce, warps splitting the
// row and combining in warp order, the first warp storing the epilogue (the mean's division).
TEST(CudaEmit, ReductionsOverStridedRowsPutNeighbouringRowsOnAWarpsLanes) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: f32[1024, 2048]{2048, 1}, %1: f32[1024, 2048]{2048, 1}, %2: f32[5, 300]{300, 1}):
  %3: f32[2048]{1} = aten::sum.dim_IntList(%0, [0], False, None)
  %4: f32[1024, 2048]{2048, 1} = aten::mul.Tensor(%0, %1)
  %5: f32[2048]{1} = aten::sum.dim_IntList(%4, [0], False, None)
  %6: f32[300]{1} = aten::mean.dim(%2, [0], False, None)
  return (%3, %5, %6)
)"));
  ASSERT_FALSE(src.empty());
  for (const std::string& s : src) {
    EXPECT_NE(s.find("const i64 o = live ? first + lane : outer_n - 1;"), std::string::npos) << s;
    EXPECT_NE(s.find("red0 = FdSum<float>()(red0, part0[w * 32 + lane])"), std::string::npos) << s;
    EXPECT_NE(s.find("if (warp == 0 && live) {"), std::string::npos) << s;
    EXPECT_EQ(s.find("fd_block_reduce(acc"), std::string::npos) << s;
  }
  // 1024 points per row: 32 warps of 32 points each; 5 points: one warp.
  EXPECT_NE(src.front().find("__launch_bounds__(1024)"), std::string::npos) << src.front();
  EXPECT_NE(src.back().find("__launch_bounds__(32)"), std::string::npos) << src.back();
  // A contiguous row keeps a block per row.
  std::vector<std::string> rows = cuda_sources(on_gpu(R"(graph(%0: f32[1024, 2048]{2048, 1}):
  %1: f32[1024]{1} = aten::sum.dim_IntList(%0, [1], False, None)
  return (%1)
)"));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].find("first + lane"), std::string::npos) << rows[0];
  src.push_back(rows[0]);
  expect_compiles(src);
}

// A bias's gradient behind a ReLU's backward ([1024, 2048]: 64 groups of 32 rows, under
// kColumnBlocks): the groups split among blocks, partials in the workspace, combined in split order
// by each group's last block; the mask's store stays in the one pass. Many groups ([256, 16384]: 512)
// keep one block per group.
TEST(CudaEmit, FewGroupsOfLongStridedRowsSplitAcrossBlocks) {
  std::vector<std::string> src = cuda_sources(on_gpu(R"(graph(%0: f32[1024, 2048]{2048, 1}, %1: f32[1024, 2048]{2048, 1}):
  %2: b8[1024, 2048]{2048, 1} = aten::gt.Scalar(%1, 0)
  %3: f32[1024, 2048]{2048, 1} = aten::mul.Tensor(%0, %2)
  %4: f32[2048]{1} = aten::sum.dim_IntList(%3, [0], False, None)
  return (%3, %4)
)"));
  ASSERT_FALSE(src.empty());
  const std::string& sum = src.back();  // the mask (a graph output) may be a kernel of its own
  EXPECT_NE(sum.find("atomicAdd(&counters[g], 1u) == 4 - 1"), std::string::npos) << sum;
  EXPECT_NE(sum.find("for (i64 q = 0; q < 4; ++q) red0"), std::string::npos) << sum;
  EXPECT_NE(sum.find("char* ws"), std::string::npos) << sum;
  std::vector<std::string> many = cuda_sources(on_gpu(R"(graph(%0: f32[256, 16384]{16384, 1}):
  %1: f32[16384]{1} = aten::sum.dim_IntList(%0, [0], False, None)
  return (%1)
)"));
  ASSERT_EQ(many.size(), 1u);
  EXPECT_EQ(many[0].find("atomicAdd"), std::string::npos) << many[0];
  EXPECT_NE(many[0].find("const i64 o = live ? first + lane : outer_n - 1;"), std::string::npos) << many[0];
  src.push_back(many[0]);
  expect_compiles(src);
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// An SGD step with momentum over three parameters (two of one shape): per parameter, one
// pointwise kernel updates the momentum buffer and the parameter from it. The three launch as one
// group kernel (horizontal.h): members of one shape share a device function, and the block ranges
// follow the members' sizes.
const char* kSgdStep = R"(graph(%0: f32[256, 64]{64, 1}, %1: f32[64]{1}, %2: f32[256, 64]{64, 1}, %3: f32[256, 64]{64, 1}, %4: f32[64]{1}, %5: f32[256, 64]{64, 1}, %6: f32[256, 64]{64, 1}, %7: f32[64]{1}, %8: f32[256, 64]{64, 1}):
  %9: f32[256, 64]{64, 1} = aten::mul_.Scalar(%6, 0.9)
  %10: f32[256, 64]{64, 1} = aten::add_.Tensor(%6, %3, 1)
  %11: f32[256, 64]{64, 1} = aten::add_.Tensor(%0, %6, -0.01)
  %12: f32[64]{1} = aten::mul_.Scalar(%7, 0.9)
  %13: f32[64]{1} = aten::add_.Tensor(%7, %4, 1)
  %14: f32[64]{1} = aten::add_.Tensor(%1, %7, -0.01)
  %15: f32[256, 64]{64, 1} = aten::mul_.Scalar(%8, 0.9)
  %16: f32[256, 64]{64, 1} = aten::add_.Tensor(%8, %5, 1)
  %17: f32[256, 64]{64, 1} = aten::add_.Tensor(%2, %8, -0.01)
  return ()
)";

TEST(CudaEmit, IndependentPointwiseKernelsLaunchAsOneGroup) {
  Graph g = on_gpu(kSgdStep);
  PreparedCuda p = prepare_cuda(g, rewrite_graph(g));
  EXPECT_NE(p.program.find("launch as one"), std::string::npos) << p.program;
  std::vector<std::string> src = cuda_sources(g);
  ASSERT_EQ(src.size(), 1u) << "one launch for the whole step\n" << p.program;
  EXPECT_NE(p.program.find("steps 0..2 launch as one"), std::string::npos) << p.program;
  const std::string& s = src[0];
  // Two bodies (the 256x64 parameters share one), three calls, 16384 points of float4 vectors per
  // 256 threads = 16 blocks for each large parameter, 1 block for the bias.
  EXPECT_NE(s.find("fd_member1("), std::string::npos) << s;
  EXPECT_EQ(s.find("fd_member2("), std::string::npos) << s;
  EXPECT_NE(s.find("if (b < 16LL) { fd_member0("), std::string::npos) << s;
  EXPECT_NE(s.find("if (b < 17LL) { fd_member1("), std::string::npos) << s;
  EXPECT_NE(s.find("if (b < 33LL) { fd_member0("), std::string::npos) << s;
  EXPECT_NE(s.find("b - 17LL, 16LL)"), std::string::npos) << "the third member's own block range\n" << s;
  EXPECT_NE(s.find("fd_bid"), std::string::npos) << s;
  expect_compiles(src);
}

// A kernel that writes what another reads (or reads what it writes) never joins its group: the
// order between them is kept.
TEST(CudaEmit, DependentKernelsStayApart) {
  Graph g = on_gpu(R"(graph(%0: f32[256, 64]{64, 1}, %1: f32[256, 64]{64, 1}):
  %2: f32[256, 64]{64, 1} = aten::mul_.Scalar(%0, 0.9)
  %3: f32[256, 64]{64, 1} = aten::add_.Tensor(%1, %0, 1)
  return ()
)");
  PreparedCuda p = prepare_cuda(g, rewrite_graph(g));
  // k0 computes the add from v0 before k1 scales v0 in place (k1 writes what k0 reads): apart.
  // k1 and k2 (v0 in place; the sum copied into v1) touch disjoint slots: together.
  EXPECT_NE(p.program.find("group k3: steps 1..2 launch as one"), std::string::npos) << p.program;
  EXPECT_EQ(p.program.find("steps 0.."), std::string::npos) << p.program;
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// An Adam-like update with its step count on the CPU (torch.optim keeps it there unless
// capturable): the count's increment runs on the host (an interpreted kernel: no GPU source), and
// the GPU kernel reads the bias correction made from it by value, a `const float` parameter.
TEST(CudaEmit, CpuScalarsAreReadByValueAndTheirKernelsRunOnTheHost) {
  Graph g = on_gpu(R"(graph(%0: f32[256, 64]{64, 1}, %1: f32[256, 64]{64, 1}, %2: f32[]{}):
  %3: f32[]{} = aten::add_.Scalar(%2, 1, 1)
  %4: f32[]{} = aten::pow.Scalar(0.9, %2)
  %5: f32[]{} = aten::rsub.Scalar(%4, 1, 1)
  %6: f32[256, 64]{64, 1} = aten::div.Tensor(%1, %5)
  %7: f32[256, 64]{64, 1} = aten::add_.Tensor(%0, %6, -0.01)
  return ()
)");
  for (ValueId v : {2, 3, 4, 5}) g.values[static_cast<size_t>(v)].device = c10::Device(c10::kCPU);
  PreparedCuda p = prepare_cuda(g, rewrite_graph(g));
  std::vector<std::string> src = cuda_sources(g);
  ASSERT_EQ(src.size(), 1u) << p.program;
  EXPECT_NE(src[0].find("const float h0)"), std::string::npos) << src[0];
  EXPECT_EQ(src[0].find("((const float*)a2)"), std::string::npos) << "the CPU tensor is never dereferenced on the GPU\n" << src[0];
  expect_compiles(src);
}

// Two parameters, each with its own step count (single-tensor Adam): the host kernels (a bias
// correction, a count's increment) sit between the parameters' GPU updates; they move ahead of the
// launches that do not read them, and the two updates launch as one group.
TEST(CudaEmit, HostKernelsMoveAheadSoThatGpuLaunchesGroup) {
  Graph g = on_gpu(R"(graph(%0: f32[256, 64]{64, 1}, %1: f32[256, 64]{64, 1}, %2: f32[256, 64]{64, 1}, %3: f32[256, 64]{64, 1}, %4: f32[]{}, %5: f32[]{}):
  %6: f32[]{} = aten::add_.Scalar(%4, 1, 1)
  %7: f32[]{} = aten::pow.Scalar(0.9, %4)
  %8: f32[]{} = aten::rsub.Scalar(%7, 1, 1)
  %9: f32[256, 64]{64, 1} = aten::div.Tensor(%2, %8)
  %10: f32[256, 64]{64, 1} = aten::add_.Tensor(%0, %9, -0.01)
  %11: f32[]{} = aten::add_.Scalar(%5, 1, 1)
  %12: f32[]{} = aten::pow.Scalar(0.9, %5)
  %13: f32[]{} = aten::rsub.Scalar(%12, 1, 1)
  %14: f32[256, 64]{64, 1} = aten::div.Tensor(%3, %13)
  %15: f32[256, 64]{64, 1} = aten::add_.Tensor(%1, %14, -0.01)
  return ()
)");
  for (ValueId v : {4, 5, 6, 7, 8, 11, 12, 13}) g.values[static_cast<size_t>(v)].device = c10::Device(c10::kCPU);
  PreparedCuda p = prepare_cuda(g, rewrite_graph(g));
  std::vector<std::string> src = cuda_sources(g);
  ASSERT_EQ(src.size(), 1u) << p.program;
  EXPECT_NE(p.program.find("launch as one"), std::string::npos) << p.program;
  EXPECT_NE(src[0].find("const float h1)"), std::string::npos) << "each member's bias correction by value\n" << src[0];
  expect_compiles(src);
}

// fused=True keeps the step counts on the GPU (torch.optim's fused Adam over two Linear(64, 64), as
// fastdyn traces it): the bias corrections made from a count are recomputed in each update that
// reads them (fusion.cpp), not computed by scalar kernels of their own, each of which the update
// after it would have to follow: every update then launches in one group, the counts'
// increments (which must follow the updates that read the old counts) in another.
TEST(CudaEmit, GpuScalarsMadeFromScalarsAreRecomputedWhereRead) {
  Graph g = on_gpu(R"(graph(%0: f32[64, 64]{64, 1}, %1: f32[64]{1}, %2: f32[64, 64]{64, 1}, %3: f32[64]{1}, %4: f32[64, 64]{64, 1}, %5: f32[]{}, %6: f32[64, 64]{64, 1}, %7: f32[64, 64]{64, 1}, %8: f32[64]{1}, %9: f32[]{}, %10: f32[64]{1}, %11: f32[64]{1}, %12: f32[64, 64]{64, 1}, %13: f32[]{}, %14: f32[64, 64]{64, 1}, %15: f32[64, 64]{64, 1}, %16: f32[64]{1}, %17: f32[]{}, %18: f32[64]{1}, %19: f32[64]{1}):
  %20: f32[]{} = aten::add_.Scalar(%5, 1, 1)
  %21: f32[]{} = aten::add_.Scalar(%9, 1, 1)
  %22: f32[]{} = aten::add_.Scalar(%13, 1, 1)
  %23: f32[]{} = aten::add_.Scalar(%17, 1, 1)
  %24: f32[64, 64]{64, 1} = aten::lerp_.Scalar(%6, %4, 0.09999999999999998)
  %25: f32[64, 64]{64, 1} = aten::mul_.Scalar(%7, 0.999)
  %26: f32[64, 64]{64, 1} = aten::addcmul_(%7, %4, %4, 0.0010000000000000009)
  %27: f32[]{} = aten::pow.Scalar(0.9, %5)
  %28: f32[]{} = aten::neg(%27)
  %29: f32[]{} = aten::add.Scalar(%28, 1.0, 1)
  %30: f32[]{} = aten::pow.Scalar(0.999, %5)
  %31: f32[]{} = aten::neg(%30)
  %32: f32[]{} = aten::add.Scalar(%31, 1.0, 1)
  %33: f32[]{} = aten::reciprocal(%29)
  %34: f32[]{} = aten::mul.Scalar(%33, 0.001)
  %35: f32[64, 64]{64, 1} = aten::sqrt(%7)
  %36: f32[]{} = aten::sqrt(%32)
  %37: f32[64, 64]{64, 1} = aten::div.Tensor(%35, %36)
  %38: f32[64, 64]{64, 1} = aten::add.Scalar(%37, 1e-08, 1)
  %39: f32[]{} = aten::neg(%34)
  %40: f32[64, 64]{64, 1} = aten::div.Tensor(%6, %38)
  %41: f32[64, 64]{64, 1} = aten::mul.Tensor(%40, %39)
  %42: f32[64, 64]{64, 1} = aten::add_.Tensor(%0, %41, 1)
  %43: f32[64]{1} = aten::lerp_.Scalar(%10, %8, 0.09999999999999998)
  %44: f32[64]{1} = aten::mul_.Scalar(%11, 0.999)
  %45: f32[64]{1} = aten::addcmul_(%11, %8, %8, 0.0010000000000000009)
  %46: f32[]{} = aten::pow.Scalar(0.9, %9)
  %47: f32[]{} = aten::neg(%46)
  %48: f32[]{} = aten::add.Scalar(%47, 1.0, 1)
  %49: f32[]{} = aten::pow.Scalar(0.999, %9)
  %50: f32[]{} = aten::neg(%49)
  %51: f32[]{} = aten::add.Scalar(%50, 1.0, 1)
  %52: f32[]{} = aten::reciprocal(%48)
  %53: f32[]{} = aten::mul.Scalar(%52, 0.001)
  %54: f32[64]{1} = aten::sqrt(%11)
  %55: f32[]{} = aten::sqrt(%51)
  %56: f32[64]{1} = aten::div.Tensor(%54, %55)
  %57: f32[64]{1} = aten::add.Scalar(%56, 1e-08, 1)
  %58: f32[]{} = aten::neg(%53)
  %59: f32[64]{1} = aten::div.Tensor(%10, %57)
  %60: f32[64]{1} = aten::mul.Tensor(%59, %58)
  %61: f32[64]{1} = aten::add_.Tensor(%1, %60, 1)
  %62: f32[64, 64]{64, 1} = aten::lerp_.Scalar(%14, %12, 0.09999999999999998)
  %63: f32[64, 64]{64, 1} = aten::mul_.Scalar(%15, 0.999)
  %64: f32[64, 64]{64, 1} = aten::addcmul_(%15, %12, %12, 0.0010000000000000009)
  %65: f32[]{} = aten::pow.Scalar(0.9, %13)
  %66: f32[]{} = aten::neg(%65)
  %67: f32[]{} = aten::add.Scalar(%66, 1.0, 1)
  %68: f32[]{} = aten::pow.Scalar(0.999, %13)
  %69: f32[]{} = aten::neg(%68)
  %70: f32[]{} = aten::add.Scalar(%69, 1.0, 1)
  %71: f32[]{} = aten::reciprocal(%67)
  %72: f32[]{} = aten::mul.Scalar(%71, 0.001)
  %73: f32[64, 64]{64, 1} = aten::sqrt(%15)
  %74: f32[]{} = aten::sqrt(%70)
  %75: f32[64, 64]{64, 1} = aten::div.Tensor(%73, %74)
  %76: f32[64, 64]{64, 1} = aten::add.Scalar(%75, 1e-08, 1)
  %77: f32[]{} = aten::neg(%72)
  %78: f32[64, 64]{64, 1} = aten::div.Tensor(%14, %76)
  %79: f32[64, 64]{64, 1} = aten::mul.Tensor(%78, %77)
  %80: f32[64, 64]{64, 1} = aten::add_.Tensor(%2, %79, 1)
  %81: f32[64]{1} = aten::lerp_.Scalar(%18, %16, 0.09999999999999998)
  %82: f32[64]{1} = aten::mul_.Scalar(%19, 0.999)
  %83: f32[64]{1} = aten::addcmul_(%19, %16, %16, 0.0010000000000000009)
  %84: f32[]{} = aten::pow.Scalar(0.9, %17)
  %85: f32[]{} = aten::neg(%84)
  %86: f32[]{} = aten::add.Scalar(%85, 1.0, 1)
  %87: f32[]{} = aten::pow.Scalar(0.999, %17)
  %88: f32[]{} = aten::neg(%87)
  %89: f32[]{} = aten::add.Scalar(%88, 1.0, 1)
  %90: f32[]{} = aten::reciprocal(%86)
  %91: f32[]{} = aten::mul.Scalar(%90, 0.001)
  %92: f32[64]{1} = aten::sqrt(%19)
  %93: f32[]{} = aten::sqrt(%89)
  %94: f32[64]{1} = aten::div.Tensor(%92, %93)
  %95: f32[64]{1} = aten::add.Scalar(%94, 1e-08, 1)
  %96: f32[]{} = aten::neg(%91)
  %97: f32[64]{1} = aten::div.Tensor(%18, %95)
  %98: f32[64]{1} = aten::mul.Tensor(%97, %96)
  %99: f32[64]{1} = aten::add_.Tensor(%3, %98, 1)
  return ()
)");
  PreparedCuda p = prepare_cuda(g, rewrite_graph(g));
  std::vector<std::string> src = cuda_sources(g);
  EXPECT_EQ(src.size(), 2u) << "the updates, then the increments\n" << p.program;
  EXPECT_EQ(p.program.find("f32[]{} buffer"), std::string::npos) << "no scalar of its own in memory\n" << p.program;
  EXPECT_NE(p.program.find("Pow f32"), std::string::npos) << p.program;
  expect_compiles(src);
}

// torch.optim's foreach Adam over four parameters, as fastdyn traces it (FASTDYN_LOG=graphs) with
// the parameters on a GPU: the step counts, the bias corrections and the stacked step sizes are CPU
// tensors, as in eager. The per-parameter host kernels move ahead of the GPU updates and those
// launch in a few groups, not one or two per parameter.
const char* kAdamForeach = R"(graph(%0: f32[8, 8]{8, 1} requires_grad, %1: f32[8]{1} requires_grad, %2: f32[4, 8]{8, 1} requires_grad, %3: f32[4]{1} requires_grad, %4: f32[8, 8]{8, 1}, %5: f32[]{}, %6: f32[8, 8]{8, 1}, %7: f32[8, 8]{8, 1}, %8: f32[8]{1}, %9: f32[]{}, %10: f32[8]{1}, %11: f32[8]{1}, %12: f32[4, 8]{8, 1}, %13: f32[]{}, %14: f32[4, 8]{8, 1}, %15: f32[4, 8]{8, 1}, %16: f32[4]{1}, %17: f32[]{}, %18: f32[4]{1}, %19: f32[4]{1}):
  %20: f32[]{} = aten::add_.Scalar(%5, 1, 1)
  %21: f32[]{} = aten::add_.Scalar(%9, 1, 1)
  %22: f32[]{} = aten::add_.Scalar(%13, 1, 1)
  %23: f32[]{} = aten::add_.Scalar(%17, 1, 1)
  %24: f32[8, 8]{8, 1} = aten::lerp_.Scalar(%6, %4, 0.09999999999999998)
  %25: f32[8]{1} = aten::lerp_.Scalar(%10, %8, 0.09999999999999998)
  %26: f32[4, 8]{8, 1} = aten::lerp_.Scalar(%14, %12, 0.09999999999999998)
  %27: f32[4]{1} = aten::lerp_.Scalar(%18, %16, 0.09999999999999998)
  %28: f32[8, 8]{8, 1} = aten::mul_.Scalar(%7, 0.999)
  %29: f32[8]{1} = aten::mul_.Scalar(%11, 0.999)
  %30: f32[4, 8]{8, 1} = aten::mul_.Scalar(%15, 0.999)
  %31: f32[4]{1} = aten::mul_.Scalar(%19, 0.999)
  %32: f32[8, 8]{8, 1} = aten::addcmul_(%7, %4, %4, 0.0010000000000000009)
  %33: f32[8]{1} = aten::addcmul_(%11, %8, %8, 0.0010000000000000009)
  %34: f32[4, 8]{8, 1} = aten::addcmul_(%15, %12, %12, 0.0010000000000000009)
  %35: f32[4]{1} = aten::addcmul_(%19, %16, %16, 0.0010000000000000009)
  %36: f32[]{} = aten::pow.Scalar(0.9, %5)
  %37: f32[]{} = aten::rsub.Scalar(%36, 1, 1)
  %38: f32[]{} = aten::pow.Scalar(0.9, %9)
  %39: f32[]{} = aten::rsub.Scalar(%38, 1, 1)
  %40: f32[]{} = aten::pow.Scalar(0.9, %13)
  %41: f32[]{} = aten::rsub.Scalar(%40, 1, 1)
  %42: f32[]{} = aten::pow.Scalar(0.9, %17)
  %43: f32[]{} = aten::rsub.Scalar(%42, 1, 1)
  %44: f32[]{} = aten::pow.Scalar(0.999, %5)
  %45: f32[]{} = aten::rsub.Scalar(%44, 1, 1)
  %46: f32[]{} = aten::pow.Scalar(0.999, %9)
  %47: f32[]{} = aten::rsub.Scalar(%46, 1, 1)
  %48: f32[]{} = aten::pow.Scalar(0.999, %13)
  %49: f32[]{} = aten::rsub.Scalar(%48, 1, 1)
  %50: f32[]{} = aten::pow.Scalar(0.999, %17)
  %51: f32[]{} = aten::rsub.Scalar(%50, 1, 1)
  %52: f32[]{} = aten::reciprocal(%37)
  %53: f32[]{} = aten::mul.Scalar(%52, 0.001)
  %54: f32[]{} = aten::mul.Scalar(%53, -1)
  %55: f32[]{} = aten::reciprocal(%39)
  %56: f32[]{} = aten::mul.Scalar(%55, 0.001)
  %57: f32[]{} = aten::mul.Scalar(%56, -1)
  %58: f32[]{} = aten::reciprocal(%41)
  %59: f32[]{} = aten::mul.Scalar(%58, 0.001)
  %60: f32[]{} = aten::mul.Scalar(%59, -1)
  %61: f32[]{} = aten::reciprocal(%43)
  %62: f32[]{} = aten::mul.Scalar(%61, 0.001)
  %63: f32[]{} = aten::mul.Scalar(%62, -1)
  %64: f32[4]{1} = aten::stack([%54, %57, %60, %63], 0)
  %65: f32[]{} = aten::pow.Tensor_Scalar(%45, 0.5)
  %66: f32[]{} = aten::pow.Tensor_Scalar(%47, 0.5)
  %67: f32[]{} = aten::pow.Tensor_Scalar(%49, 0.5)
  %68: f32[]{} = aten::pow.Tensor_Scalar(%51, 0.5)
  %69: f32[8, 8]{8, 1} = aten::sqrt(%7)
  %70: f32[8]{1} = aten::sqrt(%11)
  %71: f32[4, 8]{8, 1} = aten::sqrt(%15)
  %72: f32[4]{1} = aten::sqrt(%19)
  %73: f32[8, 8]{8, 1} = aten::div_.Tensor(%69, %65)
  %74: f32[8]{1} = aten::div_.Tensor(%70, %66)
  %75: f32[4, 8]{8, 1} = aten::div_.Tensor(%71, %67)
  %76: f32[4]{1} = aten::div_.Tensor(%72, %68)
  %77: f32[8, 8]{8, 1} = aten::add_.Scalar(%69, 1e-08, 1)
  %78: f32[8]{1} = aten::add_.Scalar(%70, 1e-08, 1)
  %79: f32[4, 8]{8, 1} = aten::add_.Scalar(%71, 1e-08, 1)
  %80: f32[4]{1} = aten::add_.Scalar(%72, 1e-08, 1)
  %81: f32[]{} = aten::select.int(%64, 0, 0)
  %82: f32[8, 8]{8, 1} = aten::div.Tensor(%6, %69)
  %83: f32[8, 8]{8, 1} = aten::mul.Tensor(%82, %81)
  %84: f32[8, 8]{8, 1} requires_grad = aten::add_.Tensor(%0, %83, 1)
  %85: f32[]{}+1 = aten::select.int(%64, 0, 1)
  %86: f32[8]{1} = aten::div.Tensor(%10, %70)
  %87: f32[8]{1} = aten::mul.Tensor(%86, %85)
  %88: f32[8]{1} requires_grad = aten::add_.Tensor(%1, %87, 1)
  %89: f32[]{}+2 = aten::select.int(%64, 0, 2)
  %90: f32[4, 8]{8, 1} = aten::div.Tensor(%14, %71)
  %91: f32[4, 8]{8, 1} = aten::mul.Tensor(%90, %89)
  %92: f32[4, 8]{8, 1} requires_grad = aten::add_.Tensor(%2, %91, 1)
  %93: f32[]{}+3 = aten::select.int(%64, 0, 3)
  %94: f32[4]{1} = aten::div.Tensor(%18, %72)
  %95: f32[4]{1} = aten::mul.Tensor(%94, %93)
  %96: f32[4]{1} requires_grad = aten::add_.Tensor(%3, %95, 1)
  return ()
)";

TEST(CudaEmit, AdamForeachLaunchesInAFewGroups) {
  Graph g = on_gpu(kAdamForeach);
  for (const Node& n : g.nodes)
    if (n.op == OpId::stack) g.values[static_cast<size_t>(n.outputs[0])].device = c10::Device(c10::kCPU);
  for (TensorMeta& m : g.values)
    if (m.dim() == 0) m.device = c10::Device(c10::kCPU);
  for (TensorMeta& m : g.values) m.requires_grad = false;  // as in the step: no_grad
  PreparedCuda p = prepare_cuda(g, rewrite_graph(g));
  std::vector<std::string> src = cuda_sources(g);
  size_t groups = 0;
  for (size_t at = p.program.find("launch as one"); at != std::string::npos; at = p.program.find("launch as one", at + 1)) ++groups;
  EXPECT_LE(src.size(), 2u) << p.program;
  EXPECT_GE(groups, 1u) << p.program;
  EXPECT_EQ(p.program.find("aten::stack"), std::string::npos) << "each update reads its own step size\n" << p.program;
  EXPECT_NE(p.program.find("run as one"), std::string::npos) << "the host kernels next to each other: one step\n" << p.program;
  expect_compiles(src);
}

// A GPU kernel reading a CPU tensor of more than one element is refused (the graph runs on ATen).
TEST(CudaEmit, CpuTensorsWiderThanAScalarAreRefused) {
  Graph g = on_gpu(R"(graph(%0: f32[64]{1}, %1: f32[64]{1}):
  %2: f32[64]{1} = aten::mul.Tensor(%0, %1)
  return (%2)
)");
  g.values[1].device = c10::Device(c10::kCPU);
  EXPECT_THROW(cuda_sources(g), loop::Unsupported);
}

}  // namespace
}  // namespace fastdyn::codegen
