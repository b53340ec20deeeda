// codegen/graph/graph_picture.cpp — see graph_picture.h.
#include "codegen/graph/graph_picture.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace fastdyn::codegen::picture {
namespace {

// ---------------------------------------------------------------------------------------------
// Reading the graph text, tolerantly.

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

std::string strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// A value id's digits at s[i..]: the value (saturating: never throws) and the end.
int64_t read_int(const std::string& s, size_t& i) {
  int64_t v = 0;
  for (; i < s.size() && is_digit(s[i]); ++i) v = v > (INT64_MAX - 9) / 10 ? INT64_MAX : v * 10 + (s[i] - '0');
  return v;
}

// Every "%<digits>" of s, first occurrences only, in order.
std::vector<int64_t> values_in(const std::string& s) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%' || i + 1 >= s.size() || !is_digit(s[i + 1])) continue;
    size_t j = i + 1;
    const int64_t v = read_int(s, j);
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    i = j - 1;
  }
  return out;
}

struct Decl {
  int64_t value;
  std::string type;
};

// "%0: f32[8]{1}, %1: i64[]{}" -> [(0, "f32[8]{1}"), (1, "i64[]{}")]: each "%N :" starts a
// declaration whose type runs to the next one (trailing commas and blanks dropped).
std::vector<Decl> decls(const std::string& s) {
  struct Hit {
    size_t start, end;
    int64_t value;
  };
  std::vector<Hit> hits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%' || i + 1 >= s.size() || !is_digit(s[i + 1])) continue;
    size_t j = i + 1;
    const int64_t v = read_int(s, j);
    size_t k = j;
    while (k < s.size() && is_space(s[k])) ++k;
    if (k < s.size() && s[k] == ':') hits.push_back({i, k + 1, v});
    i = j - 1;
  }
  std::vector<Decl> out;
  for (size_t h = 0; h < hits.size(); ++h) {
    const size_t end = h + 1 < hits.size() ? hits[h + 1].start : s.size();
    std::string t = strip(s.substr(hits[h].end, end - hits[h].end));
    while (!t.empty() && t.back() == ',') t.pop_back();
    out.push_back({hits[h].value, strip(t)});
  }
  return out;
}

struct Op {
  size_t index;
  std::string line;
  std::optional<std::string> name;  // none: a line not understood (an opaque box)
  std::vector<Decl> outs;
  std::vector<int64_t> args;
};

Op parse_op(size_t index, const std::string& s) {
  Op op{index, s, std::nullopt, {}, {}};
  const size_t eq = s.find(" = ");
  if (eq == std::string::npos) return op;
  const std::string lhs = s.substr(0, eq), rhs = s.substr(eq + 3);
  op.outs = decls(lhs);
  if (op.outs.empty())
    for (int64_t v : values_in(lhs)) op.outs.push_back({v, ""});
  // The op's name: an identifier (with '::' and '.') right before '('.
  size_t i = 0;
  while (i < rhs.size() && is_space(rhs[i])) ++i;
  if (i < rhs.size() && (is_word(rhs[i]) && !is_digit(rhs[i]))) {
    size_t j = i;
    while (j < rhs.size() && (is_word(rhs[j]) || rhs[j] == ':' || rhs[j] == '.')) ++j;
    size_t k = j;
    while (k < rhs.size() && is_space(rhs[k])) ++k;
    if (k < rhs.size() && rhs[k] == '(') op.name = rhs.substr(i, j - i);
  }
  op.args = values_in(rhs);
  return op;
}

struct ParsedGraph {
  std::vector<Decl> inputs;
  std::vector<Op> ops;
  std::vector<int64_t> returns;
};

ParsedGraph parse(const std::string& text) {
  ParsedGraph g;
  bool seen_signature = false;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string s = strip(text.substr(begin, end - begin));
    begin = end + 1;
    if (s.empty()) continue;
    if (!seen_signature && starts_with(s, "graph(")) {
      seen_signature = true;
      const size_t close = s.rfind(')');
      g.inputs = decls(close != std::string::npos && close >= 6 ? s.substr(6, close - 6) : s.substr(6));
    } else if (starts_with(s, "return")) {
      g.returns = values_in(s);
    } else if (starts_with(s, "symbols(")) {
      continue;  // the graph's size symbols (graph_text.cpp): no node
    } else {
      g.ops.push_back(parse_op(g.ops.size(), s));
    }
  }
  return g;
}

