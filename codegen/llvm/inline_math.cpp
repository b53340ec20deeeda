// codegen/llvm/inline_math.cpp — inline exp, tanh and erf for float32 (see inline_math.h for why).
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
//
// tanh(x), odd, so computed on |x| and given x's sign:
// - |x| < 0.8: x + x^3 P(x^2), P of degree 5 fitted for this project (weighted least squares on
//   Chebyshev nodes, iterated towards minimax) to tanh's relative error: under 0.01 ULP, so the
//   result's error is the evaluation's rounding, at most 0.83 ULP measured.
// - |x| >= 0.8: 1 - 2 / (exp(2|x|) + 1). The result's error is the error of exp (up to 0.87 ULP
//   of a number near 1 + e^1.6) carried through the quotient, which is where the bound of 1.5 ULP
//   comes from, plus the last rounding; exp's overflow above |x| = 44 gives exactly 1. Measured
//   over every 13th float in [-10, 10]: 1.04 ULP.
//
// erf(x) = x * P(x^2) / Q(x^2), a rational fit of degrees 5 / 6 in x^2 made for this project
// (iteratively reweighted least squares on Chebyshev nodes of [0, 3.925]; every coefficient is
// positive, so the float32 Horner steps do not cancel), with x clamped to ±3.925 (where erf
// rounds to 1) and the result to [-1, 1]. 18 vector ops against ~45 for the Abramowitz & Stegun
// 7.1.26 form that ATen's vectorised kernel uses (a reciprocal, a polynomial and an exp), with
// the same error away from 0 (<= 6 ULP measured for |x| > 0.5) and <= 4 ULP near 0, where A&S
// loses all relative accuracy. The clamps are IEEE maximum/minimum, which propagate NaN.
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

constexpr double kErfClamp = 3.925;
constexpr double kErfP[] = {1.128379169569054, 0.19245877833941397, 0.05558113952854919,
                            0.004194364207314186, 0.0004056834490129532, 6.58640051216933e-06};
constexpr double kErfQ[] = {1.0, 0.5038955724534422, 0.11722212062750129, 0.016212633829180603,
                            0.0014074244322224451, 7.109519897801734e-05, 2.4887612468857575e-07};

constexpr float kTanhSplit = 0.8f;
constexpr float kTanhP[] = {-0.33333295583724976f, 0.1333218812942505f, -0.053850214928388596f,
                            0.021296968683600426f, -0.007401606533676386f, 0.0015807923628017306f};

llvm::Value* fma(llvm::IRBuilderBase& b, llvm::Value* a, llvm::Value* m, llvm::Value* c) {
  return b.CreateIntrinsic(llvm::Intrinsic::fma, {a->getType()}, {a, m, c});
}

}  // namespace

llvm::Value* emit_exp_f32(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  if (!type->getScalarType()->isFloatTy()) throw InternalError("emit_exp_f32: operand is not float");
  auto k = [&](double v) { return llvm::ConstantFP::get(type, v); };
  llvm::Type* int_type = type->isVectorTy()
                             ? static_cast<llvm::Type*>(llvm::VectorType::get(b.getInt32Ty(), llvm::cast<llvm::VectorType>(type)->getElementCount()))
                             : b.getInt32Ty();
  auto ki = [&](int v) { return llvm::ConstantInt::get(int_type, static_cast<uint64_t>(int64_t(v)), /*isSigned=*/true); };

  llvm::Value* clamped = b.CreateIntrinsic(llvm::Intrinsic::maxnum, {type}, {x, k(kClampLow)});
  clamped = b.CreateIntrinsic(llvm::Intrinsic::minnum, {type}, {clamped, k(kClampHigh)});
  llvm::Value* n = b.CreateIntrinsic(llvm::Intrinsic::roundeven, {type}, {b.CreateFMul(clamped, k(kLog2e))});
  llvm::Value* r = fma(b, n, k(-kLn2Hi), clamped);
  r = fma(b, n, k(-kLn2Lo), r);

  double coefficient = 1.0;
  for (int i = 1; i <= kTaylorDegree; ++i) coefficient /= i;
  llvm::Value* p = k(coefficient);
  for (int i = kTaylorDegree - 1; i >= 0; --i) {
    coefficient *= (i + 1);  // 1 / i!
    p = fma(b, p, r, k(coefficient));
  }

  llvm::Value* ni = b.CreateFPToSI(n, int_type);
  llvm::Value* half = b.CreateAShr(ni, ki(1));
  llvm::Value* rest = b.CreateSub(ni, half);
  auto pow2 = [&](llvm::Value* e) { return b.CreateBitCast(b.CreateShl(b.CreateAdd(e, ki(127)), ki(23)), type); };
  llvm::Value* y = b.CreateFMul(b.CreateFMul(p, pow2(rest)), pow2(half));
  return b.CreateSelect(b.CreateFCmpUNO(x, x), x, y);
}

llvm::Value* emit_tanh_f32(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  if (!type->getScalarType()->isFloatTy()) throw InternalError("emit_tanh_f32: operand is not float");
  auto k = [&](double v) { return llvm::ConstantFP::get(type, v); };
  llvm::Value* ax = b.CreateIntrinsic(llvm::Intrinsic::fabs, {type}, {x});
  llvm::Value* u = b.CreateFMul(x, x);
  constexpr int n = int(sizeof(kTanhP) / sizeof(kTanhP[0]));
  llvm::Value* p = k(kTanhP[n - 1]);
  for (int i = n - 2; i >= 0; --i) p = fma(b, p, u, k(kTanhP[i]));
  llvm::Value* small = fma(b, b.CreateFMul(ax, u), p, ax);
  llvm::Value* e = emit_exp_f32(b, b.CreateFMul(ax, k(2)));
  llvm::Value* big = b.CreateFSub(k(1), b.CreateFDiv(k(2), b.CreateFAdd(e, k(1))));
  // NB: an ordered compare, so NaN takes the exp side, whose arithmetic keeps it NaN. The sign is
  // put back last, so that tanh(-0) is -0.
  llvm::Value* magnitude = b.CreateSelect(b.CreateFCmpOLT(ax, k(kTanhSplit)), small, big);
  return b.CreateIntrinsic(llvm::Intrinsic::copysign, {type}, {magnitude, x});
}

llvm::Value* emit_erf_f32(llvm::IRBuilderBase& b, llvm::Value* x) {
  llvm::Type* type = x->getType();
  if (!type->getScalarType()->isFloatTy()) throw InternalError("emit_erf_f32: operand is not float");
  auto k = [&](double v) { return llvm::ConstantFP::get(type, v); };
  auto clamp = [&](llvm::Value* v, double bound) {
    v = b.CreateIntrinsic(llvm::Intrinsic::maximum, {type}, {v, k(-bound)});
    return b.CreateIntrinsic(llvm::Intrinsic::minimum, {type}, {v, k(bound)});
  };
  auto horner = [&](llvm::Value* s, const double* c, int n) {
    llvm::Value* r = k(c[n - 1]);
    for (int i = n - 2; i >= 0; --i) r = fma(b, r, s, k(c[i]));
    return r;
  };
  llvm::Value* xc = clamp(x, kErfClamp);
  llvm::Value* s = b.CreateFMul(xc, xc);
  // NB: this order (x times the quotient) gives erf(3.925) = 1.
  llvm::Value* r = b.CreateFMul(xc, b.CreateFDiv(horner(s, kErfP, 6), horner(s, kErfQ, 7)));
  return clamp(r, 1.0);
}

}  // namespace fastdyn::codegen::llvm_jit
