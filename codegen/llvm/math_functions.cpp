// codegen/llvm/math_functions.cpp — which SLEEF function computes a MathFn at a given type and
// width on this host, and how kernels declare it (see math_function() in jit_engine.h).
//
// Two tables: one row per MathFn (SLEEF's base name, accuracy variant, arity), and one row per
// vector ISA variant (register width, name suffix, host features it needs, best first). A SLEEF
// name is then "Sleef_" + base + type letter + lane count + "_" + accuracy + ISA suffix, e.g.
// Sleef_expf8_u10avx2, Sleef_powd1_u10purecfma, Sleef_erfcf_u15 (plain scalar form).
// libsleef is opened at run time (dlopen): without it math_function() returns nullptr and the
// emitter falls back to its own code, instead of the whole backend failing to load.
// Known SLEEF behaviour the emitter should expect (tests/cpp/llvm/test_math_functions.cpp pins it):
// sinh/cosh return ±inf once |x| > log(FLT_MAX or DBL_MAX), a little before the exact result
// overflows (ATen's vectorised sinh does the same); Debian's libsleef 3.5.1 (our scalar and
// 128-bit forms) also returns inf for log1p(x >= 1e38 f32 / 1e307 f64) and for pow results within
// 2e-6 of DBL_MAX. Everything else is within the documented ULP bound, at every width.
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include "codegen/llvm/jit_engine.h"
#include "runtime/errors.h"