// ---------------------------------------------------------------------------------------------
// Text helpers.

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// At most n characters: longer text is cut to n - 1 and an ellipsis.
std::string clip(const std::string& s, size_t n = 22) {
  if (utf8_length(s) <= n) return s;
  size_t chars = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) {
      if (chars == n - 1) break;
      ++chars;
    }
  }
  return s.substr(0, i) + "\xE2\x80\xA6";  // an ellipsis (escape_html writes it &#8230;)
}

// A type without its trailing strides: "f32[8, 4]{4, 1}" -> "f32[8, 4]".
std::string short_type(const std::string& t) {
  std::string s = t;
  size_t e = s.size();
  while (e > 0 && is_space(s[e - 1])) --e;
  if (e > 0 && s[e - 1] == '}') {
    const size_t open = s.rfind('{', e - 1);
    if (open != std::string::npos && s.find('}', open) == e - 1) s = s.substr(0, open);
  }
  return strip(s);
}

std::string short_name(const std::optional<std::string>& name) {
  if (!name) return "?";
  const size_t at = name->rfind("::");
  return at == std::string::npos ? *name : name->substr(at + 2);
}

// Ops the backends run as library calls (drawn as extern boxes).
bool is_extern(const std::string& base) {
  static const char* const kExact[] = {"matmul", "mm", "addmm", "bmm", "baddbmm", "linear",
                                       "scaled_dot_product_attention"};
  static const char* const kPrefix[] = {"conv", "_convolution", "_scaled_dot_product", "embedding"};
  for (const char* e : kExact)
    if (base == e) return true;
  for (const char* p : kPrefix)
    if (starts_with(base, p) && std::all_of(base.begin() + std::string(p).size(), base.end(), is_word)) return true;
  return false;
}

