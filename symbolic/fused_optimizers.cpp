// symbolic/fused_optimizers.cpp — torch.optim's fused implementations in the trace: the per-tensor
// update each fused kernel computes, recorded for each parameter.
//
// `fused=True` makes Adam, AdamW and SGD call one ATen op over every parameter
// (torch._fused_adam_, _fused_adamw_, _fused_sgd_). fastdyn cannot lower such an op, so the trace
// records what it computes per parameter, in torch.optim's own terms (its single-tensor
// functions: the same updates, the same order of in-place writes), which the graph then fuses per
// parameter and the cuda backend launches together (codegen/cuda/horizontal.h). Adam's bias
// corrections come from the step count tensors (as on torch.optim's compiler path), in float32
// where ATen's kernel takes them in double: results differ from eager's by a few ulp, as they do
// for the other implementations under a compiler. Under a GradScaler the op's grad_scale and
// found_inf are applied as the fused kernels apply them (Writes). Not recorded (the call runs as
// written): a learning rate that is a tensor.
#include <functional>
#include <optional>
#include <string>

#include "runtime/errors.h"
#include "symbolic/calls.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {
namespace {

using Args = Calls::Args;
using Kwargs = Calls::Kwargs;
// A tensor method called in the trace (Tracer::call_tensor_method, which Calls reaches).
using Method = std::function<SymValue(const SymValue& self, const char* name, Args args, Kwargs kwargs)>;
// torch.<name>(args) called in the trace.
using Function = std::function<SymValue(const char* name, Args args)>;

struct FusedArgs {
  const Args& args;
  const Kwargs& kwargs;
  const std::string& name;
  // A keyword argument that must be a Python constant (its object: borrowed from the value).
  PyObject* constant(const char* key) const {
    for (const auto& [k, v] : kwargs)
      if (k == key) {
        if (!v.is_python_constant()) throw Unsupported("torch." + name + " with " + key + " that is not a constant");
        return v.obj;
      }
    throw Unsupported("torch." + name + " without " + key);
  }
  double number(const char* key) const {
    PyObject* o = constant(key);
    if (!PyFloat_Check(o) && !PyLong_Check(o)) throw Unsupported("torch." + name + ": " + key + " is not a number");
    return PyFloat_AsDouble(o);
  }
  bool flag(const char* key) const { return PyObject_IsTrue(constant(key)) == 1; }
  // A keyword argument that is a tensor, or nullptr where it is None or absent.
  const SymValue* tensor(const char* key) const {
    for (const auto& [k, v] : kwargs)
      if (k == key) {
        if (v.kind == SymValue::Kind::Tensor) return &v;
        if (v.is_python_constant() && v.obj == Py_None) return nullptr;
        throw Unsupported("torch." + name + ": " + key + " is neither a tensor nor None");
      }
    return nullptr;
  }
  const std::vector<SymValue>& list(size_t i) const {
    if (i >= args.size() || (args[i].kind != SymValue::Kind::List && args[i].kind != SymValue::Kind::Tuple))
      throw Unsupported("torch." + name + ": argument " + std::to_string(i) + " is not a list");
    return args[i].seq();
  }
};

SymValue number(double x) {
  PyOwned o(PyFloat_FromDouble(x));
  return Tracer::constant(o.p);
}

// Where the update's values go. Under a GradScaler the fused op takes its scale and found_inf:
// each gradient is divided by the scale and written back unscaled, and where found_inf == 1 (an
// inf or NaN in some gradient) the op returns before writing anything; so every write keeps the
// old contents where that holds.
struct Writes {
  const Method& m;
  const Function& f;
  std::optional<SymValue> skip;   // found_inf == 1, a bool scalar
  std::optional<SymValue> scale;  // grad_scale
  void operator()(const SymValue& t, const SymValue& value) const {
    m(t, "copy_", {skip ? f("where", {*skip, t, value}) : value}, {});
  }
  // The gradient the fused op reads: unscaled, and written back so, where there is a scale.
  SymValue grad(const SymValue& g) const {
    if (!scale) return g;
    const SymValue unscaled = m(g, "div", {*scale}, {});
    (*this)(g, unscaled);
    return unscaled;
  }
};

Writes writes(const Method& m, const Function& f, const FusedArgs& a) {
  Writes w{m, f, std::nullopt, std::nullopt};
  if (const SymValue* found_inf = a.tensor("found_inf")) w.skip = m(*found_inf, "eq", {number(1)}, {});
  if (const SymValue* scale = a.tensor("grad_scale")) w.scale = *scale;
  return w;
}

// The gradient the update uses: -grad when maximizing, plus weight_decay * param for Adam's and
// SGD's coupled decay (out of place: the fused kernels leave the caller's gradient alone).
SymValue effective_grad(const Method& m, const SymValue& param, SymValue grad, bool maximize, double coupled_decay) {
  if (maximize) grad = m(grad, "neg", {}, {});
  if (coupled_decay != 0) grad = m(grad, "add", {param}, {{"alpha", number(coupled_decay)}});
  return grad;
}

// Each parameter's update computed from the old contents, then written (Writes): the values
// torch.optim's single-tensor functions compute with their in-place ops, in the same order.
void adam(const Method& m, const Function& f, const FusedArgs& a, bool decoupled) {
  const double lr = a.number("lr"), beta1 = a.number("beta1"), beta2 = a.number("beta2"), wd = a.number("weight_decay"),
               eps = a.number("eps");
  const bool maximize = a.flag("maximize");
  const auto &params = a.list(0), &grads = a.list(1), &exp_avgs = a.list(2), &exp_avg_sqs = a.list(3), &steps = a.list(5);
  const size_t n = params.size();
  // amsgrad: the largest second moment so far, per element, is what the step divides by.
  const std::vector<SymValue>* maxima = a.flag("amsgrad") ? &a.list(4) : nullptr;
  if (grads.size() != n || exp_avgs.size() != n || exp_avg_sqs.size() != n || steps.size() != n || (maxima && maxima->size() != n))
    throw Unsupported("torch." + a.name + ": lists of different lengths");
  const Writes write = writes(m, f, a);
  for (size_t i = 0; i < n; ++i) {
    const SymValue& param = params[i];
    const SymValue decayed = decoupled && wd != 0 ? m(param, "mul", {number(1 - lr * wd)}, {}) : param;
    const SymValue grad = effective_grad(m, param, write.grad(grads[i]), maximize, decoupled ? 0 : wd);
    const SymValue exp_avg = m(exp_avgs[i], "lerp", {grad, number(1 - beta1)}, {});
    const SymValue exp_avg_sq =
        m(m(exp_avg_sqs[i], "mul", {number(beta2)}, {}), "addcmul", {grad, grad}, {{"value", number(1 - beta2)}});
    // Bias corrections from the count, which torch.optim has incremented before the call.
    auto one_minus = [&](const SymValue& x) { return m(m(x, "neg", {}, {}), "add", {number(1)}, {}); };
    const SymValue bc1 = one_minus(f("pow", {number(beta1), steps[i]}));
    const SymValue bc2 = one_minus(f("pow", {number(beta2), steps[i]}));
    const SymValue step_size = m(m(bc1, "reciprocal", {}, {}), "mul", {number(lr)}, {});
    SymValue second = exp_avg_sq;
    if (maxima) {
      second = f("maximum", {(*maxima)[i], exp_avg_sq});
      write((*maxima)[i], second);
    }
    SymValue denom = m(second, "sqrt", {}, {});
    denom = m(denom, "div", {m(bc2, "sqrt", {}, {})}, {});
    denom = m(denom, "add", {number(eps)}, {});
    const SymValue updated = m(decayed, "addcdiv", {exp_avg, denom}, {{"value", m(step_size, "neg", {}, {})}});
    write(exp_avgs[i], exp_avg);
    write(exp_avg_sqs[i], exp_avg_sq);
    write(param, updated);
  }
}

void sgd(const Method& m, const Function& f, const FusedArgs& a) {
  const double wd = a.number("weight_decay"), momentum = a.number("momentum"), lr = a.number("lr"), dampening = a.number("dampening");
  const bool nesterov = a.flag("nesterov"), maximize = a.flag("maximize"), first = a.flag("is_first_step");
  const auto &params = a.list(0), &grads = a.list(1);
  const size_t n = params.size();
  if (grads.size() != n) throw Unsupported("torch." + a.name + ": lists of different lengths");
  const std::vector<SymValue>* bufs = momentum != 0 ? &a.list(2) : nullptr;
  if (bufs && bufs->size() != n) throw Unsupported("torch." + a.name + ": lists of different lengths");
  const Writes write = writes(m, f, a);
  for (size_t i = 0; i < n; ++i) {
    SymValue grad = effective_grad(m, params[i], write.grad(grads[i]), maximize, wd);
    if (bufs) {
      const SymValue& buf = (*bufs)[i];
      const SymValue next = first ? grad : m(m(buf, "mul", {number(momentum)}, {}), "add", {grad}, {{"alpha", number(1 - dampening)}});
      write(buf, next);
      grad = nesterov ? m(grad, "add", {next}, {{"alpha", number(momentum)}}) : next;
    }
    write(params[i], m(params[i], "add", {grad}, {{"alpha", number(-lr)}}));
  }
}

}  // namespace

