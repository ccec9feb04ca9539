// guards._tensor_guards, second translation unit: DictGate and ModuleCallsCheck.
//
// Plain CPython API (no torch headers): it compiles in well under a second, and keeps
// tensor_guards.cpp (TensorCheck, DispatchTlsCheck, ModuleParamsCheck, GlobalStateCheck) under
// ~800 lines.  Registered by PyInit__tensor_guards in tensor_guards.cpp.

#include "module_gate.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace strata_guards {

// DictGate: when an instance attribute read may go straight to the instance dict.
//
// For an object whose class resolves `__getattribute__` to object's and has no attribute of a
// name in the whole MRO, CPython's attribute read of that name (generic lookup, then
// `__getattr__` only on a miss) returns the instance dict's entry whenever there is one: the
// MRO lookup finds nothing, so no descriptor can come first.  A gate records the class and its
// version tag after checking that; CPython resets the tag of a class and of all its subclasses
// on any change to their dicts or bases (PyType_Modified) and never hands out a tag twice, so
// "same class object, same nonzero tag" means the facts checked still hold.  Otherwise (another
// class, a changed class, no tag, or the name missing from the instance dict) the read takes
// the full getattr path as before.
namespace {
getattrofunc hook_getattro;  // what a Python class defining __getattr__ gets as tp_getattro
PyObject* object_getattribute;  // object.__getattribute__ (its slot wrapper)
getter standard_dict_getter;  // the `__dict__` descriptor's getter of a plain Python class
PyObject* str_getattribute;
PyObject* str_forward;
PyObject* str_dict;
PyObject* str_hooks[4];
}  // namespace


// Fills ``gate`` for instances of ``type`` reading ``names`` (and, with ``std_dict``, the
// `__dict__` attribute being the instance dict itself).  Never fails: an unfit class gets tag 0.
bool gate_fits(PyTypeObject* type, PyObject* const* names, int n, bool std_dict) {
  if (type->tp_getattro != PyObject_GenericGetAttr && type->tp_getattro != hook_getattro) {
    return false;
  }
  // _PyType_Lookup also assigns the class a version tag when it has none.
  if (_PyType_Lookup(type, str_getattribute) != object_getattribute) {
    return false;
  }
  for (int i = 0; i < n; ++i) {
    if (_PyType_Lookup(type, names[i]) != nullptr) {
      return false;
    }
  }
  if (std_dict) {
    PyObject* descr = _PyType_Lookup(type, str_dict);
    if (descr == nullptr || Py_TYPE(descr) != &PyGetSetDescr_Type ||
        reinterpret_cast<PyGetSetDescrObject*>(descr)->d_getset->get != standard_dict_getter) {
      return false;
    }
  }
  return true;
}

void gate_init(DictGate* gate, PyTypeObject* type, PyObject* const* names, int n, bool std_dict) {
  Py_INCREF(type);
  gate->type = reinterpret_cast<PyObject*>(type);
  gate->tag = 0;
  // Never opens on 3.13 (no Py_TPFLAGS_VALID_VERSION_TAG there): its instance dicts share the
  // object's inline values, and an attribute store does not change the dict's version tag.
  if (gate_fits(type, names, n, std_dict) &&
      PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) {
    gate->tag = type->tp_version_tag;
  }
}


// ---------------------------------------------------------------------------------------------
// ModuleCallsCheck

struct ModuleCall {
  PyObject* key;
  PyObject* cls;  // the exact expected class
  bool inlined;   // the class forward was inlined: the instance must not shadow it
  DictGate gate;  // cls: `m.__dict__` is the instance dict and no class attribute hides a hook
  // What the last passing call read, keyed by dict version tags (borrowed pointers, used only
  // while the dict holding them has the recorded tag): the module found under key (valid
  // with the check's modules_tag), and the four hook dicts found in its instance dict, each
  // an exact dict or OrderedDict (truth == size), no 'forward' in it (valid with dict_tag).
  PyObject* module_seen;
  uint64_t dict_tag;
  PyObject* hooks_seen[4];
};

struct ClassForward {
  PyObject* cls;
  PyObject* forward;  // the class's forward when traced
  unsigned int tag;  // cls's version tag when `cls.forward is forward` last held (0: none)
};

struct ModuleCallsCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  std::vector<ClassForward>* forwards;
  std::vector<ModuleCall>* calls;
  uint64_t modules_tag;  // the `_modules` dict's tag when the module_seen were read in it
};

