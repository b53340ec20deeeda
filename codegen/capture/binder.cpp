// codegen/capture/binder.cpp — Signature parsing and binding, BoundArgs accessors, emit helpers.
//
// A Signature is parsed once from Python notation ("softmax(Tensor input, int dim, ScalarType?
// dtype=None)"). Binding follows Python's rules: positionals fill parameters in order up to the
// first keyword-only one (a `Type *name` parameter gathers the rest), keywords by name, defaults
// last. Every value is checked against its declared type and normalised (a float parameter given
// an int becomes Double, an int[] given a single int becomes [i], a tuple of tensors becomes a
// TensorList), so binders read one canonical kind per type. Errors name the function and the
// parameter, as CPython's and PyTorch's own messages do.
#include "codegen/capture/autocast.h"
#include "codegen/capture/binder.h"
#include "codegen/capture/meta_rules.h"
#include "codegen/shapes/propagate.h"

#include "runtime/errors.h"

#include <cctype>
#include <cstdlib>
#include <limits>

namespace fastdyn::codegen {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Splits at top-level commas (not inside brackets, parentheses or quotes).
std::vector<std::string> split_top_level(const std::string& s) {
  std::vector<std::string> parts;
  int depth = 0;
  char quote = 0;
  std::string cur;
  for (char c : s) {
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '[' || c == '(') {
      ++depth;
    } else if (c == ']' || c == ')') {
      --depth;
    } else if (c == ',' && depth == 0) {
      parts.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (!trim(cur).empty()) parts.push_back(trim(cur));
  return parts;
}

CallArg parse_default(const std::string& text, const std::string& where) {
  if (text == "None") return CallArg::none();
  if (text == "True") return CallArg::of_bool(true);
  if (text == "False") return CallArg::of_bool(false);
  if (text.size() >= 2 && (text[0] == '"' || text[0] == '\'')) return CallArg::of_string(text.substr(1, text.size() - 2));
  if (text.size() >= 2 && (text[0] == '[' || text[0] == '(')) {
    std::vector<int64_t> v;
    for (const auto& p : split_top_level(text.substr(1, text.size() - 2))) v.push_back(std::stoll(p));
    return CallArg::of_ints(std::move(v));
  }
  char* end = nullptr;
  long long iv = std::strtoll(text.c_str(), &end, 10);
  if (end && *end == '\0' && !text.empty()) return CallArg::of_int(iv);
  if (text == "inf") return CallArg::of_double(std::numeric_limits<double>::infinity());
  if (text == "-inf") return CallArg::of_double(-std::numeric_limits<double>::infinity());
  double dv = std::strtod(text.c_str(), &end);
  if (end && *end == '\0' && !text.empty()) return CallArg::of_double(dv);
  FD_CHECK(false, "bad default '" + text + "' in signature " + where);
  return CallArg::none();
}

const char* kind_name(const CallArg& a) {
  switch (a.kind) {
    case CallArg::Kind::Tensor: return "Tensor";
    case CallArg::Kind::Int: return "int";
    case CallArg::Kind::Double: return "float";
    case CallArg::Kind::Bool: return "bool";
    case CallArg::Kind::None: return "NoneType";
    case CallArg::Kind::IntList: return "tuple of ints";
    case CallArg::Kind::TensorList: return "tuple of Tensors";
    case CallArg::Kind::DType: return "torch.dtype";
    case CallArg::Kind::Device: return "torch.device";
    case CallArg::Kind::String: return "str";
    case CallArg::Kind::Ellipsis: return "ellipsis";
    case CallArg::Kind::Slice: return "slice";
    case CallArg::Kind::Tuple: return "tuple";
    case CallArg::Kind::MemoryFormat: return "torch.memory_format";
  }
  return "object";
}

bool is_number(const CallArg& a) {
  return a.kind == CallArg::Kind::Int || a.kind == CallArg::Kind::Double || a.kind == CallArg::Kind::Bool;
}

// Converts `in` to the canonical kind of one (non-union, non-optional) type; false if it does not fit.

// Ints as an int[] argument, with the expressions of size-derived ones (CallArg::sym).
bool pack_ints(const std::vector<CallArg>& items, CallArg& out) {
  std::vector<int64_t> v;
  std::vector<shapes::SizeExpr> sym;
  bool symbolic = false;
  for (const CallArg& it : items) {
    if (it.kind != CallArg::Kind::Int) return false;
    v.push_back(it.i);
    sym.push_back(it.sym.empty() ? shapes::SizeExpr(it.i) : it.sym[0]);
    symbolic = symbolic || !sym.back().is_constant();
  }
  out = CallArg::of_ints(std::move(v));
  if (symbolic) out.sym = std::move(sym);
  return true;
}

bool convert_one(const std::string& type, const CallArg& in, CallArg& out) {
  using K = CallArg::Kind;
  if (type == "Any") { out = in; return true; }
  if (type == "Tensor") { if (in.kind != K::Tensor) return false; out = in; return true; }
  if (type == "Number") { if (!is_number(in)) return false; out = in; return true; }
  if (type == "int") {
    if (in.kind != K::Int && in.kind != K::Bool) return false;
    out = in;
    return true;
  }
  if (type == "float") {
    if (!is_number(in)) return false;
    out = CallArg::of_double(in.kind == K::Double ? in.d : in.kind == K::Int ? static_cast<double>(in.i) : (in.b ? 1.0 : 0.0));
    return true;
  }
  if (type == "bool") { if (in.kind != K::Bool) return false; out = in; return true; }
  if (type == "ScalarType") { if (in.kind != K::DType) return false; out = in; return true; }
  if (type == "MemoryFormat") { if (in.kind != K::MemoryFormat) return false; out = in; return true; }
  if (type == "Device") { if (in.kind != K::Device) return false; out = in; return true; }
  if (type == "str") { if (in.kind != K::String) return false; out = in; return true; }
  if (type == "int[]") {
    if (in.kind == K::IntList) { out = in; return true; }
    if (in.kind == K::Int) return pack_ints({in}, out);
    if (in.kind == K::Tuple) return pack_ints(in.items, out);
    if (in.kind == K::TensorList && in.values.empty()) return pack_ints({}, out);
    return false;
  }
  if (type == "Tensor[]") {
    if (in.kind == K::TensorList) { out = in; return true; }
    if (in.kind == K::IntList && in.ints.empty()) { out = CallArg::of_tensors({}); return true; }
    if (in.kind == K::Tuple) {
      std::vector<ValueId> v;
      for (const auto& it : in.items) {
        if (it.kind != K::Tensor) return false;
        v.push_back(it.value);
      }
      out = CallArg::of_tensors(std::move(v));
      return true;
    }
    return false;
  }
  FD_CHECK(false, "unknown signature type '" + type + "'");
  return false;
}

bool convert(const std::string& type, const CallArg& in, CallArg& out) {
  std::string t = type;
  bool optional = !t.empty() && t.back() == '?';
  if (optional) t.pop_back();
  if (optional && in.kind == CallArg::Kind::None) { out = in; return true; }
  size_t start = 0;
  while (true) {  // "Tensor|Number": the first alternative that fits
    size_t bar = t.find('|', start);
    if (convert_one(t.substr(start, bar == std::string::npos ? std::string::npos : bar - start), in, out)) return true;
    if (bar == std::string::npos) return false;
    start = bar + 1;
  }
}

// Gathers `Type *name` positionals: f(2, 3) and f((2, 3)) bind alike.
bool gather_varargs(const std::string& type, const std::vector<CallArg>& rest, CallArg& out) {
  if (rest.size() == 1 && rest[0].kind != CallArg::Kind::Int && rest[0].kind != CallArg::Kind::Tensor) {
    out = rest[0];
    return true;
  }
  std::string t = type;
  if (!t.empty() && t.back() == '?') t.pop_back();
  if (t == "int[]") return pack_ints(rest, out);
  if (t == "Tensor[]") {
    std::vector<ValueId> v;
    for (const auto& a : rest) {
      if (a.kind != CallArg::Kind::Tensor) return false;
      v.push_back(a.value);
    }
    out = CallArg::of_tensors(std::move(v));
    return true;
  }
  out = CallArg::tuple(rest);
  return true;
}

}  // namespace

// ---- Signature -------------------------------------------------------------------------------

Signature::Signature(const char* python_signature) {
  std::string s = python_signature;
  size_t open = s.find('(');
  size_t close = s.rfind(')');
  FD_CHECK(open != std::string::npos && close != std::string::npos && close > open,
           std::string("malformed signature: ") + python_signature);
  name_ = trim(s.substr(0, open));
  bool keyword_only = false;
  for (const auto& part : split_top_level(s.substr(open + 1, close - open - 1))) {
    if (part == "*") {
      keyword_only = true;
      continue;
    }
    Param p;
    std::string decl = part;
    size_t eq = decl.find('=');
    if (eq != std::string::npos) {
      p.default_value = parse_default(trim(decl.substr(eq + 1)), python_signature);
      decl = trim(decl.substr(0, eq));
    }
    size_t sp = decl.rfind(' ');
    FD_CHECK(sp != std::string::npos, "parameter without a type in signature " + std::string(python_signature));
    p.type = trim(decl.substr(0, sp));
    p.name = trim(decl.substr(sp + 1));
    if (!p.type.empty() && p.type[0] == '*') {  // "*int[] size" spelling
      p.type = p.type.substr(1);
      p.name = "*" + p.name;
    }
    if (!p.name.empty() && p.name[0] == '*') {
      p.name = p.name.substr(1);
      p.varargs = true;
    }
    p.keyword_only = keyword_only;
    if (p.varargs) keyword_only = true;  // as in Python, parameters after *args are keyword-only
    params_.push_back(std::move(p));
  }
}

std::optional<std::string> Signature::bind(const BindCall& call, BoundArgs& out) const {
  return bind(call.args, call.kwargs, out);
}

std::optional<std::string> Signature::bind(const std::vector<CallArg>& args,
                                           const std::vector<std::pair<std::string, CallArg>>& kwargs,
                                           BoundArgs& out) const {
  out.values.clear();
  std::vector<std::optional<CallArg>> given(params_.size());
  size_t n_positional = 0;
  bool has_varargs = false;
  for (const auto& p : params_) {
    if (p.keyword_only && !p.varargs) break;
    ++n_positional;
    if (p.varargs) { has_varargs = true; break; }
  }
  size_t fixed = has_varargs ? n_positional - 1 : n_positional;
  for (size_t i = 0; i < args.size() && i < fixed; ++i) given[i] = args[i];
  if (args.size() > fixed) {
    if (!has_varargs) {
      return name_ + "() takes at most " + std::to_string(fixed) + " positional argument" +
             (fixed == 1 ? "" : "s") + " (" + std::to_string(args.size()) + " given)";
    }
    const Param& vp = params_[fixed];
    std::vector<CallArg> rest(args.begin() + static_cast<std::ptrdiff_t>(fixed), args.end());
    CallArg gathered;
    if (!gather_varargs(vp.type, rest, gathered))
      return name_ + "(): argument '" + vp.name + "' must be " + vp.type + ", not a mix of values";
    given[fixed] = gathered;
  }
  for (const auto& kw : kwargs) {
    size_t idx = params_.size();
    for (size_t i = 0; i < params_.size(); ++i)
      if (params_[i].name == kw.first) idx = i;
    if (idx == params_.size()) return name_ + "() got an unexpected keyword argument '" + kw.first + "'";
    if (given[idx]) return name_ + "() got multiple values for argument '" + kw.first + "'";
    given[idx] = kw.second;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    if (!given[i]) {
      if (!p.default_value) return name_ + "() missing required argument '" + p.name + "'";
      out.values[p.name] = *p.default_value;
      continue;
    }
    CallArg converted;
    if (!convert(p.type, *given[i], converted))
      return name_ + "(): argument '" + p.name + "' must be " + p.type + ", not " + kind_name(*given[i]);
    out.values[p.name] = std::move(converted);
  }
  return std::nullopt;
}

// ---- BoundArgs -------------------------------------------------------------------------------

const CallArg& BoundArgs::get(const std::string& name) const {
  auto it = values.find(name);
  FD_CHECK(it != values.end(), "binder reads unknown parameter '" + name + "'");
  return it->second;
}

ValueId BoundArgs::tensor(const std::string& name) const {
  const CallArg& a = get(name);
  FD_CHECK(a.kind == CallArg::Kind::Tensor, "parameter '" + name + "' is not a Tensor");
  return a.value;
}

int64_t BoundArgs::integer(const std::string& name) const {
  const CallArg& a = get(name);
  if (a.kind == CallArg::Kind::Bool) return a.b ? 1 : 0;
  FD_CHECK(a.kind == CallArg::Kind::Int, "parameter '" + name + "' is not an int");
  return a.i;
}

double BoundArgs::number(const std::string& name) const {
  const CallArg& a = get(name);
  switch (a.kind) {
    case CallArg::Kind::Double: return a.d;
    case CallArg::Kind::Int: return static_cast<double>(a.i);
    case CallArg::Kind::Bool: return a.b ? 1.0 : 0.0;
    default: break;
  }
  FD_CHECK(false, "parameter '" + name + "' is not a number");
  return 0.0;
}

bool BoundArgs::boolean(const std::string& name) const {
  const CallArg& a = get(name);
  FD_CHECK(a.kind == CallArg::Kind::Bool, "parameter '" + name + "' is not a bool");
  return a.b;
}

std::vector<int64_t> BoundArgs::ints(const std::string& name) const {
  const CallArg& a = get(name);
  if (a.kind == CallArg::Kind::Int) return {a.i};
  FD_CHECK(a.kind == CallArg::Kind::IntList, "parameter '" + name + "' is not an int list");
  return a.ints;
}

Arg ints_arg(std::vector<int64_t> ints, const std::vector<shapes::SizeExpr>& sym) {
  Arg a = Arg::of_ints(std::move(ints));
  for (const shapes::SizeExpr& e : sym)
    if (!e.is_constant()) {
      a.sym_ints = sym;
      break;
    }
  return a;
}

std::vector<shapes::SizeExpr> BoundArgs::sym_ints(const std::string& name) const {
  const CallArg& a = get(name);
  std::vector<int64_t> v = ints(name);
  if (a.sym.size() == v.size()) return a.sym;
  return std::vector<shapes::SizeExpr>(v.begin(), v.end());
}

std::vector<ValueId> BoundArgs::tensors(const std::string& name) const {
  const CallArg& a = get(name);
  FD_CHECK(a.kind == CallArg::Kind::TensorList, "parameter '" + name + "' is not a tensor list");
  return a.values;
}

c10::ScalarType BoundArgs::dtype(const std::string& name) const {
  const CallArg& a = get(name);
  FD_CHECK(a.kind == CallArg::Kind::DType, "parameter '" + name + "' is not a dtype");
  return a.dtype;
}

std::optional<c10::MemoryFormat> BoundArgs::memory_format(const std::string& name) const {
  const CallArg& a = get(name);
  if (a.kind == CallArg::Kind::None) return std::nullopt;
  FD_CHECK(a.kind == CallArg::Kind::MemoryFormat, "parameter '" + name + "' is not a memory format");
  return static_cast<c10::MemoryFormat>(a.i);
}

const std::string& BoundArgs::str(const std::string& name) const {
  const CallArg& a = get(name);
  FD_CHECK(a.kind == CallArg::Kind::String, "parameter '" + name + "' is not a str");
  return a.str;
}

// ---- emission --------------------------------------------------------------------------------

std::vector<ValueId> emit(Graph& g, OpId op, std::vector<Arg> args, std::vector<TensorMeta> outs) {
  autocast::before_emit(g, op, args, outs);  // eager's autocast casts, under torch.autocast
  Node n;
  n.op = op;
  n.args = std::move(args);
  for (auto& m : outs) {
    // NB: a meta rule that started from a copy of its input carries the input's symbolic sizes:
    // only the symbolic rules below say what they are.
    m.sym_sizes.clear();
    m.sym_strides.clear();
    m.sym_offset.clear();
    n.outputs.push_back(g.add_value(std::move(m)));
  }
  g.nodes.push_back(std::move(n));
  // Sizes as symbols: this node's outputs now, so that the next node a binder records (and a
  // nested call) reads them.
  shapes::propagate(g, g.nodes.size() - 1);
  return g.nodes.back().outputs;
}

std::optional<std::string> same_dtype(const BindCall& c, const std::string& op, const std::vector<ValueId>& vs) {
  const c10::ScalarType first = c.graph.meta(vs.front()).dtype;
  for (ValueId v : vs)
    if (c.graph.meta(v).dtype != first)
      return op + ": expected all operands to have the same dtype, but got " + dtype_name(first) + " and " +
             dtype_name(c.graph.meta(v).dtype);
  if (first == c10::ScalarType::Bool) return op + ": not implemented for 'Bool'";
  return std::nullopt;
}

ValueId emit1(Graph& g, OpId op, std::vector<Arg> args, TensorMeta out) {
  std::vector<TensorMeta> outs;
  outs.push_back(std::move(out));
  return emit(g, op, std::move(args), std::move(outs)).front();
}

CaptureResult tensor_result(ValueId v) {
  CaptureResult r;
  r.ok = true;
  r.shape = CaptureResult::Shape::Tensor;
  r.values = {v};
  return r;
}

CaptureResult none_result() {
  CaptureResult r;
  r.ok = true;
  r.shape = CaptureResult::Shape::None;
  return r;
}

CaptureResult tuple_result(std::vector<ValueId> vs, std::vector<std::string> field_names) {
  CaptureResult r;
  r.ok = true;
  r.shape = CaptureResult::Shape::Tuple;
  r.values = std::move(vs);
  r.field_names = std::move(field_names);
  return r;
}

}  // namespace fastdyn::codegen
