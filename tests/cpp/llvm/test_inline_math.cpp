// tests/cpp/llvm/test_inline_math.cpp — the inline float32 functions (exp, tanh, erf) (codegen/llvm/inline_math.h),
// compiled by the JIT at 1, 8 and 16 lanes and checked against long double references: every
// 997th float bit pattern of each function's interesting range (about 2.2 million inputs, all
// exponents and all mantissa patterns' low bits), plus the IEEE edge values.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>
#include <llvm/IR/IRBuilder.h>

#include "codegen/llvm/inline_math.h"
#include "codegen/llvm/jit_engine.h"
#include "tests/cpp/llvm/test_kernels.h"

namespace fastdyn::codegen::llvm_jit {
namespace {

using Kernel = void (*)(const float*, float*, int64_t);
using Emitter = llvm::Value* (*)(llvm::IRBuilderBase&, llvm::Value*);

// void <name>(const float* x, float* out, int64_t n), n a multiple of lanes: out = f(x).
void add_kernel(llvm::Module& m, Emitter f, int lanes, const std::string& name) {
  llvm::IRBuilder<> ir(m.getContext());
  llvm::Type* type = lanes == 1 ? ir.getFloatTy() : static_cast<llvm::Type*>(llvm::FixedVectorType::get(ir.getFloatTy(), lanes));
  auto* k = llvm::Function::Create(
      llvm::FunctionType::get(ir.getVoidTy(), {ir.getPtrTy(), ir.getPtrTy(), ir.getInt64Ty()}, false),
      llvm::Function::ExternalLinkage, name, m);
  testing::emit_loop(ir, k, k->getArg(2), lanes, [&](llvm::Value* i) {
    llvm::Value* x = ir.CreateAlignedLoad(type, ir.CreateInBoundsGEP(ir.getFloatTy(), k->getArg(0), i), llvm::Align(4));
    ir.CreateAlignedStore(f(ir, x), ir.CreateInBoundsGEP(ir.getFloatTy(), k->getArg(1), i), llvm::Align(4));
  });
  ir.CreateRetVoid();
}

// |got - exact| in ULPs of float at exact (denormal ULP below FLT_MIN); infinite on a mismatch
// of NaN, infinity or zero.
double ulp_error(float got, long double exact) {
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got) ? 0.0 : INFINITY;
  const float rounded = float(exact);
  if (std::isinf(rounded) || std::isinf(got)) return got == rounded ? 0.0 : INFINITY;
  int exponent = 0;
  std::frexp(exact, &exponent);
  long double ulp = std::max<long double>(std::ldexp(1.0L, exponent - 24), std::numeric_limits<float>::denorm_min());
  return double(std::fabs((long double)got - exact) / ulp);
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The whole range of `bits_from`..`bits_to` (both signs), every 997th bit pattern, plus edges.
std::vector<float> inputs(float positive_limit, float negative_limit, std::vector<float> edges) {
  std::vector<float> xs = std::move(edges);
  for (uint32_t bits = 0; from_bits(bits) < positive_limit; bits += 997) xs.push_back(from_bits(bits));
  for (uint32_t bits = 0x80000000u; from_bits(bits) > negative_limit; bits += 997) xs.push_back(from_bits(bits));
  while (xs.size() % 16) xs.push_back(0.5f);
  return xs;
}

// Runs f at every width over xs; returns the outputs of each width after checking the ULP bound.
std::vector<std::vector<float>> check(const char* name, Emitter f, long double (*ref)(long double),
                                      const std::vector<float>& xs, double max_ulp) {
  ::setenv("FASTDYN_CACHE_DIR", "off", 1);
  const int64_t n = int64_t(xs.size());
  ModuleBuilder m = new_module(std::string("inline_") + name);
  const int widths[] = {1, 8, 16};
  std::vector<std::string> names;
  for (int lanes : widths) {
    names.push_back(name + std::to_string(lanes));
    add_kernel(*m.module, f, lanes, names.back());
  }
  std::vector<void*> kernels = compile(std::move(m), std::string("test inline ") + name, names);
  std::vector<std::vector<float>> outs;
  for (size_t w = 0; w < kernels.size(); ++w) {
    SCOPED_TRACE(std::string(name) + " lanes " + std::to_string(widths[w]));
    std::vector<float> out(xs.size(), -1.0f);
    reinterpret_cast<Kernel>(kernels[w])(xs.data(), out.data(), n);
    double worst = 0;
    float worst_x = 0;
    for (int64_t i = 0; i < n; ++i) {
      double e = ulp_error(out[i], ref((long double)xs[i]));
      if (!(e <= worst)) worst = e, worst_x = xs[i];
    }
    std::printf("[ inline   ] %s f32 x%-2d max %.3f ulp (at %.9g)\n", name, widths[w], worst, double(worst_x));
    EXPECT_LE(worst, max_ulp) << "worst at x = " << worst_x;
    outs.push_back(std::move(out));
  }
  ::unsetenv("FASTDYN_CACHE_DIR");
  return outs;
}

using L = std::numeric_limits<float>;

TEST(InlineMath, ExpWithinOneUlpAtEveryWidthOverTheWholeRange) {
  // Edges first: 0, -0, inf, -inf, nan, -nan, then the thresholds around overflow and underflow.
  std::vector<float> xs = inputs(89.0f, -104.0f, {0.0f, -0.0f, L::infinity(), -L::infinity(), L::quiet_NaN(),
      -L::quiet_NaN(), L::denorm_min(), -L::denorm_min(), L::max(), -L::max(), 88.7228394f, 88.7228470f,
      88.72283935546875f, -87.3365479f, -103.2789307f, -103.972084f, -104.0f, 89.0f, 1.0f});
  for (const std::vector<float>& out : check("exp", emit_exp_f32, [](long double x) { return expl(x); }, xs, 1.0)) {
    EXPECT_TRUE(std::isnan(out[4]) && std::isnan(out[5]));
    EXPECT_EQ(out[2], L::infinity());
    EXPECT_EQ(out[3], 0.0f);
    EXPECT_FALSE(std::signbit(out[3]));
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], 1.0f);
  }
}