// The SVG text, appended piece by piece (no temporaries: the picture is mostly numbers and short
// strings).
class Writer {
 public:
  explicit Writer(size_t reserve) { out_.reserve(reserve); }
  Writer& operator<<(std::string_view s) {
    out_.append(s);
    return *this;
  }
  Writer& operator<<(int64_t v) {
    char buf[24];
    out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
    return *this;
  }
  // printf's "%.0f" (round half to even, "-0" kept), without printf's cost.
  Writer& operator<<(double v) {
    const double r = std::nearbyint(v);  // the default rounding mode: to nearest, ties to even
    if (!(std::fabs(r) < 1e15)) {
      char buf[512];
      out_.append(buf, static_cast<size_t>(std::snprintf(buf, sizeof buf, "%.0f", v)));
    } else if (r == 0 && std::signbit(r)) {
      out_ += "-0";
    } else {
      *this << static_cast<int64_t>(r);
    }
    return *this;
  }
  Writer& esc(const std::string& s);  // escaped (escape_html)
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// ---------------------------------------------------------------------------------------------
// Nodes and layout.

enum class Kind { Input, Op, Output, Dummy };

struct Node {
  Kind kind;
  std::string classes, value, label0, label1, title, values;
  std::string group;  // kernel name; empty: none
  bool has_group = false;
  std::vector<size_t> preds, succs;
  std::vector<std::pair<size_t, std::string>> via;  // pred -> the value id read from it
  int64_t row = 0;
  double x = 0.0, w = kNodeWidth;
};

int64_t node_y(const Node& n) { return kMargin + 16 + n.row * (kNodeHeight + kGapY); }

struct Built {
  std::vector<Node> nodes;
  int64_t left = 0, total = 0;
};

Built build_nodes(const Request& r) {
  ParsedGraph g = parse(r.graph_text);
  std::unordered_map<int64_t, const std::string*> kernel_of;
  for (const Kernel& k : r.kernels)
    for (int64_t v : k.values) kernel_of.emplace(v, &k.name);
  const size_t cap = static_cast<size_t>(std::max<int64_t>(0, r.node_cap));
  const size_t drawn = std::min(cap, g.ops.size());
  Built b;
  b.total = static_cast<int64_t>(g.ops.size());
  b.left = static_cast<int64_t>(g.ops.size() - drawn);
  std::unordered_map<int64_t, size_t> producer;
  std::vector<int64_t> used;
  if (b.left) {
    for (size_t i = 0; i < drawn; ++i) used.insert(used.end(), g.ops[i].args.begin(), g.ops[i].args.end());
    used.insert(used.end(), g.returns.begin(), g.returns.end());
    std::sort(used.begin(), used.end());
  }
  std::vector<Node>& nodes = b.nodes;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Decl& in = g.inputs[i];
    if (b.left && !std::binary_search(used.begin(), used.end(), in.value)) continue;
    const std::string id = std::to_string(in.value);
    const std::string src = i < r.input_sources.size() ? r.input_sources[i] : "%" + id;
    Node n{Kind::Input, "node input", id, clip(src), clip(short_type(in.type)), "input %" + id + " = " + src + ": " + in.type};
    producer[in.value] = nodes.size();
    nodes.push_back(std::move(n));
  }
  for (size_t o = 0; o < drawn; ++o) {
    const Op& op = g.ops[o];
    const std::string loc = op.index < r.node_locations.size() ? r.node_locations[op.index] : "";
    Node n{Kind::Op};
    for (const Decl& d : op.outs)
      if (auto k = kernel_of.find(d.value); k != kernel_of.end()) {
        n.group = *k->second;
        n.has_group = true;
        break;
      }
    const std::string name = short_name(op.name);
    const std::string base = name.substr(0, name.find('.'));
    const char* kind = !op.name ? "opaque" : is_extern(base) ? "extern" : n.has_group ? "fused" : "plain";
    std::string shape = op.outs.empty() ? "" : short_type(op.outs[0].type);
    if (op.outs.size() > 1) shape += " +" + std::to_string(op.outs.size() - 1);
    n.classes = std::string("node op ") + kind;
    n.value = op.outs.empty() ? "" : std::to_string(op.outs[0].value);
    n.label0 = clip(op.name ? name : op.line);
    n.label1 = clip(shape);
    n.title = op.line + (loc.empty() ? "" : "\n@ " + loc);
    for (size_t i = 0; i < op.outs.size(); ++i) n.values += (i ? " " : "") + std::to_string(op.outs[i].value);
    for (int64_t a : op.args) {
      auto p = producer.find(a);
      if (p == producer.end() || std::find(n.preds.begin(), n.preds.end(), p->second) != n.preds.end()) continue;
      n.preds.push_back(p->second);
      n.via.emplace_back(p->second, std::to_string(a));
    }
    const size_t self = nodes.size();
    for (const Decl& d : op.outs) producer[d.value] = self;
    nodes.push_back(std::move(n));
  }
  for (size_t j = 0; j < g.returns.size(); ++j) {
    const int64_t v = g.returns[j];
    auto p = producer.find(v);
    if (p == producer.end()) continue;
    const std::string id = std::to_string(v), out = "output " + std::to_string(j);
    Node n{Kind::Output, "node output", id, out, "%" + id, out + " = %" + id};
    n.preds = {p->second};
    n.via = {{p->second, id}};
    nodes.push_back(std::move(n));
  }
  for (size_t i = 0; i < nodes.size(); ++i)
    for (size_t p : nodes[i].preds) nodes[p].succs.push_back(i);
  return b;
}

void assign_rows(std::vector<Node>& nodes) {
  int64_t last = 0;
  for (Node& n : nodes) {
    if (n.kind != Kind::Op) continue;
    int64_t row = 0;
    for (size_t p : n.preds)
      if (nodes[p].kind == Kind::Op) row = std::max(row, nodes[p].row);
    n.row = 1 + row;
    last = std::max(last, n.row);
  }
  for (Node& n : nodes) {
    if (n.kind == Kind::Input) {
      int64_t first = 1;
      bool any = false;
      for (size_t s : n.succs)
        if (nodes[s].kind == Kind::Op) {
          first = any ? std::min(first, nodes[s].row) : nodes[s].row;
          any = true;
        }
      n.row = std::max<int64_t>(0, first - 1);
    } else if (n.kind == Kind::Output) {
      n.row = last + 1;
    }
  }
}

using Chains = std::map<std::pair<size_t, size_t>, std::vector<size_t>>;  // (pred, succ) -> dummies