namespace fastdyn::codegen::llvm_jit {
namespace {

struct MathRow {
  MathFn fn;
  const char* base;      // SLEEF's name for it
  const char* accuracy;  // SLEEF's variant: "u10" = at most 1.0 ULP, "u15" = 1.5 ULP
  double max_ulp;
  int arity;
};

constexpr MathRow kMathRows[] = {
    {MathFn::Exp, "exp", "u10", 1.0, 1},     {MathFn::Expm1, "expm1", "u10", 1.0, 1},
    {MathFn::Log, "log", "u10", 1.0, 1},     {MathFn::Log1p, "log1p", "u10", 1.0, 1},
    {MathFn::Log2, "log2", "u10", 1.0, 1},   {MathFn::Log10, "log10", "u10", 1.0, 1},
    {MathFn::Sin, "sin", "u10", 1.0, 1},     {MathFn::Cos, "cos", "u10", 1.0, 1},
    {MathFn::Tan, "tan", "u10", 1.0, 1},     {MathFn::Tanh, "tanh", "u10", 1.0, 1},
    {MathFn::Sinh, "sinh", "u10", 1.0, 1},   {MathFn::Cosh, "cosh", "u10", 1.0, 1},
    {MathFn::Asin, "asin", "u10", 1.0, 1},   {MathFn::Acos, "acos", "u10", 1.0, 1},
    {MathFn::Atan, "atan", "u10", 1.0, 1},   {MathFn::Atan2, "atan2", "u10", 1.0, 2},
    {MathFn::Erf, "erf", "u10", 1.0, 1},     {MathFn::Erfc, "erfc", "u15", 1.5, 1},
    {MathFn::Pow, "pow", "u10", 1.0, 2},     {MathFn::Cbrt, "cbrt", "u10", 1.0, 1},
    {MathFn::Lgamma, "lgamma", "u10", 1.0, 1},
};
static_assert(sizeof(kMathRows) / sizeof(kMathRows[0]) == kMathFnCount, "one row per MathFn");

constexpr bool rows_in_enum_order() {
  for (int i = 0; i < kMathFnCount; ++i)
    if (int(kMathRows[i].fn) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(), "kMathRows must follow the MathFn enum");

// ISA variants, best first within each register width. bits == 0: the one-lane (scalar) forms.
struct IsaRow {
  int bits;
  const char* suffix;
  const char* needs[2];  // host features, nullptr = none
};
constexpr IsaRow kIsaRows[] = {
    {0, "purecfma", {"fma", nullptr}},  // Sleef_expf1_u10purecfma
    {0, "", {nullptr, nullptr}},        // Sleef_expf_u10 (no lane count: see sleef_name)
    {128, "avx2128", {"avx2", "fma"}},  {128, "sse4", {"sse4.1", nullptr}},
    {128, "sse2", {"sse2", nullptr}},   {256, "avx2", {"avx2", "fma"}},
    {256, "avx", {"avx", nullptr}},     {512, "avx512f", {"avx512f", nullptr}},
};

const MathRow& row(MathFn fn) { return kMathRows[int(fn)]; }

const std::unordered_set<std::string>& host_features() {
  static const std::unordered_set<std::string> enabled = [] {
    std::unordered_set<std::string> out;
    const std::string& all = host_target().features;
    size_t start = 0;
    while (start < all.size()) {
      size_t end = all.find(',', start);
      if (end == std::string::npos) end = all.size();
      if (all[start] == '+') out.insert(all.substr(start + 1, end - start - 1));
      start = end + 1;
    }
    return out;
  }();
  return enabled;
}

bool host_supports(const IsaRow& isa) {
  for (const char* need : isa.needs)
    if (need && !host_features().count(need)) return false;
  return true;
}

std::string sleef_name(const MathRow& r, bool is_f64, int lanes, const IsaRow& isa) {
  std::string name = std::string("Sleef_") + r.base;
  // NB: SLEEF's plain scalar names have no lane count, and then no 'd' for double either
  // (Sleef_exp_u10, Sleef_expf_u10); every other form spells both (Sleef_expd1_u10purecfma).
  bool plain = isa.bits == 0 && isa.suffix[0] == '\0';
  name += is_f64 ? (plain ? "" : "d") : "f";
  if (!plain) name += std::to_string(lanes);
  return name + "_" + r.accuracy + isa.suffix;
}

struct Sleef {
  std::mutex mutex;
  void* handle = nullptr;
  std::unordered_map<std::string, void*> symbols;
};

Sleef& sleef() {
  static Sleef* s = [] {
    auto* out = new Sleef;  // NB: never closed: JIT code keeps calling into it until exit
    for (const char* soname : {"libsleef.so.3", "libsleef.so"})
      if ((out->handle = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL))) break;
    return out;
  }();
  return *s;
}

}  // namespace

const char* math_fn_name(MathFn fn) { return row(fn).base; }
int math_fn_arity(MathFn fn) { return row(fn).arity; }
double math_fn_max_ulp(MathFn fn) { return row(fn).max_ulp; }

void* math_symbol_address(const std::string& name) {
  Sleef& s = sleef();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.symbols.find(name);
  if (it == s.symbols.end()) {
    // NB: the process first: the torch wheel exports its own, newer SLEEF build (256- and 512-bit
    // forms), the very functions ATen's vectorised kernels call, so our kernels then agree with
    // ATen bit for bit. libsleef fills in the rest (scalar and 128-bit forms).
    void* address = ::dlsym(RTLD_DEFAULT, name.c_str());
    if (!address && s.handle) address = ::dlsym(s.handle, name.c_str());
    it = s.symbols.emplace(name, address).first;
  }
  return it->second;
}

std::string math_function_name(MathFn fn, bool is_f64, int lanes) {
  const int element_bits = is_f64 ? 64 : 32;
  const int bits = lanes == 1 ? 0 : lanes * element_bits;
  for (const IsaRow& isa : kIsaRows) {
    if (isa.bits != bits || !host_supports(isa)) continue;
    std::string name = sleef_name(row(fn), is_f64, lanes, isa);
    if (math_symbol_address(name)) return name;
  }
  return "";
}

llvm::Function* math_function(llvm::Module& m, MathFn fn, bool is_f64, int lanes) {
  const std::string name = math_function_name(fn, is_f64, lanes);
  if (name.empty()) return nullptr;
  llvm::LLVMContext& ctx = m.getContext();
  llvm::Type* element = is_f64 ? llvm::Type::getDoubleTy(ctx) : llvm::Type::getFloatTy(ctx);
  llvm::Type* type = lanes == 1 ? element : llvm::FixedVectorType::get(element, lanes);
  auto* signature = llvm::FunctionType::get(type, std::vector<llvm::Type*>(size_t(math_fn_arity(fn)), type), false);
  if (llvm::Function* existing = m.getFunction(name)) {
    FD_CHECK(existing->getFunctionType() == signature, "math_function: " + name + " declared with another type");
    return existing;
  }
  auto* f = llvm::Function::Create(signature, llvm::Function::ExternalLinkage, name, m);
  f->setDoesNotThrow();
  f->setDoesNotAccessMemory();
  f->setWillReturn();
  f->addFnAttr(llvm::Attribute::NoSync);
  f->addFnAttr(llvm::Attribute::NoFree);
  if (lanes != 1) return f;

  // Tell the loop vectoriser which vector forms compute the same function (VFABI mangling:
  // _ZGV_LLVM_N<lanes><one 'v' per vector argument>_<scalar>(<vector>)). The vector declarations
  // must exist in the module, kept alive through llvm.compiler.used until the vectoriser runs.
  std::string variants;
  const int element_bits = is_f64 ? 64 : 32;
  for (int width = 2; width * element_bits <= host_target().vector_bits; width *= 2) {
    if (width * element_bits < 128) continue;
    llvm::Function* vector = math_function(m, fn, is_f64, width);
    if (!vector) continue;
    if (!variants.empty()) variants += ',';
    variants += "_ZGV_LLVM_N" + std::to_string(width) + std::string(size_t(math_fn_arity(fn)), 'v') + "_" +
                name + "(" + vector->getName().str() + ")";
    llvm::appendToCompilerUsed(m, {vector});
  }
  if (!variants.empty()) f->addFnAttr("vector-function-abi-variant", variants);
  return f;
}

}  // namespace fastdyn::codegen::llvm_jit
