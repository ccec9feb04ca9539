// guards._tensor_guards, fifth translation unit: StateTree, "nothing on these paths changed"
// for the value guards on objects read through instance dicts, dicts and tuples (plain
// CPython API, no torch headers).
//
// A StateTree knows a tree of reads: roots (positional arguments of the call: a local, the
// globals dict) and steps from a node to a child: ATTR (an instance-dict attribute), ITEM (a
// dict entry or a tuple item), TYPE (`type(x)`), CLASSATTR (a function found along a class's
// MRO).  `tree.arm(*roots)` walks the tree from the live roots, checks that each step reads
// exactly what Python's own read would (no class attribute or descriptor of the name, an
// unmodified `__getattribute__`, exact dicts and tuples), and records each node's object, its
// class and what pins what was read: a dict's PEP 509 tag (see dict_tag), an instance dict's
// tag up to 3.12 (in 3.13, the identity of each attribute read from it: see
// same_instance_dict), a class's version tag (class_tag).  `tree(*roots)` then returns the
// objects of the nodes marked exported while every root is the recorded object and all of
// that still holds, else None (arm returns the same, or None when a step cannot be recorded).
// It checks from the roots down: each child pointer is borrowed, but its holder (an unchanged
// dict, an immutable tuple, a class with the same tag) still holds it when the check reaches
// it, so it is alive; a root is only compared by address until the check has read its live
// argument's dict.
//
// What that proves: every node is the object recorded at arm time, with the same class, so a
// guard on identity, class, constant value (constants are immutable), a dict's keys or a
// tuple's length that held at arm time still holds.  The generated check (check_fn.py) runs
// those guards in Python only when the tree says no, and re-arms after they pass.

#include "module_gate.h"

#include <cstddef>
#include <vector>

