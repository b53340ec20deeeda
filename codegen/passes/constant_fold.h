// codegen/passes/constant_fold.h — values a graph computes from no input data (codegen/ layer).
//
// A factory (arange, zeros, ones_like, ...) depends on its arguments' metadata at most, which the
// guards fix, so it and every deterministic op over such values compute the same tensor on every
// call: a causal mask built from arange, comparisons and indexing, say. A backend evaluates them
// once, at compile time, and passes the results as extra inputs. Not folded: random ops; values
// an in-place op writes (or views of them); graph outputs and the values they view (each call
// must return fresh tensors). The folded values a graph keeps stay within kMaxFoldedBytes, so a
// graph never pins much memory: past it, the ops making the largest ones run per call, from the
// smaller folded values before them.
#pragma once
#include "codegen/graph/graph.h"

#include <cstdint>

namespace fastdyn::codegen {

struct ConstantFolding {
  Graph constants;  // its outputs are the folded values the rest of the graph reads; its inputs
                    // are graph inputs whose metadata a factory reads (zeros_like(x)): any
                    // tensor with that metadata will do
  Graph rest;       // the original graph with those nodes gone and constants.outputs appended
                    // to its inputs (same ValueIds)
};

constexpr int64_t kMaxFoldedBytes = 4 << 20;

// Nothing to fold: constants has no nodes and rest == g.
ConstantFolding fold_constants(const Graph& g);

}  // namespace fastdyn::codegen
