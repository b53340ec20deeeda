// GoogleTest for symbolic/: bytecode decoding and the assembler, against an embedded CPython
// (the same version fastdyn is built for; python_env.cpp starts it). No torch needed.
#include <Python.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "symbolic/assembler.h"
#include "symbolic/bytecode.h"
#include "symbolic/opcodes.h"

using namespace fastdyn::symbolic;

namespace {

// Compiles `src` and returns a new reference to the code of the function named `name`.
PyCodeObject* function_code(const char* src, const char* name) {
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyObject* r = PyRun_String(src, Py_file_input, globals, globals);
  EXPECT_NE(r, nullptr);
  Py_XDECREF(r);
  PyObject* fn = PyDict_GetItemString(globals, name);
  PyObject* code = PyObject_GetAttrString(fn, "__code__");
  Py_DECREF(globals);
  return reinterpret_cast<PyCodeObject*>(code);
}

std::vector<std::string> names(const std::vector<Instruction>& ins) {
  std::vector<std::string> out;
  for (const Instruction& i : ins) out.push_back(opcode_info(i.opcode).name);
  return out;
}

}  // namespace

TEST(Bytecode, DecodeSkipsCachesAndKeepsOrder) {
  PyCodeObject* code = function_code("def f(x, y):\n    return x + y\n", "f");
  const auto ins = decode(code);
  const auto n = names(ins);
  ASSERT_GE(n.size(), 4u);
  EXPECT_EQ(n.front(), "RESUME");
  EXPECT_EQ(n.back(), "RETURN_VALUE");
  // BINARY_OP has one inline cache entry: the next instruction starts two units later.
  for (size_t i = 0; i + 1 < ins.size(); ++i) {
    if (n[i] == "BINARY_OP") {
      EXPECT_EQ(ins[i].next, ins[i].index + 2);
      EXPECT_EQ(ins[i + 1].index, ins[i].next);
      EXPECT_STREQ(binary_op_symbol(ins[i].arg), "+");
    }
  }
  Py_DECREF(code);
}

TEST(Bytecode, DecodeFoldsExtendedArg) {
  // 300 locals force LOAD_FAST with an argument above 255.
  std::string src = "def f():\n";
  for (int i = 0; i < 300; ++i) src += "    v" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  src += "    return v299\n";
  PyCodeObject* code = function_code(src.c_str(), "f");
  const auto ins = decode(code);
  bool found = false;
  for (const Instruction& i : ins)
    if (std::string(opcode_info(i.opcode).name).rfind("LOAD_FAST", 0) == 0 && i.arg == 299) {
      found = true;
      EXPECT_LT(i.start, i.index);  // an EXTENDED_ARG prefix precedes it
    }
  EXPECT_TRUE(found);
  for (const Instruction& i : ins) EXPECT_NE(i.opcode, op::EXTENDED_ARG);
  Py_DECREF(code);
}

TEST(Bytecode, LinesFollowTheSource) {
  PyCodeObject* code = function_code("def f(x):\n    y = x * 2\n    return y\n", "f");
  const auto ins = decode(code);
  const int first = code->co_firstlineno;
  EXPECT_EQ(ins.back().line, first + 2);
  bool saw_mul_line = false;
  for (const Instruction& i : ins)
    if (i.opcode == op::BINARY_OP) saw_mul_line = i.line == first + 1;
  EXPECT_TRUE(saw_mul_line);
  Py_DECREF(code);
}

// decode() reads lines in one pass over co_lines(); they must be PyCode_Addr2Line's, instruction
// by instruction, also where lines jump back (loops), repeat, are missing (no-line units) and where
// EXTENDED_ARG and inline caches sit between instructions.
TEST(Bytecode, LinesAreAddr2LinesEverywhere) {
  std::string src =
      "def f(x, *a, **k):\n"
      "    total = 0\n"
      "    for i in range(x):\n"
      "        if (i % 3 ==\n"
      "                0):\n"
      "            total += i\n"
      "        else:\n"
      "            total -= (i *\n"
      "                      2)\n"
      "    try:\n"
      "        total = total // x\n"
      "    except ZeroDivisionError:\n"
      "        pass\n"
      "    g = lambda y: y + total\n"
      "    return [g(j) for j in a] + list(k)\n"
      "def big():\n    v = 0\n";
  for (int i = 0; i < 300; ++i) src += "    v = v + " + std::to_string(i) + "\n";  // EXTENDED_ARG jumps
  src += "    return v\n";
  for (const char* name : {"f", "big"}) {
    PyCodeObject* code = function_code(src.c_str(), name);
    const auto ins = decode(code);
    ASSERT_FALSE(ins.empty());
    for (const Instruction& i : ins) EXPECT_EQ(i.line, PyCode_Addr2Line(code, i.index * 2)) << name << " @" << i.index;
    Py_DECREF(code);
  }
}

