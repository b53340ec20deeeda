// codegen/capture/binder.h — the machinery shared by all family binders (codegen/capture_*.cpp).
//
// A family binder turns one Python-level call into graph nodes:
//   CaptureResult bind_<family>(BindCall& call);
// is declared for every row of families.def (below) and defined in one of the capture_*.cpp
// files; a family without a binder is a link error, never a silent gap.
// Signatures are written once, in Python's own notation, and parsed once:
//   static const Signature sig("softmax(Tensor input, int dim, ScalarType? dtype=None)");
//   BoundArgs a; if (auto err = sig.bind(call, a)) return CaptureResult::fail(*err);
//   a.tensor("input"), a.integer("dim"), a.is_none("dtype")...
// Types understood by Signature: Tensor, Tensor?, Tensor[], int, int?, int[], int[]?, float,
// float?, bool, bool?, Number (int/float/bool), Number?, Tensor|Number, ScalarType?, Device?,
// str, str?, Any. `*` starts keyword-only parameters; `*args` gathers the remaining positionals
// into one IntList or TensorList (so x.view(2, 3) and x.view((2, 3)) bind alike).
#pragma once
#include "codegen/capture/capture.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fastdyn::codegen {

struct BindCall {
  Graph& graph;
  const CaptureContext& ctx;
  Family family;
  const std::vector<CallArg>& args;
  const std::vector<std::pair<std::string, CallArg>>& kwargs;
};

class BoundArgs {
 public:
  // Accessors by parameter name; they throw InternalError for an unknown name (a binder bug).
  const CallArg& get(const std::string& name) const;
  bool is_none(const std::string& name) const { return get(name).kind == CallArg::Kind::None; }
  ValueId tensor(const std::string& name) const;                 // Tensor
  int64_t integer(const std::string& name) const;                // int (bool accepted)
  double number(const std::string& name) const;                  // float/int/bool as double
  bool boolean(const std::string& name) const;
  std::vector<int64_t> ints(const std::string& name) const;      // int[] (a single int -> [i])
  // ints(name)'s expressions over size symbols (constants for plain ints; CallArg::sym).
  std::vector<shapes::SizeExpr> sym_ints(const std::string& name) const;
  std::vector<ValueId> tensors(const std::string& name) const;   // Tensor[]
  c10::ScalarType dtype(const std::string& name) const;          // ScalarType (not None)
  const std::string& str(const std::string& name) const;
  std::optional<c10::MemoryFormat> memory_format(const std::string& name) const;  // MemoryFormat? (None: nullopt)

  std::map<std::string, CallArg> values;  // every parameter, defaults filled in
};

class Signature {
 public:
  explicit Signature(const char* python_signature);  // parsed once; throws InternalError if malformed
  // Binds positional and keyword arguments. Returns an error message naming the function and
  // the culprit ("softmax() got an unexpected keyword argument 'dims'", "view(): argument 'size'
  // must be int[], not Tensor") or nullopt on success.
  std::optional<std::string> bind(const BindCall& call, BoundArgs& out) const;
  // Same, from an explicit argument list (for binders that rewrite a call before binding).
  std::optional<std::string> bind(const std::vector<CallArg>& args,
                                  const std::vector<std::pair<std::string, CallArg>>& kwargs,
                                  BoundArgs& out) const;
  const std::string& name() const { return name_; }

  struct Param {
    std::string name;
    std::string type;           // as written: "Tensor", "int[]?", "Tensor|Number"...
    bool keyword_only = false;
    bool varargs = false;       // *size
    std::optional<CallArg> default_value;  // parsed from the default text
  };

 private:
  std::string name_;
  std::vector<Param> params_;
};

// The prologue of nearly every binder: bind `call` to `signature_text` (parsed once) into a
// BoundArgs named `args`, or return the binding error from the enclosing binder.
#define FD_BIND_OR_RETURN(call, args, signature_text)                               \
  static const ::fastdyn::codegen::Signature fd_signature_(signature_text);        \
  ::fastdyn::codegen::BoundArgs args;                                               \
  if (auto fd_bind_error_ = fd_signature_.bind(call, args))                         \
  return ::fastdyn::codegen::CaptureResult::fail(*fd_bind_error_)

// Appends a node computing `op` over `args` (ATen schema order) with the given output metadata;
// returns the new output values in order.
std::vector<ValueId> emit(Graph& g, OpId op, std::vector<Arg> args, std::vector<TensorMeta> outs);
ValueId emit1(Graph& g, OpId op, std::vector<Arg> args, TensorMeta out);
// The matmul family's and sdpa's operand check: one dtype, not bool (ATen's message), or nullopt.
std::optional<std::string> same_dtype(const BindCall& c, const std::string& op, const std::vector<ValueId>& vs);
// An int[] node argument with the expressions of its ints (kept only when one is symbolic).
Arg ints_arg(std::vector<int64_t> ints, const std::vector<shapes::SizeExpr>& sym);

// Result helpers.
CaptureResult tensor_result(ValueId v);
CaptureResult tuple_result(std::vector<ValueId> vs, std::vector<std::string> field_names = {});
CaptureResult none_result();  // the Python call returns None (x[i] = v)

#define FD_FAMILY(id, ...) CaptureResult bind_##id(BindCall& call);
#include "codegen/capture/families.def"

}  // namespace fastdyn::codegen
