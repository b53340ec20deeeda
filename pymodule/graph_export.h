// pymodule/graph_export.h — a graph's text form (what explain() reports) as plain Python data,
// for fastdyn's FX export (python/fastdyn/fx_export.py builds a torch.fx.GraphModule from it).
// The text is read by codegen's own parser, so the Python side never parses graph text.
#pragma once
#include <pybind11/pybind11.h>

#include <string>

namespace fastdyn::pymodule {

// {"values": {id: (dtype, sizes, strides, storage offset, device)}, "inputs": [ids], "outputs": [ids],
//  "nodes": [(qualified op name, [args], [output ids])]}. Dtypes are c10 names ("Float",
// "BFloat16"); sizes are the traced call's numbers (a symbolic size as its hint). An argument is
// an int, float, bool, str, None or list of ints as itself; a tensor ("value", id); a tensor list
// ("values", [id or None]); a dtype ("dtype", name); a device ("device", "cuda:0").
pybind11::dict graph_structure(const std::string& text);

}  // namespace fastdyn::pymodule