// Chains of dummy nodes for edges over more than one row, shortest edges first, within the budget.
Chains add_dummies(std::vector<Node>& nodes) {
  struct Edge {
    size_t p, n;
    int64_t span;
  };
  std::vector<Edge> long_edges;
  for (size_t n = 0; n < nodes.size(); ++n)
    for (size_t p : nodes[n].preds)
      if (nodes[n].row - nodes[p].row > 1) long_edges.push_back({p, n, nodes[n].row - nodes[p].row});
  std::stable_sort(long_edges.begin(), long_edges.end(), [](const Edge& a, const Edge& b) { return a.span < b.span; });
  Chains chains;
  int64_t budget = kDummyBudget;
  for (const Edge& e : long_edges) {
    if (e.span - 1 > budget) break;
    budget -= e.span - 1;
    std::vector<size_t> chain;
    for (int64_t r = nodes[e.p].row + 1; r < nodes[e.n].row; ++r) {
      Node d{Kind::Dummy};
      d.row = r;
      d.w = kDummyWidth;
      chain.push_back(nodes.size());
      nodes.push_back(std::move(d));
    }
    std::vector<size_t> path = {e.p};
    path.insert(path.end(), chain.begin(), chain.end());
    path.push_back(e.n);
    for (size_t i = 0; i + 1 < path.size(); ++i) {
      const size_t a = path[i], b = path[i + 1];
      if (a == e.p) *std::find(nodes[a].succs.begin(), nodes[a].succs.end(), e.n) = b;
      else nodes[a].succs.push_back(b);
      if (b == e.n) *std::find(nodes[b].preds.begin(), nodes[b].preds.end(), e.p) = a;
      else nodes[b].preds.push_back(a);
    }
    chains[{e.p, e.n}] = std::move(chain);
  }
  return chains;
}

// For each node of a row: the mean of at[] over its neighbours, or its own at[] if none.
std::vector<double> means(const std::vector<size_t>& row, const std::vector<std::vector<size_t>>& nbrs,
                          const std::vector<double>& at) {
  std::vector<double> out;
  out.reserve(row.size());
  for (size_t i : row) {
    const std::vector<size_t>& ks = nbrs[i];
    if (ks.empty()) {
      out.push_back(at[i]);
    } else {
      double sum = 0.0;
      for (size_t k : ks) sum += at[k];
      out.push_back(ks.size() == 1 ? at[ks[0]] : sum / double(ks.size()));
    }
  }
  return out;
}

// The row's nodes sorted by keys, stably, the nodes of one kernel kept adjacent (a kernel sits at
// the mean key of its nodes in the row); group == nullptr when no two nodes of the row share one.
std::vector<size_t> group_sort(const std::vector<size_t>& row, const std::vector<double>& keys,
                               const std::vector<std::string>* group) {
  std::vector<size_t> at(row.size());
  std::iota(at.begin(), at.end(), 0);
  auto by_key = [&](size_t a, size_t b) { return keys[a] < keys[b]; };
  std::vector<size_t> out;
  out.reserve(row.size());
  if (!group) {
    std::stable_sort(at.begin(), at.end(), by_key);
    for (size_t j : at) out.push_back(row[j]);
    return out;
  }
  std::vector<std::vector<size_t>> groups;  // positions in row, groups in order of first member
  std::unordered_map<std::string, size_t> index;
  for (size_t j = 0; j < row.size(); ++j) {
    auto [it, fresh] = index.emplace((*group)[row[j]], groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(j);
  }
  std::vector<double> mean(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    double sum = 0.0;
    for (size_t j : groups[g]) sum += keys[j];
    mean[g] = sum / double(groups[g].size());
  }
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return mean[a] < mean[b]; });
  for (size_t g : order) {
    std::stable_sort(groups[g].begin(), groups[g].end(), by_key);
    for (size_t j : groups[g]) out.push_back(row[j]);
  }
  return out;
}

// x of a row's nodes: as near their desired x as the gaps between them allow, the row shifted so
// that it is centred on the desired positions.
void place_row(const std::vector<size_t>& row, const std::vector<double>& gaps, const std::vector<double>& desired,
               std::vector<double>& x) {
  std::vector<double> xs;
  xs.reserve(row.size());
  double prev = desired[0];
  xs.push_back(prev);
  for (size_t i = 1; i < row.size(); ++i) {
    prev += gaps[i - 1];
    if (desired[i] > prev) prev = desired[i];
    xs.push_back(prev);
  }
  double shift = 0.0;
  for (size_t i = 0; i < row.size(); ++i) shift += desired[i] - xs[i];
  shift /= double(row.size());
  for (size_t i = 0; i < row.size(); ++i) x[row[i]] = xs[i] + shift;
}

