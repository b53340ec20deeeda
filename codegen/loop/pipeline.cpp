// codegen/loop/pipeline.cpp — build_program: the ordered pass list, with FASTDYN_DUMP after each
// pass and FASTDYN_TIME_PASSES timing, plus the lowered graph's printer.
#include "codegen/loop/passes.h"

#include "runtime/format.h"
#include "codegen/graph/source_location.h"
#include "codegen/passes/pass_timer.h"
#include "runtime/journal.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fastdyn::codegen::loop {

bool dump_enabled(const char* pass) {
  const char* env = std::getenv("FASTDYN_DUMP");
  if (!env || !*env) return false;
  std::string s = std::string(",") + env + ",";
  return s.find(",all,") != std::string::npos || s.find(std::string(",") + pass + ",") != std::string::npos;
}

std::string print_lowered(const LoweredGraph& lg) {
  Program p;
  p.graph = lg.graph;
  Text os;
  for (size_t i = 0; i < lg.nodes.size(); ++i) {
    const NodeLowering& l = lg.nodes[i];
    const Node& n = lg.graph.nodes[i];
    switch (l.kind) {
      case NodeLowering::Kind::Extern: os << "extern (" << l.why << ") " << print_node(lg.graph, n) << "\n"; break;
      case NodeLowering::Kind::View:
        for (size_t o = 0; o < l.views.size(); ++o) {
          os << "view v" << n.outputs[o] << " of v" << l.views[o].base;
          if (!l.views[o].affine) {
            os << " (reshape: base in memory)\n";
            continue;
          }
          Kernel k;
          k.outer = lg.graph.meta(n.outputs[o]).sizes;
          Stage s;
          Access a;
          a.value = l.views[o].base;
          a.index = l.views[o].map;
          s.loads.push_back(a);
          Instr in;
          in.op = Op::Load;
          in.a = 0;
          in.type = compute_type(lg.graph.meta(a.value).dtype);
          s.instrs.push_back(in);
          k.stages.push_back(s);
          std::string text = print_kernel(p, k);
          os << ": " << text.substr(text.find("%0 = ") + 5);
        }
        break;
      case NodeLowering::Kind::Pointwise: {
        Kernel k;
        k.name = "v" + std::to_string(n.outputs[0]);
        k.outer = lg.graph.meta(n.outputs[0]).sizes;
        k.stages.push_back(l.body);
        os << "pointwise " << print_kernel(p, k) << "  result %" << l.result << "\n";
        break;
      }
      case NodeLowering::Kind::Kernels:
        for (const KernelDef& d : l.kernels) {
          Kernel k = d.kernel;
          k.name = "v" + std::to_string(n.outputs[0]);
          os << print_kernel(p, k);
        }
        break;
    }
  }
  return os.str();
}

namespace {

// The report's view of each fused kernel: its loop IR, the graph values it computes and the
// Python lines they came from.
void journal_kernels(const Program& p) {
  for (const Kernel& k : p.kernels) {
    std::string values, locations;
    for (int32_t n : k.nodes) {
      const Node& node = p.graph.nodes[static_cast<size_t>(n)];
      if (!node.outputs.empty()) values += (values.empty() ? "" : " ") + std::to_string(node.outputs[0]);
      const std::string where = location_text(node.loc);
      if (!where.empty() && locations.find(where + "\n") == std::string::npos) locations += where + "\n";
    }
    runtime::journal::add("kernel", {{"name", k.name}, {"loop_ir", print_kernel(p, k)}, {"values", values}, {"locations", locations}});
  }
}

}  // namespace

Program build_program(const Graph& g) {
  PassTimer timer;
  auto lap = [&](const char* pass) { timer.lap(pass); };
  if (dump_enabled("graph")) std::fprintf(stderr, "=== graph ===\n%s", print_graph(g).c_str());
  LoweredGraph lg = lower(g);
  lap("lower");
  if (dump_enabled("functional") && !lg.writebacks.empty()) {
    std::string wb;
    for (const WriteBack& w : lg.writebacks) wb += "  write back v" + std::to_string(w.value) + " into input v" + std::to_string(w.input) + "\n";
    std::fprintf(stderr, "=== functional ===\n%s%s", print_graph(lg.graph).c_str(), wb.c_str());
  }
  if (dump_enabled("lowered")) std::fprintf(stderr, "=== lowered ===\n%s", print_lowered(lg).c_str());
  Program p = fuse(lg);
  lap("fuse");
  if (dump_enabled("fused")) std::fprintf(stderr, "=== fused ===\n%s", print_program(p).c_str());
  p = plan_memory(std::move(p));
  lap("plan_memory");
  if (dump_enabled("planned")) std::fprintf(stderr, "=== planned ===\n%s", print_program(p).c_str());
  if (runtime::journal::recording()) journal_kernels(p);
  return p;
}

}  // namespace fastdyn::codegen::loop