bool Calls::fused_optimizer_call(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out) {
  if (!PyCFunction_Check(fn)) return false;
  const char* raw = reinterpret_cast<PyCFunctionObject*>(fn)->m_ml->ml_name;
  if (!raw) return false;
  const std::string name = raw;
  if (name != "_fused_adam_" && name != "_fused_adamw_" && name != "_fused_sgd_") return false;
  PyOwned torch_fn(resolve_loaded_python_name("torch." + name));
  if (torch_fn.p != fn) return false;
  const FusedArgs a{args, kwargs, name};
  const Method m = [&t](const SymValue& self, const char* method, Args margs, Kwargs mkwargs) {
    return t.call_tensor_method(self, method, std::move(margs), std::move(mkwargs));
  };
  const Function f = [&t, &name](const char* torch_name, Args fargs) {
    PyOwned fn(resolve_loaded_python_name(std::string("torch.") + torch_name));
    if (!fn.p) throw Unsupported("torch." + name + ": torch." + torch_name + " is missing");
    return t.call(Tracer::constant(fn.p), std::move(fargs), {});
  };
  if (name == "_fused_sgd_") sgd(m, f, a);
  else adam(m, f, a, name == "_fused_adamw_");
  out = Tracer::constant(Py_None);
  return true;
}

}  // namespace fastdyn::symbolic
