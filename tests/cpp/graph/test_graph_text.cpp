// tests/cpp/graph/test_graph_text.cpp — graph IR text form, equality and the op table.
//
// Goldens in tests/golden/ir/: printing the hand-built graph must equal the file byte for byte,
// and parsing the file must give the same graph back (so printing again is identical).
#include "codegen/graph/graph.h"
#include "runtime/errors.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace fastdyn::codegen {
namespace {

std::string read_golden(const std::string& name) {
  std::ifstream in(std::string(FASTDYN_GOLDEN_DIR) + "/ir/" + name);
  EXPECT_TRUE(in.good()) << "missing golden " << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TensorMeta meta(c10::ScalarType t, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  TensorMeta m;
  m.dtype = t;
  m.sizes = std::move(sizes);
  m.strides = std::move(strides);
  return m;
}

Node node(OpId op, std::vector<Arg> args, std::vector<ValueId> outputs) {
  Node n;
  n.op = op;
  n.args = std::move(args);
  n.outputs = std::move(outputs);
  return n;
}

void expect_golden(const Graph& built, const std::string& file) {
  std::string golden = read_golden(file);
  EXPECT_EQ(print_graph(built), golden);
  Graph parsed = parse_graph(golden);
  EXPECT_TRUE(parsed == built) << print_graph(parsed);
  EXPECT_EQ(print_graph(parsed), golden);
}

TEST(GraphText, GoldenAddReluPrintsAndParsesBack) {
  Graph g;
  ValueId x = g.add_input(meta(c10::kFloat, {4, 8}, {8, 1}));
  ValueId y = g.add_input(meta(c10::kFloat, {8}, {1}));
  ValueId s = g.add_value(meta(c10::kFloat, {4, 8}, {8, 1}));
  ValueId r = g.add_value(meta(c10::kFloat, {4, 8}, {8, 1}));
  g.nodes.push_back(node(OpId::add_Tensor, {Arg::of_value(x), Arg::of_value(y), Arg::of_int(1)}, {s}));
  g.nodes.push_back(node(OpId::relu, {Arg::of_value(s)}, {r}));
  g.outputs = {r, s};
  expect_golden(g, "add_relu.txt");
}

TEST(GraphText, GoldenListsAndMetadataPrintAndParseBack) {
  Graph g;
  TensorMeta x = meta(c10::kFloat, {6, 4}, {4, 1});
  x.requires_grad = true;
  ValueId v0 = g.add_input(x);
  ValueId v1 = g.add_input(meta(c10::kLong, {3}, {1}));
  TensorMeta scalar = meta(c10::kBFloat16, {}, {});
  scalar.device = c10::Device(c10::DeviceType::CUDA, 0);
  ValueId v2 = g.add_input(scalar);
  TensorMeta strided = meta(c10::kFloat, {2, 3}, {1, 2});
  strided.storage_offset = 5;
  ValueId v3 = g.add_input(strided);
  auto grad = [](TensorMeta m) {
    m.requires_grad = true;
    return m;
  };
  ValueId v4 = g.add_value(grad(meta(c10::kFloat, {2, 4}, {4, 1})));
  TensorMeta second = grad(meta(c10::kFloat, {4, 4}, {4, 1}));
  second.storage_offset = 8;
  ValueId v5 = g.add_value(second);
  ValueId v6 = g.add_value(grad(meta(c10::kFloat, {6, 4}, {4, 1})));
  ValueId v7 = g.add_value(grad(meta(c10::kFloat, {6, 3}, {3, 1})));
  ValueId v8 = g.add_value(grad(meta(c10::kDouble, {6, 4}, {4, 1})));
  ValueId v9 = g.add_value(meta(c10::kFloat, {2, 3}, {3, 1}));
  g.nodes.push_back(node(OpId::split_with_sizes, {Arg::of_value(v0), Arg::of_ints({2, 4}), Arg::of_int(0)}, {v4, v5}));
  g.nodes.push_back(node(OpId::cat, {Arg::of_values({v5, v4}), Arg::of_int(0)}, {v6}));
  g.nodes.push_back(node(OpId::index_Tensor, {Arg::of_value(v0), Arg::of_values({-1, v1})}, {v7}));
  g.nodes.push_back(node(OpId::_to_copy,
                         {Arg::of_value(v6), Arg::of_dtype(c10::kDouble), Arg::none(), Arg::of_device(c10::Device("cpu")),
                          Arg::none(), Arg::of_bool(false), Arg::none()},
                         {v8}));
  g.nodes.push_back(node(OpId::full,
                         {Arg::of_ints({2, 3}), Arg::of_double(0.5), Arg::of_dtype(c10::kFloat), Arg::none(), Arg::none(),
                          Arg::none()},
                         {v9}));
  g.outputs = {v8, v7, v9, v2, v3};
  expect_golden(g, "lists_and_meta.txt");
}

// Every golden in tests/golden/ir/ (including ones other suites add) is in canonical form.
TEST(GraphText, EveryIrGoldenIsCanonical) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(FASTDYN_GOLDEN_DIR) + "/ir")) {
    if (entry.path().extension() != ".txt") continue;
    std::string text = read_golden(entry.path().filename().string());
    EXPECT_EQ(print_graph(parse_graph(text)), text) << entry.path();
    ++count;
  }
  EXPECT_GE(count, 2);
}

