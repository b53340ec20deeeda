// codegen/aten/aten_backend.h — the `aten` backend: runs a graph op by op through the ATen dispatcher.
//
// The reference backend; it exists in every build and runs every op ops.def can name, on any
// device, with autograd (each call goes through the full dispatcher, so requires_grad inputs
// give grad-tracking outputs). All work that does not depend on the input tensors — operator
// lookup, schema checks, constant conversion, liveness — happens once in compile_aten; a run is
// a loop of stack pushes and boxed calls with no string work and no Python.
#pragma once
#include "codegen/graph/graph.h"
#include "runtime/executable.h"

namespace fastdyn::codegen {

// Throws InternalError naming the node's text when a node does not fit its ATen schema (argument
// count or kinds, output count) or uses a value before it is defined.
runtime::ExecutablePtr compile_aten(const Graph& g);

}  // namespace fastdyn::codegen
