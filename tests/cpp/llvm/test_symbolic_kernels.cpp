// tests/cpp/llvm/test_symbolic_kernels.cpp — kernels that take sizes as arguments: one symbolic
// graph, specialised to several sizes and compiled by llvm_cpu at each, computes what eager does
// at every size, and its kernels compile once (later sizes find them in the kernel cache because
// the emitted code reads the symbolic sizes from its `sizes` argument instead of baking them in).
#include "codegen/aten/aten_backend.h"
#include "codegen/capture/capture.h"
#include "tests/cpp/capture/recorded_graphs.h"
#include "codegen/passes/graph_passes.h"
#include "codegen/llvm/backend.h"
#include "codegen/llvm/emit.h"
#include "codegen/llvm/jit_engine.h"
#include "codegen/loop/passes.h"
#include "codegen/shapes/propagate.h"

#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/raw_ostream.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>

namespace fastdyn::codegen {
namespace {

using recorded::contiguous;
using recorded::record;


// A graph over input %0 of `sizes` whose dim `dim` is the symbol s0; `body` records its nodes
// and returns the outputs.
Graph symbolic_graph(std::vector<int64_t> sizes, int64_t dim, const std::function<std::vector<ValueId>(Graph&)>& body) {
  Graph g;
  g.add_input(contiguous(std::move(sizes)));
  EXPECT_TRUE(shapes::make_dynamic(g, 0, dim));
  g.outputs = body(g);
  EXPECT_TRUE(shapes::is_dynamic(g)) << print_graph(g);
  return g;
}

// Runs g at each size of s0 (dim `dim` of the input) on llvm_cpu and on aten, compares, and
// returns the kernels each size did not find in the memory cache (compiled, or read from disk:
// a kernel emitted with its sizes baked in would be another module at every size).
std::vector<int64_t> compiles_per_size(const Graph& g, std::vector<int64_t> shape, int64_t dim, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> compiles;
  for (int64_t n : sizes) {
    const Graph sg = shapes::specialize(g, {n});
    shape[static_cast<size_t>(dim)] = n;
    const at::Tensor x = at::randn(shape);
    auto misses = [] { return llvm_jit::cache_stats().compiles + llvm_jit::cache_stats().disk_hits; };
    const int64_t before = misses();
    const std::vector<at::Tensor> got = compile_llvm_cpu(sg)->run({x});
    compiles.push_back(misses() - before);
    const std::vector<at::Tensor> want = compile_aten(sg)->run({x});
    EXPECT_EQ(got.size(), want.size());
    // NB: a float32 sum of n standard normals is off by ~sqrt(n) * 1e-7 * its terms' size in
    // either order (ours or ATen's cascade); near a result of 0 a fixed 1e-5 cannot hold both.
    const double atol = 1e-5 * std::sqrt(static_cast<double>(n));
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      EXPECT_EQ(got[i].sizes(), want[i].sizes()) << "size " << n << " output " << i;
      EXPECT_TRUE(at::allclose(got[i], want[i], 1e-5, atol)) << "size " << n << " output " << i << ": max difference "
                                                               << (got[i] - want[i]).abs().max().item<double>();
    }
  }
  return compiles;
}

const std::vector<int64_t> kSizes = {9, 5, 37, 100, 1000};

TEST(SymbolicKernels, PointwiseChainCompilesOnceForEveryLength) {
  Graph g = symbolic_graph({9, 64}, 0, [](Graph& g) {
    ValueId y = record(g, Family::mul, {CallArg::tensor(0), CallArg::of_double(2.0)});
    ValueId z = record(g, Family::tanh, {CallArg::tensor(y)});
    return std::vector<ValueId>{record(g, Family::add, {CallArg::tensor(z), CallArg::of_double(1.0)})};
  });
  std::vector<int64_t> c = compiles_per_size(g, {9, 64}, 0, kSizes);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_EQ(c[i], 0) << "size " << kSizes[i];
}

// The symbolic dim is the reduced (and vectorised) one: loop bounds and the scalar tail at run time.
TEST(SymbolicKernels, SoftmaxAndSumOverASymbolicRow) {
  Graph g = symbolic_graph({4, 9}, 1, [](Graph& g) {
    ValueId s = record(g, Family::softmax, {CallArg::tensor(0), CallArg::of_int(-1)});
    ValueId t = record(g, Family::sum, {CallArg::tensor(0), CallArg::of_int(-1)});
    return std::vector<ValueId>{s, t};
  });
  std::vector<int64_t> c = compiles_per_size(g, {4, 9}, 1, kSizes);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_EQ(c[i], 0) << "size " << kSizes[i];
}

// Column mode (x.sum(0) over a symbolic number of rows) and a transposed read, whose strides are
// the symbol: strides and lane offsets computed at run time.
TEST(SymbolicKernels, SymbolicStridesColumnSumAndTranspose) {
  Graph g = symbolic_graph({9, 24}, 0, [](Graph& g) {
    ValueId s = record(g, Family::sum, {CallArg::tensor(0), CallArg::of_int(0)});
    ValueId t = record(g, Family::transpose, {CallArg::tensor(0), CallArg::of_int(0), CallArg::of_int(1)});
    ValueId e = record(g, Family::exp, {CallArg::tensor(t)});
    return std::vector<ValueId>{s, e};
  });
  std::vector<int64_t> c = compiles_per_size(g, {9, 24}, 0, kSizes);
  for (size_t i = 2; i < c.size(); ++i) EXPECT_EQ(c[i], 0) << "size " << kSizes[i];
}

TEST(SymbolicKernels, LayerNormRowsOfASymbolicBatch) {
  Graph g = symbolic_graph({9, 32}, 0, [](Graph& g) {
    return std::vector<ValueId>{record(g, Family::layer_norm, {CallArg::tensor(0), CallArg::of_ints({32})})};
  });
  std::vector<int64_t> c = compiles_per_size(g, {9, 32}, 0, kSizes);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_EQ(c[i], 0) << "size " << kSizes[i];
}

// The divisor of a mean over a symbolic row is the run-time row length (Op::Count), not a
// constant: layer_norm(x, (x.shape[-1],)) and mean(-1) compile once for every row length.
TEST(SymbolicKernels, MeanAndLayerNormOverASymbolicRow) {
  Graph g = symbolic_graph({4, 9}, 1, [](Graph& g) {
    CallArg shape = CallArg::of_ints({9});
    shape.sym = {shapes::SizeExpr::symbol(0)};
    ValueId ln = record(g, Family::layer_norm, {CallArg::tensor(0), shape});
    ValueId m = record(g, Family::mean, {CallArg::tensor(0), CallArg::of_ints({-1})});
    return std::vector<ValueId>{ln, m};
  });
  std::vector<int64_t> c = compiles_per_size(g, {4, 9}, 1, kSizes);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_EQ(c[i], 0) << "size " << kSizes[i];
}

// var / std over a symbolic row divide by max(n - correction, 0) with n counted at run time.
TEST(SymbolicKernels, VarianceOverASymbolicRow) {
  Graph g = symbolic_graph({4, 9}, 1, [](Graph& g) {
    ValueId v = record(g, Family::var, {CallArg::tensor(0), CallArg::of_ints({-1})});
    ValueId s = record(g, Family::std, {CallArg::tensor(0), CallArg::of_ints({1})});
    return std::vector<ValueId>{v, s};
  });
  std::vector<int64_t> c = compiles_per_size(g, {4, 9}, 1, kSizes);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_EQ(c[i], 0) << "size " << kSizes[i];
}

// Offsets that are sizes: cat's second input lands past the first's symbolic length (a KV cache
// growing by one token), and x.select(0, -1) reads the last row of a symbolic count of rows.
TEST(SymbolicKernels, CatOffsetAndIndexFromTheEndAreSizeExpressions) {
  Graph g = symbolic_graph({9, 16}, 0, [](Graph& g) {
    ValueId y = record(g, Family::mul, {CallArg::tensor(0), CallArg::of_double(2.0)});
    ValueId c = record(g, Family::cat, {CallArg::of_tensors({0, y}), CallArg::of_int(0)});
    ValueId last = record(g, Family::select, {CallArg::tensor(y), CallArg::of_int(0), CallArg::of_int(-1)});
    ValueId e = record(g, Family::exp, {CallArg::tensor(last)});
    return std::vector<ValueId>{c, e};
  });
  std::vector<int64_t> c = compiles_per_size(g, {9, 16}, 0, kSizes);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_EQ(c[i], 0) << "size " << kSizes[i];
}

// The emitter plans a kernel from its numbers, then forgets every number that has a size
// expression: emit_key (the planned kernel) names the module exactly, whatever the sizes. So equal
// keys are equal modules (the llvm_cpu backend's memo of emitted kernels relies on it), and
// across the sizes of a dynamic graph a kernel keeps its key wherever its decisions agree: one
// emission (and one compile) for every size.
TEST(SymbolicKernels, EqualEmitKeysAreEqualModulesAndSizesShareTheirKernels) {
  Graph g;
  g.add_input(contiguous({9, 64}));
  g.add_input(contiguous({4, 32}));
  ASSERT_TRUE(shapes::make_dynamic(g, 0, 0));
  ValueId y = record(g, Family::softmax, {CallArg::tensor(0), CallArg::of_int(-1)});
  ValueId t = record(g, Family::sum, {CallArg::tensor(0), CallArg::of_int(0)});
  ValueId z = record(g, Family::softmax, {CallArg::tensor(1), CallArg::of_int(-1)});  // static
  ValueId c = record(g, Family::cat, {CallArg::of_tensors({0, y}), CallArg::of_int(0)});
  g.outputs = {y, t, z, c};
  const int bits = llvm_jit::host_target().vector_bits;
  std::map<std::string, std::string> module_of_key;
  std::map<int64_t, std::vector<std::string>> keys_at;
  for (int64_t n : {2, 3, 7, 8, 9, 16, 17, 33, 64, 100, 1000, 5000}) {
    const loop::Program p = loop::build_program(rewrite_graph(shapes::specialize(g, {n})).graph);
    for (const loop::Kernel& k : p.kernels) {
      const llvm_emit::KernelInput in = llvm_emit::kernel_input(p, k);
      const std::string key = llvm_emit::emit_key(in, bits);
      llvm_jit::ModuleBuilder mb = llvm_jit::new_module("k");
      llvm_emit::emit_kernel(in, *mb.module, bits, "k");
      std::string module;
      llvm::raw_string_ostream os(module);
      llvm::WriteBitcodeToFile(*mb.module, os);
      os.flush();
      auto [it, fresh] = module_of_key.emplace(key, module);
      EXPECT_TRUE(fresh || it->second == module) << "size " << n << ": one emit key, two modules";
      keys_at[n].push_back(key);
    }
  }
  // From 16 rows on, every kernel is the same kernel at every size.
  const std::vector<std::string>& at16 = keys_at.at(16);
  for (int64_t n : {17, 33, 64, 100, 1000, 5000}) EXPECT_EQ(keys_at.at(n), at16) << "size " << n;
  EXPECT_LE(module_of_key.size(), 3 * at16.size()) << "kernels emitted over 12 sizes";
}

// The backend emits a kernel once per plan key: the sizes after the first emit nothing (their
// kernels are the memo's). Fails without the memo: every size emits every kernel again to find it.
TEST(SymbolicKernels, TheBackendEmitsEachPlannedKernelOnce) {
  Graph g = symbolic_graph({9, 48}, 0, [](Graph& g) {
    ValueId y = record(g, Family::softmax, {CallArg::tensor(0), CallArg::of_int(-1)});
    ValueId z = record(g, Family::mul, {CallArg::tensor(y), CallArg::of_double(3.0)});
    return std::vector<ValueId>{record(g, Family::sum, {CallArg::tensor(z), CallArg::of_int(0)})};
  });
  const int64_t before = kernels_emitted();
  compile_llvm_cpu(shapes::specialize(g, {9}));
  const int64_t first = kernels_emitted() - before;
  EXPECT_GE(first, 1);
  for (int64_t n : {37, 100, 1000}) compile_llvm_cpu(shapes::specialize(g, {n}));
  EXPECT_EQ(kernels_emitted() - before, first) << "a later size emitted its kernels again";
}

// The LLVM text of every kernel of g specialised to n, concatenated.
std::string kernels_text(const Graph& g, int64_t n) {
  const loop::Program p = loop::build_program(rewrite_graph(shapes::specialize(g, {n})).graph);
  std::string text;
  for (const loop::Kernel& k : p.kernels) {
    llvm_jit::ModuleBuilder mb = llvm_jit::new_module("k");
    llvm_emit::emit_kernel(llvm_emit::kernel_input(p, k), *mb.module, llvm_jit::host_target().vector_bits, "k");
    llvm::raw_string_ostream os(text);
    mb.module->print(os, nullptr);
  }
  return text;
}

// The points of a symbolic row past its last whole vector run as one masked vector step of the
// row's own vector code, not as a scalar copy of the stage (half of a dynamic kernel's LLVM
// time went to that copy): lanes past the row neither load, store nor accumulate. Every length
// from 1 (a row shorter than one vector) to 3 vectors + 15, so every remainder, with ties for
// argmax across the whole vectors and the remainder (the first index wins, as in ATen). Fails
// where a masked lane reads past the row (values), accumulates (sum, max) or stores.
TEST(SymbolicKernels, TheRowRemainderIsOneMaskedVectorStep) {
  Graph g = symbolic_graph({4, 9}, 1, [](Graph& g) {
    ValueId r = record(g, Family::round, {CallArg::tensor(0)});
    ValueId s = record(g, Family::softmax, {CallArg::tensor(r), CallArg::of_int(-1)});
    ValueId a = record(g, Family::argmax, {CallArg::tensor(r), CallArg::of_int(-1)});
    ValueId t = record(g, Family::sum, {CallArg::tensor(0), CallArg::of_int(-1)});
    ValueId p = record(g, Family::sin, {CallArg::tensor(0)});
    return std::vector<ValueId>{s, a, t, p};
  });
  std::vector<int64_t> sizes;
  for (int64_t n = 1; n <= 63; ++n) sizes.push_back(n);
  // 4 x 20001 points: the pointwise kernel's row is shared by two threads (a range of its vectors
  // each; the second starts mid-row) and ends in a remainder of 4.
  sizes.push_back(20001);
  at::set_num_threads(2);
  for (int64_t n : sizes) {
    const Graph sg = shapes::specialize(g, {n});
    const at::Tensor x = at::randn({4, n}) * 2;
    const std::vector<at::Tensor> got = compile_llvm_cpu(sg)->run({x});
    const std::vector<at::Tensor> want = compile_aten(sg)->run({x});
    ASSERT_EQ(got.size(), 4u);
    EXPECT_TRUE(at::allclose(got[0], want[0], 1e-5, 1e-6)) << "softmax, length " << n;
    EXPECT_TRUE(at::equal(got[1], want[1])) << "argmax, length " << n << ": " << got[1] << want[1];
    EXPECT_TRUE(at::allclose(got[2], want[2], 1e-5, 1e-5 * std::sqrt(double(n)))) << "sum, length " << n;
    EXPECT_TRUE(at::allclose(got[3], want[3], 1e-6, 1e-6)) << "sin, length " << n;
  }
  if (llvm_jit::host_target().vector_bits < 128) GTEST_SKIP() << "no vectors on this target";
  const std::string text = kernels_text(g, 37);
  EXPECT_NE(text.find("@llvm.masked.load"), std::string::npos) << text;
  EXPECT_NE(text.find("@llvm.masked.store"), std::string::npos) << text;
  EXPECT_EQ(text.find("Sleef_sinf1_"), std::string::npos) << "a scalar copy of the sin stage:\n" << text;
}

// A read across the rows (x.t().contiguous(): stride 24 along the row written) cannot be a masked
// contiguous load; its kernel keeps the scalar tail, and still computes every length.
TEST(SymbolicKernels, AStridedReadKeepsTheScalarTail) {
  Graph g = symbolic_graph({9, 24}, 0, [](Graph& g) {
    ValueId t = record(g, Family::t, {CallArg::tensor(0)});
    return std::vector<ValueId>{record(g, Family::contiguous, {CallArg::tensor(t)})};
  });
  compiles_per_size(g, {9, 24}, 0, {1, 5, 17, 37, 64});
  const std::string text = kernels_text(g, 37);
  EXPECT_EQ(text.find("@llvm.masked.store"), std::string::npos) << text;
}

// A graph that was never symbolic emits exactly what it did: no size parameters.
TEST(SymbolicKernels, StaticGraphsHaveNoSizeParameters) {
  Graph g;
  g.add_input(contiguous({8, 64}));
  ValueId y = record(g, Family::mul, {CallArg::tensor(0), CallArg::of_double(2.0)});
  g.outputs = {y};
  EXPECT_TRUE(g.binding.empty());
  const at::Tensor x = at::randn({8, 64});
  EXPECT_TRUE(at::allclose(compile_llvm_cpu(g)->run({x}).at(0), x * 2));
}

}  // namespace
}  // namespace fastdyn::codegen
