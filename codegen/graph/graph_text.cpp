// codegen/graph/graph_text.cpp — the text form of the graph IR (print_graph / parse_graph).
//
// Grammar. One construct per line; leading blanks are ignored, and so are blank lines and
// everything from '#' to the end of a line (outside strings):
//
//   graph   := header-line node-line* return-line
//   header  := 'graph' '(' [decl {',' decl}] ')' ':'
//   node    := [decl {',' decl} '='] OPNAME '(' [arg {',' arg}] ')'
//   return  := 'return' '(' [VALUE {',' VALUE}] ')'
//   decl    := VALUE ':' meta                      -- defines a value
//   meta    := DTYPE '[' [INT {',' INT}] ']'       -- sizes
//                    '{' [INT {',' INT}] '}'       -- strides
//                    ['+' INT]                     -- storage offset, printed when non-zero
//                    ['@' DEVICE]                  -- device, printed when not cpu ("@cuda:0")
//                    ['requires_grad']             -- printed when set
//                    ['sym' '[' EXPR {',' EXPR} ']' '{' EXPR {',' EXPR} '}']
//                                                  -- symbolic sizes and strides, when symbolic
//   EXPR    := term {'+' term}, term := factor {'*' factor}, factor := INT | 's' INT
//   symbols := 'symbols' '(' SYM {',' SYM} ')'     -- after the header, when the graph has any:
//   SYM     := 's' INT '=' VALUE '[' INT ']' ['pinned'] ['same' SYMBOL]   (input value, dim)
//   arg     := VALUE                               -- Arg::Value
//            | '[' VALUE-or-None {',' ...} ']'     -- Arg::ValueList; None = ValueId -1, the
//                                                     absent entries of a Tensor?[] (index.Tensor)
//            | 'Tensor[]'                          -- an empty Arg::ValueList
//            | '[' [INT {',' INT}] ']'             -- Arg::IntList ("[]" is the empty IntList)
//            | 'None' | 'True' | 'False'
//            | INT                                 -- Arg::Int: -?[0-9]+
//            | DOUBLE                              -- Arg::Double: always has '.', 'e', or is
//                                                     inf / -inf / nan; shortest text of 15-17
//                                                     significant digits that reads back exactly
//            | 'torch.' DTYPENAME                  -- Arg::DType (torch.float32, torch.int64...)
//            | 'device' '(' STRING ')'             -- Arg::Device (device("cuda:0"))
//            | STRING                              -- Arg::String: "..." with \" \\ \n \t \r \xHH
//   VALUE   := '%' [0-9]+ (the ValueId itself), OPNAME := aten::name[.overload] (an ops.def row),
//   DTYPE   := a short name of kDTypes below (f32, f64, f16, bf16, i64, i32, i16, i8, u8, b8...).
//
// Every value is defined exactly once (graph input or node output) before it is used; ValueIds
// must cover 0..N-1 without gaps. parse_graph(print_graph(g)) == g for every graph that obeys
// this. Parse errors throw UserError("parse_graph: line L: <what> at '<token>'").
#include "codegen/graph/graph.h"
#include "runtime/errors.h"

