// Shared by the extension's translation units: DictGate (instance-dict reads behind a class
// gate, see module_calls.cpp), dict_tag, and the types defined outside tensor_guards.cpp
// (ModuleCallsCheck, WeakTuple, DictKeysCheck, StateTree).  Plain CPython API.
#pragma once

#include <Python.h>

#include <cstdint>

namespace strata_guards {

// A dict's PEP 509 version tag (``d`` must pass PyDict_Check): CPython gives every dict a tag
// from one process-wide counter when it is made and a fresh one on every change of its
// contents (insert, replace by another object, delete, clear, STORE_ATTR's specialised
// writes), and never hands a tag out twice; in 3.12/3.13 the low bits also carry watcher
// flags (a watch changes the tag: a miss, never a false hit).  So "the same tag as when we
// read it" means "the same dict object, with the same entries".  0 = never trust (3.14
// dropped the field).
inline uint64_t dict_tag(PyObject* d) {
#if PY_VERSION_HEX < 0x030E0000
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return reinterpret_cast<PyDictObject*>(d)->ma_version_tag;
#pragma GCC diagnostic pop
#else
  (void)d;
  return 0;
#endif
}

// A class's version tag while it is valid, else 0: CPython hands out a fresh tag after any
// change to the class, its bases' dicts or its MRO (PyType_Modified), never the same one twice.
// Up to 3.12 a valid tag carries Py_TPFLAGS_VALID_VERSION_TAG; 3.13 dropped that flag and marks
// an invalid tag by 0.
inline unsigned int class_tag(PyTypeObject* type) {
#if PY_VERSION_HEX >= 0x030D0000
  return type->tp_version_tag;
#else
  return PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) ? type->tp_version_tag : 0;
#endif
}

struct DictGate {
  PyObject* type;  // strong reference, or nullptr
  unsigned int tag;  // 0: never take the fast read
};

// Whether an instance attribute read of each of ``names`` on an object of ``type`` returns the
// instance dict's entry whenever there is one (and, with ``std_dict``, `__dict__` is the
// instance dict itself); also gives the class a version tag when it has none.
bool gate_fits(PyTypeObject* type, PyObject* const* names, int n, bool std_dict);

// Fills ``gate`` for instances of ``type`` reading ``names`` (and, with ``std_dict``, the
// `__dict__` attribute being the instance dict itself).  Never fails: an unfit class gets tag 0.
void gate_init(DictGate* gate, PyTypeObject* type, PyObject* const* names, int n, bool std_dict);

inline bool gate_open(const DictGate& gate, PyObject* obj) {
  return gate.tag != 0 && reinterpret_cast<PyObject*>(Py_TYPE(obj)) == gate.type &&
         Py_TYPE(obj)->tp_version_tag == gate.tag;
}

// The interned names and the references DictGate compares with; false with a Python error.
bool module_checks_init();

// PyType_Ready of ModuleCallsCheckType; false with a Python error.
bool module_calls_ready();

extern PyTypeObject ModuleCallsCheckType;

// PyType_Ready of WeakTupleType (weak_tuple.cpp); false with a Python error.
bool weak_tuple_ready();

extern PyTypeObject WeakTupleType;

// PyType_Ready of DictKeysCheckType (dict_keys.cpp); false with a Python error.
bool dict_keys_ready();

extern PyTypeObject DictKeysCheckType;

// PyType_Ready of StateTreeType (state_tree.cpp); false with a Python error.
bool state_tree_ready();

extern PyTypeObject StateTreeType;

}  // namespace strata_guards