Chains layout(std::vector<Node>& nodes) {
  assign_rows(nodes);
  Chains chains = add_dummies(nodes);
  const size_t n = nodes.size();
  std::vector<std::vector<size_t>> preds(n), succs(n);
  std::vector<std::string> group(n);
  for (size_t i = 0; i < n; ++i) {
    preds[i] = nodes[i].preds;
    succs[i] = nodes[i].succs;
    group[i] = nodes[i].has_group ? nodes[i].group : "\x01" + std::to_string(i);  // a group of its own
  }
  std::map<int64_t, std::vector<size_t>> by_row;
  for (size_t i = 0; i < n; ++i) by_row[nodes[i].row].push_back(i);
  std::vector<std::vector<size_t>> rows;
  for (auto& [r, members] : by_row) rows.push_back(std::move(members));
  const size_t R = rows.size();
  std::vector<bool> kernels_meet(R);
  for (size_t r = 0; r < R; ++r) {
    std::vector<const std::string*> gs;
    for (size_t i : rows[r]) gs.push_back(&group[i]);
    std::sort(gs.begin(), gs.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
    kernels_meet[r] = std::unique(gs.begin(), gs.end(), [](const std::string* a, const std::string* b) { return *a == *b; }) - gs.begin() <
                      static_cast<ptrdiff_t>(rows[r].size());
  }
  std::vector<double> pos(n, 0.0);  // index in its row, centred on 0
  auto index_pos = [&](const std::vector<size_t>& row) {
    const double mid = (double(row.size()) - 1) / 2;
    for (size_t j = 0; j < row.size(); ++j) pos[row[j]] = double(j) - mid;
  };
  for (const auto& row : rows) index_pos(row);
  // Ordering sweeps: down by predecessors (rows 1..R-1), up by successors (rows R-2..0).
  auto sweep = [&](const std::vector<std::vector<size_t>>& nbrs, bool down, auto&& visit) {
    if (R < 2) return;
    if (down)
      for (size_t r = 1; r < R; ++r) visit(r, nbrs);
    else
      for (size_t r = R - 1; r-- > 0;) visit(r, nbrs);
  };
  for (int round = 0; round < 4; ++round) {
    const std::vector<std::vector<size_t>> before = rows;
    auto reorder = [&](size_t r, const std::vector<std::vector<size_t>>& nbrs) {
      std::vector<size_t> order = group_sort(rows[r], means(rows[r], nbrs, pos), kernels_meet[r] ? &group : nullptr);
      if (order != rows[r]) {
        rows[r] = std::move(order);
        index_pos(rows[r]);
      }
    };
    sweep(preds, true, reorder);
    sweep(succs, false, reorder);
    if (rows == before) break;  // back where it started: more sweeps would change nothing
  }
  // The orders are final, so are the gaps between neighbours in a row.
  std::vector<std::vector<double>> gaps(R);
  for (size_t r = 0; r < R; ++r)
    for (size_t j = 0; j + 1 < rows[r].size(); ++j) {
      const Node &a = nodes[rows[r][j]], &b = nodes[rows[r][j + 1]];
      gaps[r].push_back((a.w + b.w) / 2 + (a.kind != Kind::Dummy && b.kind != Kind::Dummy ? kGapX : 6));
    }
  std::vector<double> x(n, 0.0);
  for (size_t r = 0; r < R; ++r) place_row(rows[r], gaps[r], std::vector<double>(rows[r].size(), 0.0), x);
  auto pull = [&](size_t r, const std::vector<std::vector<size_t>>& nbrs) {
    place_row(rows[r], gaps[r], means(rows[r], nbrs, x), x);
  };
  for (int round = 0; round < 3; ++round) {  // coordinates: each node towards its neighbours' mean x
    sweep(preds, true, pull);
    sweep(succs, false, pull);
    sweep(preds, true, pull);
  }
  double lowest = 0.0;
  for (size_t i = 0; i < n; ++i) lowest = i ? std::min(lowest, x[i] - nodes[i].w / 2) : x[i] - nodes[i].w / 2;
  const double shift = kMargin - lowest;
  for (size_t i = 0; i < n; ++i) nodes[i].x = x[i] + shift;
  return chains;
}

struct Rect {
  double x, y, w, h;
};

// The rectangles behind a kernel's boxes: row by row, consecutive rows merged while no other box
// falls inside. A box over rows r0..r1 can only meet boxes of those rows (it reaches 18 px above
// r0's boxes and 8 below r1's, less than the gap between rows).
std::vector<Rect> kernel_rects(const std::vector<Node>& nodes, const std::vector<size_t>& members,
                               const std::map<int64_t, std::vector<size_t>>& by_row) {
  const std::string& name = nodes[members[0]].group;
  auto box = [&](const std::vector<size_t>& ns) {
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (size_t i : ns) {
      x0 = std::min(x0, nodes[i].x);
      x1 = std::max(x1, nodes[i].x);
      y0 = std::min(y0, double(node_y(nodes[i])));
      y1 = std::max(y1, double(node_y(nodes[i])));
    }
    x0 = x0 - kNodeWidth / 2.0 - 8;  // NB: in this order (the picture is stable to the last bit)
    y0 -= 18;
    x1 = x1 + kNodeWidth / 2.0 + 8;
    y1 += kNodeHeight + 8;
    return Rect{x0, y0, x1 - x0, y1 - y0};
  };
  auto clear = [&](const Rect& b, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r <= r1; ++r) {
      auto it = by_row.find(r);
      if (it == by_row.end()) continue;
      for (size_t o : it->second) {
        const Node& other = nodes[o];
        if (other.has_group && other.group == name) continue;
        const double oy = double(node_y(other));
        if (b.x < other.x + kNodeWidth / 2.0 && other.x - kNodeWidth / 2.0 < b.x + b.w && b.y < oy + kNodeHeight &&
            oy < b.y + b.h)
          return false;
      }
    }
    return true;
  };
  std::map<int64_t, std::vector<size_t>> rows;
  for (size_t i : members) rows[nodes[i].row].push_back(i);
  struct Span {
    std::vector<size_t> nodes;
    int64_t first, last;
  };
  std::vector<Span> spans;
  for (auto& [r, ns] : rows) {
    if (!spans.empty() && spans.back().last == r - 1) {
      std::vector<size_t> merged = spans.back().nodes;
      merged.insert(merged.end(), ns.begin(), ns.end());
      if (clear(box(merged), spans.back().first, r)) {
        spans.back().nodes = std::move(merged);
        spans.back().last = r;
        continue;
      }
    }
    spans.push_back({ns, r, r});
  }
  std::vector<Rect> out;
  for (const Span& s : spans) out.push_back(box(s.nodes));
  return out;
}

