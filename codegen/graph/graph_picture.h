// codegen/graph/graph_picture.h — a graph drawn as inline SVG, for the HTML report
// (python/fastdyn/report_html.py; issue 23).
//
// Input is what the report's journal holds of a compiled entry: the graph's text form
// (graph_text.cpp's print_graph), where each graph input is read from, the Python line of each
// node, and the fused kernels with the values each computes. The reader is tolerant: a line it
// does not understand becomes an opaque box, nothing throws (the report must be written whatever
// the journal holds).
//
// Layout (a layered drawing in the Sugiyama style): rows by longest path from the inputs; an edge
// over several rows gets a small dummy node per row it crosses, so that it bends around boxes
// (at most kDummyBudget dummies in all); the order within rows by barycentre sweeps, down by
// predecessors and up by successors, with the boxes of one kernel kept adjacent; then x pulled
// towards the neighbours' mean. Kernels are drawn as rounded rectangles behind their boxes, row
// by row, rows merged while no other box falls inside.
//
// This was Python (report_html.py) until it was 70% of report()'s time: 5.3 ms of a 7.3 ms render
// for the tiny GPT-2's one graph. The picture is the same.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace fastdyn::codegen::picture {

// Box and spacing sizes, in px (the report's stylesheet assumes them).
constexpr int kNodeWidth = 160, kNodeHeight = 38, kDummyWidth = 12, kGapX = 28, kGapY = 58, kMargin = 20;
constexpr int kDummyBudget = 3000;

struct Kernel {
  std::string name;
  std::vector<int64_t> values;  // graph values the kernel computes
  bool diverged = false;        // accuracy mode named it (drawn highlighted)
};

struct Request {
  std::string graph_text;
  std::vector<std::string> input_sources;   // per graph input: where it is read from (L['x'])
  std::vector<std::string> node_locations;  // per node: its Python line ("file:line")
  std::vector<Kernel> kernels;
  int64_t node_cap = 400;                   // ops drawn at most
  std::string code_id, entry;               // the svg's data-code / data-entry attributes
  std::string marker_id;                    // the arrowhead's id, unique in the page
};

struct Picture {
  std::string svg;
  int64_t ops_left_out = 0;  // ops past node_cap, not drawn
  int64_t ops = 0;           // ops in the graph
};

Picture draw(const Request& r);

// The report's HTML escaping (html.escape with quote=True), non-ASCII characters written as
// character references (&#8230;): the picture is ASCII.
std::string escape_html(const std::string& s);

}  // namespace fastdyn::codegen::picture
