// GoogleTest for runtime::GuardTree's aliasing of instances guarded by type (GuardKind::Instance,
// as symbolic/guard_builder.cpp builds it), on plain Python objects in fast-local slots: no torch.
#include <Python.h>
#include <gtest/gtest.h>

#include <string>

#include "runtime/guards.h"

using fastdyn::runtime::AccessKind;
using fastdyn::runtime::Accessor;
using fastdyn::runtime::GuardFailure;
using fastdyn::runtime::GuardFrame;
using fastdyn::runtime::GuardNode;
using fastdyn::runtime::GuardTree;

namespace {

// New reference to a new class `name` (a plain `class name: pass`).
PyObject* new_class(const char* name) {
  return PyObject_CallFunction(reinterpret_cast<PyObject*>(&PyType_Type), "s(){}", name);
}

PyObject* instance_of(PyObject* cls) { return PyObject_CallNoArgs(cls); }

Accessor local(int index, const char* name) {
  Accessor a;
  a.kind = AccessKind::Local;
  a.index = index;
  a.name = name;
  return a;
}

bool check(const GuardTree& tree, PyObject* a, PyObject* b, std::string* why = nullptr) {
  PyObject* slots[2] = {a, b};
  GuardFrame f;
  f.fast_locals = slots;
  GuardFailure failure;
  const bool ok = tree.check(f, &failure);
  if (why) *why = failure.description;
  return ok;
}

}  // namespace

// Two distinct instances at compile time: any two distinct instances of the types pass; the same
// object in both slots, or another type, does not.
TEST(GuardTree, InstancesAreGuardedByTypeAndStayDistinct) {
  PyObject* A = new_class("A");
  PyObject* B = new_class("B");
  PyObject* a = instance_of(A);
  PyObject* b = instance_of(A);
  GuardTree tree;
  const int sa = tree.add_instance(tree.node(nullptr, local(0, "a")), a);
  const int sb = tree.add_instance(tree.node(nullptr, local(1, "b")), b);
  EXPECT_NE(sa, sb);
  PyObject* a2 = instance_of(A);
  PyObject* b2 = instance_of(A);
  EXPECT_TRUE(check(tree, a2, b2));  // new objects of the same class: a hit
  std::string why;
  EXPECT_FALSE(check(tree, a2, a2, &why));
  EXPECT_NE(why.find("now the same object"), std::string::npos) << why;
  PyObject* other = instance_of(B);
  EXPECT_FALSE(check(tree, a2, other, &why));
  EXPECT_NE(why.find("type is"), std::string::npos) << why;
  for (PyObject* o : {a, b, a2, b2, other, A, B}) Py_DECREF(o);
}

// One object reached by two paths at compile time: SameAs ties the second path to the first slot.
TEST(GuardTree, OneInstanceReachedTwiceMustStayOne) {
  PyObject* A = new_class("A");
  PyObject* a = instance_of(A);
  GuardTree tree;
  const int slot = tree.add_instance(tree.node(nullptr, local(0, "a")), a);
  tree.add_same_as(tree.node(nullptr, local(1, "b")), slot);
  PyObject* c = instance_of(A);
  PyObject* d = instance_of(A);
  EXPECT_TRUE(check(tree, c, c));
  std::string why;
  EXPECT_FALSE(check(tree, c, d, &why));
  EXPECT_NE(why.find("is a different object"), std::string::npos) << why;
  const auto lines = tree.describe();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "L['a'] type is A (input 0)");
  EXPECT_EQ(lines[1], "L['b'] is input 0");
  for (PyObject* o : {a, c, d, A}) Py_DECREF(o);
}

