// symbolic/foreach.cpp — torch._foreach_* calls in the trace: one call of the op per list item.
//
// torch.optim's multi-tensor implementations (the default on CUDA, `foreach=True` anywhere) update
// every parameter through ops over lists of tensors. The trace records them as the per-tensor ops
// they stand for (`_foreach_add_(xs, ys, alpha=a)` is `x.add_(y, alpha=a)` for each pair), which
// the graph then fuses per parameter like the single-tensor loop. On the CPU that beats ATen's
// foreach kernels; on a GPU, where those save launches across tensors, the cuda backend launches
// the per-tensor kernels together (codegen/cuda/horizontal.h).
#include <cstring>
#include <string>

#include "runtime/errors.h"
#include "symbolic/calls.h"
#include "symbolic/py_ops.h"
#include "symbolic/tracer.h"

namespace fastdyn::symbolic {

namespace {

bool is_sequence(const SymValue& v) { return v.kind == SymValue::Kind::List || v.kind == SymValue::Kind::Tuple; }

}  // namespace

bool Calls::foreach_call(Tracer& t, PyObject* fn, Args& args, Kwargs& kwargs, SymValue& out) {
  if (!PyCFunction_Check(fn)) return false;
  const char* name = reinterpret_cast<PyCFunctionObject*>(fn)->m_ml->ml_name;
  constexpr const char* kPrefix = "_foreach_";
  if (!name || std::strncmp(name, kPrefix, std::strlen(kPrefix)) != 0 || args.empty()) return false;
  const std::string full = name, op = full.substr(std::strlen(kPrefix));
  PyOwned torch_fn(resolve_loaded_python_name("torch." + full));
  if (torch_fn.p != fn) return false;
  const bool inplace = !op.empty() && op.back() == '_';
  // The lists: every positional sequence argument, one item per call. The first one sets the
  // count; torch._foreach_pow(scalar, exponents) has a scalar first.
  size_t n = SIZE_MAX;
  for (const SymValue& a : args)
    if (is_sequence(a)) {
      const size_t len = a.seq().size();
      if (n != SIZE_MAX && len != n) throw Unsupported("torch." + full + ": lists of different lengths");
      n = len;
    }
  if (n == SIZE_MAX) return false;
  // addcmul/addcdiv take their scalar(s) positionally here, as `value` in the per-tensor op; a
  // 1-d tensor there holds one scalar per item (torch.optim's stacked Adam step sizes).
  const bool addc = op.rfind("addcmul", 0) == 0 || op.rfind("addcdiv", 0) == 0;
  std::vector<SymValue> results;
  for (size_t i = 0; i < n; ++i) {
    Args a;
    Kwargs kw = kwargs;
    for (size_t k = 0; k < args.size(); ++k) {
      SymValue item = args[k];
      if (is_sequence(args[k])) {
        item = args[k].seq()[i];
      } else if (addc && k == 3 && args[k].is_tensor() && t.meta(args[k]).dim() == 1) {
        PyOwned idx(PyLong_FromSize_t(i));
        item = t.subscript(args[k], Tracer::constant(idx.p));
      }
      if (addc && k == 3) kw.emplace_back("value", item);
      else a.push_back(item);
    }
    SymValue r;
    if (is_sequence(args[0])) {
      SymValue self = a.front();
      a.erase(a.begin());
      r = t.call_tensor_method(self, op, std::move(a), std::move(kw));
    } else {  // a scalar first (pow): the torch function
      PyOwned f(resolve_loaded_python_name("torch." + op));
      if (!f.p) throw Unsupported("torch." + full + " with a scalar first argument");
      r = t.call(Tracer::constant(f.p), std::move(a), std::move(kw));
    }
    results.push_back(std::move(r));
  }
  out = inplace ? Tracer::constant(Py_None) : SymValue::list(std::move(results));
  return true;
}

}  // namespace fastdyn::symbolic
