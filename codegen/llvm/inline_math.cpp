// codegen/llvm/inline_math.cpp — inline exp for float32 (see inline_math.h for why).
//
// exp(x) = 2^n * exp(r), n = round(x / ln 2), r = x - n ln 2, |r| <= ln(2)/2:
// - Range reduction in two steps (Cody and Waite): ln 2 = C1 + C2 where C1 has only 9 significant
//   bits, so n * C1 is exact for |n| <= 150 and x - n * C1 (one fused multiply-add) is exact too;
//   the second step subtracts n * C2 with one rounding.
// - exp(r) by its Taylor polynomial of degree 7, evaluated by Horner's rule with fused
//   multiply-adds: the truncation error at |r| = ln(2)/2 is r^8/8! < 5.3e-9, under 0.1 ULP.
// - 2^n is built from exponent bits. n ranges over [-150, 128] after x is clamped to [-104, 89],
//   wider than one float exponent can hold, so the scale is applied as 2^(n - n/2) * 2^(n/2): the
//   first product is exact, and the second rounds once, which is what makes results in the
//   denormal range correctly rounded instead of flushed, and overflow above log(FLT_MAX) give +inf.
// - The clamp maps +inf to 89 (→ +inf) and -inf to -104 (→ +0); NaN is passed through by a final
//   select, since minnum/maxnum would turn it into a number.
#include "codegen/llvm/inline_math.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

#include "runtime/errors.h"

namespace fastdyn::codegen::llvm_jit {
namespace {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;        // 355 / 512: 9 significant bits
constexpr float kLn2Lo = -2.12194440e-4f;     // ln 2 - kLn2Hi, to float precision
constexpr float kClampLow = -104.0f;          // exp(-104) < FLT_TRUE_MIN / 2: rounds to +0
constexpr float kClampHigh = 89.0f;           // exp(89) > FLT_MAX: +inf
constexpr int kTaylorDegree = 7;

}  // namespace

llvm::Value* emit_exp_f32(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  if (!type->getScalarType()->isFloatTy()) throw InternalError("emit_exp_f32: operand is not float");
  auto k = [&](double v) { return llvm::ConstantFP::get(type, v); };
  llvm::Type* int_type = type->isVectorTy()
                             ? static_cast<llvm::Type*>(llvm::VectorType::get(b.getInt32Ty(), llvm::cast<llvm::VectorType>(type)->getElementCount()))
                             : b.getInt32Ty();
  auto ki = [&](int v) { return llvm::ConstantInt::get(int_type, static_cast<uint64_t>(int64_t(v)), /*isSigned=*/true); };
  auto fma = [&](llvm::Value* a, llvm::Value* m, llvm::Value* c) {
    return b.CreateIntrinsic(llvm::Intrinsic::fma, {type}, {a, m, c});
  };

  llvm::Value* clamped = b.CreateIntrinsic(llvm::Intrinsic::maxnum, {type}, {x, k(kClampLow)});
  clamped = b.CreateIntrinsic(llvm::Intrinsic::minnum, {type}, {clamped, k(kClampHigh)});
  llvm::Value* n = b.CreateIntrinsic(llvm::Intrinsic::roundeven, {type}, {b.CreateFMul(clamped, k(kLog2e))});
  llvm::Value* r = fma(n, k(-kLn2Hi), clamped);
  r = fma(n, k(-kLn2Lo), r);

  double coefficient = 1.0;
  for (int i = 1; i <= kTaylorDegree; ++i) coefficient /= i;
  llvm::Value* p = k(coefficient);
  for (int i = kTaylorDegree - 1; i >= 0; --i) {
    coefficient *= (i + 1);  // 1 / i!
    p = fma(p, r, k(coefficient));
  }

  llvm::Value* ni = b.CreateFPToSI(n, int_type);
  llvm::Value* half = b.CreateAShr(ni, ki(1));
  llvm::Value* rest = b.CreateSub(ni, half);
  auto pow2 = [&](llvm::Value* e) { return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, ki(127)), ki(23)), type); };
  llvm::Value* y = b.CreateFMul(b.CreateFMul(p, pow2(rest)), pow2(half));
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, y);
}

}  // namespace fastdyn::codegen::llvm_jit