TEST(InlineMath, TanhWithinOneAndAHalfUlpAtEveryWidth) {
  // Beyond |x| = 10 tanh is 1 in float; the sweep covers both pieces and the split at 0.8.
  std::vector<float> xs = inputs(10.0f, -10.0f, {0.0f, -0.0f, L::infinity(), -L::infinity(), L::quiet_NaN(),
      L::denorm_min(), -L::denorm_min(), 0.8f, -0.8f, 0.79999995f, 44.0f, 100.0f, -1e30f, L::max()});
  for (const std::vector<float>& out : check("tanh", emit_tanh_f32, [](long double x) { return tanhl(x); }, xs, 1.5)) {
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_FALSE(std::signbit(out[0]));
    EXPECT_TRUE(std::signbit(out[1]) && out[1] == 0.0f);
    EXPECT_EQ(out[2], 1.0f);
    EXPECT_EQ(out[3], -1.0f);
    EXPECT_TRUE(std::isnan(out[4]));
    EXPECT_EQ(out[5], L::denorm_min());
    EXPECT_EQ(out[12], -1.0f);
    EXPECT_EQ(out[13], 1.0f);
  }
}

TEST(InlineMath, ErfWithinSixUlpAtEveryWidth) {
  // Beyond |x| = 3.925 erf is ±1 in float (the clamp); the sweep covers [-4.5, 4.5].
  std::vector<float> xs = inputs(4.5f, -4.5f, {0.0f, -0.0f, L::infinity(), -L::infinity(), L::quiet_NaN(),
      3.925f, -3.925f, 100.0f, -L::max(), L::denorm_min(), 0.5f});
  for (const std::vector<float>& out : check("erf", emit_erf_f32, [](long double x) { return erfl(x); }, xs, 6.0)) {
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_FALSE(std::signbit(out[0]));
    EXPECT_TRUE(std::signbit(out[1]) && out[1] == 0.0f);
    EXPECT_EQ(out[2], 1.0f);
    EXPECT_EQ(out[3], -1.0f);
    EXPECT_TRUE(std::isnan(out[4]));
    EXPECT_EQ(out[5], 1.0f);
    EXPECT_EQ(out[6], -1.0f);
    EXPECT_EQ(out[7], 1.0f);
    EXPECT_EQ(out[8], -1.0f);
  }
}

}  // namespace
}  // namespace fastdyn::codegen::llvm_jit