namespace strata_guards {

namespace {

enum Step : int { ROOT = 0, ATTR = 1, ITEM = 2, TYPE = 3, CLASSATTR = 4 };
// What an armed node is, by what it was checked for.
enum Kind : int { LEAF = 0, OBJ = 1, MOD = 2, DICT = 3, TUPLE = 4, CLS = 5 };

struct Node {
  int parent;       // -1 for a root
  int step;         // Step
  PyObject* key;    // strong: root index (int), attribute name (str), item key
  bool wants_attr;  // has ATTR children
  bool wants_item;  // has ITEM children
  bool wants_cls;   // has CLASSATTR children
  bool exported;    // its object is in the tuple a passing check returns
  std::vector<PyObject*> attr_names;  // borrowed from the children's keys
  std::vector<int> attr_children;     // their indices, in the same order
  // Recorded by arm (what the check compares with).
  PyObject* obj;    // borrowed (roots: compared as a pointer only)
  PyObject* type;   // strong: Py_TYPE(obj) at arm time
  int kind;         // Kind
  PyObject* dict;   // OBJ/MOD: the instance dict (borrowed; compared as a pointer)
  uint64_t tag;     // OBJ/MOD: the instance dict's tag; DICT: its own tag
  unsigned int type_tag;  // OBJ: its class's version tag; CLS: the class's own
};

struct StateTree {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  std::vector<Node>* nodes;
  std::vector<int>* exports;  // indices of the exported nodes, in the order returned
  Py_ssize_t nroots;
  bool armed;
  const char* why;  // why the last arm failed (static text), or nullptr
  int why_node;
};

// The instance dict of ``obj`` (borrowed; it holds it), or nullptr (no error set).
PyObject* instance_dict(PyObject* obj) {
  PyObject* d = PyObject_GenericGetDict(obj, nullptr);
  if (d == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  Py_DECREF(d);  // obj holds it
  return PyDict_CheckExact(d) ? d : nullptr;
}

bool fail(StateTree* self, int node, const char* why) {
  self->armed = false;
  self->why = why;
  self->why_node = node;
  return false;
}

// Classifies ``n.obj`` for what its children read; false (with self->why) when unfit.
bool classify(StateTree* self, int i, Node& n) {
  PyObject* obj = n.obj;
  PyTypeObject* type = Py_TYPE(obj);
  n.kind = LEAF;
  n.dict = nullptr;
  n.tag = 0;
  n.type_tag = 0;
  if (n.wants_attr && n.wants_item) {
    return fail(self, i, "read both by attribute and by item");
  }
  if (n.wants_attr) {
    if (type == &PyModule_Type) {
      // module_getattro: a generic lookup first, and nothing on ModuleType has these names.
      for (PyObject* name : n.attr_names) {
        if (_PyType_Lookup(type, name) != nullptr) {
          return fail(self, i, "a module attribute that ModuleType defines");
        }
      }
      n.kind = MOD;
      n.dict = PyModule_GetDict(obj);
    } else {
      if (!gate_fits(type, n.attr_names.data(), static_cast<int>(n.attr_names.size()), false)) {
        return fail(self, i, "its class defines an attribute read, or __getattribute__");
      }
      n.kind = OBJ;
      n.type_tag = class_tag(type);
      if (n.type_tag == 0) {
        return fail(self, i, "its class has no version tag");
      }
      n.dict = instance_dict(obj);
    }
    if (n.dict == nullptr) {
      return fail(self, i, "no instance dict");
    }
    n.tag = dict_tag(n.dict);
  } else if (PyDict_CheckExact(obj)) {
    n.kind = DICT;
    n.tag = dict_tag(obj);
  } else if (PyTuple_CheckExact(obj)) {
    n.kind = TUPLE;
  } else if (n.wants_item) {
    return fail(self, i, "read by item but not an exact dict or tuple");
  }
  if (n.wants_cls) {
    if (!PyType_Check(obj) || Py_TYPE(obj) != &PyType_Type) {
      return fail(self, i, "class attributes read from something that is not a plain class");
    }
    n.kind = CLS;
    n.type_tag = class_tag(reinterpret_cast<PyTypeObject*>(obj));
    if (n.type_tag == 0) {
      return fail(self, i, "the class has no version tag");
    }
  }
  if ((n.kind == OBJ || n.kind == MOD || n.kind == DICT) && n.tag == 0) {
    return fail(self, i, "no dict version tag (Python 3.14)");
  }
  return true;
}

// The child value of node ``n`` (borrowed), or nullptr with self->why set.
PyObject* read_child(StateTree* self, int i, Node& n, const Node& parent, PyObject* const* roots) {
  switch (n.step) {
    case ROOT:
      return roots[PyLong_AsSsize_t(n.key)];
    case ATTR: {
      PyObject* v = PyDict_GetItemWithError(parent.dict, n.key);
      if (v == nullptr) {
        PyErr_Clear();
        fail(self, i, "the attribute is not in the instance dict");
      }
      return v;
    }
    case ITEM: {
      if (parent.kind == DICT) {
        if (!PyUnicode_CheckExact(n.key) && !PyLong_CheckExact(n.key)) {
          fail(self, i, "a dict key other than a str or an int");
          return nullptr;
        }
        PyObject* v = PyDict_GetItemWithError(parent.obj, n.key);
        if (v == nullptr) {
          PyErr_Clear();
          fail(self, i, "the key is not in the dict");
        }
        return v;
      }
      if (parent.kind == TUPLE && PyLong_CheckExact(n.key)) {
        Py_ssize_t k = PyLong_AsSsize_t(n.key);
        const Py_ssize_t size = PyTuple_GET_SIZE(parent.obj);
        if (k < 0) {
          k += size;
        }
        if (k >= 0 && k < size) {
          return PyTuple_GET_ITEM(parent.obj, k);
        }
        PyErr_Clear();
      }
      fail(self, i, "a tuple index out of range or not an int");
      return nullptr;
    }
    case TYPE:
      return reinterpret_cast<PyObject*>(Py_TYPE(parent.obj));
    case CLASSATTR: {
      // type.__getattribute__: the metaclass (exactly `type`) first, then the MRO; a plain
      // function found there is returned as itself.
      if (_PyType_Lookup(&PyType_Type, n.key) != nullptr) {
        fail(self, i, "a name that `type` itself defines");
        return nullptr;
      }
      PyObject* v = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(parent.obj), n.key);
      if (v == nullptr || (Py_TYPE(v)->tp_descr_get != nullptr && !PyFunction_Check(v))) {
        fail(self, i, "a class attribute that is missing or a descriptor");
        return nullptr;
      }
      return v;
    }
    default:
      fail(self, i, "unknown step");
      return nullptr;
  }
}

bool arm(StateTree* self, PyObject* const* roots) {
  std::vector<Node>& nodes = *self->nodes;
  self->armed = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = nodes[i];
    const Node& parent = n.parent >= 0 ? nodes[n.parent] : n;
    PyObject* v = read_child(self, static_cast<int>(i), n, parent, roots);
    if (v == nullptr) {
      return false;
    }
    n.obj = v;
    PyObject* type = reinterpret_cast<PyObject*>(Py_TYPE(v));
    Py_INCREF(type);
    Py_XSETREF(n.type, type);
    if (!classify(self, static_cast<int>(i), n)) {
      return false;
    }
    if (n.step == ROOT && (n.kind == LEAF || n.kind == TUPLE || n.kind == CLS)) {
      // A root is compared by address: only objects whose version tags are unique to them
      // (instance dicts, dicts) tell a new object at a reused address apart.
      return fail(self, static_cast<int>(i), "a root that is not an object with a dict");
    }
  }
  self->armed = true;
  self->why = nullptr;
  return true;
}

// Whether the instance dict ``d`` of node ``n`` still holds what arm read from it.  Up to 3.12
// its version tag says so.  In 3.13 an instance dict shares the object's inline values and an
// attribute store does not change its tag, so each attribute read is looked up again and
// compared by identity.
bool same_instance_dict(const std::vector<Node>& nodes, const Node& n, PyObject* d) {
  if (d != n.dict) {
    return false;
  }
#if PY_VERSION_HEX < 0x030D0000
  (void)nodes;
  return dict_tag(d) == n.tag;
#else
  for (int k : n.attr_children) {
    const Node& child = nodes[k];
    if (PyDict_GetItemWithError(d, child.key) != child.obj) {
      PyErr_Clear();
      return false;
    }
  }
  return true;
#endif
}

bool check(StateTree* self, PyObject* const* roots) {
  if (!self->armed) {
    return false;
  }
  const std::vector<Node>& nodes = *self->nodes;
  for (const Node& n : nodes) {
    PyObject* obj = n.obj;
    if (n.step == ROOT) {
      obj = roots[PyLong_AsSsize_t(n.key)];
      if (obj != n.obj) {
        return false;
      }
    }
    if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) != n.type) {
      return false;
    }
    switch (n.kind) {
      case OBJ: {
        if (class_tag(Py_TYPE(obj)) != n.type_tag) {
          return false;
        }
        if (!same_instance_dict(nodes, n, instance_dict(obj))) {
          return false;
        }
        break;
      }
      case MOD: {
        PyObject* d = PyModule_GetDict(obj);
        if (d != n.dict || dict_tag(d) != n.tag) {
          return false;
        }
        break;
      }
      case DICT:
        if (dict_tag(obj) != n.tag) {
          return false;
        }
        break;
      case CLS:
        if (class_tag(reinterpret_cast<PyTypeObject*>(obj)) != n.type_tag) {
          return false;
        }
        break;
      default:
        break;
    }
  }
  return true;
}

