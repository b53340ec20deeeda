// codegen/capture/autocast.h — eager's torch.autocast casts, recorded into the graph (capture layer).
//
// Under autocast, ATen casts the tensor arguments of some ops before running them: matmuls and
// convolutions to the lower-precision dtype, some numerically delicate ops to float32, joins to
// the widest dtype. A trace under autocast (CaptureContext::autocast, guarded) records those casts
// as `_to_copy` nodes in front of the op and gives its outputs the dtype eager's would have, so the
// graph means what eager computes; the kernels and ATen calls then run it like any other graph.
//
// Which op casts how is autocast.cpp's table (one row per op of ops.def that autocast touches).
// Where eager's autocast would act and the table does not say how, the call is refused (a graph
// break: eager runs it under autocast): an op with an autocast kernel of its own and no row, or a
// composite op (one ATen implements by calling others, which autocast may cast) with no row saying
// it is plain, or a binder that recorded a call of such an op as other ops. ATen's dispatcher says
// which ops have autocast kernels and which are composite, at run time, for the torch in use.
#pragma once
#include <string>
#include <vector>

#include "codegen/capture/capture.h"

namespace fastdyn::codegen::autocast {

// Set by record_call around one family's binder while autocast is on; emit() consults it.
class Scope {
 public:
  explicit Scope(const CaptureContext& ctx);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const CaptureContext* saved_;
};

// Called by emit() before a node of `op` is appended to `g`: appends the casts eager's autocast
// makes of `args` (replacing them in `args`) and gives `outs` their dtype. Nothing outside a
// Scope. Throws Refused when autocast would act in a way the table does not describe.
void before_emit(Graph& g, OpId op, std::vector<Arg>& args, std::vector<TensorMeta>& outs);

// Before a family binds: eager's casts of its tensor arguments when the op its Python names
// reach casts them (the binder then checks and computes with eager's dtypes: matmul(bf16, f32)
// under autocast multiplies two bfloat16 matrices). Appends the casts to `g`.
void cast_call_args(Graph& g, const CaptureContext& ctx, Family f, std::vector<CallArg>& args,
                    std::vector<std::pair<std::string, CallArg>>& kwargs);

// After a family bound under a Scope (nodes from `first_node` on): "" if what it recorded is what
// eager's autocast sees, else why not (a binder that recorded a casting op as other ops).
std::string check_family(const Graph& g, const CaptureContext& ctx, Family f, size_t first_node);

struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Test support: "cpu"/"cuda" policy names of a row ("lower", "fp32", "fp32 unless dtype=",
// "promote", "plain"), or "" where the table has no row.
std::string policy_name(OpId op, c10::DeviceType device);

}  // namespace fastdyn::codegen::autocast