#include <c10/util/Exception.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fastdyn::codegen {
namespace {

// ---- dtype names --------------------------------------------------------------------------

struct DTypeName {
  c10::ScalarType type;
  const char* short_name;  // in tensor metadata: f32[4]{1}
  const char* torch_name;  // as an argument: torch.float32
};

constexpr DTypeName kDTypes[] = {
    {c10::ScalarType::Float, "f32", "torch.float32"},
    {c10::ScalarType::Double, "f64", "torch.float64"},
    {c10::ScalarType::Half, "f16", "torch.float16"},
    {c10::ScalarType::BFloat16, "bf16", "torch.bfloat16"},
    {c10::ScalarType::Long, "i64", "torch.int64"},
    {c10::ScalarType::Int, "i32", "torch.int32"},
    {c10::ScalarType::Short, "i16", "torch.int16"},
    {c10::ScalarType::Char, "i8", "torch.int8"},
    {c10::ScalarType::Byte, "u8", "torch.uint8"},
    {c10::ScalarType::UInt16, "u16", "torch.uint16"},
    {c10::ScalarType::UInt32, "u32", "torch.uint32"},
    {c10::ScalarType::UInt64, "u64", "torch.uint64"},
    {c10::ScalarType::Bool, "b8", "torch.bool"},
    {c10::ScalarType::ComplexHalf, "c32", "torch.complex32"},
    {c10::ScalarType::ComplexFloat, "c64", "torch.complex64"},
    {c10::ScalarType::ComplexDouble, "c128", "torch.complex128"},
    {c10::ScalarType::Float8_e5m2, "f8e5m2", "torch.float8_e5m2"},
    {c10::ScalarType::Float8_e4m3fn, "f8e4m3fn", "torch.float8_e4m3fn"},
    {c10::ScalarType::Float8_e5m2fnuz, "f8e5m2fnuz", "torch.float8_e5m2fnuz"},
    {c10::ScalarType::Float8_e4m3fnuz, "f8e4m3fnuz", "torch.float8_e4m3fnuz"},
};

const DTypeName* find_dtype(c10::ScalarType t) {
  for (const auto& d : kDTypes)
    if (d.type == t) return &d;
  return nullptr;
}

// NB: a dtype outside the table prints under c10's own name, which parse_graph then rejects:
// printing is also used for error messages and must not throw.
std::string dtype_short(c10::ScalarType t) {
  const DTypeName* d = find_dtype(t);
  return d ? d->short_name : c10::toString(t);
}
std::string dtype_torch(c10::ScalarType t) {
  const DTypeName* d = find_dtype(t);
  return d ? d->torch_name : std::string("torch.") + c10::toString(t);
}

// ---- printing -----------------------------------------------------------------------------

void print_ints(std::string& out, const std::vector<int64_t>& v, char open, char close) {
  out += open;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i]);
  }
  out += close;
}

std::string format_double(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // The shortest of 15..17 significant digits that reads back to the same double: goldens stay
  // readable (0.1, not 0.10000000000000001) and the round trip stays exact.
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // keep it apart from an Int
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += static_cast<char>(c);
        } else {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        }
    }
  }
  return out + "\"";
}

void print_meta(std::string& out, const TensorMeta& m) {
  out += dtype_short(m.dtype);
  print_ints(out, m.sizes, '[', ']');
  print_ints(out, m.strides, '{', '}');
  if (m.storage_offset != 0) out += "+" + std::to_string(m.storage_offset);
  if (m.device.type() != c10::DeviceType::CPU || m.device.has_index()) out += "@" + m.device.str();
  if (m.requires_grad) out += " requires_grad";
  if (m.symbolic()) {
    auto exprs = [&](const std::vector<shapes::SizeExpr>& v, char open, char close) {
      out += open;
      for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i].str();
      out += close;
    };
    out += " sym";
    exprs(m.sym_sizes, '[', ']');
    exprs(m.sym_strides, '{', '}');
    if (!m.sym_offset.empty()) exprs(m.sym_offset, '<', '>');
  }
}

void print_decl(std::string& out, const Graph& g, ValueId v) {
  out += "%" + std::to_string(v) + ": ";
  if (v >= 0 && static_cast<size_t>(v) < g.values.size())
    print_meta(out, g.values[static_cast<size_t>(v)]);
  else
    out += "<undefined>";
}

void print_value_ref(std::string& out, ValueId v) { out += v < 0 ? std::string("None") : "%" + std::to_string(v); }

void print_arg(std::string& out, const Arg& a) {
  switch (a.kind) {
    case Arg::Kind::Value: out += "%" + std::to_string(a.value); return;
    case Arg::Kind::ValueList:
      if (a.values.empty()) {
        out += "Tensor[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < a.values.size(); ++i) {
        if (i) out += ", ";
        print_value_ref(out, a.values[i]);
      }
      out += ']';
      return;
    case Arg::Kind::None: out += "None"; return;
    case Arg::Kind::Int: out += a.sym_ints.size() == 1 ? a.sym_ints[0].str() : std::to_string(a.i); return;
    case Arg::Kind::Double: out += format_double(a.d); return;
    case Arg::Kind::Bool: out += a.b ? "True" : "False"; return;
    case Arg::Kind::IntList:
      if (a.sym_ints.size() == a.ints.size() && !a.ints.empty()) {  // over size symbols
        out += '[';
        for (size_t i = 0; i < a.sym_ints.size(); ++i) out += (i ? ", " : "") + a.sym_ints[i].str();
        out += ']';
        return;
      }
      print_ints(out, a.ints, '[', ']');
      return;
    case Arg::Kind::DType: out += dtype_torch(a.dtype); return;
    case Arg::Kind::Device: out += "device(" + quote(a.device.str()) + ")"; return;
    case Arg::Kind::String: out += quote(a.str); return;
  }
}