// One node carrying every Arg kind, with the awkward values of each: the text form must keep them
// all exactly (parse_graph does not check schemas, so one op can hold them all).
TEST(GraphText, EveryArgKindRoundTripsExactly) {
  Graph g;
  ValueId a = g.add_input(meta(c10::kFloat, {2}, {1}));
  ValueId b = g.add_input(meta(c10::kHalf, {2}, {1}));
  ValueId out = g.add_value(meta(c10::kFloat, {2}, {1}));
  std::vector<Arg> args = {
      Arg::of_value(a),
      Arg::of_values({a, b, a}),
      Arg::of_values({}),
      Arg::of_values({-1, b}),
      Arg::none(),
      Arg::of_int(0),
      Arg::of_int(-7),
      Arg::of_int(std::numeric_limits<int64_t>::max()),
      Arg::of_int(std::numeric_limits<int64_t>::min()),
      Arg::of_bool(true),
      Arg::of_bool(false),
      Arg::of_ints({}),
      Arg::of_ints({-1, 0, 3}),
      Arg::of_device(c10::Device("cpu")),
      Arg::of_device(c10::Device("cuda:1")),
      Arg::of_device(c10::Device("meta")),
      Arg::of_string(""),
      Arg::of_string("tanh"),
      Arg::of_string("quote\" back\\ nl\n tab\t ctl\x01 utf8 \xc3\xa9 hash#"),
  };
  for (double d : {0.0, -0.0, 1.0, -2.5, 0.1, 1.0 / 3.0, 1e300, 5e-324, 1e22, 123456789012345680.0,
                   std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()})
    args.push_back(Arg::of_double(d));
  for (c10::ScalarType t : {c10::kFloat, c10::kDouble, c10::kHalf, c10::kBFloat16, c10::kLong, c10::kInt, c10::kShort,
                            c10::kChar, c10::kByte, c10::kBool, c10::kComplexFloat, c10::kComplexDouble})
    args.push_back(Arg::of_dtype(t));
  g.nodes.push_back(node(OpId::add_Tensor, args, {out}));
  g.outputs = {out, a, out};

  std::string text = print_graph(g);
  Graph parsed = parse_graph(text);
  EXPECT_TRUE(parsed == g) << text << "\nparsed back as\n" << print_graph(parsed);
  EXPECT_EQ(print_graph(parsed), text);
  // -0.0 must not come back as 0.0, NaN must stay NaN.
  ASSERT_EQ(parsed.nodes[0].args.size(), args.size());
  EXPECT_TRUE(std::signbit(parsed.nodes[0].args[20].d));
}