// The path that records an object read again (an optimizer step reads `opt.state` once per
// parameter): its node compares the object with itself, so no second check is kept; another path
// to the same slot still gets its own.
TEST(GuardTree, ASameAsOnTheNodeThatRecordsTheSlotIsNotRepeated) {
  PyObject* A = new_class("A");
  PyObject* a = instance_of(A);
  GuardTree tree;
  GuardNode* n = tree.node(nullptr, local(0, "a"));
  const int slot = tree.add_instance(n, a);
  tree.add_same_as(n, slot);
  tree.add_same_as(n, slot);
  tree.add_same_as(tree.node(nullptr, local(1, "b")), slot);
  tree.add_same_as(tree.node(nullptr, local(1, "b")), slot);
  const auto lines = tree.describe();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "L['a'] type is A (input 0)");
  EXPECT_EQ(lines[1], "L['b'] is input 0");
  PyObject* c = instance_of(A);
  PyObject* d = instance_of(A);
  EXPECT_TRUE(check(tree, c, c));
  EXPECT_FALSE(check(tree, c, d));
  for (PyObject* o : {a, c, d, A}) Py_DECREF(o);
}

// TypeAttr: what obj.name resolves to through its class. Absent: neither the class nor the object
// may gain it. Present (a plain class value, not a data descriptor): the class must keep it and
// the object must not shadow it with its own.
TEST(GuardTree, TypeAttrFollowsTheClassAndTheInstanceDict) {
  PyObject* A = new_class("A");
  PyObject* a = instance_of(A);
  PyObject* value = PyLong_FromLong(7);
  ASSERT_EQ(PyObject_SetAttrString(A, "k", value), 0);
  GuardTree tree;
  GuardNode* n = tree.node(nullptr, local(0, "a"));
  tree.add_type_attr(n, "k", value);
  tree.add_type_attr(n, "missing", nullptr);
  std::string why;
  EXPECT_TRUE(check(tree, a, nullptr, &why)) << why;
  PyObject* b = instance_of(A);
  ASSERT_EQ(PyObject_SetAttrString(b, "missing", value), 0);  // the object gains it
  EXPECT_FALSE(check(tree, b, nullptr, &why));
  EXPECT_NE(why.find("own attribute .missing"), std::string::npos) << why;
  PyObject* c = instance_of(A);
  ASSERT_EQ(PyObject_SetAttrString(c, "k", value), 0);  // shadows the class value
  EXPECT_FALSE(check(tree, c, nullptr, &why));
  PyObject* other = PyLong_FromLong(8);
  ASSERT_EQ(PyObject_SetAttrString(A, "k", other), 0);  // the class changes
  EXPECT_FALSE(check(tree, a, nullptr, &why));
  EXPECT_NE(why.find("its class now has .k"), std::string::npos) << why;
  for (PyObject* o : {a, b, c, value, other, A}) Py_DECREF(o);
}

// DictKeys: the same keys in the same order (what an unrolled loop over the dict relied on).
TEST(GuardTree, DictKeysAreCheckedInOrder) {
  PyObject* d = Py_BuildValue("{s:i,s:i}", "a", 1, "b", 2);
  GuardTree tree;
  tree.add_dict_keys(tree.node(nullptr, local(0, "d")), d);
  PyObject* same = Py_BuildValue("{s:i,s:i}", "a", 5, "b", 6);
  PyObject* swapped = PyDict_New();
  PyDict_SetItemString(swapped, "b", same);
  PyDict_SetItemString(swapped, "a", same);
  PyObject* shorter = Py_BuildValue("{s:i}", "a", 1);
  std::string why;
  EXPECT_TRUE(check(tree, same, nullptr, &why)) << why;
  EXPECT_FALSE(check(tree, swapped, nullptr, &why));
  EXPECT_NE(why.find("another order"), std::string::npos) << why;
  EXPECT_FALSE(check(tree, shorter, nullptr));
  for (PyObject* o : {d, same, swapped, shorter}) Py_DECREF(o);
}