void print_node_into(std::string& out, const Graph& g, const Node& n) {
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (i) out += ", ";
    print_decl(out, g, n.outputs[i]);
  }
  if (!n.outputs.empty()) out += " = ";
  out += static_cast<size_t>(n.op) < static_cast<size_t>(OpId::kCount) ? qualified_name(n.op) : "<bad op>";
  out += '(';
  for (size_t i = 0; i < n.args.size(); ++i) {
    if (i) out += ", ";
    print_arg(out, n.args[i]);
  }
  out += ')';
}

// ---- lexing -------------------------------------------------------------------------------

struct Token {
  enum class Kind : uint8_t { Value, Ident, Int, Double, String, Punct, End };
  Kind kind = Kind::End;
  std::string text;  // as written (for messages); String: the decoded contents
  int64_t i = 0;     // Value, Int
  double d = 0.0;    // Double
};

[[noreturn]] void fail_at(int line, const std::string& what, const std::string& found) {
  throw UserError("parse_graph: line " + std::to_string(line) + ": " + what + " at '" + found + "'");
}

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int64_t to_int(const std::string& text, int line) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') fail_at(line, "integer out of range", text);
  return static_cast<int64_t>(v);
}

int hex_digit(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Splits one line into tokens. Identifiers may contain '.' and, when followed by another name
// character, ':' — so "aten::add.Tensor", "torch.float32" and "cuda:0" are single tokens while
// "%0: f32" and "...):" are not.
std::vector<Token> lex_line(std::string_view s, int line) {
  std::vector<Token> toks;
  size_t p = 0;
  while (p < s.size()) {
    char c = s[p];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++p;
      continue;
    }
    if (c == '#') break;
    Token t;
    size_t start = p;
    if (c == '%') {
      ++p;
      while (p < s.size() && is_digit(s[p])) ++p;
      t.kind = Token::Kind::Value;
      t.text = std::string(s.substr(start, p - start));
      if (p == start + 1) fail_at(line, "expected a value number after '%'", t.text);
      t.i = to_int(t.text.substr(1), line);
    } else if (is_ident_start(c)) {
      while (p < s.size() &&
             (is_ident_char(s[p]) || (s[p] == ':' && p + 1 < s.size() && (is_ident_char(s[p + 1]) || s[p + 1] == ':'))))
        ++p;
      t.text = std::string(s.substr(start, p - start));
      if (t.text == "inf" || t.text == "nan") {
        t.kind = Token::Kind::Double;
        t.d = t.text == "inf" ? HUGE_VAL : std::nan("");
      } else {
        t.kind = Token::Kind::Ident;
      }
    } else if (is_digit(c) || (c == '-' && p + 1 < s.size() && (is_digit(s[p + 1]) || s[p + 1] == 'i'))) {
      if (s.substr(p, 4) == "-inf") {
        p += 4;
        t.kind = Token::Kind::Double;
        t.d = -HUGE_VAL;
        t.text = "-inf";
      } else {
        bool is_double = false;
        ++p;
        while (p < s.size()) {
          char q = s[p];
          if (is_digit(q)) {
            ++p;
          } else if (q == '.' || q == 'e' || q == 'E') {
            is_double = true;
            ++p;
            if ((q == 'e' || q == 'E') && p < s.size() && (s[p] == '-' || s[p] == '+')) ++p;
          } else {
            break;
          }
        }
        t.text = std::string(s.substr(start, p - start));
        if (is_double) {
          char* end = nullptr;
          t.d = std::strtod(t.text.c_str(), &end);
          if (*end != '\0') fail_at(line, "malformed number", t.text);
          t.kind = Token::Kind::Double;
        } else {
          t.kind = Token::Kind::Int;
          t.i = to_int(t.text, line);
        }
      }
    } else if (c == '"') {
      ++p;
      std::string value;
      bool closed = false;
      while (p < s.size()) {
        char q = s[p++];
        if (q == '"') {
          closed = true;
          break;
        }
        if (q != '\\') {
          value += q;
          continue;
        }
        if (p >= s.size()) break;
        char e = s[p++];
        switch (e) {
          case '"': value += '"'; break;
          case '\\': value += '\\'; break;
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case 'r': value += '\r'; break;
          case 'x': {
            int hi = p < s.size() ? hex_digit(s[p]) : -1;
            int lo = p + 1 < s.size() ? hex_digit(s[p + 1]) : -1;
            if (hi < 0 || lo < 0) fail_at(line, "bad \\x escape in string", std::string(s.substr(start, p - start)));
            value += static_cast<char>(hi * 16 + lo);
            p += 2;
            break;
          }
          default: fail_at(line, "unknown escape in string", std::string("\\") + e);
        }
      }
      if (!closed) fail_at(line, "unterminated string", std::string(s.substr(start)));
      t.kind = Token::Kind::String;
      t.text = std::move(value);
    } else if (std::strchr("()[]{},:=+@*<>", c) != nullptr || (c == '-' && (p + 1 >= s.size() || s[p + 1] == ' '))) {
      ++p;
      t.kind = Token::Kind::Punct;
      t.text = std::string(1, c);
    } else {
      fail_at(line, "unexpected character", std::string(1, c));
    }
    toks.push_back(std::move(t));
  }
  return toks;
}

