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
void gate_init(DictGate* gate, PyTypeObject* type, PyObject* const* names, int n, bool std_dict) {
  Py_INCREF(type);
  gate->type = reinterpret_cast<PyObject*>(type);
  gate->tag = 0;
  if (type->tp_getattro != PyObject_GenericGetAttr && type->tp_getattro != hook_getattro) {
    return;
  }
  // _PyType_Lookup also assigns the class a version tag when it has none.
  if (_PyType_Lookup(type, str_getattribute) != object_getattribute) {
    return;
  }
  for (int i = 0; i < n; ++i) {
    if (_PyType_Lookup(type, names[i]) != nullptr) {
      return;
    }
  }
  if (std_dict) {
    PyObject* descr = _PyType_Lookup(type, str_dict);
    if (descr == nullptr || Py_TYPE(descr) != &PyGetSetDescr_Type ||
        reinterpret_cast<PyGetSetDescrObject*>(descr)->d_getset->get != standard_dict_getter) {
      return;
    }
  }
  if (PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) {
    gate->tag = type->tp_version_tag;
  }
}


// The entry ``name`` of obj's instance dict (new reference) when ``gate`` is open and the
// entry exists; nullptr otherwise (no Python error left set): the caller reads the slow way.
PyObject* gated_read(const DictGate& gate, PyObject* obj, PyObject* name) {
  if (!gate_open(gate, obj)) {
    return nullptr;
  }
  PyObject* dict = PyObject_GenericGetDict(obj, nullptr);
  if (dict == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* value = PyDict_CheckExact(dict) ? PyDict_GetItemWithError(dict, name) : nullptr;
  Py_XINCREF(value);
  Py_DECREF(dict);
  if (value == nullptr && PyErr_Occurred()) {
    PyErr_Clear();
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// ModuleCallsCheck

struct ModuleCall {
  PyObject* key;
  PyObject* cls;  // the exact expected class
  bool inlined;   // the class forward was inlined: the instance must not shadow it
  DictGate gate;  // cls: `m.__dict__` is the instance dict and no class attribute hides a hook
};

struct ModuleCallsCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  std::vector<std::pair<PyObject*, PyObject*>>* forwards;  // (class, its forward when traced)
  std::vector<ModuleCall>* calls;
};


// 1 true, 0 false, -1 error (Python error set): the same reads as module_calls._python_check.
int module_calls_run(ModuleCallsCheck* self, PyObject* modules) {
  if (self->calls == nullptr) {
    return 0;  // cleared by the cycle collector
  }
  for (const auto& [cls, forward] : *self->forwards) {
    PyObject* now = PyObject_GetAttr(cls, str_forward);
    if (now == nullptr) {
      return -1;
    }
    Py_DECREF(now);  // identity only; cls keeps its forward alive
    if (now != forward) {
      return 0;
    }
  }
  for (const ModuleCall& call : *self->calls) {
    PyObject* m = PyObject_GetItem(modules, call.key);
    if (m == nullptr) {
      return -1;
    }
    int ok = reinterpret_cast<PyObject*>(Py_TYPE(m)) == call.cls ? 1 : 0;
    PyObject* d = nullptr;
    if (ok) {
      // Open gate: `m.__dict__` is the instance dict itself (see DictGate), read without the
      // getattr of nn.Module's __getattr__ slot.
      if (gate_open(call.gate, m)) {
        d = PyObject_GenericGetDict(m, nullptr);
        if (d == nullptr) {
          PyErr_Clear();
        }
      }
      if (d == nullptr) {
        d = PyObject_GetAttr(m, str_dict);
      }
      if (d == nullptr) {
        ok = -1;
      }
    }
    const bool exact = d != nullptr && PyDict_CheckExact(d);
    for (int i = 0; ok == 1 && i < 4; ++i) {
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
        ok = -1;
        break;
      }
      const int truth = PyObject_IsTrue(hooks);
      Py_DECREF(hooks);
      ok = truth < 0 ? -1 : (truth ? 0 : 1);
    }
    if (ok == 1 && call.inlined) {
      const int shadowed =
          exact ? PyDict_Contains(d, str_forward) : PySequence_Contains(d, str_forward);
      ok = shadowed < 0 ? -1 : (shadowed ? 0 : 1);
    }
    Py_XDECREF(d);
    Py_DECREF(m);
    if (ok != 1) {
      return ok;
    }
  }
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
    for (auto& [cls, forward] : *self->forwards) {
      Py_CLEAR(cls);
      Py_CLEAR(forward);
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
    for (const auto& [cls, forward] : *self->forwards) {
      Py_VISIT(cls);
      Py_VISIT(forward);
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
  self->forwards = new std::vector<std::pair<PyObject*, PyObject*>>();
  self->calls = new std::vector<ModuleCall>();
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(forwards); ++i) {
    PyObject *cls, *forward;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(forwards, i), "O!O", &PyType_Type, &cls, &forward)) {
      Py_DECREF(self);
      return nullptr;
    }
    Py_INCREF(cls);
    Py_INCREF(forward);
    self->forwards->emplace_back(cls, forward);
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
    self->calls->push_back(ModuleCall{key, cls, inlined != 0, gate});
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