bool right_args(StateTree* self, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != self->nroots ||
      (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_Format(PyExc_TypeError, "StateTree takes exactly %zd positional arguments",
                 self->nroots);
    return false;
  }
  return true;
}

// The exported nodes' objects (roots: the live arguments), after a passing check or arm.
PyObject* exported(StateTree* self, PyObject* const* roots) {
  const std::vector<int>& exports = *self->exports;
  PyObject* out = PyTuple_New(static_cast<Py_ssize_t>(exports.size()));
  if (out == nullptr) {
    return nullptr;
  }
  for (size_t k = 0; k < exports.size(); ++k) {
    const Node& n = (*self->nodes)[exports[k]];
    PyObject* obj = n.step == ROOT ? roots[PyLong_AsSsize_t(n.key)] : n.obj;
    Py_INCREF(obj);
    PyTuple_SET_ITEM(out, static_cast<Py_ssize_t>(k), obj);
  }
  return out;
}

PyObject* state_tree_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* self = reinterpret_cast<StateTree*>(callable);
  if (!right_args(self, nargsf, kwnames)) {
    return nullptr;
  }
  if (!check(self, args)) {
    Py_RETURN_NONE;
  }
  return exported(self, args);
}

PyObject* state_tree_arm(PyObject* obj, PyObject* const* args, Py_ssize_t nargs) {
  auto* self = reinterpret_cast<StateTree*>(obj);
  if (!right_args(self, static_cast<size_t>(nargs), nullptr)) {
    return nullptr;
  }
  if (!arm(self, args)) {
    Py_RETURN_NONE;
  }
  return exported(self, args);
}