// ---- parsing ------------------------------------------------------------------------------

class Parser {
 public:
  explicit Parser(std::string_view text) {
    int line_no = 0;
    size_t p = 0;
    while (p <= text.size()) {
      size_t nl = text.find('\n', p);
      if (nl == std::string_view::npos) nl = text.size();
      ++line_no;
      std::vector<Token> toks = lex_line(text.substr(p, nl - p), line_no);
      if (!toks.empty()) {
        lines_.push_back({line_no, std::move(toks)});
        last_line_ = line_no;
      }
      p = nl + 1;
    }
  }

  Graph parse() {
    if (lines_.empty()) fail_at(1, "expected 'graph('", "end of input");
    size_t li = 0;
    start_line(li++);
    expect_ident("graph");
    expect_punct("(");
    if (!accept_punct(")")) {
      do g_.inputs.push_back(parse_decl());
      while (accept_punct(","));
      expect_punct(")");
    }
    expect_punct(":");
    expect_end();
    commit_defs();
    if (li < lines_.size()) {
      start_line(li);
      if (peek().kind == Token::Kind::Ident && peek().text == "symbols") {
        parse_symbols();
        ++li;
      }
    }

    bool returned = false;
    for (; li < lines_.size(); ++li) {
      start_line(li);
      if (returned) fail("expected end of graph after 'return'");
      if (peek().kind == Token::Kind::Ident && peek().text == "return") {
        parse_return();
        returned = true;
      } else {
        parse_node();
      }
    }
    if (!returned) fail_at(last_line_, "expected 'return (...)' at the end of the graph", "end of input");
    for (size_t v = 0; v < defined_.size(); ++v)
      if (!defined_[v]) fail_at(last_line_, "value is never defined", "%" + std::to_string(v));
    return std::move(g_);
  }

 private:
  struct Line {
    int number;
    std::vector<Token> toks;
  };