// The lines decode() reads from the location table match PyCode_Addr2Line for every instruction of
// every code object (nested ones included) in a few standard-library modules: long and short
// forms, lines going back (loops, comprehensions), no-line entries, EXTENDED_ARG.
TEST(Bytecode, LinesFromTheLocationTableMatchAddr2LineAcrossTheStandardLibrary) {
  size_t checked = 0;
  std::vector<PyObject*> todo;
  for (const char* module : {"argparse", "inspect", "dataclasses", "json.decoder", "asyncio.base_events", "typing"}) {
    PyObject* m = PyImport_ImportModule(module);
    ASSERT_NE(m, nullptr) << module;
    PyObject* file = PyObject_GetAttrString(m, "__file__");
    PyObject* io = PyImport_ImportModule("io");
    PyObject* text = PyObject_CallMethod(io, "open_code", "O", file);
    PyObject* src = text ? PyObject_CallMethod(text, "read", nullptr) : nullptr;
    ASSERT_NE(src, nullptr) << module;
    PyObject* builtins = PyEval_GetBuiltins();
    PyObject* compiled = PyObject_CallFunction(PyDict_GetItemString(builtins, "compile"), "OOs", src, file, "exec");
    ASSERT_NE(compiled, nullptr) << module;
    todo.push_back(compiled);
    for (PyObject* o : {src, text, io, file, m}) Py_XDECREF(o);
  }
  while (!todo.empty()) {
    auto* code = reinterpret_cast<PyCodeObject*>(todo.back());
    todo.pop_back();
    const int n_units = static_cast<int>(PyBytes_GET_SIZE(code->co_linetable) ? Py_SIZE(code) : 0);
    const std::vector<int> lines = unit_lines(code, n_units);
    ASSERT_EQ(lines.size(), static_cast<size_t>(n_units)) << "the table did not parse: " << PyUnicode_AsUTF8(code->co_qualname);
    for (int u = 0; u < n_units; ++u) {
      ASSERT_EQ(lines[static_cast<size_t>(u)], PyCode_Addr2Line(code, u * 2)) << PyUnicode_AsUTF8(code->co_qualname) << " @" << u;
      ++checked;
    }
    for (const Instruction& i : decode(code)) ASSERT_EQ(i.line, PyCode_Addr2Line(code, i.index * 2));
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(code->co_consts); ++k)
      if (PyObject* c = PyTuple_GET_ITEM(code->co_consts, k); PyCode_Check(c)) todo.push_back(Py_NewRef(c));
    Py_DECREF(code);
  }
  EXPECT_GT(checked, 20000u);
  forget_decoded();
}

// decode() is memoized per code object: a second decode gives the same instructions, the memo holds
// one reference to the code (so no other code object can take its address while it is cached), and
// forget_decoded() gives it back.
TEST(Bytecode, DecodeIsMemoizedAndForgetReleasesTheCode) {
  forget_decoded();
  PyCodeObject* code = function_code("def f(x):\n    for i in range(3):\n        x = x * i\n    return x\n", "f");
  const Py_ssize_t before = Py_REFCNT(code);
  const auto first = decode(code);
  EXPECT_EQ(Py_REFCNT(code), before + 1);
  const auto again = decode(code);
  EXPECT_EQ(Py_REFCNT(code), before + 1) << "a second decode took another reference";
  ASSERT_EQ(first.size(), again.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].index, again[i].index);
    EXPECT_EQ(first[i].opcode, again[i].opcode);
    EXPECT_EQ(first[i].arg, again[i].arg);
    EXPECT_EQ(first[i].line, again[i].line);
    EXPECT_EQ(first[i].next, again[i].next);
  }
  forget_decoded();
  EXPECT_EQ(Py_REFCNT(code), before);
  Py_DECREF(code);
}

TEST(Bytecode, DisassemblyIsRelativeToFirstLine) {
  PyCodeObject* code = function_code("\n\n\ndef f(x):\n    return x\n", "f");
  const std::string text = disassemble(code);
  EXPECT_NE(text.find("L+0"), std::string::npos) << text;
  EXPECT_NE(text.find("L+1"), std::string::npos) << text;
  EXPECT_NE(text.find("LOAD_FAST"), std::string::npos) << text;
  EXPECT_NE(text.find("(x)"), std::string::npos) << text;
  Py_DECREF(code);
}

TEST(Assembler, StackDepthAndLineTable) {
  Assembler as;
  as.emit(op::RESUME, 0, 10);
  as.emit(op::LOAD_CONST, 0, 11);
  as.emit(op::LOAD_CONST, 1, 11);
  as.emit(op::BINARY_OP, 0, 12);
  as.emit(op::RETURN_VALUE, 0, 12);
  EXPECT_EQ(as.max_stack_depth(), 2);
  PyObject* code = as.code_bytes();
  // RESUME, 2x LOAD_CONST, BINARY_OP (+1 cache), RETURN_VALUE = 6 units.
  EXPECT_EQ(PyBytes_GET_SIZE(code), 2 * (5 + opcode_info(op::BINARY_OP).cache_entries));
  Py_DECREF(code);
  PyObject* lines = as.line_table(10);
  EXPECT_GT(PyBytes_GET_SIZE(lines), 0);
  Py_DECREF(lines);
}

TEST(Assembler, ExtendedArgIsEmitted) {
  Assembler as;
  as.emit(op::LOAD_CONST, 0x1234, 1);
  PyObject* code = as.code_bytes();
  const auto* b = reinterpret_cast<const unsigned char*>(PyBytes_AS_STRING(code));
  EXPECT_EQ(b[0], op::EXTENDED_ARG);
  EXPECT_EQ(b[1], 0x12);
  EXPECT_EQ(b[2], op::LOAD_CONST);
  EXPECT_EQ(b[3], 0x34);
  Py_DECREF(code);
}