TEST(GraphText, DoublesPrintShortAndStayApartFromInts) {
  Graph g;
  ValueId a = g.add_input(meta(c10::kFloat, {}, {}));
  ValueId o = g.add_value(meta(c10::kFloat, {}, {}));
  g.nodes.push_back(node(OpId::add_Tensor, {Arg::of_value(a), Arg::of_value(a), Arg::of_double(0.1)}, {o}));
  g.outputs = {o};
  EXPECT_NE(print_graph(g).find("aten::add.Tensor(%0, %0, 0.1)"), std::string::npos) << print_graph(g);
  g.nodes[0].args[2] = Arg::of_double(2.0);
  EXPECT_NE(print_graph(g).find("aten::add.Tensor(%0, %0, 2.0)"), std::string::npos) << print_graph(g);
  g.nodes[0].args[2] = Arg::of_int(2);
  EXPECT_NE(print_graph(g).find("aten::add.Tensor(%0, %0, 2)"), std::string::npos) << print_graph(g);
}

TEST(GraphText, CommentsBlankLinesAndIndentationAreIgnored) {
  Graph g = parse_graph(
      "# a comment line\n"
      "\n"
      "graph(%0: f32[3]{1}):   # inputs\n"
      "      %1: f32[3]{1} = aten::relu(%0)\n"
      "\n"
      "return (%1)\n");
  EXPECT_EQ(print_graph(g),
            "graph(%0: f32[3]{1}):\n"
            "  %1: f32[3]{1} = aten::relu(%0)\n"
            "  return (%1)\n");
}

TEST(GraphText, EmptyGraphAndNodeWithoutOutputsRoundTrip) {
  Graph g;
  ValueId a = g.add_input(meta(c10::kFloat, {1}, {1}));
  g.nodes.push_back(node(OpId::relu, {Arg::of_value(a)}, {}));
  std::string text = print_graph(g);
  EXPECT_EQ(text, "graph(%0: f32[1]{1}):\n  aten::relu(%0)\n  return ()\n");
  EXPECT_TRUE(parse_graph(text) == g);
  EXPECT_TRUE(parse_graph("graph():\n  return ()\n") == Graph());
}

// Each bad input must throw UserError naming the line and the offending token.
struct BadText {
  const char* text;
  const char* line;   // "line N"
  const char* token;  // quoted culprit
};

class GraphTextErrors : public ::testing::TestWithParam<BadText> {};

TEST_P(GraphTextErrors, NameTheLineAndToken) {
  const BadText& bad = GetParam();
  try {
    parse_graph(bad.text);
    FAIL() << "parsed without error: " << bad.text;
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(bad.line), std::string::npos) << msg;
    EXPECT_NE(msg.find(bad.token), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Parse, GraphTextErrors,
    ::testing::Values(
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::nope(%0)\n  return (%1)\n", "line 2", "'aten::nope'"},
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::relu(%7)\n  return (%1)\n", "line 2", "'%7'"},
        BadText{"graph(%0: q9[3]{1}):\n  return (%0)\n", "line 1", "'q9'"},
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::relu(%0)\n", "line 2", "'end of input'"},
        BadText{"graph(%0: f32[3]{1}):\n\n  %0: f32[3]{1} = aten::relu(%0)\n  return (%0)\n", "line 3", "'%0'"},
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::relu(%0, \"oops)\n  return (%1)\n", "line 2", "'\"oops)'"},
        BadText{"graph(%0: f32[3]{1}):\n  return (%0)\n  %1: f32[3]{1} = aten::relu(%0)\n", "line 3", "'%1'"},
        BadText{"graph(%0: f32[3]{1}@warp:9):\n  return (%0)\n", "line 1", "'warp:9'"},
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::relu(%0) extra\n  return (%1)\n", "line 2", "'extra'"},
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::relu(%0, [1, %0])\n  return (%1)\n", "line 2", "'%0'"},
        BadText{"graph(%0: f32[3]{1, 1}):\n  return (%0)\n", "line 1", "'{1, 1}'"},
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::relu(99999999999999999999)\n  return (%1)\n", "line 2",
                "'99999999999999999999'"},
        BadText{"graph(%0: f32[3]{1}):\n  %1: f32[3]{1} = aten::relu(%0, torch.float99)\n  return (%1)\n", "line 2",
                "'torch.float99'"},
        BadText{"graph(%0: f32[3]{1}, %2: f32[3]{1}):\n  return (%0)\n", "line 2", "'%1'"},
        BadText{"", "line 1", "'end of input'"}));

