// symbolic/values.cpp — reference counting of SymValue's Python object.
#include "symbolic/values.h"

namespace fastdyn::symbolic {

std::string source_key(const Source& s) {
  std::string key = s.parent ? source_key(*s.parent) : std::string();
  PyObject* object = s.object && PyWeakref_CheckRef(s.object) ? PyWeakref_GetObject(s.object) : s.object;
  key += "/" + std::to_string(static_cast<int>(s.kind)) + ":" + std::to_string(s.index) + ":" + s.name + ":" +
         std::to_string(reinterpret_cast<uintptr_t>(object));
  return key;
}


SymValue::SymValue(const SymValue& o)
    : kind(o.kind), obj(o.obj), tensor(o.tensor), items(o.items), name(o.name),
      field_names(o.field_names), source(o.source), box(o.box), size(o.size), torch_size(o.torch_size) {
  Py_XINCREF(obj);
}

SymValue& SymValue::operator=(const SymValue& o) {
  if (this != &o) {
    Py_XINCREF(o.obj);
    Py_XDECREF(obj);
    kind = o.kind;
    obj = o.obj;
    tensor = o.tensor;
    items = o.items;
    name = o.name;
    field_names = o.field_names;
    source = o.source;
    box = o.box;
    size = o.size;
    torch_size = o.torch_size;
  }
  return *this;
}

SymValue::SymValue(SymValue&& o) noexcept
    : kind(o.kind), obj(o.obj), tensor(o.tensor), items(std::move(o.items)), name(std::move(o.name)),
      field_names(std::move(o.field_names)), source(std::move(o.source)), box(std::move(o.box)),
      size(std::move(o.size)), torch_size(o.torch_size) {
  o.obj = nullptr;
}

SymValue& SymValue::operator=(SymValue&& o) noexcept {
  if (this != &o) {
    Py_XDECREF(obj);
    kind = o.kind;
    obj = o.obj;
    o.obj = nullptr;
    tensor = o.tensor;
    items = std::move(o.items);
    name = std::move(o.name);
    field_names = std::move(o.field_names);
    source = std::move(o.source);
    box = std::move(o.box);
    size = std::move(o.size);
    torch_size = o.torch_size;
  }
  return *this;
}

SymValue::~SymValue() { Py_XDECREF(obj); }

SymValue SymValue::constant(PyObject* borrowed, SourcePtr src) {
  SymValue v;
  v.kind = Kind::Constant;
  v.obj = Py_NewRef(borrowed);
  v.source = std::move(src);
  return v;
}

SymValue SymValue::list(std::vector<SymValue> items) {
  SymValue v = boxed(Kind::List);
  v.box->items = std::move(items);
  return v;
}

SymValue SymValue::boxed(Kind kind) {
  SymValue v;
  v.kind = kind;
  v.box = std::make_shared<SymBox>();
  return v;
}

const std::vector<SymValue>& SymValue::seq() const { return kind == Kind::List ? box->items : items; }
std::vector<SymValue>& SymValue::mutable_seq() { return kind == Kind::List ? box->items : items; }

bool SymValue::holds_box(const SymBox* b, int depth) const {
  if (box && box.get() == b) return true;
  if (depth > 32) return true;
  for (const SymValue& i : items)
    if (i.holds_box(b, depth + 1)) return true;
  if (box && (kind == Kind::List || kind == Kind::Dict || kind == Kind::Object))
    for (const SymValue& i : box->items)
      if (i.holds_box(b, depth + 1)) return true;
  return false;
}

SizeReadHook& size_read_hook() {
  thread_local SizeReadHook hook;
  return hook;
}

void size_read(const SymValue& v) {
  const SizeReadHook& h = size_read_hook();
  if (v.size && h.fn) h.fn(h.ctx, *v.size);
}

bool SymValue::is_python_constant() const {
  switch (kind) {
    case Kind::Constant:
      if (size) size_read(*this);
      return true;
    case Kind::BoundMethod: return obj && !items.empty() && items[0].is_constant();
    case Kind::Tuple:
    case Kind::List:
    case Kind::Slice:
      for (const SymValue& i : seq())
        if (!i.is_python_constant()) return false;
      return true;
    default: return false;
  }
}

}  // namespace fastdyn::symbolic