// One call's reads of one module: the tags read before what they key (committed on a pass).
struct CallRead {
  PyObject* module;  // borrowed from the modules dict (held there while this call runs)
  uint64_t dict_tag;
  PyObject* hooks[4];
};

// A class's valid version tag, else 0.
unsigned int type_tag(PyObject* cls) {
  auto* type = reinterpret_cast<PyTypeObject*>(cls);
  return PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) ? type->tp_version_tag : 0;
}

// Exactly dict or OrderedDict: truth is its size, read without running Python code.
bool plain_hook_dict(PyObject* d) {
  return PyDict_CheckExact(d) || Py_TYPE(d) == &PyODict_Type;
}


// One module's hook dicts and forward shadowing, read from its instance dict ``d``; fills
// ``r`` (r.dict_tag stays 0 unless all of it may be recorded).  1 / 0 / -1 as below.
int check_module_dict(const ModuleCall& call, PyObject* d, CallRead* r) {
  const bool exact = PyDict_CheckExact(d);
  const uint64_t tag = exact ? dict_tag(d) : 0;  // read before the entries (see dict_tag)
  if (tag != 0 && tag == call.dict_tag) {
    // The same dict, unchanged: the same hook dict objects, still no 'forward' entry.
    for (int i = 0; i < 4; ++i) {
      if (PyDict_GET_SIZE(call.hooks_seen[i]) != 0) {
        return 0;
      }
      r->hooks[i] = call.hooks_seen[i];
    }
    r->dict_tag = tag;
    return 1;
  }
  bool plain = exact;
  for (int i = 0; i < 4; ++i) {
    PyObject* hooks;
    if (exact) {
      hooks = PyDict_GetItemWithError(d, str_hooks[i]);
      if (hooks == nullptr && !PyErr_Occurred()) {
        PyErr_SetObject(PyExc_KeyError, str_hooks[i]);
      }
      Py_XINCREF(hooks);
    } else {
      hooks = PyObject_GetItem(d, str_hooks[i]);
    }
    if (hooks == nullptr) {
      return -1;
    }
    plain = plain && plain_hook_dict(hooks);
    r->hooks[i] = hooks;  // borrowed once d holds it: only recorded when d is an exact dict
    const int truth = PyObject_IsTrue(hooks);
    Py_DECREF(hooks);
    if (truth != 0) {
      return truth < 0 ? -1 : 0;
    }
  }
  if (call.inlined) {
    const int shadowed =
        exact ? PyDict_Contains(d, str_forward) : PySequence_Contains(d, str_forward);
    if (shadowed != 0) {
      return shadowed < 0 ? -1 : 0;
    }
  }
  r->dict_tag = plain ? tag : 0;
  return 1;
}

