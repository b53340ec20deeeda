// tests/cpp/llvm/test_math_functions.cpp — every SLEEF function the JIT resolves, called from a
// JIT-compiled kernel at every width this host offers, against the C library's long double math
// over a grid with edge values (0, -0, inf, nan, denormals, huge) and random points; max ULP error
// must stay within SLEEF's documented bound for the variant (1.0 ULP for u10, 1.5 for u15).
#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "codegen/llvm/jit_engine.h"
#include "tests/cpp/llvm/test_kernels.h"

namespace fastdyn::codegen::llvm_jit {
namespace {

using Ref1 = long double (*)(long double);
using Ref2 = long double (*)(long double, long double);
struct Reference {
  MathFn fn;
  Ref1 one;
  Ref2 two;
};
// NB: long double (x87, 64-bit mantissa) references are 11 bits more precise than double, so
// their own error is a negligible part of an ULP at float or double.
const Reference kReferences[] = {
    {MathFn::Exp, [](long double x) { return expl(x); }, nullptr},
    {MathFn::Expm1, [](long double x) { return expm1l(x); }, nullptr},
    {MathFn::Log, [](long double x) { return logl(x); }, nullptr},
    {MathFn::Log1p, [](long double x) { return log1pl(x); }, nullptr},
    {MathFn::Log2, [](long double x) { return log2l(x); }, nullptr},
    {MathFn::Log10, [](long double x) { return log10l(x); }, nullptr},
    {MathFn::Sin, [](long double x) { return sinl(x); }, nullptr},
    {MathFn::Cos, [](long double x) { return cosl(x); }, nullptr},
    {MathFn::Tan, [](long double x) { return tanl(x); }, nullptr},
    {MathFn::Tanh, [](long double x) { return tanhl(x); }, nullptr},
    {MathFn::Sinh, [](long double x) { return sinhl(x); }, nullptr},
    {MathFn::Cosh, [](long double x) { return coshl(x); }, nullptr},
    {MathFn::Asin, [](long double x) { return asinl(x); }, nullptr},
    {MathFn::Acos, [](long double x) { return acosl(x); }, nullptr},
    {MathFn::Atan, [](long double x) { return atanl(x); }, nullptr},
    {MathFn::Atan2, nullptr, [](long double y, long double x) { return atan2l(y, x); }},
    {MathFn::Erf, [](long double x) { return erfl(x); }, nullptr},
    {MathFn::Erfc, [](long double x) { return erfcl(x); }, nullptr},
    {MathFn::Pow, nullptr, [](long double x, long double y) { return powl(x, y); }},
    {MathFn::Cbrt, [](long double x) { return cbrtl(x); }, nullptr},
    {MathFn::Lgamma, [](long double x) { return lgammal(x); }, nullptr},
};
static_assert(sizeof(kReferences) / sizeof(kReferences[0]) == kMathFnCount, "one reference per MathFn");

// SLEEF's known early overflows, measured on Debian's libsleef 3.5.1 (scalar and 128-bit forms)
// and torch's bundled copy (256/512-bit forms, the ones ATen's own kernels call): there the result
// may be ±inf (with the exact result's sign) although the exact result is still finite. Every
// other input must meet the ULP bound.
// - sinh, cosh: inf once |x| > log(max) (88.72 f32, 709.78 f64), not at asinh(max) (89.42, 710.48).
// - log1p: libsleef 3.5.1 returns inf for x >= 1e38 (f32) / 1e307 (f64); torch's copy does not.
// - pow: libsleef 3.5.1 returns inf for results within 2e-6 of the largest double.
bool known_early_overflow(MathFn fn, bool is_f64, long double x, long double exact) {
  const long double max = is_f64 ? std::numeric_limits<double>::max() : std::numeric_limits<float>::max();
  switch (fn) {
    case MathFn::Sinh:
    case MathFn::Cosh: return std::fabs(x) > std::log(max);
    case MathFn::Log1p: return x >= (is_f64 ? 1e307L : 1e38L);
    case MathFn::Pow: return std::fabs(exact) >= max * (1 - 2e-6L);
    default: return false;
  }
}

// void k<lanes>(const T* x, const T* y, T* out, int64_t n), n a multiple of lanes: out = fn(x[, y])
// in steps of `lanes` elements, calling exactly the declaration math_function() returns. The
// scalar kernel is optnone so that it really calls the scalar form (otherwise the vectoriser
// would replace it by a vector one).
bool add_math_kernel(llvm::Module& m, MathFn fn, bool is_f64, int lanes, const std::string& name) {
  llvm::Function* callee = math_function(m, fn, is_f64, lanes);
  if (!callee) return false;
  llvm::IRBuilder<> ir(m.getContext());
  llvm::Type* element = is_f64 ? ir.getDoubleTy() : ir.getFloatTy();
  llvm::Type* type = callee->getReturnType();
  auto* k = llvm::Function::Create(
      llvm::FunctionType::get(ir.getVoidTy(), {ir.getPtrTy(), ir.getPtrTy(), ir.getPtrTy(), ir.getInt64Ty()}, false),
      llvm::Function::ExternalLinkage, name, m);
  if (lanes == 1) {
    k->addFnAttr(llvm::Attribute::OptimizeNone);
    k->addFnAttr(llvm::Attribute::NoInline);
  }
  const llvm::Align align(is_f64 ? 8 : 4);
  testing::emit_loop(ir, k, k->getArg(3), lanes, [&](llvm::Value* i) {
    std::vector<llvm::Value*> args;
    for (int a = 0; a < math_fn_arity(fn); ++a)
      args.push_back(ir.CreateAlignedLoad(type, ir.CreateInBoundsGEP(element, k->getArg(a), i), align));
    ir.CreateAlignedStore(ir.CreateCall(callee, args), ir.CreateInBoundsGEP(element, k->getArg(2), i), align);
  });
  ir.CreateRetVoid();
  return true;
}

// Error of `got` against the exact value `exact`, in ULPs of T at `exact`; 0 when both are the
// same NaN/inf/signed zero, infinity when they disagree on those.
template <class T>
double ulp_error(T got, long double exact) {
  const T rounded = T(exact);
  if (std::isnan(exact) || std::isnan(got)) return std::isnan(exact) && std::isnan(got) ? 0.0 : INFINITY;
  if (std::isinf(rounded) || std::isinf(got)) return got == rounded ? 0.0 : INFINITY;
  if (exact == 0 && got == 0) return std::signbit(got) == std::signbit(rounded) ? 0.0 : INFINITY;
  int exponent = 0;
  std::frexp(exact, &exponent);
  const int digits = std::numeric_limits<T>::digits;
  long double ulp = std::ldexp(1.0L, exponent - digits);
  ulp = std::max<long double>(ulp, std::numeric_limits<T>::denorm_min());
  return double(std::fabs((long double)got - exact) / ulp);
}

template <class T>
std::vector<T> grid(uint32_t seed) {
  using L = std::numeric_limits<T>;
  std::vector<T> v = {T(0), -T(0), L::infinity(), -L::infinity(), L::quiet_NaN(), L::denorm_min(), -L::denorm_min(),
                      L::min(), -L::min(), L::max(), -L::max(), T(1), T(-1), T(0.5), T(-0.5), T(2), T(-2), T(3),
                      T(10), T(-10), T(100), T(-100), T(1.5707963267948966), T(3.141592653589793), T(1e-5), T(-1e-5)};
  for (int e = L::min_exponent - L::digits; e < L::max_exponent; e += 3)
    for (T m : {T(1), T(1.37), T(-1), T(-1.61)}) v.push_back(std::ldexp(m, e));
  std::mt19937 rng(seed);
  for (T range : {T(1), T(10), T(100), T(1000)}) {
    std::uniform_real_distribution<T> d(-range, range);
    for (int i = 0; i < 400; ++i) v.push_back(d(rng));
  }
  return v;
}

template <class T>
struct Worst {
  double ulp = 0;
  T x = 0, y = 0, got = 0;
  long double exact = 0;
};

template <class T>
void check_function(MathFn fn, const Reference& ref) {
  const bool is_f64 = std::is_same_v<T, double>;
  const std::string type = is_f64 ? "f64" : "f32";
  // Inputs: the grid for unary functions; for binary ones, the edge values crossed with each
  // other plus random pairs.
  std::vector<T> xs, ys;
  std::vector<T> g = grid<T>(int(fn) * 2 + is_f64);
  if (math_fn_arity(fn) == 1) {
    xs = g;
    ys = g;
  } else {
    for (size_t i = 0; i < 40; ++i)
      for (size_t j = 0; j < 40; ++j) {
        xs.push_back(g[i]);
        ys.push_back(g[j]);
      }
    std::mt19937 rng(7);
    std::uniform_real_distribution<T> pos(T(0), T(50)), any(T(-20), T(20));
    for (int i = 0; i < 1500; ++i) {
      xs.push_back(i % 2 ? pos(rng) : any(rng));
      ys.push_back(any(rng));
    }
  }
  while (xs.size() % 16) {
    xs.push_back(T(1));
    ys.push_back(T(1));
  }
  const int64_t n = int64_t(xs.size());

  ModuleBuilder m = new_module(std::string("sleef_") + math_fn_name(fn) + "_" + type);
  std::vector<int> widths;
  std::vector<std::string> names;
  for (int lanes : {1, 2, 4, 8, 16}) {
    if (lanes > 1 && (lanes * (is_f64 ? 64 : 32) < 128 || lanes * (is_f64 ? 64 : 32) > 512)) continue;
    std::string name = "k" + std::to_string(lanes);
    if (!add_math_kernel(*m.module, fn, is_f64, lanes, name)) continue;
    widths.push_back(lanes);
    names.push_back(name);
  }
  ASSERT_FALSE(widths.empty()) << "no SLEEF form of " << math_fn_name(fn) << " " << type;
  ASSERT_EQ(widths[0], 1) << "the scalar form must always exist";
  std::vector<void*> kernels = compile(std::move(m), "test sleef " + std::string(math_fn_name(fn)) + " " + type, names);

  for (size_t w = 0; w < widths.size(); ++w) {
    const std::string symbol = math_function_name(fn, is_f64, widths[w]);
    SCOPED_TRACE(symbol);
    std::vector<T> out(n, T(-12345));
    reinterpret_cast<void (*)(const T*, const T*, T*, int64_t)>(kernels[w])(xs.data(), ys.data(), out.data(), n);
    Worst<T> worst;
    for (int64_t i = 0; i < n; ++i) {
      long double exact = ref.one ? ref.one(xs[i]) : ref.two(xs[i], ys[i]);
      double e = ulp_error<T>(out[i], exact);
      if (std::isinf(out[i]) && std::signbit(out[i]) == std::signbit(exact) &&
          known_early_overflow(fn, is_f64, xs[i], exact))
        e = 0;
      if (!(e <= worst.ulp)) worst = {e, xs[i], ys[i], out[i], exact};
    }
    std::printf("[ sleef    ] %-28s max %.3f ulp\n", symbol.c_str(), worst.ulp);
    EXPECT_LE(worst.ulp, math_fn_max_ulp(fn) + 0.01)
        << symbol << "(" << double(worst.x) << (ref.two ? ", " + std::to_string(double(worst.y)) : "") << ") = "
        << double(worst.got) << ", exact " << double(worst.exact);
  }
}

// One test per type, each function in turn (SCOPED_TRACE names the SLEEF symbol on failure):
// ctest runs every test in its own process, and 42 processes loading torch would cost more
// than the checks themselves.
template <class T>
void check_all_functions() {
  ::setenv("FASTDYN_CACHE_DIR", "off", 1);
  for (int f = 0; f < kMathFnCount; ++f) check_function<T>(MathFn(f), kReferences[f]);
  ::unsetenv("FASTDYN_CACHE_DIR");
}

TEST(SleefAccuracy, F32EveryFunctionEveryWidthWithinDocumentedUlp) { check_all_functions<float>(); }
TEST(SleefAccuracy, F64EveryFunctionEveryWidthWithinDocumentedUlp) { check_all_functions<double>(); }

TEST(SleefNames, TableFollowsHostFeatures) {
  const HostTarget& h = host_target();
  auto has = [&](const char* f) { return h.features.find(std::string("+") + f + ",") != std::string::npos; };
  ASSERT_NE(math_symbol_address("Sleef_expf_u10"), nullptr) << "libsleef is not loadable";
  EXPECT_EQ(math_function_name(MathFn::Exp, false, 1), has("fma") ? "Sleef_expf1_u10purecfma" : "Sleef_expf_u10");
  EXPECT_EQ(math_function_name(MathFn::Erfc, true, 1), has("fma") ? "Sleef_erfcd1_u15purecfma" : "Sleef_erfc_u15");
  if (has("avx2") && has("fma")) {
    EXPECT_EQ(math_function_name(MathFn::Exp, false, 8), "Sleef_expf8_u10avx2");
    EXPECT_EQ(math_function_name(MathFn::Pow, true, 2), "Sleef_powd2_u10avx2128");
  }
  EXPECT_EQ(math_function_name(MathFn::Exp, false, 16), has("avx512f") ? "Sleef_expf16_u10avx512f" : "");
  EXPECT_EQ(math_function_name(MathFn::Exp, false, 3), "");
  EXPECT_EQ(math_function_name(MathFn::Exp, true, 16), "") << "no 1024-bit vectors";
}

// A kernel tuned for 256-bit vectors (as LLVM tunes several AVX-512 CPUs) that declares a small
// legal vector width (as clang-style IR does) still calls a 512-bit SLEEF function with its
// argument in one zmm register: the engine raises the declared width to what its calls pass.
TEST(SleefVectorisation, WideCallKeepsItsAbiInKernelPreferring256Bits) {
  if (math_function_name(MathFn::Exp, false, 16).empty()) GTEST_SKIP() << "no 512-bit SLEEF on this host";
  ::setenv("FASTDYN_CACHE_DIR", "off", 1);
  ModuleBuilder m = new_module("prefer_256");
  ASSERT_TRUE(add_math_kernel(*m.module, MathFn::Exp, false, 16, "k16"));
  m.module->getFunction("k16")->addFnAttr("prefer-vector-width", "256");
  m.module->getFunction("k16")->addFnAttr("min-legal-vector-width", "0");
  auto k16 = reinterpret_cast<void (*)(const float*, const float*, float*, int64_t)>(
      compile(std::move(m), "test prefer 256", {"k16"}).at(0));
  std::vector<float> x(64), out(64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.25f - 8.0f;
  k16(x.data(), x.data(), out.data(), 64);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(out[i], std::exp(x[i]), 2e-7f * std::exp(x[i])) << i;
  ::unsetenv("FASTDYN_CACHE_DIR");
}

// The torch wheel exports its own SLEEF build (the 256/512-bit forms its vectorised kernels
// call); where it has a symbol, kernels call that one, so they agree with ATen bit for bit.
TEST(SleefNames, PrefersTheSleefTheProcessAlreadyHas) {
  void* from_torch = ::dlsym(RTLD_DEFAULT, "Sleef_expf8_u10avx2");
  if (!from_torch) GTEST_SKIP() << "this process exports no SLEEF (torch built without it?)";
  EXPECT_EQ(math_symbol_address("Sleef_expf8_u10avx2"), from_torch);
  // Forms the process lacks come from libsleef.
  EXPECT_EQ(::dlsym(RTLD_DEFAULT, "Sleef_expf1_u10purecfma"), nullptr);
  EXPECT_NE(math_symbol_address("Sleef_expf1_u10purecfma"), nullptr);
}

// Only LLVM's loop vectoriser does this, so only under FASTDYN_LLVM_PIPELINE=o3 (ctest runs this
// suite once more with it: SleefVectorisationUnderO3). fastdyn's emitter calls the vector forms
// itself and needs no vectoriser.
TEST(SleefVectorisation, ScalarCallInLoopBecomesHostWidthVectorCall) {
  if (optimisation_pipeline() != "o3") GTEST_SKIP() << "the lean pipeline does not vectorise loops";
  const std::string dir = (std::filesystem::temp_directory_path() / "fastdyn_sleef_vec_test").string();
  std::filesystem::remove_all(dir);
  ::setenv("FASTDYN_CACHE_DIR", dir.c_str(), 1);
  const int lanes = host_target().vector_bits / 32;
  const std::string vector_name = math_function_name(MathFn::Exp, false, lanes);
  ASSERT_FALSE(vector_name.empty());

  // A plain scalar loop out[i] = exp(x[i]), optimised normally.
  ModuleBuilder m = new_module("vectorise_exp");
  llvm::IRBuilder<> ir(*m.context);
  llvm::Function* exp = math_function(*m.module, MathFn::Exp, false, 1);
  auto* k = llvm::Function::Create(
      llvm::FunctionType::get(ir.getVoidTy(), {ir.getPtrTy(), ir.getPtrTy(), ir.getInt64Ty()}, false),
      llvm::Function::ExternalLinkage, "vexp", *m.module);
  k->addParamAttr(0, llvm::Attribute::NoAlias);
  k->addParamAttr(1, llvm::Attribute::NoAlias);
  testing::emit_loop(ir, k, k->getArg(2), 1, [&](llvm::Value* i) {
    llvm::Value* x = ir.CreateLoad(ir.getFloatTy(), ir.CreateInBoundsGEP(ir.getFloatTy(), k->getArg(0), i));
    ir.CreateStore(ir.CreateCall(exp, {x}), ir.CreateInBoundsGEP(ir.getFloatTy(), k->getArg(1), i));
  });
  ir.CreateRetVoid();
  auto vexp = reinterpret_cast<void (*)(const float*, float*, int64_t)>(compile(std::move(m), "test vexp", {"vexp"}).at(0));
  std::vector<float> x(1001), out(1001);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) * 0.01f - 5.0f;
  vexp(x.data(), out.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(out[i], std::exp(x[i]), 2e-7f * std::exp(x[i])) << i;

  // The object the disk cache holds names the vector form: the vectoriser used it.
  std::string object;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    object += ss.str();
  }
  EXPECT_NE(object.find(vector_name), std::string::npos) << "no call to " << vector_name << " in the object";
  std::filesystem::remove_all(dir);
  ::unsetenv("FASTDYN_CACHE_DIR");
}

}  // namespace
}  // namespace fastdyn::codegen::llvm_jit
