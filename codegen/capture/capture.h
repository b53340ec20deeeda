// codegen/capture/capture.h — recording one Python-level tensor call into a Graph.
//
// symbolic/ has already identified *which* Python operation is called (a Family from
// families.def) and turned its arguments into CallArgs (tensors as graph values, Python scalars,
// lists, dtypes... as constants). record_call binds them to the family's Python signature
// (positional and keyword), chooses the ATen overload(s), appends the node(s) to the graph and
// computes every output's metadata with the C++ rules of codegen/capture/meta_rules.cpp — never by
// running ATen. Anything unsupported returns a CaptureResult with ok=false and a reason that
// names the op and the culprit argument; it never throws for bad user input.
// Pure C++: no Python headers, testable from GoogleTest.
#pragma once
#include "codegen/graph/graph.h"
#include "runtime/autocast_state.h"

#include <c10/core/MemoryFormat.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fastdyn::codegen {

enum class Family : uint16_t {
#define FD_FAMILY(id, ...) id,
#include "codegen/capture/families.def"
  kCount
};
const char* family_name(Family f);                         // "add"
const std::vector<const char*>& family_python_names(Family f);  // {"torch.add", ...}

// A Python value as the binder sees it.
struct CallArg {
  enum class Kind : uint8_t {
    Tensor,      // value
    Int,         // i (Python int; also SymInt-free shape arithmetic results)
    Double,      // d
    Bool,        // b
    None,
    IntList,     // ints (tuple/list of ints, torch.Size)
    TensorList,  // values (tuple/list of tensors)
    DType,       // dtype
    Device,      // device
    String,      // str
    Ellipsis,
    Slice,       // slice_start/stop/step; nullopt = None
    Tuple,       // items: a tuple/list of mixed items (e.g. an index tuple)
    MemoryFormat,  // torch.contiguous_format ...: i holds the c10::MemoryFormat
  };
  Kind kind = Kind::None;
  ValueId value = -1;
  int64_t i = 0;
  double d = 0.0;
  bool b = false;
  std::vector<int64_t> ints;
  std::vector<ValueId> values;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  std::string str;
  std::optional<int64_t> slice_start, slice_stop, slice_step;
  std::vector<CallArg> items;
  // Int / IntList from size-derived Python ints (x.shape[0] along a size symbol): the expression
  // of each int (empty: all constant). record_call passes them to binders that take symbolic
  // sizes and specialises them for the others (codegen/shapes/propagate.h).
  std::vector<shapes::SizeExpr> sym;

  static CallArg tensor(ValueId v) { CallArg a; a.kind = Kind::Tensor; a.value = v; return a; }
  static CallArg of_int(int64_t v) { CallArg a; a.kind = Kind::Int; a.i = v; return a; }
  static CallArg of_double(double v) { CallArg a; a.kind = Kind::Double; a.d = v; return a; }
  static CallArg of_bool(bool v) { CallArg a; a.kind = Kind::Bool; a.b = v; return a; }
  static CallArg none() { return CallArg(); }
  static CallArg of_ints(std::vector<int64_t> v) { CallArg a; a.kind = Kind::IntList; a.ints = std::move(v); return a; }
  static CallArg of_tensors(std::vector<ValueId> v) { CallArg a; a.kind = Kind::TensorList; a.values = std::move(v); return a; }
  static CallArg of_dtype(c10::ScalarType t) { CallArg a; a.kind = Kind::DType; a.dtype = t; return a; }
  static CallArg of_device(c10::Device d) { CallArg a; a.kind = Kind::Device; a.device = d; return a; }
  static CallArg of_string(std::string s) { CallArg a; a.kind = Kind::String; a.str = std::move(s); return a; }
  static CallArg of_memory_format(c10::MemoryFormat f) { CallArg a; a.kind = Kind::MemoryFormat; a.i = static_cast<int64_t>(f); return a; }
  static CallArg ellipsis() { CallArg a; a.kind = Kind::Ellipsis; return a; }
  static CallArg slice(std::optional<int64_t> b, std::optional<int64_t> e, std::optional<int64_t> s) {
    CallArg a; a.kind = Kind::Slice; a.slice_start = b; a.slice_stop = e; a.slice_step = s; return a;
  }
  static CallArg tuple(std::vector<CallArg> items) { CallArg a; a.kind = Kind::Tuple; a.items = std::move(items); return a; }
};

struct CaptureResult {
  bool ok = false;
  std::string reason;            // when !ok: "aten op 'foo' has no rule", "add: bad 'alpha'..."
  // What the Python call returns (None: nothing, for statements such as `x[i] = v`, whose
  // effect is an in-place write recorded in the graph):
  enum class Shape : uint8_t { Tensor, Tuple, None } shape = Shape::Tensor;
  std::vector<ValueId> values;   // Tensor: one value; Tuple: the elements (e.g. chunk, var_mean; -1: None); None: empty
  std::vector<std::string> field_names;  // named-tuple returns (torch.max(x, 1): values, indices)

  static CaptureResult fail(std::string why) { CaptureResult r; r.reason = std::move(why); return r; }
};

// Global state a rule depends on; guarded by symbolic/ (grad mode, default dtype, autocast).
struct CaptureContext {
  bool grad_enabled = true;                                 // outputs require grad only if on
  c10::ScalarType default_dtype = c10::ScalarType::Float;   // for factories and int->float ops
  runtime::AutocastState autocast;                          // eager's casts (codegen/capture/autocast.h)
  // Graph inputs that share memory (x and x.t() passed as two arguments): (input, the first
  // input of its storage), as the caller saw them when tracing. An in-place write that reads
  // another view of its memory is refused as eager refuses it (capture.cpp).
  std::vector<std::pair<ValueId, ValueId>> input_storage_alias;
  // Graph inputs that are leaves requiring grad, or views of one: an in-place write into their
  // memory in grad mode is refused as eager refuses it ("a leaf Variable that requires grad is
  // being used in an in-place operation").
  std::vector<ValueId> grad_leaf_inputs;
};

// Binds `args`/`kwargs` to `family` and records the op(s) into `g`. `self` is not special: for a
// tensor method call `x.add(y)` the caller passes x as the first positional argument; for a
// reflected operator (`2 - x`) it passes the operands in source order (2, x).
CaptureResult record_call(Graph& g, const CaptureContext& ctx, Family family, const std::vector<CallArg>& args,
                          const std::vector<std::pair<std::string, CallArg>>& kwargs);

}  // namespace fastdyn::codegen
