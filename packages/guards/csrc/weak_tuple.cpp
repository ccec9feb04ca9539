// guards._tensor_guards, third translation unit: WeakTuple, the parameter reader of a
// transformed frame (plain CPython API, no torch headers).
//
// WeakTuple(refs) holds weak references; calling it returns a new tuple of their live targets,
// or raises ReferenceError when one has died.  symbolic_vm's transformed code calls one in
// place of reading each parameter through `_modules` / `_parameters` (one C call instead of
// ~3 Python subscripts per parameter).  It is sound only where the same entry's guard checks,
// on every call, that each path still holds exactly the referenced object (MODULE_PARAMS's
// identity steps, or an ID_MATCH per path): then reading the path and reading the weak
// reference give the same object.  guards/readers.py says so to its callers.

#include "module_gate.h"

#include <cstddef>

namespace strata_guards {

namespace {

struct WeakTuple {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* refs;  // a tuple of weakref.ref (strong reference to the tuple)
};

PyObject* weak_tuple_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  (void)args;
  if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "WeakTuple takes no arguments");
    return nullptr;
  }
  auto* self = reinterpret_cast<WeakTuple*>(callable);
  if (self->refs == nullptr) {
    PyErr_SetString(PyExc_ReferenceError, "WeakTuple: cleared by the cycle collector");
    return nullptr;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(self->refs);
  PyObject* out = PyTuple_New(n);
  if (out == nullptr) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject* target = nullptr;  // 3.13 deprecates the borrowed read
    if (PyWeakref_GetRef(PyTuple_GET_ITEM(self->refs, i), &target) != 1) {
      target = nullptr;
    }
#else
    PyObject* target = PyWeakref_GET_OBJECT(PyTuple_GET_ITEM(self->refs, i));
    if (target == Py_None) {
      target = nullptr;
    } else {
      Py_INCREF(target);
    }
#endif
    if (target == nullptr) {
      Py_DECREF(out);
      PyErr_Format(PyExc_ReferenceError, "WeakTuple: referent %zd no longer exists", i);
      return nullptr;
    }
    PyTuple_SET_ITEM(out, i, target);
  }
  return out;
}

// WeakTuple(refs: tuple[weakref.ref, ...])
PyObject* weak_tuple_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"refs", nullptr};
  PyObject* refs;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "O!", const_cast<char**>(kwlist), &PyTuple_Type, &refs)) {
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(refs); ++i) {
    // Exactly weakref.ref (not a proxy, not a subclass whose __call__ could differ).
    if (Py_TYPE(PyTuple_GET_ITEM(refs, i)) != &_PyWeakref_RefType) {
      PyErr_SetString(PyExc_TypeError, "WeakTuple: refs must be a tuple of weakref.ref");
      return nullptr;
    }
  }
  auto* self = reinterpret_cast<WeakTuple*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = weak_tuple_vectorcall;
  Py_INCREF(refs);
  self->refs = refs;
  return reinterpret_cast<PyObject*>(self);
}

void weak_tuple_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  Py_CLEAR(reinterpret_cast<WeakTuple*>(obj)->refs);
  Py_TYPE(obj)->tp_free(obj);
}

int weak_tuple_traverse(PyObject* obj, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<WeakTuple*>(obj)->refs);
  return 0;
}

int weak_tuple_clear(PyObject* obj) {
  Py_CLEAR(reinterpret_cast<WeakTuple*>(obj)->refs);
  return 0;
}

}  // namespace

PyTypeObject WeakTupleType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool weak_tuple_ready() {
  PyTypeObject* type = &WeakTupleType;
  type->tp_name = "guards._tensor_guards.WeakTuple";
  type->tp_basicsize = sizeof(WeakTuple);
  type->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = weak_tuple_traverse;
  type->tp_clear = weak_tuple_clear;
  type->tp_vectorcall_offset = offsetof(WeakTuple, vectorcall);
  type->tp_call = PyVectorcall_Call;
  type->tp_new = weak_tuple_new;
  type->tp_dealloc = weak_tuple_dealloc;
  return PyType_Ready(type) == 0;
}

}  // namespace strata_guards