  void start_line(size_t li) {
    line_ = &lines_[li];
    pos_ = 0;
  }
  const Token& peek() const {
    static const Token kEnd{Token::Kind::End, "end of line"};
    return pos_ < line_->toks.size() ? line_->toks[pos_] : kEnd;
  }
  const Token& next() {
    const Token& t = peek();
    if (pos_ < line_->toks.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(line_->number, what, peek().text); }
  bool at_punct(const char* p) const { return peek().kind == Token::Kind::Punct && peek().text == p; }
  bool accept_punct(const char* p) {
    if (!at_punct(p)) return false;
    ++pos_;
    return true;
  }
  void expect_punct(const char* p) {
    if (!accept_punct(p)) fail(std::string("expected '") + p + "'");
  }
  void expect_ident(const char* word) {
    if (peek().kind != Token::Kind::Ident || peek().text != word) fail(std::string("expected '") + word + "'");
    ++pos_;
  }
  void expect_end() {
    if (peek().kind != Token::Kind::End) fail("expected end of line");
  }
  int64_t expect_int() {
    if (peek().kind != Token::Kind::Int) fail("expected an integer");
    return next().i;
  }
  ValueId expect_value_token() {
    if (peek().kind != Token::Kind::Value) fail("expected a value (%N)");
    int64_t v = peek().i;
    if (v > INT32_MAX) fail("value number too large");
    ++pos_;
    return static_cast<ValueId>(v);
  }

  // A use must name a value defined on an earlier line (or in the header).
  ValueId parse_use() {
    std::string text = peek().text;
    ValueId v = expect_value_token();
    if (static_cast<size_t>(v) >= defined_.size() || !defined_[static_cast<size_t>(v)])
      fail_at(line_->number, "use of undefined value", text);
    return v;
  }

  std::vector<int64_t> parse_int_list(const char* open, const char* close) {
    expect_punct(open);
    std::vector<int64_t> v;
    if (accept_punct(close)) return v;
    do v.push_back(expect_int());
    while (accept_punct(","));
    expect_punct(close);
    return v;
  }

  c10::Device parse_device_text(const std::string& text) {
    try {
      return c10::Device(text);
    } catch (const c10::Error&) {
      fail_at(line_->number, "bad device", text);
    }
  }

  TensorMeta parse_meta() {
    TensorMeta m;
    if (peek().kind != Token::Kind::Ident) fail("expected a dtype (f32, i64, ...)");
    const DTypeName* dt = nullptr;
    for (const auto& d : kDTypes)
      if (peek().text == d.short_name) dt = &d;
    if (dt == nullptr) fail("unknown dtype");
    ++pos_;
    m.dtype = dt->type;
    m.sizes = parse_int_list("[", "]");
    m.strides = parse_int_list("{", "}");
    if (m.strides.size() != m.sizes.size()) {
      std::string strides;
      print_ints(strides, m.strides, '{', '}');
      fail_at(line_->number, "strides differ in rank from sizes", strides);
    }
    if (accept_punct("+")) m.storage_offset = expect_int();
    if (accept_punct("@")) {
      if (peek().kind != Token::Kind::Ident) fail("expected a device after '@'");
      m.device = parse_device_text(next().text);
    }
    if (peek().kind == Token::Kind::Ident && peek().text == "requires_grad") {
      ++pos_;
      m.requires_grad = true;
    }
    if (peek().kind == Token::Kind::Ident && peek().text == "sym") {
      ++pos_;
      m.sym_sizes = parse_expr_list("[", "]");
      m.sym_strides = parse_expr_list("{", "}");
      if (m.sym_sizes.size() != m.sizes.size() || m.sym_strides.size() != m.sizes.size())
        fail("symbolic sizes or strides differ in rank from sizes");
      if (peek().kind == Token::Kind::Punct && peek().text == "<") {
        m.sym_offset = parse_expr_list("<", ">");
        if (m.sym_offset.size() != 1) fail("a symbolic storage offset is one expression");
      }
    }
    return m;
  }

  // s<k> as a token: an identifier "s" followed by digits.
  std::optional<shapes::SymbolId> accept_symbol() {
    const Token& t = peek();
    if (t.kind != Token::Kind::Ident || t.text.size() < 2 || t.text[0] != 's') return std::nullopt;
    for (size_t i = 1; i < t.text.size(); ++i)
      if (t.text[i] < '0' || t.text[i] > '9') return std::nullopt;
    ++pos_;
    return static_cast<shapes::SymbolId>(std::stol(t.text.substr(1)));
  }

  shapes::SizeExpr parse_expr() {
    shapes::SizeExpr sum;
    bool negate = false;
    do {
      shapes::SizeExpr term(negate ? -1 : 1);
      do {
        if (auto s = accept_symbol()) term = term * shapes::SizeExpr::symbol(*s);
        else term = term * shapes::SizeExpr(expect_int());
      } while (accept_punct("*"));
      sum = sum + term;
      negate = at_punct("-");
    } while (accept_punct("+") || accept_punct("-"));
    return sum;
  }

  // An expression's value at the sizes of the graph's inputs (the symbols line came first).
  int64_t value_at_hints(const shapes::SizeExpr& e) {
    std::vector<int64_t> h;
    for (const SymbolSource& src : g_.symbols) {
      const TensorMeta& m = g_.values.at(static_cast<size_t>(g_.inputs.at(static_cast<size_t>(src.input))));
      h.push_back(m.sizes.at(static_cast<size_t>(src.dim)));
    }
    const std::optional<int64_t> v = e.evaluate(h);
    if (!v) fail("an expression over unknown size symbols");
    return *v;
  }

  std::vector<shapes::SizeExpr> parse_expr_list(const char* open, const char* close) {
    expect_punct(open);
    std::vector<shapes::SizeExpr> v;
    if (accept_punct(close)) return v;
    do v.push_back(parse_expr());
    while (accept_punct(","));
    expect_punct(close);
    return v;
  }

  void parse_symbols() {
    expect_ident("symbols");
    expect_punct("(");
    do {
      auto s = accept_symbol();
      if (!s || *s != static_cast<shapes::SymbolId>(g_.symbols.size())) fail("expected the next symbol s" + std::to_string(g_.symbols.size()));
      expect_punct("=");
      SymbolSource src;
      const ValueId v = parse_use();
      for (size_t i = 0; i < g_.inputs.size(); ++i)
        if (g_.inputs[i] == v) src.input = static_cast<int32_t>(i);
      if (src.input < 0) fail("a symbol's source must be a graph input");
      expect_punct("[");
      src.dim = static_cast<int32_t>(expect_int());
      expect_punct("]");
      if (peek().kind == Token::Kind::Ident && peek().text == "pinned") {
        ++pos_;
        src.pinned = true;
      }
      if (peek().kind == Token::Kind::Ident && peek().text == "same") {
        ++pos_;
        auto t = accept_symbol();
        if (!t || *t < 0 || static_cast<size_t>(*t) >= g_.symbols.size()) fail("'same' names an earlier symbol");
        src.same_as = *t;
      }
      g_.symbols.push_back(src);
    } while (accept_punct(","));
    expect_punct(")");
    expect_end();
  }

  ValueId parse_decl() {
    std::string text = peek().text;
    ValueId v = expect_value_token();
    if (static_cast<size_t>(v) < defined_.size() && defined_[static_cast<size_t>(v)])
      fail_at(line_->number, "value defined twice", text);
    expect_punct(":");
    TensorMeta m = parse_meta();
    if (static_cast<size_t>(v) >= g_.values.size()) {
      g_.values.resize(static_cast<size_t>(v) + 1);
      defined_.resize(static_cast<size_t>(v) + 1, false);
    }
    g_.values[static_cast<size_t>(v)] = std::move(m);
    pending_defs_.push_back(v);
    return v;
  }

  // Definitions become visible at the end of their line: a node cannot consume its own outputs.
  void commit_defs() {
    for (ValueId v : pending_defs_) defined_[static_cast<size_t>(v)] = true;
    pending_defs_.clear();
  }

  Arg parse_list_arg() {
    expect_punct("[");
    if (accept_punct("]")) return Arg::of_ints({});
    bool tensors = peek().kind == Token::Kind::Value || (peek().kind == Token::Kind::Ident && peek().text == "None");
    if (!tensors) {
      std::vector<shapes::SizeExpr> exprs;
      bool symbolic = false;
      do {
        exprs.push_back(parse_expr());
        symbolic = symbolic || !exprs.back().is_constant();
      } while (accept_punct(","));
      expect_punct("]");
      std::vector<int64_t> ints;
      for (const shapes::SizeExpr& e : exprs) ints.push_back(value_at_hints(e));
      Arg a = Arg::of_ints(std::move(ints));
      if (symbolic) a.sym_ints = std::move(exprs);
      return a;
    }
    std::vector<ValueId> values;
    do {
      if (peek().kind == Token::Kind::Ident && peek().text == "None") {
        ++pos_;
        values.push_back(-1);
      } else {
        values.push_back(parse_use());
      }
    } while (accept_punct(","));
    expect_punct("]");
    return Arg::of_values(std::move(values));
  }

  Arg parse_arg() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::Value: return Arg::of_value(parse_use());
      case Token::Kind::Int:
      case Token::Kind::Ident:
        if (t.kind == Token::Kind::Int ||
            (t.text.size() > 1 && t.text[0] == 's' && std::isdigit(static_cast<unsigned char>(t.text[1])))) {
          shapes::SizeExpr e = parse_expr();  // an int, maybe over size symbols
          Arg a = Arg::of_int(value_at_hints(e));
          if (!e.is_constant()) a.sym_ints = {std::move(e)};
          return a;
        }
        break;
      case Token::Kind::Double: return Arg::of_double(next().d);
      case Token::Kind::String: return Arg::of_string(next().text);
      case Token::Kind::Punct:
        if (t.text == "[") return parse_list_arg();
        fail("expected an argument");
      case Token::Kind::End: fail("expected an argument");
    }
    std::string word = t.text;
    if (word == "None") return ++pos_, Arg::none();
    if (word == "True") return ++pos_, Arg::of_bool(true);
    if (word == "False") return ++pos_, Arg::of_bool(false);
    if (word == "Tensor") {
      ++pos_;
      expect_punct("[");
      expect_punct("]");
      return Arg::of_values({});
    }
    if (word == "device") {
      ++pos_;
      expect_punct("(");
      if (peek().kind != Token::Kind::String) fail("expected a device string");
      c10::Device dev = parse_device_text(next().text);
      expect_punct(")");
      return Arg::of_device(dev);
    }
    for (const auto& d : kDTypes)
      if (word == d.torch_name) return ++pos_, Arg::of_dtype(d.type);
    fail("expected an argument");
  }

  void parse_node() {
    Node n;
    if (peek().kind == Token::Kind::Value) {
      do n.outputs.push_back(parse_decl());
      while (accept_punct(","));
      expect_punct("=");
    }
    if (peek().kind != Token::Kind::Ident) fail("expected an op name (aten::name.overload)");
    std::optional<OpId> op = op_by_qualified_name(peek().text);
    if (!op) fail("unknown op");
    ++pos_;
    n.op = *op;
    expect_punct("(");
    if (!accept_punct(")")) {
      do n.args.push_back(parse_arg());
      while (accept_punct(","));
      expect_punct(")");
    }
    expect_end();
    commit_defs();
    g_.nodes.push_back(std::move(n));
  }

  void parse_return() {
    expect_ident("return");
    expect_punct("(");
    if (!accept_punct(")")) {
      do g_.outputs.push_back(parse_use());
      while (accept_punct(","));
      expect_punct(")");
    }
    expect_end();
  }

  std::vector<Line> lines_;
  int last_line_ = 1;
  const Line* line_ = nullptr;
  size_t pos_ = 0;
  Graph g_;
  std::vector<bool> defined_;
  std::vector<ValueId> pending_defs_;
};

}  // namespace