PyObject* state_tree_why(PyObject* obj, PyObject* /*unused*/) {
  auto* self = reinterpret_cast<StateTree*>(obj);
  if (self->armed) {
    return PyUnicode_FromString("armed");
  }
  if (self->why == nullptr) {
    return PyUnicode_FromString("not armed yet");
  }
  return PyUnicode_FromFormat("node %d: %s", self->why_node, self->why);
}

void release(StateTree* self) {
  if (self->nodes != nullptr) {
    for (Node& n : *self->nodes) {
      Py_CLEAR(n.key);
      Py_CLEAR(n.type);
    }
    delete self->nodes;
    self->nodes = nullptr;
  }
  delete self->exports;
  self->exports = nullptr;
  self->armed = false;
}

// StateTree(nroots: int, steps: tuple of (parent: int, step: int, key, exported: bool));
// parents come first.
PyObject* state_tree_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"nroots", "steps", nullptr};
  Py_ssize_t nroots;
  PyObject* steps;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO!", const_cast<char**>(kwlist), &nroots,
                                   &PyTuple_Type, &steps)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<StateTree*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = state_tree_vectorcall;
  self->nroots = nroots;
  self->armed = false;
  self->why = nullptr;
  self->nodes = new std::vector<Node>();
  self->exports = new std::vector<int>();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(steps); ++i) {
    int parent, step, exported;
    PyObject* key;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(steps, i), "iiOp", &parent, &step, &key, &exported)) {
      Py_DECREF(self);
      return nullptr;
    }
    const bool root = step == ROOT;
    const bool bad_root =
        root && (parent != -1 || !PyLong_CheckExact(key) || PyLong_AsSsize_t(key) < 0 ||
                 PyLong_AsSsize_t(key) >= nroots);
    if (bad_root || (!root && (parent < 0 || parent >= i)) || step < ROOT || step > CLASSATTR ||
        ((step == ATTR || step == CLASSATTR) && !PyUnicode_CheckExact(key))) {
      PyErr_Format(PyExc_ValueError, "StateTree: bad step %zd", i);
      Py_DECREF(self);
      return nullptr;
    }
    Py_INCREF(key);
    Node n{parent, step, key, false, false, false, exported != 0, {}, {}, nullptr, nullptr,
           LEAF, nullptr, 0, 0};
    self->nodes->push_back(n);
    if (exported) {
      self->exports->push_back(static_cast<int>(i));
    }
    if (!root) {
      Node& p = (*self->nodes)[parent];
      p.wants_attr |= step == ATTR;
      p.wants_item |= step == ITEM;
      p.wants_cls |= step == CLASSATTR;
      if (step == ATTR) {
        p.attr_names.push_back(key);
        p.attr_children.push_back(static_cast<int>(i));
      }
    }
  }
  return reinterpret_cast<PyObject*>(self);
}

void state_tree_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  release(reinterpret_cast<StateTree*>(obj));
  Py_TYPE(obj)->tp_free(obj);
}

int state_tree_traverse(PyObject* obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<StateTree*>(obj);
  if (self->nodes != nullptr) {
    for (Node& n : *self->nodes) {
      Py_VISIT(n.key);
      Py_VISIT(n.type);
    }
  }
  return 0;
}

int state_tree_clear(PyObject* obj) {
  release(reinterpret_cast<StateTree*>(obj));
  return 0;
}

PyMethodDef state_tree_methods[] = {
    {"arm", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(state_tree_arm)),
     METH_FASTCALL,
     "Record the tree read from these roots: the exported objects, or None when a step "
     "could not be recorded."},
    {"why", state_tree_why, METH_NOARGS, "Why the tree is not armed (for tests and logs)."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

PyTypeObject StateTreeType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool state_tree_ready() {
  PyTypeObject* type = &StateTreeType;
  type->tp_name = "guards._tensor_guards.StateTree";
  type->tp_basicsize = sizeof(StateTree);
  type->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = state_tree_traverse;
  type->tp_clear = state_tree_clear;
  type->tp_vectorcall_offset = offsetof(StateTree, vectorcall);
  type->tp_call = PyVectorcall_Call;
  type->tp_new = state_tree_new;
  type->tp_dealloc = state_tree_dealloc;
  type->tp_methods = state_tree_methods;
  return PyType_Ready(type) == 0;
}

}  // namespace strata_guards
