// The report's graph picture (codegen/graph/graph_picture.h): rows, routing, kernels, the cap,
// escaping and a tolerant reader, checked on the SVG it writes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "codegen/graph/graph_picture.h"

namespace fastdyn::codegen::picture {
namespace {

struct Box {
  std::string classes, value;
  double x = 0, y = 0;
};

// The node boxes of a picture, in document order.
std::vector<Box> boxes(const std::string& svg) {
  static const std::regex node(R"re(<g class="(node [^"]*)" data-value="([^"]*)"[^>]*><title>[^<]*</title><rect x="(-?\d+)" y="(-?\d+)")re");
  std::vector<Box> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), node); it != std::sregex_iterator(); ++it)
    out.push_back({(*it)[1], (*it)[2], std::stod((*it)[3]), std::stod((*it)[4])});
  return out;
}

std::map<std::string, Box> by_value(const std::vector<Box>& bs, const std::string& kind) {
  std::map<std::string, Box> out;
  for (const Box& b : bs)
    if (b.classes.find(kind) != std::string::npos) out[b.value] = b;
  return out;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

std::string path_of(const std::string& svg, const std::string& from, const std::string& to) {
  const std::regex edge("<path class=\"edge\" data-from=\"" + from + "\" data-to=\"" + to + "\" d=\"([^\"]*)\"");
  std::smatch m;
  return std::regex_search(svg, m, edge) ? m[1].str() : "";
}

Request request(const std::string& text) {
  Request r;
  r.graph_text = text;
  r.code_id = "7";
  r.entry = "0";
  r.marker_id = "m7";
  return r;
}

const char* kDiamond =
    "graph(%0: f32[8]{1}, %1: f32[8]{1}):\n"
    "  %2: f32[8]{1} = aten::neg(%0)\n"
    "  %3: f32[8]{1} = aten::exp(%2)\n"
    "  %4: f32[8]{1} = aten::sin(%3)\n"
    "  %5: f32[8]{1} = aten::add.Tensor(%4, %2, 1)\n"
    "  %6: f32[8]{1} = aten::mul.Tensor(%5, %1)\n"
    "  return (%6, %3)\n";

TEST(GraphPicture, RowsFollowTheLongestPathAndBoxesNeverOverlap) {
  const Picture p = draw(request(kDiamond));
  EXPECT_EQ(p.ops, 5);
  EXPECT_EQ(p.ops_left_out, 0);
  const std::vector<Box> bs = boxes(p.svg);
  ASSERT_EQ(bs.size(), 9u);  // 2 inputs, 5 ops, 2 outputs
  auto ops = by_value(bs, "node op"), inputs = by_value(bs, "node input"), outputs = by_value(bs, "node output");
  const double row = kNodeHeight + kGapY;
  EXPECT_EQ(ops["3"].y - ops["2"].y, row);
  EXPECT_EQ(ops["5"].y - ops["4"].y, row);  // add waits for sin, two rows below neg
  EXPECT_EQ(ops["6"].y - ops["5"].y, row);
  EXPECT_EQ(ops["2"].y - inputs["0"].y, row);
  EXPECT_EQ(ops["6"].y - inputs["1"].y, row);  // an input sits right above its first use
  EXPECT_EQ(outputs["6"].y, outputs["3"].y);   // outputs share the last row
  EXPECT_EQ(outputs["6"].y - ops["6"].y, row);
  for (size_t i = 0; i < bs.size(); ++i)
    for (size_t j = i + 1; j < bs.size(); ++j)
      EXPECT_TRUE(std::abs(bs[i].x - bs[j].x) >= kNodeWidth || std::abs(bs[i].y - bs[j].y) >= kNodeHeight)
          << bs[i].value << " and " << bs[j].value << " overlap";
  for (const Box& b : bs) EXPECT_GE(b.x, kMargin - 1);
}

TEST(GraphPicture, AnEdgeOverSeveralRowsBendsThroughItsRows) {
  const Picture p = draw(request(kDiamond));
  // neg -> add crosses two rows (exp, sin): a curve per row and a straight piece through each
  const std::string long_edge = path_of(p.svg, "2", "5");
  ASSERT_FALSE(long_edge.empty());
  EXPECT_EQ(count(long_edge, "C"), 3);
  EXPECT_EQ(count(long_edge, "L"), 2);
  const std::string short_edge = path_of(p.svg, "2", "3");
  EXPECT_EQ(count(short_edge, "C"), 1);
  EXPECT_EQ(count(short_edge, "L"), 0);
  EXPECT_EQ(count(p.svg, "marker-end=\"url(#m7)\""), count(p.svg, "<path class=\"edge\""));
  EXPECT_EQ(count(p.svg, "<path class=\"edge\""), 9);  // 7 between ops and inputs, 2 to the outputs
}

TEST(GraphPicture, KernelsAreDrawnBehindTheirBoxesAndSplitAroundOthers) {
  Request r = request(kDiamond);
  r.kernels = {{"k0", {2, 3, 4}, false}, {"k1", {6}, true}, {"unused", {99}, false}};
  const Picture p = draw(r);
  EXPECT_EQ(count(p.svg, "<g class=\"kernel\" data-kernel=\"k0\">"), 1);
  EXPECT_EQ(count(p.svg, "<g class=\"kernel diverged\" data-kernel=\"k1\">"), 1);
  EXPECT_EQ(count(p.svg, "data-kernel=\"unused\""), 0);  // nothing of it drawn: no rectangle
  const std::vector<Box> bs = boxes(p.svg);
  auto ops = by_value(bs, "node op");
  EXPECT_NE(ops["2"].classes.find("fused"), std::string::npos);
  EXPECT_NE(ops["5"].classes.find("plain"), std::string::npos);
  // k0's three consecutive rows make one rectangle that covers its boxes
  static const std::regex k0(R"re(data-kernel="k0"><title>kernel k0</title>\n<rect x="(-?\d+)" y="(-?\d+)" width="(\d+)" height="(\d+)")re");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(p.svg, m, k0));
  const double x = std::stod(m[1]), y = std::stod(m[2]), w = std::stod(m[3]), h = std::stod(m[4]);
  for (const char* v : {"2", "3", "4"}) {
    EXPECT_LE(x, ops[v].x);
    EXPECT_GE(x + w, ops[v].x + kNodeWidth);
    EXPECT_LE(y, ops[v].y);
    EXPECT_GE(y + h, ops[v].y + kNodeHeight);
  }
  const size_t k0_at = p.svg.find("data-kernel=\"k0\"");
  EXPECT_EQ(count(p.svg.substr(k0_at, p.svg.find("</g>", k0_at) - k0_at), "<rect"), 1);
}