std::string print_node(const Graph& g, const Node& n) {
  std::string out;
  print_node_into(out, g, n);
  return out;
}

std::string print_graph(const Graph& g) {
  std::string out = "graph(";
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (i) out += ", ";
    print_decl(out, g, g.inputs[i]);
  }
  out += "):\n";
  if (!g.symbols.empty()) {
    out += "  symbols(";
    for (size_t k = 0; k < g.symbols.size(); ++k) {
      const SymbolSource& s = g.symbols[k];
      out += (k ? ", s" : "s") + std::to_string(k) + " = %" +
             std::to_string(s.input >= 0 && static_cast<size_t>(s.input) < g.inputs.size() ? g.inputs[static_cast<size_t>(s.input)] : -1) +
             "[" + std::to_string(s.dim) + "]" + (s.pinned ? " pinned" : "") +
             (s.same_as >= 0 ? " same s" + std::to_string(s.same_as) : "");
    }
    out += ")\n";
  }
  for (const Node& n : g.nodes) {
    out += "  ";
    print_node_into(out, g, n);
    out += '\n';
  }
  out += "  return (";
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    if (i) out += ", ";
    print_value_ref(out, g.outputs[i]);
  }
  out += ")\n";
  return out;
}

Graph parse_graph(std::string_view text) { return Parser(text).parse(); }

}  // namespace fastdyn::codegen