// A path from s's bottom to n's top through the dummy nodes of a long edge.
void edge_path(Writer& w, const std::vector<Node>& nodes, size_t s, size_t n, const std::vector<size_t>& chain) {
  double x = nodes[s].x, y = double(node_y(nodes[s]) + kNodeHeight);
  w << "M" << x << "," << y;
  for (size_t h = 0; h <= chain.size(); ++h) {
    const size_t t = h < chain.size() ? chain[h] : n;
    const double x2 = nodes[t].x, y2 = double(node_y(nodes[t]) - (t == n ? 1 : 0));
    const double dy = (y2 - y) / 2;
    w << " C" << x << "," << (y + dy) << " " << x2 << "," << (y2 - dy) << " " << x2 << "," << y2;
    if (t != n) {
      y = y2 + kNodeHeight;
      w << " L" << x2 << "," << y;
    }
    x = x2;
  }
}

}  // namespace

namespace {
// Appends s escaped to out; runs of plain ASCII go in at once.
void escape_into(std::string& out, const std::string& s) {
  size_t plain = 0;  // start of the current run of plain ASCII
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const char* entity = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&quot;"
                       : c == '\'' ? "&#x27;" : nullptr;
    if (!entity && c < 0x80) continue;
    out.append(s, plain, i - plain);
    plain = i + 1;
    if (entity) {
      out += entity;
      continue;
    }
    // A UTF-8 sequence as a character reference (the page stays ASCII); a broken one as U+FFFD.
    const size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    uint32_t cp = n == 4 ? c & 0x07 : n == 3 ? c & 0x0F : c & 0x1F;
    bool ok = n != 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const unsigned char t = static_cast<unsigned char>(s[i + k]);
      ok = (t & 0xC0) == 0x80;
      cp = (cp << 6) | (t & 0x3F);
    }
    if (ok) {
      i += n - 1;
      plain = i + 1;
    }
    out += "&#";
    out += std::to_string(ok ? cp : 0xFFFD);
    out += ';';
  }
  out.append(s, plain, s.size() - plain);
}

Writer& Writer::esc(const std::string& s) {
  escape_into(out_, s);
  return *this;
}
}  // namespace

std::string escape_html(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 16);
  escape_into(out, s);
  return out;
}

