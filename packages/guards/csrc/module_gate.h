// Shared by the extension's translation units: DictGate (instance-dict reads behind a class
// gate, see module_calls.cpp), dict_tag, and the types defined outside tensor_guards.cpp
// (ModuleCallsCheck, WeakTuple, DictKeysCheck).  Plain CPython API.
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

}  // namespace strata_guards