TEST(GraphPicture, TheCapDrawsTheFirstOpsAndTheInputsTheyRead) {
  std::string text = "graph(%0: f32[4]{1}, %1: f32[4]{1}):\n";
  for (int i = 0; i < 50; ++i) text += "  %" + std::to_string(i + 2) + ": f32[4]{1} = aten::neg(%" + std::to_string(i ? i + 1 : 0) + ")\n";
  text += "  %52: f32[4]{1} = aten::add.Tensor(%51, %1, 1)\n  return (%52)\n";
  Request r = request(text);
  r.node_cap = 10;
  const Picture p = draw(r);
  EXPECT_EQ(p.ops, 51);
  EXPECT_EQ(p.ops_left_out, 41);
  const std::vector<Box> bs = boxes(p.svg);
  EXPECT_EQ(by_value(bs, "node op").size(), 10u);
  EXPECT_EQ(by_value(bs, "node input").size(), 1u);  // %1 is read only past the cap
  EXPECT_EQ(by_value(bs, "node output").size(), 0u);
}

TEST(GraphPicture, UserTextIsEscapedAndClipped) {
  Request r = request("graph(%0: f32[2]{1}):\n  %1: f32[2]{1} = aten::relu(%0)\n  return (%1)\n");
  r.input_sources = {"L['<script>alert(\"x\")</script>']"};
  r.node_locations = {"a&b.py:3"};
  r.code_id = "\"7\"";
  const Picture p = draw(r);
  EXPECT_EQ(p.svg.find("<script>"), std::string::npos);
  EXPECT_NE(p.svg.find("&lt;script&gt;alert(&quot;x&quot;)"), std::string::npos);
  EXPECT_NE(p.svg.find("@ a&amp;b.py:3"), std::string::npos);
  EXPECT_NE(p.svg.find("data-code=\"&quot;7&quot;\""), std::string::npos);
  // the label keeps 21 characters and an ellipsis; the title keeps all
  EXPECT_NE(p.svg.find(">L[&#x27;&lt;script&gt;alert(&quot;x&quot;)&#8230;</text>"), std::string::npos) << p.svg;
}

TEST(GraphPicture, TheReaderIsTolerantAndSkipsTheSymbolsLine) {
  Request r = request(
      "graph(%0: f32[s0]{1}):\n  symbols(s0 = %0[0])\n  %1: f32[s0]{1} = aten::neg(%0)\n"
      "  what is this\n  %2 = weird\n  return (%2, %7)\n");
  r.node_locations = {"m.py:1", "m.py:2", "m.py:3"};
  const Picture p = draw(r);
  EXPECT_EQ(p.ops, 3);
  const std::vector<Box> bs = boxes(p.svg);
  auto ops = by_value(bs, "node op");
  EXPECT_EQ(count(p.svg, "class=\"node op opaque\""), 2);
  EXPECT_NE(p.svg.find("aten::neg(%0)\n@ m.py:1<"), std::string::npos);
  EXPECT_NE(p.svg.find("what is this\n@ m.py:2<"), std::string::npos);
  EXPECT_EQ(by_value(bs, "node output").size(), 1u);  // %7 is nobody's: no output box
  for (const char* junk : {"", "graph(", "return", "%", "%99999999999999999999999 = f(%1)", "graph(%0: \xC3\xA9)\n x = y(%0)"})
    EXPECT_NE(draw(request(junk)).svg.find("</svg>"), std::string::npos) << junk;
  // non-ASCII text comes out as character references, broken UTF-8 as U+FFFD
  Request u = request("graph(%0: f32[2]{1}):\n  %1: f32[2]{1} = aten::relu(%0)\n  return (%1)\n");
  u.input_sources = {"L['caf\xC3\xA9'] \xF0\x9F\x98\x80 \xFF"};
  const std::string svg = draw(u).svg;
  EXPECT_NE(svg.find("caf&#233;&#x27;] &#128512; &#65533;"), std::string::npos) << svg;
  EXPECT_TRUE(std::all_of(svg.begin(), svg.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
}

}  // namespace
}  // namespace fastdyn::codegen::picture
