// pymodule/graph_export.cpp — see graph_export.h.
#include "pymodule/graph_export.h"

#include <c10/core/ScalarType.h>
#include <pybind11/stl.h>

#include "codegen/graph/graph.h"

namespace py = pybind11;

namespace fastdyn::pymodule {
namespace {

using codegen::Arg;

py::object arg_object(const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Value: return py::make_tuple("value", a.value);
    case Arg::Kind::ValueList: {
      py::list ids;
      for (codegen::ValueId v : a.values) ids.append(v < 0 ? py::object(py::none()) : py::object(py::int_(v)));
      return py::make_tuple("values", ids);
    }
    case Arg::Kind::None: return py::none();
    case Arg::Kind::Int: return py::int_(a.i);
    case Arg::Kind::Double: return py::float_(a.d);
    case Arg::Kind::Bool: return py::bool_(a.b);
    case Arg::Kind::IntList: return py::cast(a.ints);
    case Arg::Kind::DType: return py::make_tuple("dtype", std::string(c10::toString(a.dtype)));
    case Arg::Kind::Device: return py::make_tuple("device", a.device.str());
    case Arg::Kind::String: return py::str(a.str);
  }
  return py::none();
}

}  // namespace

py::dict graph_structure(const std::string& text) {
  const codegen::Graph g = codegen::parse_graph(text);
  py::dict values;
  for (size_t v = 0; v < g.values.size(); ++v) {
    const codegen::TensorMeta& m = g.values[v];
    values[py::int_(v)] = py::make_tuple(std::string(c10::toString(m.dtype)), m.sizes, m.strides, m.storage_offset, m.device.str());
  }
  py::list nodes;
  for (const codegen::Node& n : g.nodes) {
    py::list args;
    for (const Arg& a : n.args) args.append(arg_object(a));
    nodes.append(py::make_tuple(codegen::qualified_name(n.op), args, py::cast(n.outputs)));
  }
  py::dict out;
  out["values"] = values;
  out["inputs"] = py::cast(g.inputs);
  out["outputs"] = py::cast(g.outputs);
  out["nodes"] = nodes;
  return out;
}

}  // namespace fastdyn::pymodule