// One object reached by two paths where the path traced second is evaluated first (its node was
// made earlier by another guard): whichever comes first records the object, the other must find
// the same one. The SameAs used to read a slot not yet filled and missed on every call.
TEST(GuardTree, SameAsHoldsWhicheverPathIsEvaluatedFirst) {
  PyObject* A = new_class("A");
  PyObject* holder_cls = new_class("Holder");
  PyObject* a = instance_of(A);
  PyObject* holder = instance_of(holder_cls);
  ASSERT_EQ(PyObject_SetAttrString(holder, "x", a), 0);
  GuardTree tree;
  GuardNode* via_holder = tree.node(tree.node(nullptr, local(0, "h")), [] {
    Accessor x;
    x.kind = AccessKind::Attr;
    x.name = "x";
    return x;
  }());
  const int slot = tree.add_instance(tree.node(nullptr, local(1, "a")), a);
  tree.add_same_as(via_holder, slot);  // evaluated before the Instance check that defines the slot
  std::string why;
  EXPECT_TRUE(check(tree, holder, a, &why)) << why;
  PyObject* b = instance_of(A);
  EXPECT_TRUE(check(tree, holder, a, &why)) << why;  // again, with the table reused
  EXPECT_FALSE(check(tree, holder, b, &why));
  EXPECT_NE(why.find("is a different object"), std::string::npos) << why;
  ASSERT_EQ(PyObject_SetAttrString(holder, "x", b), 0);
  EXPECT_TRUE(check(tree, holder, b, &why)) << why;  // a new object on both paths: a hit
  for (PyObject* o : {a, b, holder, holder_cls, A}) Py_DECREF(o);
}

// strict_equal, which Equals guards on snapshots use: types at every level, the sign of zero,
// iteration order, OrderedDict's own order, a dict subclass against its plain-dict snapshot, and
// identity for objects that are not values.
TEST(GuardTree, StrictEqualTellsApartWhatATraceCouldSee) {
  using fastdyn::runtime::strict_equal;
  auto eq = [](const char* a, const char* b) {
    PyObject* globals = PyDict_New();
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyRun_String("import collections\nclass D(dict): pass\nclass K: pass\nk = K()", Py_file_input, globals, globals);
    PyObject* x = PyRun_String(a, Py_eval_input, globals, globals);
    PyObject* y = PyRun_String(b, Py_eval_input, globals, globals);
    EXPECT_TRUE(x && y) << a << " / " << b;
    const bool r = x && y && strict_equal(x, y);
    Py_XDECREF(x);
    Py_XDECREF(y);
    Py_DECREF(globals);
    return r;
  };
  EXPECT_TRUE(eq("{(1, 2): [1.5, 'a'], 3: {4}}", "{(1, 2): [1.5, 'a'], 3: {4}}"));
  EXPECT_FALSE(eq("{True: 'a'}", "{1: 'a'}"));
  EXPECT_FALSE(eq("{1: 'a'}", "{1.0: 'a'}"));
  EXPECT_FALSE(eq("(1, 2)", "(True, 2)"));
  EXPECT_FALSE(eq("[0.0]", "[-0.0]"));
  EXPECT_FALSE(eq("{'a': 1, 'b': 2}", "{'b': 2, 'a': 1}"));
  EXPECT_FALSE(eq("collections.OrderedDict(a=1, b=2)", "(lambda d: (d.move_to_end('a'), d)[1])(collections.OrderedDict(a=1, b=2))"));
  EXPECT_TRUE(eq("D(a=[1])", "{'a': [1]}"));
  EXPECT_FALSE(eq("D(a=[1])", "{'a': [2]}"));
  EXPECT_TRUE(eq("{k: 1}", "{k: 1}"));
  EXPECT_FALSE(eq("K()", "K()"));  // two objects of a class without __eq__ of its own: not one
}