Picture draw(const Request& r) {
  Built b = build_nodes(r);
  std::vector<Node>& nodes = b.nodes;
  const size_t real = nodes.size();
  std::vector<std::pair<size_t, size_t>> edges;  // (pred, node), before the dummies reroute them
  for (size_t i = 0; i < real; ++i)
    for (size_t p : nodes[i].preds) edges.emplace_back(p, i);
  const Chains chains = layout(nodes);
  double width = 0.0, height = 0.0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    width = i ? std::max(width, nodes[i].x + nodes[i].w / 2) : nodes[i].x + nodes[i].w / 2;
    height = i ? std::max(height, double(node_y(nodes[i]))) : double(node_y(nodes[i]));
  }
  width += kMargin;
  height += kNodeHeight + kMargin;
  Writer out(600 * real + 1024);
  out << "<svg class=\"graph\" xmlns=\"http://www.w3.org/2000/svg\" data-code=\"";
  out.esc(r.code_id) << "\" data-entry=\"";
  out.esc(r.entry) << "\" width=\"" << width << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
                   << "\" role=\"img\">\n<defs><marker id=\"" << r.marker_id
                   << "\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" orient=\"auto\">"
                      "<path d=\"M0,0 L10,5 L0,10 z\" class=\"arrowhead\"/></marker></defs>";
  std::map<int64_t, std::vector<size_t>> by_row;
  std::unordered_map<std::string, std::vector<size_t>> members_of;
  for (size_t i = 0; i < real; ++i) {
    by_row[nodes[i].row].push_back(i);
    if (nodes[i].kind == Kind::Op && nodes[i].has_group) members_of[nodes[i].group].push_back(i);
  }
  for (const Kernel& k : r.kernels) {
    auto members = members_of.find(k.name);
    if (members == members_of.end()) continue;
    const std::string name = escape_html(k.name);
    out << "\n<g class=\"kernel" << (k.diverged ? " diverged" : "") << "\" data-kernel=\"" << name << "\"><title>kernel "
        << name << "</title>";
    for (const Rect& rc : kernel_rects(nodes, members->second, by_row))
      out << "\n<rect x=\"" << rc.x << "\" y=\"" << rc.y << "\" width=\"" << rc.w << "\" height=\"" << rc.h
          << "\" rx=\"8\"/><text x=\"" << (rc.x + 6) << "\" y=\"" << (rc.y + 12) << "\">" << name << "</text>";
    out << "\n</g>";
  }
  out << "\n<g class=\"edges\">";
  static const std::vector<size_t> kNoChain;
  for (const auto& [p, n] : edges) {
    auto chain = chains.find({p, n});
    const std::string* via = nullptr;
    for (const auto& [from, value] : nodes[n].via)
      if (from == p) via = &value;
    out << "\n<path class=\"edge\" data-from=\"";
    out.esc(via ? *via : std::string()) << "\" data-to=\"";
    out.esc(nodes[n].value) << "\" d=\"";
    edge_path(out, nodes, p, n, chain == chains.end() ? kNoChain : chain->second);
    out << "\" marker-end=\"url(#" << r.marker_id << ")\"/>";
  }
  out << "\n</g>";
  for (size_t i = 0; i < real; ++i) {
    const Node& n = nodes[i];
    const int64_t y = node_y(n);
    out << "\n<g class=\"" << n.classes << "\" data-value=\"";
    out.esc(n.value) << "\"";
    if (n.kind == Kind::Op) {
      out << " data-values=\"";
      out.esc(n.values) << "\"";
    }
    out << "><title>";
    out.esc(n.title) << "</title><rect x=\"" << (n.x - kNodeWidth / 2.0) << "\" y=\"" << y << "\" width=\""
                     << int64_t{kNodeWidth} << "\" height=\"" << int64_t{kNodeHeight} << "\" rx=\"";
    if (n.kind != Kind::Op) out << kNodeHeight / 2.0;
    else out << "5";
    out << "\"/><text x=\"" << n.x << "\" y=\"" << (y + 15) << "\" class=\"l1\">";
    out.esc(n.label0) << "</text><text x=\"" << n.x << "\" y=\"" << (y + 30) << "\" class=\"l2\">";
    out.esc(n.label1) << "</text></g>";
  }
  out << "\n</svg>";
  return Picture{out.take(), b.left, b.total};
}

}  // namespace fastdyn::codegen::picture
