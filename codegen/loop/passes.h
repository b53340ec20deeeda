// codegen/loop/passes.h — the passes from a tensor Graph to a planned loop Program (codegen/ layer,
// backend-neutral), and the pipeline that runs them in order with FASTDYN_DUMP.
//
//   functionalize  graph -> graph without in-place ops: each becomes its out-of-place twin, later
//                reads read the new version, and mutated inputs get a WriteBack (loop_ir.h).
//   lower        graph -> LoweredGraph: per node a pointwise definition (an SSA body over the
//                output's index space), a view (affine index map, or an alias needing a
//                materialised base), kernels (reductions, softmax, norms, cat), or Extern.
//   fuse         LoweredGraph -> Program: decides which values are materialised (pointwise values
//                are inlined into their readers unless that duplicates real work), builds kernels,
//                merges adjacent kernels over the same domain (epilogues, softmax-like chains,
//                horizontal reductions) and drops stores nobody reads.
//   plan_memory  assigns buffer slots; dead temporaries of equal dtype and size are reused;
//                inputs and outputs never are.
// Each pass is a free function; none runs ATen.
#pragma once
#include "codegen/graph/graph.h"
#include "codegen/loop/loop_ir.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace fastdyn::codegen::loop {

// The graph cannot be compiled natively at all (the caller runs it on aten); the message says why.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct KernelDef {
  Kernel kernel;
  // The shape whose every element the kernel visits once ("full" iteration shape, natural dim
  // order) and where each of its dims sits in the kernel's domain: a pointwise consumer of this
  // shape can join the kernel as a later inner stage.
  std::vector<int64_t> full;
  std::vector<int32_t> full_to_dom;
};

struct NodeLowering {
  enum class Kind : uint8_t { Extern, Pointwise, View, Kernels };
  Kind kind = Kind::Extern;
  std::string why;  // Extern: why the node has no lowering (FASTDYN_LOG=code)
  // Pointwise: one output; `body` indexes the output's dims (its loads are over that domain).
  Stage body;
  int32_t result = -1;
  // View: per output, the base value and each base dim's index as affine over the view's dims;
  // !affine: the view needs its base materialised (then it is an alias with the meta strides).
  struct View {
    ValueId base = -1;
    bool affine = false;
    std::vector<AffineIndex> map;
  };
  std::vector<View> views;
  std::vector<KernelDef> kernels;  // Kernels: they store the node's outputs
};

struct LoweredGraph {
  Graph graph;                      // functionalized
  std::vector<NodeLowering> nodes;  // parallel to graph.nodes
  std::vector<WriteBack> writebacks;
  std::vector<ValueId> extern_writes;
};

struct Functional {
  Graph graph;
  std::vector<WriteBack> writebacks;
  std::vector<ValueId> extern_writes;  // graph inputs an in-place extern writes (no write-back)
};
// Throws Unsupported for mutations it cannot express (writes into views, see functionalize.cpp), and
// for in-place ops in a graph with random ops unless `random_ok` (the autograd split: it replays
// nothing on ATen, where a backend's fallback would draw again).
Functional functionalize(const Graph& g, bool random_ok = false);
// Functionalizes, then lowers each node.
LoweredGraph lower(const Graph& g);
Program fuse(const LoweredGraph& lg);
Program plan_memory(Program p);

// Runs lower -> fuse -> plan_memory; with FASTDYN_DUMP=<pass|all> (pass = graph, functional (when
// it mutates), lowered, fused, planned) prints the IR after each pass to stderr. Throws Unsupported.
Program build_program(const Graph& g);
// The text of the lowered graph (for dumps and golden tests).
std::string print_lowered(const LoweredGraph& lg);
// True when FASTDYN_DUMP names `pass` or "all".
bool dump_enabled(const char* pass);
// Every name FASTDYN_DUMP accepts (the configuration check names them).
inline constexpr const char* kDumpPasses[] = {"autograd", "rewritten", "graph", "functional", "lowered", "fused", "planned", "llvm", "all"};

}  // namespace fastdyn::codegen::loop