// IdIs of a function: the same object that still has the code and defaults it had.
TEST(GuardTree, AFunctionWithReplacedCodeOrDefaultsIsNotTheSame) {
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyRun_String("def f(x, k=2): return x * k\ndef g(x, k=2): return x + k", Py_file_input, globals, globals);
  PyObject* f = PyDict_GetItemString(globals, "f");
  PyObject* g = PyDict_GetItemString(globals, "g");
  GuardTree tree;
  tree.add_id_is(tree.node(nullptr, local(0, "f")), f);
  std::string why;
  EXPECT_TRUE(check(tree, f, nullptr, &why)) << why;
  PyObject* five = Py_BuildValue("(i)", 5);
  PyObject* old_defaults = PyObject_GetAttrString(f, "__defaults__");
  ASSERT_EQ(PyObject_SetAttrString(f, "__defaults__", five), 0);
  EXPECT_FALSE(check(tree, f, nullptr, &why));
  EXPECT_NE(why.find("__code__ or defaults"), std::string::npos) << why;
  ASSERT_EQ(PyObject_SetAttrString(f, "__defaults__", old_defaults), 0);
  EXPECT_TRUE(check(tree, f, nullptr, &why)) << why;
  PyObject* g_code = PyObject_GetAttrString(g, "__code__");
  ASSERT_EQ(PyObject_SetAttrString(f, "__code__", g_code), 0);
  EXPECT_FALSE(check(tree, f, nullptr, &why));
  for (PyObject* o : {five, old_defaults, g_code, globals}) Py_DECREF(o);
}

// FunctionParts: a closure made anew at every call (a continuation's live nested function) passes
// when it has the code, defaults and globals the trace saw, whatever its identity; another code,
// other defaults, keyword defaults or other globals fail.
TEST(GuardTree, AClosureMadeAnewPassesOnItsPartsNotItsIdentity) {
  PyObject* globals = PyDict_New();
  PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
  PyRun_String("def make(y, k=2):\n"
               "    def inner(x, k=k): return x * y * k\n"
               "    return inner\n"
               "def make_other(y):\n"
               "    def inner(x): return x + y\n"
               "    return inner\n"
               "def make_kw(y):\n"
               "    def inner(x, *, k=2): return x + y\n"
               "    return inner\n",
               Py_file_input, globals, globals);
  auto made = [&](const char* call) { return PyRun_String(call, Py_eval_input, globals, globals); };
  PyObject* first = made("make(1)");
  PyObject* again = made("make(5)");       // a new function object, same code and defaults
  PyObject* other_k = made("make(1, 3)");  // other defaults
  PyObject* other = made("make_other(1)");
  PyObject* kw = made("make_kw(1)");
  ASSERT_TRUE(first && again && other_k && other && kw);
  GuardTree tree;
  tree.add_function_parts(tree.node(nullptr, local(0, "f")), first);
  std::string why;
  EXPECT_TRUE(check(tree, first, nullptr, &why)) << why;
  EXPECT_TRUE(check(tree, again, nullptr, &why)) << why;
  EXPECT_FALSE(check(tree, other_k, nullptr, &why));
  EXPECT_FALSE(check(tree, other, nullptr, &why));
  EXPECT_FALSE(check(tree, kw, nullptr, &why));
  EXPECT_FALSE(check(tree, globals, nullptr, &why));  // not a function at all
  for (PyObject* o : {first, again, other_k, other, kw, globals}) Py_DECREF(o);
}

// Lacks: a dict without the key (an nn.Module's _parameters without 'extra'), until it has it.
TEST(GuardTree, LacksFailsOnceTheKeyAppears) {
  PyObject* d = PyDict_New();
  GuardTree tree;
  tree.add_lacks(tree.node(nullptr, local(0, "d")), "extra");
  std::string why;
  EXPECT_TRUE(check(tree, d, nullptr, &why)) << why;
  PyDict_SetItemString(d, "extra", Py_None);
  EXPECT_FALSE(check(tree, d, nullptr, &why));
  EXPECT_NE(why.find("has no key 'extra'"), std::string::npos) << why;
  Py_DECREF(d);
}