// 1 true, 0 false, -1 error (Python error set): the same reads as module_calls._python_check,
// except what a version tag proves unchanged since the last passing call (see ModuleCall):
// `cls.forward` while the class keeps its version tag, `modules[key]` while the `_modules`
// dict keeps its tag, and the hook-dict lookups and the `'forward' in` test while a module's
// instance dict keeps its tag (each hook dict's emptiness is still read, every call).  The
// exact class and the class gate are compared on every call.
int module_calls_run(ModuleCallsCheck* self, PyObject* modules) {
  if (self->calls == nullptr) {
    return 0;  // cleared by the cycle collector
  }
  for (ClassForward& f : *self->forwards) {
    // The class's tag keys `cls.forward` only when no metaclass could answer the lookup.
    const bool plain_meta = Py_TYPE(f.cls) == &PyType_Type;
    const unsigned int before = plain_meta ? type_tag(f.cls) : 0;
    if (before != 0 && before == f.tag) {
      continue;
    }
    PyObject* now = PyObject_GetAttr(f.cls, str_forward);
    if (now == nullptr) {
      return -1;
    }
    Py_DECREF(now);  // identity only; cls keeps its forward alive
    if (now != f.forward) {
      return 0;
    }
    if (before != 0 && type_tag(f.cls) == before) {
      f.tag = before;  // the lookup ran no code that changed the class
    }
  }
  std::vector<ModuleCall>& calls = *self->calls;
  const size_t n = calls.size();
  CallRead local[64];
  std::vector<CallRead> heap;
  CallRead* reads = local;
  if (n > 64) {
    heap.resize(n);
    reads = heap.data();
  }
  const bool modules_exact = PyDict_CheckExact(modules);
  const uint64_t modules_tag = modules_exact ? dict_tag(modules) : 0;
  const bool modules_same = modules_tag != 0 && modules_tag == self->modules_tag;
  for (size_t i = 0; i < n; ++i) {
    const ModuleCall& call = calls[i];
    CallRead& r = reads[i];
    r.dict_tag = 0;
    PyObject* m;
    if (modules_same) {
      m = call.module_seen;
      Py_INCREF(m);
    } else if (modules_exact) {
      m = PyDict_GetItemWithError(modules, call.key);
      if (m == nullptr) {
        if (!PyErr_Occurred()) {
          PyErr_SetObject(PyExc_KeyError, call.key);
        }
        return -1;
      }
      Py_INCREF(m);
    } else {
      m = PyObject_GetItem(modules, call.key);
      if (m == nullptr) {
        return -1;
      }
    }
    r.module = m;
    int ok = reinterpret_cast<PyObject*>(Py_TYPE(m)) == call.cls ? 1 : 0;
    if (ok) {
      // Open gate: `m.__dict__` is the instance dict itself (see DictGate), read without the
      // getattr of nn.Module's __getattr__ slot.
      PyObject* d = nullptr;
      const bool gated = gate_open(call.gate, m);
      if (gated) {
        d = PyObject_GenericGetDict(m, nullptr);
        if (d == nullptr) {
          PyErr_Clear();
        }
      }
      const bool own_dict = d != nullptr;
      if (d == nullptr) {
        d = PyObject_GetAttr(m, str_dict);
      }
      ok = d == nullptr ? -1 : check_module_dict(call, d, &r);
      if (!own_dict) {
        r.dict_tag = 0;  // read through getattr: nothing to record
      }
      Py_XDECREF(d);
    }
    Py_DECREF(m);
    if (ok != 1) {
      return ok;
    }
  }
  // Passed: record what was read (each tag was read before what it keys).
  for (size_t i = 0; i < n; ++i) {
    ModuleCall& call = calls[i];
    call.module_seen = reads[i].module;
    call.dict_tag = reads[i].dict_tag;
    for (int k = 0; k < 4; ++k) {
      call.hooks_seen[k] = reads[i].hooks[k];
    }
  }
  self->modules_tag = modules_exact ? modules_tag : 0;
  return 1;
}

PyObject* module_calls_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "ModuleCallsCheck takes exactly one positional argument");
    return nullptr;
  }
  const int ok = module_calls_run(reinterpret_cast<ModuleCallsCheck*>(callable), args[0]);
  if (ok < 0) {
    PyErr_Clear();  // an exception while checking means "failed", as in the Python path
  }
  PyObject* out = ok == 1 ? Py_True : Py_False;
  Py_INCREF(out);
  return out;
}

void module_calls_release(ModuleCallsCheck* self) {
  if (self->forwards != nullptr) {
    for (ClassForward& f : *self->forwards) {
      Py_CLEAR(f.cls);
      Py_CLEAR(f.forward);
    }
    delete self->forwards;
    self->forwards = nullptr;
  }
  if (self->calls != nullptr) {
    for (ModuleCall& call : *self->calls) {
      Py_CLEAR(call.key);
      Py_CLEAR(call.cls);
      Py_CLEAR(call.gate.type);
    }
    delete self->calls;
    self->calls = nullptr;
  }
}

void module_calls_dealloc(PyObject* obj) {
  PyObject_GC_UnTrack(obj);
  module_calls_release(reinterpret_cast<ModuleCallsCheck*>(obj));
  Py_TYPE(obj)->tp_free(obj);
}

int module_calls_traverse(PyObject* obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<ModuleCallsCheck*>(obj);
  if (self->forwards != nullptr) {
    for (const ClassForward& f : *self->forwards) {
      Py_VISIT(f.cls);
      Py_VISIT(f.forward);
    }
  }
  if (self->calls != nullptr) {
    for (const ModuleCall& call : *self->calls) {
      Py_VISIT(call.cls);
      Py_VISIT(call.gate.type);
    }
  }
  return 0;
}

int module_calls_clear(PyObject* obj) {
  module_calls_release(reinterpret_cast<ModuleCallsCheck*>(obj));
  return 0;
}

