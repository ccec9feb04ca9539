// guards._tensor_guards, fourth translation unit: DictKeysCheck, DICT_KEYS on an exact dict
// (plain CPython API, no torch headers).
//
// DictKeysCheck(keys)(d) is `type(d) is dict and tuple(d) == keys` (the keys in order, each
// compared as tuple equality compares items: identity, then ==), and after a passing call it
// remembers d's dict version tag: while d keeps that tag (the same dict, no insert, delete or
// clear since; see dict_tag in module_gate.h) its keys are the ones that passed, in the same
// order (a plain dict's order only changes by deleting and inserting), so the call returns
// True without walking them.  Only recorded when every key is an exact str or int: their
// equality with the expected keys cannot change later (a user key's __eq__ could).

#include "module_gate.h"

#include <cstddef>

namespace strata_guards {

namespace {

struct DictKeysCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* keys;  // a tuple (strong reference)
  uint64_t tag;    // the tag of the dict the last passing call read (0: none)
};

// 1 true, 0 false, -1 error (Python error set).
int dict_keys_run(DictKeysCheck* self, PyObject* d) {
  if (self->keys == nullptr || !PyDict_CheckExact(d)) {
    return 0;
  }
  const uint64_t tag = dict_tag(d);  // before the keys: see dict_tag
  if (tag != 0 && tag == self->tag) {
    return 1;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(self->keys);
  if (PyDict_GET_SIZE(d) != n) {
    return 0;
  }
  // The keys are compared on a copy of them (a key's __eq__ may change the dict), as
  // tuple(d) would take them.
  PyObject* now = PyDict_Keys(d);
  if (now == nullptr) {
    return -1;
  }
  int ok = PyList_GET_SIZE(now) == n ? 1 : 0;
  bool plain = true;
  for (Py_ssize_t i = 0; ok == 1 && i < n; ++i) {
    PyObject* key = PyList_GET_ITEM(now, i);
    plain = plain && (PyUnicode_CheckExact(key) || PyLong_CheckExact(key));
    const int eq = PyObject_RichCompareBool(key, PyTuple_GET_ITEM(self->keys, i), Py_EQ);
    ok = eq < 0 ? -1 : eq;
  }
  Py_DECREF(now);
  if (ok == 1 && plain) {
    self->tag = tag;
  }
  return ok;
}

PyObject* dict_keys_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "DictKeysCheck takes exactly one positional argument");
    return nullptr;
  }
  const int ok = dict_keys_run(reinterpret_cast<DictKeysCheck*>(callable), args[0]);
  if (ok < 0) {
    PyErr_Clear();  // an exception while checking means "failed", as in the Python path
  }
  PyObject* out = ok == 1 ? Py_True : Py_False;
  Py_INCREF(out);
  return out;
}

// DictKeysCheck(keys: tuple)
PyObject* dict_keys_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"keys", nullptr};
  PyObject* keys;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "O!", const_cast<char**>(kwlist), &PyTuple_Type, &keys)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<DictKeysCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = dict_keys_vectorcall;
  Py_INCREF(keys);
  self->keys = keys;
  self->tag = 0;
  return reinterpret_cast<PyObject*>(self);
}

void dict_keys_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  Py_CLEAR(reinterpret_cast<DictKeysCheck*>(obj)->keys);
  Py_TYPE(obj)->tp_free(obj);
}

int dict_keys_traverse(PyObject* obj, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<DictKeysCheck*>(obj)->keys);
  return 0;
}

int dict_keys_clear(PyObject* obj) {
  Py_CLEAR(reinterpret_cast<DictKeysCheck*>(obj)->keys);
  return 0;
}

}  // namespace

PyTypeObject DictKeysCheckType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool dict_keys_ready() {
  PyTypeObject* type = &DictKeysCheckType;
  type->tp_name = "guards._tensor_guards.DictKeysCheck";
  type->tp_basicsize = sizeof(DictKeysCheck);
  type->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = dict_keys_traverse;
  type->tp_clear = dict_keys_clear;
  type->tp_vectorcall_offset = offsetof(DictKeysCheck, vectorcall);
  type->tp_call = PyVectorcall_Call;
  type->tp_new = dict_keys_new;
  type->tp_dealloc = dict_keys_dealloc;
  return PyType_Ready(type) == 0;
}

}  // namespace strata_guards
