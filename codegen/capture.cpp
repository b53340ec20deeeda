// codegen/capture.cpp — record_call: dispatches a Family to its binder through a table generated
// from families.def, and makes recording transactional and crash-free.
//
// NB: a binder may fail after appending some nodes (a multi-node family that meets a bad argument
// late), or throw (an InternalError from a BoundArgs accessor, a std::out_of_range from a bad
// ValueId). Either way record_call truncates the graph back to what it was and returns
// CaptureResult::fail naming the family, so symbolic/ can graph-break on a clean graph.
#include "codegen/binder.h"

#include "runtime/errors.h"

#include <exception>

namespace fastdyn::codegen {

namespace {

using Binder = CaptureResult (*)(BindCall&);

struct FamilyRow {
  const char* name;
  std::vector<const char*> python_names;
  Binder bind;
};

const std::vector<FamilyRow>& family_table() {
  static const std::vector<FamilyRow> table = {
#define FD_FAMILY(id, ...) FamilyRow{#id, {__VA_ARGS__}, &bind_##id},
#include "codegen/families.def"
  };
  return table;
}

const FamilyRow& row(Family f) {
  const auto& t = family_table();
  auto i = static_cast<size_t>(f);
  FD_CHECK(i < t.size(), "family id " + std::to_string(i) + " out of range");
  return t[i];
}

}  // namespace

const char* family_name(Family f) { return row(f).name; }

const std::vector<const char*>& family_python_names(Family f) { return row(f).python_names; }

CaptureResult record_call(Graph& g, const CaptureContext& ctx, Family family, const std::vector<CallArg>& args,
                          const std::vector<std::pair<std::string, CallArg>>& kwargs) {
  const size_t n_values = g.values.size();
  const size_t n_nodes = g.nodes.size();
  CaptureResult result;
  std::string name = "?";
  try {
    const FamilyRow& r = row(family);
    name = r.name;
    BindCall call{g, ctx, family, args, kwargs};
    result = r.bind(call);
    if (!result.ok && result.reason.empty()) result.reason = name + ": unsupported call";
  } catch (const std::exception& e) {
    result = CaptureResult::fail(name + ": " + e.what());
  } catch (...) {
    result = CaptureResult::fail(name + ": unknown exception while recording");
  }
  if (!result.ok) {
    g.nodes.resize(n_nodes);
    g.values.resize(n_values);
  }
  return result;
}

}  // namespace fastdyn::codegen
