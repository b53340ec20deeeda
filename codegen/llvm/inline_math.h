// codegen/llvm/inline_math.h — math functions the kernel emitter writes inline, as straight-line
// IR, instead of calling SLEEF (codegen/ layer, below the emitter; LLVM types only).
//
// Why inline: a call inside a vectorised loop is opaque to LLVM's register allocator, and every
// vector register is caller-saved in the SysV ABI, so each call spills whatever the loop keeps
// live (operands, constants, partial results) around it. For exp, which softmax, sigmoid, silu,
// softplus and the float32 erf of GELU all need, the call and its spills cost more than the
// function itself. Inline code also lets LLVM schedule it with its neighbours and keep constants
// in registers across iterations.
//
// Accuracy contract: as stated per function (exp: at most 1.0 ULP, like the SLEEF form it
// replaces), pinned by tests/cpp/llvm/test_inline_math.cpp over every float exponent, with IEEE
// edge behaviour: exp(nan) = nan, exp(+inf) = +inf, exp(-inf) = +0, overflow to +inf above log(FLT_MAX),
// gradual underflow through the denormals and +0 below.
#pragma once

namespace llvm {
class IRBuilderBase;
class Value;
}  // namespace llvm

namespace fastdyn::codegen::llvm_jit {

// exp(x) for x of type float or <N x float>, emitted at the builder's insertion point.
llvm::Value* emit_exp_f32(llvm::IRBuilderBase& b, llvm::Value* x);

// tanh(x), likewise. At most 1.5 ULP (SLEEF's tanh: 1.0): see inline_math.cpp for where the
// extra half ULP comes from. tanh(±0) = ±0, tanh(±inf) = ±1, tanh(nan) = nan.
llvm::Value* emit_tanh_f32(llvm::IRBuilderBase& b, llvm::Value* x);

// erf(x), likewise: x * P(x^2) / Q(x^2), a rational fit made for this project (inline_math.cpp).
// At most 6 ULP for |x| > 0.5 and 4 ULP below; erf(±0) = ±0, erf(±inf) = ±1, erf(nan) = nan.
llvm::Value* emit_erf_f32(llvm::IRBuilderBase& b, llvm::Value* x);

}  // namespace fastdyn::codegen::llvm_jit