// ModuleCallsCheck(forwards, calls): forwards is a tuple of (class, function) pairs, calls a
// tuple of (key: str, class, inlined: bool).
PyObject* module_calls_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"forwards", "calls", nullptr};
  PyObject *forwards, *calls;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "O!O!", const_cast<char**>(kwlist), &PyTuple_Type, &forwards,
          &PyTuple_Type, &calls)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<ModuleCallsCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = module_calls_vectorcall;
  self->forwards = new std::vector<ClassForward>();
  self->modules_tag = 0;
  self->calls = new std::vector<ModuleCall>();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(forwards); ++i) {
    PyObject *cls, *forward;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(forwards, i), "O!O", &PyType_Type, &cls, &forward)) {
      Py_DECREF(self);
      return nullptr;
    }
    Py_INCREF(cls);
    Py_INCREF(forward);
    self->forwards->push_back(ClassForward{cls, forward, 0});
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(calls); ++i) {
    PyObject *key, *cls;
    int inlined;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(calls, i), "UO!p", &key, &PyType_Type, &cls,
                          &inlined)) {
      Py_DECREF(self);
      return nullptr;
    }
    Py_INCREF(key);
    Py_INCREF(cls);
    DictGate gate{nullptr, 0};
    gate_init(&gate, reinterpret_cast<PyTypeObject*>(cls), str_hooks, 4, true);
    self->calls->push_back(
        ModuleCall{key, cls, inlined != 0, gate, nullptr, 0, {nullptr, nullptr, nullptr, nullptr}});
  }
  return reinterpret_cast<PyObject*>(self);
}

PyTypeObject ModuleCallsCheckType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool module_checks_init() {
  str_forward = PyUnicode_InternFromString("forward");
  str_dict = PyUnicode_InternFromString("__dict__");
  const char* hook_names[4] = {
      "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"};
  for (int i = 0; i < 4; ++i) {
    str_hooks[i] = PyUnicode_InternFromString(hook_names[i]);
    if (str_hooks[i] == nullptr) {
      return false;
    }
  }
  if (str_forward == nullptr || str_dict == nullptr) {
    return false;
  }
  // The references DictGate compares with: object.__getattribute__, and the tp_getattro and
  // `__dict__` getter CPython gives a plain Python class that defines __getattr__.
  str_getattribute = PyUnicode_InternFromString("__getattribute__");
  if (str_getattribute == nullptr) {
    return false;
  }
  object_getattribute = _PyType_Lookup(&PyBaseObject_Type, str_getattribute);
  PyObject* ref_class = PyObject_CallFunction(
      reinterpret_cast<PyObject*>(&PyType_Type), "s(O){sO}", "_getattr_hook_reference",
      reinterpret_cast<PyObject*>(&PyBaseObject_Type), "__getattr__", Py_None);
  if (ref_class == nullptr || object_getattribute == nullptr) {
    Py_XDECREF(ref_class);
    return false;
  }
  auto* ref_type = reinterpret_cast<PyTypeObject*>(ref_class);
  hook_getattro = ref_type->tp_getattro;
  PyObject* dict_descr = _PyType_Lookup(ref_type, str_dict);
  if (dict_descr == nullptr || Py_TYPE(dict_descr) != &PyGetSetDescr_Type) {
    Py_DECREF(ref_class);
    PyErr_SetString(PyExc_ImportError, "guards._tensor_guards: no __dict__ getset to compare");
    return false;
  }
  standard_dict_getter = reinterpret_cast<PyGetSetDescrObject*>(dict_descr)->d_getset->get;
  Py_INCREF(object_getattribute);  // kept for the module's lifetime, as the class below
  // ref_class stays alive on purpose: hook_getattro and the getter are static functions of
  // CPython, but holding the class keeps the descriptor they were read from valid too.
  return true;
}

bool module_calls_ready() {
  PyTypeObject* type = &ModuleCallsCheckType;
  type->tp_name = "guards._tensor_guards.ModuleCallsCheck";
  type->tp_basicsize = sizeof(ModuleCallsCheck);
  type->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
  type->tp_traverse = module_calls_traverse;
  type->tp_clear = module_calls_clear;
  type->tp_vectorcall_offset = offsetof(ModuleCallsCheck, vectorcall);
  type->tp_call = PyVectorcall_Call;
  type->tp_new = module_calls_new;
  type->tp_dealloc = module_calls_dealloc;
  return PyType_Ready(type) == 0;
}

}  // namespace strata_guards
