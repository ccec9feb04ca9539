// Shared by tensor_guards.cpp, module_calls.cpp and weak_tuple.cpp: DictGate (instance-dict
// reads behind a class gate, see module_calls.cpp), the ModuleCallsCheck and WeakTuple types.
// Plain CPython API.
#pragma once

#include <Python.h>

namespace strata_guards {

struct DictGate {
  PyObject* type;  // strong reference, or nullptr
  unsigned int tag;  // 0: never take the fast read
};

// Fills ``gate`` for instances of ``type`` reading ``names`` (and, with ``std_dict``, the
// `__dict__` attribute being the instance dict itself).  Never fails: an unfit class gets tag 0.
void gate_init(DictGate* gate, PyTypeObject* type, PyObject* const* names, int n, bool std_dict);

inline bool gate_open(const DictGate& gate, PyObject* obj) {
  return gate.tag != 0 && reinterpret_cast<PyObject*>(Py_TYPE(obj)) == gate.type &&
         Py_TYPE(obj)->tp_version_tag == gate.tag;
}

// The entry ``name`` of obj's instance dict (new reference) when ``gate`` is open and the
// entry exists; nullptr otherwise (no Python error left set): the caller reads the slow way.
PyObject* gated_read(const DictGate& gate, PyObject* obj, PyObject* name);

// The interned names and the references DictGate compares with; false with a Python error.
bool module_checks_init();

// PyType_Ready of ModuleCallsCheckType; false with a Python error.
bool module_calls_ready();

extern PyTypeObject ModuleCallsCheckType;

// PyType_Ready of WeakTupleType (weak_tuple.cpp); false with a Python error.
bool weak_tuple_ready();

extern PyTypeObject WeakTupleType;

}  // namespace strata_guards