TEST(GraphEquality, EveryFieldMatters) {
  Graph a = parse_graph(read_golden("add_relu.txt"));
  Graph b = a;
  EXPECT_TRUE(a == b);
  b.values[0].strides = {1, 4};
  EXPECT_FALSE(a == b);
  b = a;
  b.values[1].requires_grad = true;
  EXPECT_FALSE(a == b);
  b = a;
  b.values[1].storage_offset = 1;
  EXPECT_FALSE(a == b);
  b = a;
  b.values[1].device = c10::Device("meta");
  EXPECT_FALSE(a == b);
  b = a;
  b.nodes[0].args[2] = Arg::of_double(1.0);  // Int 1 and Double 1.0 are different constants
  EXPECT_FALSE(a == b);
  b = a;
  b.nodes[1].op = OpId::alias;
  EXPECT_FALSE(a == b);
  b = a;
  b.outputs = {3};
  EXPECT_FALSE(a == b);
  b = a;
  b.inputs = {1, 0};
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(Arg::of_double(0.0) == Arg::of_double(-0.0));
  EXPECT_TRUE(Arg::of_double(std::nan("")) == Arg::of_double(std::nan("")));
}

TEST(TensorMeta, NumelIsTheProductOfSizes) {
  EXPECT_EQ(meta(c10::kFloat, {}, {}).numel(), 1);
  EXPECT_EQ(meta(c10::kFloat, {2, 3, 4}, {12, 4, 1}).numel(), 24);
  EXPECT_EQ(meta(c10::kFloat, {5, 0}, {1, 1}).numel(), 0);
}

TEST(OpTable, QualifiedNamesRoundTripForEveryOp) {
  for (size_t i = 0; i < static_cast<size_t>(OpId::kCount); ++i) {
    auto op = static_cast<OpId>(i);
    std::string name = qualified_name(op);
    EXPECT_EQ(name.rfind("aten::", 0), 0u) << name;
    auto found = op_by_qualified_name(name);
    ASSERT_TRUE(found.has_value()) << name;
    EXPECT_EQ(*found, op) << name;
  }
}

TEST(OpTable, LooksUpOverloadsAndRejectsUnknownNames) {
  EXPECT_EQ(op_by_qualified_name("aten::add.Tensor"), OpId::add_Tensor);
  EXPECT_EQ(op_by_qualified_name("aten::relu"), OpId::relu);
  EXPECT_EQ(qualified_name(OpId::relu), "aten::relu");
  EXPECT_EQ(qualified_name(OpId::add_Tensor), "aten::add.Tensor");
  EXPECT_FALSE(op_by_qualified_name("aten::add").has_value());
  EXPECT_FALSE(op_by_qualified_name("add.Tensor").has_value());
  EXPECT_FALSE(op_by_qualified_name("aten::no_such_op").has_value());
  const OpInfo& info = op_info(OpId::add_Tensor);
  EXPECT_STREQ(info.id, "add_Tensor");
  EXPECT_STREQ(info.aten, "add");
  EXPECT_STREQ(info.overload, "Tensor");
  EXPECT_EQ(info.category, OpCategory::Pointwise);
  EXPECT_EQ(op_info(OpId::cat).category, OpCategory::Extern);
}

}  // namespace
}  // namespace fastdyn::codegen

namespace fastdyn::codegen {
namespace {

// ops.def's Twin column: every InPlace row either names the Pointwise row that computes what it
// writes (the in-place name without its underscore, same overload; or a rename listed here with
// its reason), or says NoTwin; no other category has one. Fails when a new in-place row forgets
// its twin while the out-of-place row exists.
TEST(OpTable, InPlaceTwinsAreTheOutOfPlaceRows) {
  // pow_.Scalar takes a Scalar exponent (pow.Tensor_Scalar); floor_divide has no .Tensor overload.
  const std::map<std::string, std::string> renamed = {{"aten::pow_.Scalar", "aten::pow.Tensor_Scalar"},
                                                      {"aten::pow_.Tensor", "aten::pow.Tensor_Tensor"},
                                                      {"aten::floor_divide_.Tensor", "aten::floor_divide"},
                                                      // Random fills: ATen's functional forms (Random rows, the same draws).
                                                      {"aten::bernoulli_.float", "aten::bernoulli.p"},
                                                      {"aten::uniform_", "aten::uniform"},
                                                      {"aten::normal_", "aten::normal_functional"}};
  // In-place rows with no twin although the name matches a Pointwise row: the result type differs.
  const std::set<std::string> no_twin = {"aten::logical_not_"};
  int twins = 0;
  for (size_t i = 0; i < static_cast<size_t>(OpId::kCount); ++i) {
    const OpId op = static_cast<OpId>(i);
    const OpInfo& info = op_info(op);
    const std::string q = qualified_name(op);
    if (info.category != OpCategory::InPlace) {
      EXPECT_EQ(info.twin, OpId::NoTwin) << q << " is not in-place but names a twin";
      continue;
    }
    std::string expected;
    if (auto r = renamed.find(q); r != renamed.end()) {
      expected = r->second;
    } else {
      const std::string name = info.aten;
      if (!name.empty() && name.back() == '_') {
        const std::string plain = "aten::" + name.substr(0, name.size() - 1) + (*info.overload ? std::string(".") + info.overload : "");
        auto candidate = op_by_qualified_name(plain);
        if (candidate && op_info(*candidate).category == OpCategory::Pointwise && !no_twin.count(q)) expected = plain;
      }
    }
    if (expected.empty()) {
      EXPECT_EQ(info.twin, OpId::NoTwin) << q << " names a twin no rule gives it";
    } else {
      ASSERT_NE(info.twin, OpId::NoTwin) << q << ": its twin " << expected << " exists; name it in the Twin column";
      EXPECT_EQ(qualified_name(info.twin), expected) << q;
      const OpCategory twin_kind = op_info(info.twin).category;
      EXPECT_EQ(twin_kind, info.aten == std::string("bernoulli_") || info.aten == std::string("uniform_") ||
                                   info.aten == std::string("normal_")
                               ? OpCategory::Random
                               : OpCategory::Pointwise)
          << q;
      ++twins;
    }
  }
  EXPECT_GT(twins, 50);
}

// Whether a graph may be redone eagerly after it raised depends on this (eval_hook/compiler.cpp).
TEST(GraphAnalysis, WritesAnInputThroughViewsAndInPlaceResultsOnly) {
  const Graph made = parse_graph(
      "graph(%0: f32[4, 4]{4, 1}):\n"
      "  %1: f32[4, 4]{4, 1} = aten::mul.Scalar(%0, 2)\n"
      "  %2: f32[4, 4]{1, 4} = aten::transpose.int(%1, 0, 1)\n"
      "  %3: f32[4, 4]{1, 4} = aten::relu_(%2)\n"
      "  return (%3)\n");
  EXPECT_FALSE(writes_an_input(made));
  const Graph through_view = parse_graph(
      "graph(%0: f32[4, 4]{4, 1}):\n"
      "  %1: f32[4, 4]{1, 4} = aten::transpose.int(%0, 0, 1)\n"
      "  %2: f32[4, 4]{1, 4} = aten::mul.Scalar(%1, 2)\n"
      "  %3: f32[4, 4]{1, 4} = aten::relu_(%1)\n"
      "  return (%2)\n");
  EXPECT_TRUE(writes_an_input(through_view));
  const Graph through_in_place = parse_graph(
      "graph(%0: f32[4]{1}):\n"
      "  %1: f32[4]{1} = aten::add_.Scalar(%0, 1, 1)\n"
      "  return (%1)\n");
  EXPECT_TRUE(writes_an_input(through_in_place));
  // The first node that writes one: the aten backend's run failing before it left inputs as they were.
  EXPECT_EQ(first_input_write(made), made.nodes.size());
  EXPECT_EQ(first_input_write(through_view), 2u);
  EXPECT_EQ(first_input_write(through_in_place), 0u);
}

}  // namespace
}  // namespace fastdyn::codegen
