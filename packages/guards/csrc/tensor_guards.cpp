// guards._tensor_guards: the C++ fast path of the generated guard check.
//
// Five callables, each built once per guard by guards/native.py and called by the generated
// Python check function:
//   TensorCheck(tensor) -> bool       class, dispatch keys, dtype, device, requires_grad, sizes
//                                      (dynamic dims: >= 2), strides (exact or stride relations)
//   DispatchTlsCheck() -> bool         the thread-local dispatch include/exclude sets
//   ModuleParamsCheck(module) -> bool  identities along _modules/_parameters, then a
//                                      TensorCheck per parameter
//   ModuleCallsCheck(modules) -> bool  the called submodules' class, hook dicts, forward
//   GlobalStateCheck() -> bool         grad mode, inference mode, default dtype, deterministic
//                                      flags, torch-function / torch-dispatch mode stack lengths
//
// Soundness: nothing is cached between calls; every call reads the live TensorImpl (a
// parameter's metadata changes in place under `p.data = other`, `t_()`, `requires_grad_()`).
// Any C++ exception or Python error while checking means "guard failed", as in the Python path.
//
// Only torch's own headers for the Python tensor object, dtype, device and TLS are included
// (no torch/extension.h, no pybind11 bindings of our own): the module is plain CPython API
// with vectorcall, so one call costs what calling a builtin does.

#include <Python.h>

#include <ATen/Context.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include "module_gate.h"

#include <cstddef>
#include <cstdint>
#include <vector>

// The build passes the sources' hash as an identifier (d<hex>): a quoted string would not
// survive every build tool's shell quoting.
#define STRATA_GUARDS_STR2(x) #x
#define STRATA_GUARDS_STR(x) STRATA_GUARDS_STR2(x)
#ifdef STRATA_GUARDS_SOURCE_DIGEST_ID
#define STRATA_GUARDS_SOURCE_DIGEST STRATA_GUARDS_STR(STRATA_GUARDS_SOURCE_DIGEST_ID)
#else
#define STRATA_GUARDS_SOURCE_DIGEST ""  // built without the hash (sources unknown)
#endif

namespace {

using strata_guards::DictGate;
using strata_guards::gate_init;
using strata_guards::dict_tag;

// ---------------------------------------------------------------------------------------------
// TensorCheck

struct TensorCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* cls;  // the exact expected class (strong reference)
  caffe2::TypeMeta dtype;
  c10::DeviceType device_type;
  c10::DeviceIndex device_index;  // checked only when >= 0 (as Tensor.get_device())
  bool requires_grad;
  uint64_t keys_raw;
  bool strided;  // false: no stride check (the dispatch keys pin the layout)
  std::vector<int64_t>* sizes;       // -1: dynamic, checked >= 2
  std::vector<int64_t>* strides;     // exact value when stride_rel[i] < 0
  std::vector<int64_t>* stride_rel;  // j >= 0: stride[i] == stride[j] * size[j]
};

// The check itself; false on any mismatch, and on any exception (Python error cleared).
bool tensor_check_run(TensorCheck* self, PyObject* obj) {
  if (reinterpret_cast<PyObject*>(Py_TYPE(obj)) != self->cls) {
    return false;
  }
  try {
    c10::TensorImpl* impl = THPVariable_Unpack(obj).unsafeGetTensorImpl();
    // Keys first: they pin layout, backend, inference, conj/neg bits, so strides() below is
    // only read on a tensor of the expected (strided) layout.
    if (impl->key_set().raw_repr() != self->keys_raw) {
      return false;
    }
    if (impl->dtype() != self->dtype) {
      return false;
    }
    const c10::Device device = impl->device();
    if (device.type() != self->device_type) {
      return false;
    }
    if (self->device_index >= 0 && device.index() != self->device_index) {
      return false;
    }
    if (impl->requires_grad() != self->requires_grad) {
      return false;
    }
    const c10::IntArrayRef sizes = impl->sizes();
    const std::vector<int64_t>& want = *self->sizes;
    const size_t ndim = want.size();
    if (sizes.size() != ndim) {
      return false;
    }
    for (size_t i = 0; i < ndim; ++i) {
      if (want[i] < 0 ? sizes[i] < 2 : sizes[i] != want[i]) {
        return false;
      }
    }
    if (self->strided) {
      const c10::IntArrayRef strides = impl->strides();
      if (strides.size() != ndim) {
        return false;
      }
      const std::vector<int64_t>& exact = *self->strides;
      const std::vector<int64_t>& rel = *self->stride_rel;
      for (size_t i = 0; i < ndim; ++i) {
        const int64_t j = rel[i];
        const int64_t expected = j < 0 ? exact[i] : strides[j] * sizes[j];
        if (strides[i] != expected) {
          return false;
        }
      }
    }
    return true;
  } catch (...) {
    // c10::Error (e.g. sizes() of a tensor without sizes) or a python_error from a subclass's
    // custom sizes/strides/device: the Python path's `except Exception: return False`.
  }
  if (PyErr_Occurred()) {
    PyErr_Clear();
  }
  return false;
}

PyObject* tensor_check_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "TensorCheck takes exactly one positional argument");
    return nullptr;
  }
  PyObject* out = tensor_check_run(reinterpret_cast<TensorCheck*>(callable), args[0])
      ? Py_True
      : Py_False;
  Py_INCREF(out);
  return out;
}

// Reads a tuple of Python ints into ``out``; false with a Python error on bad input.
bool read_int_tuple(PyObject* tuple, std::vector<int64_t>* out, const char* what) {
  if (!PyTuple_Check(tuple)) {
    PyErr_Format(PyExc_TypeError, "TensorCheck: %s must be a tuple of ints", what);
    return false;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  out->reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (v == -1 && PyErr_Occurred()) {
      return false;
    }
    out->push_back(static_cast<int64_t>(v));
  }
  return true;
}

void tensor_check_dealloc(PyObject* obj) {
  auto* self = reinterpret_cast<TensorCheck*>(obj);
  PyObject_GC_UnTrack(obj);
  Py_CLEAR(self->cls);
  delete self->sizes;
  delete self->strides;
  delete self->stride_rel;
  Py_TYPE(obj)->tp_free(obj);
}

int tensor_check_traverse(PyObject* obj, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<TensorCheck*>(obj)->cls);
  return 0;
}

int tensor_check_clear(PyObject* obj) {
  Py_CLEAR(reinterpret_cast<TensorCheck*>(obj)->cls);
  return 0;
}

// TensorCheck(cls, dtype, device, requires_grad, keys_raw, sizes, strides, stride_rel)
// sizes: tuple, -1 = dynamic; strides: None (not strided) or a tuple of exact strides;
// stride_rel: tuple, -1 = exact, else the dim j of the relation stride[j] * size[j].
PyObject* tensor_check_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {
      "cls", "dtype", "device", "requires_grad", "keys_raw", "sizes", "strides", "stride_rel",
      nullptr};
  PyObject *cls, *dtype, *device, *sizes, *strides, *stride_rel;
  int requires_grad;
  unsigned long long keys_raw;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "O!O!O!pKO!OO!", const_cast<char**>(kwlist), &PyType_Type, &cls,
          &THPDtypeType, &dtype, &THPDeviceType, &device, &requires_grad, &keys_raw,
          &PyTuple_Type, &sizes, &strides, &PyTuple_Type, &stride_rel)) {
    return nullptr;
  }
  if (!THPVariableClass ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(cls),
                        reinterpret_cast<PyTypeObject*>(THPVariableClass))) {
    PyErr_SetString(PyExc_TypeError, "TensorCheck: cls must be a torch.Tensor class");
    return nullptr;
  }
  auto* self = reinterpret_cast<TensorCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = tensor_check_vectorcall;
  Py_INCREF(cls);
  self->cls = cls;
  self->dtype = c10::scalarTypeToTypeMeta(reinterpret_cast<THPDtype*>(dtype)->scalar_type);
  const c10::Device dev = reinterpret_cast<THPDevice*>(device)->device;
  self->device_type = dev.type();
  self->device_index = dev.has_index() ? dev.index() : -1;
  self->requires_grad = requires_grad != 0;
  self->keys_raw = static_cast<uint64_t>(keys_raw);
  self->sizes = new std::vector<int64_t>();
  self->strides = new std::vector<int64_t>();
  self->stride_rel = new std::vector<int64_t>();
  self->strided = strides != Py_None;
  if (!read_int_tuple(sizes, self->sizes, "sizes") ||
      !read_int_tuple(stride_rel, self->stride_rel, "stride_rel") ||
      (self->strided && !read_int_tuple(strides, self->strides, "strides"))) {
    Py_DECREF(self);
    return nullptr;
  }
  const size_t ndim = self->sizes->size();
  if (self->strided &&
      (self->strides->size() != ndim || self->stride_rel->size() != ndim)) {
    PyErr_SetString(PyExc_ValueError, "TensorCheck: sizes, strides, stride_rel differ in length");
    Py_DECREF(self);
    return nullptr;
  }
  for (int64_t j : *self->stride_rel) {
    if (j >= static_cast<int64_t>(ndim)) {
      PyErr_SetString(PyExc_ValueError, "TensorCheck: stride_rel names a dim out of range");
      Py_DECREF(self);
      return nullptr;
    }
  }
  return reinterpret_cast<PyObject*>(self);
}

PyTypeObject TensorCheckType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---------------------------------------------------------------------------------------------
// DispatchTlsCheck

struct DispatchTlsCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  uint64_t include_raw;
  uint64_t exclude_raw;
};

PyObject* tls_check_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "DispatchTlsCheck takes no arguments");
    return nullptr;
  }
  auto* self = reinterpret_cast<DispatchTlsCheck*>(callable);
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  PyObject* out = tls.included_.raw_repr() == self->include_raw &&
          tls.excluded_.raw_repr() == self->exclude_raw
      ? Py_True
      : Py_False;
  Py_INCREF(out);
  return out;
}

PyObject* tls_check_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"include_raw", "exclude_raw", nullptr};
  unsigned long long inc, exc;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KK", const_cast<char**>(kwlist), &inc, &exc)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<DispatchTlsCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = tls_check_vectorcall;
  self->include_raw = static_cast<uint64_t>(inc);
  self->exclude_raw = static_cast<uint64_t>(exc);
  return reinterpret_cast<PyObject*>(self);
}

PyObject* tls_raw(PyObject*, PyObject*) {
  const c10::impl::LocalDispatchKeySet tls = c10::impl::tls_local_dispatch_key_set();
  return Py_BuildValue(
      "KK", static_cast<unsigned long long>(tls.included_.raw_repr()),
      static_cast<unsigned long long>(tls.excluded_.raw_repr()));
}

PyTypeObject DispatchTlsCheckType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---------------------------------------------------------------------------------------------
// ModuleParamsCheck

struct Step {
  Py_ssize_t parent;  // -1: the root module
  PyObject* dict_name;  // interned "_modules" or "_parameters"
  PyObject* key;
  PyObject* ref;  // weakref.ref to the guarded object
  PyObject* check;  // a TensorCheck for parameters, else nullptr
  DictGate gate;  // the parent's class, for reading dict_name from its instance dict
  Py_ssize_t same_container;  // an earlier step reading the same parent.dict_name, else -1
};

// What the last passing call on one root read at one step, keyed by dict version tags (0:
// nothing known).  Borrowed pointers, dereferenced only while the dict holding them still has
// the recorded tag (it then still holds them): see module_params_run.
struct Seen {
  uint64_t parent_dict_tag;  // the parent's instance dict, when container_seen was read in it
  PyObject* container_seen;
  uint64_t container_tag;  // the container, when obj_seen was read in it (and, with identity,
  PyObject* obj_seen;      // compared with ref: that object is still ref's referent)
};

// Without identity one check serves the modules of a stack called in turn: what each root's
// last passing call read is kept in a slot of its own (chosen by the root's address, which
// only picks a slot: the tags alone decide what may be reused).
constexpr size_t kRootSlots = 16;

// One step's reads in one call: owned references, and the tags read before them.
struct StepRead {
  PyObject* container;
  PyObject* obj;
  uint64_t parent_dict_tag;
  uint64_t container_tag;
};

struct ModuleParamsCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* root_ref;
  std::vector<Step>* steps;
  bool identity;  // false: any root, no identity compares (one frame shared by many modules)
  std::vector<Seen>* seen;  // steps->size() per slot: one slot with identity, else kRootSlots
  const void* slot_root[kRootSlots];  // the root each slot was filled for (compared only)
  size_t next_slot;  // the slot a new root takes (round robin)
};

// ``parent.<dict_name>`` (new reference, or nullptr with a Python error set), and in
// ``*parent_tag`` the tag of the parent's instance dict it was read from (0: read by getattr).
// With that dict unchanged since the last passing call (same tag), the container it held then.
PyObject* read_container(PyObject* parent, const Step& step, const Seen& seen,
                         uint64_t* parent_tag) {
  *parent_tag = 0;
  if (gate_open(step.gate, parent)) {
    PyObject* dict = PyObject_GenericGetDict(parent, nullptr);
    if (dict == nullptr) {
      PyErr_Clear();
    } else {
      PyObject* container = nullptr;
      if (PyDict_CheckExact(dict)) {
        // The tag is read before the entry: if the dict changes after this read, it never
        // has this tag again, so the pair can only ever be used while it is true.
        const uint64_t tag = dict_tag(dict);
        if (tag != 0 && tag == seen.parent_dict_tag) {
          container = seen.container_seen;
        } else {
          container = PyDict_GetItemWithError(dict, step.dict_name);
          if (container == nullptr) {
            PyErr_Clear();
          }
        }
        if (container != nullptr) {
          Py_INCREF(container);
          *parent_tag = tag;
        }
      }
      Py_DECREF(dict);
      if (container != nullptr) {
        return container;
      }
    }
  }
  return PyObject_GetAttr(parent, step.dict_name);
}

// ``container[key]`` (new reference, or nullptr with a Python error set), its tag in
// ``*container_tag`` (0: not an exact dict), and whether it is the object recorded for an
// unchanged container (its identity with the step's referent is then already known).
PyObject* read_item(PyObject* container, const Step& step, const Seen& seen,
                    uint64_t* container_tag, bool* known) {
  *container_tag = 0;
  *known = false;
  if (!PyDict_CheckExact(container)) {
    return PyObject_GetItem(container, step.key);
  }
  const uint64_t tag = dict_tag(container);
  PyObject* item;
  if (tag != 0 && tag == seen.container_tag) {
    item = seen.obj_seen;
    *known = true;
  } else {
    item = PyDict_GetItemWithError(container, step.key);
    if (item == nullptr) {
      if (!PyErr_Occurred()) {
        PyErr_SetObject(PyExc_KeyError, step.key);
      }
      return nullptr;
    }
  }
  Py_INCREF(item);
  *container_tag = tag;
  return item;
}

// The walk.  Every call compares the root with its weakref, each module's class gate, and
// runs every parameter's full TensorCheck (metadata is never cached: `p.data = ...` changes
// it behind the same object).  What may be skipped is only what a dict version tag proves
// unchanged: the lookups in an instance dict / `_modules` / `_parameters` dict that has the
// tag it had on the last passing call, and the weakref compare of the object found there
// (it is the object compared then).
bool module_params_run(ModuleParamsCheck* self, PyObject* root) {
  if (self->root_ref == nullptr) {
    return false;  // cleared by the cycle collector
  }
  if (self->identity) {
    PyObject* target = PyWeakref_GetObject(self->root_ref);
    if (root != target || root == Py_None) {
      return false;
    }
  } else if (root == Py_None) {
    return false;
  }
  std::vector<Step>& steps = *self->steps;
  const size_t n = steps.size();
  size_t slot = 0;
  if (!self->identity) {
    while (slot < kRootSlots && self->slot_root[slot] != root) {
      ++slot;
    }
    if (slot == kRootSlots) {  // a new root: take the next slot, forgetting what it held
      slot = self->next_slot;
      self->next_slot = (self->next_slot + 1) % kRootSlots;
      self->slot_root[slot] = root;
      for (size_t i = 0; i < n; ++i) {
        (*self->seen)[slot * n + i] = Seen{0, nullptr, 0, nullptr};
      }
    }
  }
  Seen* seen = self->seen->data() + slot * n;
  // Strong references for the duration of the call (a __getattr__ or a subclass's custom
  // sizes may run Python code that could drop the last other reference); on the stack for
  // trees of up to 128 steps.
  StepRead local[128];
  std::vector<StepRead> heap;
  StepRead* reads = local;
  if (n > 128) {
    heap.resize(n);
    reads = heap.data();
  }
  size_t done = 0;
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    const Step& step = steps[i];
    PyObject* parent = step.parent < 0 ? root : reads[static_cast<size_t>(step.parent)].obj;
    StepRead& r = reads[i];
    r.parent_dict_tag = 0;
    // Each parent's _modules / _parameters is read once per call, as the transformed code and
    // the Python path read each source once (the container of an earlier step is reused).
    if (step.same_container >= 0) {
      r.container = reads[static_cast<size_t>(step.same_container)].container;
      Py_INCREF(r.container);
    } else {
      r.container = read_container(parent, step, seen[i], &r.parent_dict_tag);
      if (r.container == nullptr) {
        PyErr_Clear();
        ok = false;
        break;
      }
    }
    bool known;
    r.obj = read_item(r.container, step, seen[i], &r.container_tag, &known);
    if (r.obj == nullptr) {
      Py_DECREF(r.container);
      PyErr_Clear();
      ok = false;
      break;
    }
    done = i + 1;
    if (!known && self->identity) {
      PyObject* expected = PyWeakref_GetObject(step.ref);
      if (r.obj != expected || r.obj == Py_None) {
        ok = false;
        break;
      }
    }
    if (!self->identity && r.obj == Py_None) {
      ok = false;
      break;
    }
    if (step.check != nullptr &&
        !tensor_check_run(reinterpret_cast<TensorCheck*>(step.check), r.obj)) {
      ok = false;
      break;
    }
  }
  if (ok) {
    // Record what this passing call read (see Step): each pair was read tag first.
    for (size_t i = 0; i < n; ++i) {
      seen[i] = Seen{reads[i].parent_dict_tag, reads[i].container, reads[i].container_tag,
                     reads[i].obj};
    }
  }
  for (size_t i = 0; i < done; ++i) {
    Py_DECREF(reads[i].obj);
    Py_DECREF(reads[i].container);
  }
  return ok;
}

PyObject* module_params_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "ModuleParamsCheck takes exactly one positional argument");
    return nullptr;
  }
  PyObject* out =
      module_params_run(reinterpret_cast<ModuleParamsCheck*>(callable), args[0]) ? Py_True
                                                                                 : Py_False;
  Py_INCREF(out);
  return out;
}

void module_params_clear_steps(ModuleParamsCheck* self) {
  if (self->steps == nullptr) {
    return;
  }
  for (Step& s : *self->steps) {
    Py_CLEAR(s.dict_name);
    Py_CLEAR(s.key);
    Py_CLEAR(s.ref);
    Py_CLEAR(s.check);
    Py_CLEAR(s.gate.type);
  }
  self->steps->clear();
}

void module_params_dealloc(PyObject* obj) {
  auto* self = reinterpret_cast<ModuleParamsCheck*>(obj);
  PyObject_GC_UnTrack(obj);
  Py_CLEAR(self->root_ref);
  module_params_clear_steps(self);
  delete self->steps;
  delete self->seen;
  Py_TYPE(obj)->tp_free(obj);
}

int module_params_traverse(PyObject* obj, visitproc visit, void* arg) {
  auto* self = reinterpret_cast<ModuleParamsCheck*>(obj);
  Py_VISIT(self->root_ref);
  if (self->steps != nullptr) {
    for (const Step& s : *self->steps) {
      Py_VISIT(s.key);
      Py_VISIT(s.ref);
      Py_VISIT(s.check);
      Py_VISIT(s.gate.type);
    }
  }
  return 0;
}

int module_params_clear(PyObject* obj) {
  auto* self = reinterpret_cast<ModuleParamsCheck*>(obj);
  Py_CLEAR(self->root_ref);
  module_params_clear_steps(self);
  return 0;
}

// Replaces ``*key`` (a strong reference) with the equal key object stored in
// ``parent.<dict_name>`` when that is a dict holding one: a lookup with the very object the
// dict stores skips the string compare.  Equal strings give the same lookup result either way;
// this only saves time.  Leaves no Python error set.
void share_key_object(PyObject* parent, PyObject* dict_name, PyObject** key) {
  PyObject* container = PyObject_GetAttr(parent, dict_name);
  if (container == nullptr) {
    PyErr_Clear();
    return;
  }
  if (PyDict_CheckExact(container)) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(container, &pos, &k, &v)) {
      if (PyUnicode_CheckExact(k) && PyUnicode_Compare(k, *key) == 0) {
        Py_INCREF(k);
        Py_SETREF(*key, k);
        break;
      }
    }
  }
  PyErr_Clear();
  Py_DECREF(container);
}

// ModuleParamsCheck(root_ref, steps): steps is a sequence of
// (parent: int, dict_name: str, key: str, ref: weakref.ref, check: TensorCheck | None);
// identity (default true): compare the root and each object read with its reference.
PyObject* module_params_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"root_ref", "steps", "identity", nullptr};
  PyObject *root_ref, *steps;
  int identity = 1;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "O!O!|p", const_cast<char**>(kwlist), &_PyWeakref_RefType, &root_ref,
          &PyTuple_Type, &steps, &identity)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<ModuleParamsCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = module_params_vectorcall;
  self->identity = identity != 0;
  Py_INCREF(root_ref);
  self->root_ref = root_ref;
  self->steps = new std::vector<Step>();
  const Py_ssize_t n = PyTuple_GET_SIZE(steps);
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t parent;
    PyObject *dict_name, *key, *ref, *check;
    if (!PyArg_ParseTuple(
            PyTuple_GET_ITEM(steps, i), "nUUO!O", &parent, &dict_name, &key,
            &_PyWeakref_RefType, &ref, &check)) {
      Py_DECREF(self);
      return nullptr;
    }
    if (parent < -1 || parent >= i) {
      PyErr_SetString(PyExc_ValueError, "ModuleParamsCheck: a step's parent must come before it");
      Py_DECREF(self);
      return nullptr;
    }
    if (check != Py_None && Py_TYPE(check) != &TensorCheckType) {
      PyErr_SetString(PyExc_TypeError, "ModuleParamsCheck: check must be a TensorCheck or None");
      Py_DECREF(self);
      return nullptr;
    }
    Py_INCREF(dict_name);
    PyUnicode_InternInPlace(&dict_name);
    Py_INCREF(key);
    Py_INCREF(ref);
    PyObject* tc = nullptr;
    if (check != Py_None) {
      Py_INCREF(check);
      tc = check;
    }
    // The gate is the class of the parent as it is now (the same object the check's identity
    // compare expects there); a parent already gone gets no gate.
    PyObject* parent_obj = PyWeakref_GetObject(
        parent < 0 ? root_ref : (*self->steps)[static_cast<size_t>(parent)].ref);
    DictGate gate{nullptr, 0};
    if (parent_obj != nullptr && parent_obj != Py_None) {
      gate_init(&gate, Py_TYPE(parent_obj), &dict_name, 1, false);
      share_key_object(parent_obj, dict_name, &key);
    } else {
      PyErr_Clear();
    }
    Py_ssize_t same = -1;
    for (size_t j = 0; j < self->steps->size(); ++j) {
      const Step& earlier = (*self->steps)[j];
      if (earlier.parent == parent && earlier.dict_name == dict_name) {
        same = earlier.same_container >= 0 ? earlier.same_container
                                           : static_cast<Py_ssize_t>(j);
        break;
      }
    }
    self->steps->push_back(Step{parent, dict_name, key, ref, tc, gate, same});
  }
  const size_t slots = self->identity ? 1 : kRootSlots;
  self->seen = new std::vector<Seen>(slots * self->steps->size(), Seen{0, nullptr, 0, nullptr});
  for (size_t i = 0; i < kRootSlots; ++i) {
    self->slot_root[i] = nullptr;
  }
  self->next_slot = 0;
  return reinterpret_cast<PyObject*>(self);
}

PyTypeObject ModuleParamsCheckType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---------------------------------------------------------------------------------------------
// GlobalStateCheck

struct GlobalStateCheck {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  bool grad_enabled;
  bool inference_mode;
  c10::ScalarType default_dtype;
  bool deterministic;
  bool check_warn_only;  // only when deterministic was on at capture, as the Python path
  bool deterministic_warn_only;
  int64_t function_modes;
  int64_t dispatch_modes;
};

bool global_state_run(const GlobalStateCheck* self) {
  if (c10::GradMode::is_enabled() != self->grad_enabled ||
      c10::InferenceMode::is_enabled() != self->inference_mode ||
      c10::get_default_dtype_as_scalartype() != self->default_dtype) {
    return false;
  }
  const at::Context& ctx = at::globalContext();
  if (ctx.deterministicAlgorithms() != self->deterministic) {
    return false;
  }
  if (self->check_warn_only &&
      ctx.deterministicAlgorithmsWarnOnly() != self->deterministic_warn_only) {
    return false;
  }
  return at::impl::PythonTorchFunctionTLS::stack_len() == self->function_modes &&
      c10::impl::TorchDispatchModeTLS::stack_len() == self->dispatch_modes;
}

PyObject* global_state_vectorcall(
    PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 0 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "GlobalStateCheck takes no arguments");
    return nullptr;
  }
  PyObject* out =
      global_state_run(reinterpret_cast<GlobalStateCheck*>(callable)) ? Py_True : Py_False;
  Py_INCREF(out);
  return out;
}

// GlobalStateCheck(grad_enabled, inference_mode, default_dtype, deterministic,
//                  deterministic_warn_only, check_warn_only, function_modes, dispatch_modes)
PyObject* global_state_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {
      "grad_enabled", "inference_mode", "default_dtype", "deterministic",
      "deterministic_warn_only", "check_warn_only", "function_modes", "dispatch_modes", nullptr};
  int grad, inference, det, warn, check_warn;
  PyObject* dtype;
  long long fmodes, dmodes;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "ppO!pppLL", const_cast<char**>(kwlist), &grad, &inference,
          &THPDtypeType, &dtype, &det, &warn, &check_warn, &fmodes, &dmodes)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<GlobalStateCheck*>(type->tp_alloc(type, 0));
  if (self == nullptr) {
    return nullptr;
  }
  self->vectorcall = global_state_vectorcall;
  self->grad_enabled = grad != 0;
  self->inference_mode = inference != 0;
  self->default_dtype = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
  self->deterministic = det != 0;
  self->deterministic_warn_only = warn != 0;
  self->check_warn_only = check_warn != 0;
  self->function_modes = static_cast<int64_t>(fmodes);
  self->dispatch_modes = static_cast<int64_t>(dmodes);
  return reinterpret_cast<PyObject*>(self);
}

PyTypeObject GlobalStateCheckType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---------------------------------------------------------------------------------------------
// Module

PyObject* impl_address(PyObject*, PyObject* obj) {
  if (!THPVariable_Check(obj)) {
    PyErr_SetString(PyExc_TypeError, "impl_address: expected a tensor");
    return nullptr;
  }
  return PyLong_FromVoidPtr(THPVariable_Unpack(obj).unsafeGetTensorImpl());
}

PyMethodDef module_methods[] = {
    {"dispatch_tls_raw", tls_raw, METH_NOARGS,
     "(include, exclude): the raw bits of the thread-local dispatch key sets, read in C++."},
    {"impl_address", impl_address, METH_O,
     "The address of a tensor's TensorImpl as this module reads it (compare with ._cdata)."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "guards._tensor_guards",
    "C++ fast path of guards' generated check (see guards/native.py).", -1, module_methods};

bool ready(PyTypeObject* type, const char* name, Py_ssize_t size, Py_ssize_t vectorcall_offset,
           newfunc tp_new, destructor dealloc, traverseproc traverse, inquiry clear) {
  type->tp_name = name;
  type->tp_basicsize = size;
  type->tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  if (traverse != nullptr) {
    type->tp_flags |= Py_TPFLAGS_HAVE_GC;
    type->tp_traverse = traverse;
    type->tp_clear = clear;
  }
  type->tp_vectorcall_offset = vectorcall_offset;
  type->tp_call = PyVectorcall_Call;
  type->tp_new = tp_new;
  type->tp_dealloc = dealloc;
  return PyType_Ready(type) == 0;
}

void plain_dealloc(PyObject* obj) {
  Py_TYPE(obj)->tp_free(obj);
}

}  // namespace

PyMODINIT_FUNC PyInit__tensor_guards() {
  if (!strata_guards::module_checks_init()) {
    return nullptr;
  }
  if (!strata_guards::module_calls_ready() || !strata_guards::weak_tuple_ready() ||
      !strata_guards::dict_keys_ready() || !strata_guards::state_tree_ready() ||
      !ready(&TensorCheckType, "guards._tensor_guards.TensorCheck", sizeof(TensorCheck),
             offsetof(TensorCheck, vectorcall), tensor_check_new, tensor_check_dealloc,
             tensor_check_traverse, tensor_check_clear) ||
      !ready(&DispatchTlsCheckType, "guards._tensor_guards.DispatchTlsCheck",
             sizeof(DispatchTlsCheck), offsetof(DispatchTlsCheck, vectorcall), tls_check_new,
             plain_dealloc, nullptr, nullptr) ||
      !ready(&ModuleParamsCheckType, "guards._tensor_guards.ModuleParamsCheck",
             sizeof(ModuleParamsCheck), offsetof(ModuleParamsCheck, vectorcall),
             module_params_new, module_params_dealloc, module_params_traverse,
             module_params_clear) ||
      !ready(&GlobalStateCheckType, "guards._tensor_guards.GlobalStateCheck",
             sizeof(GlobalStateCheck), offsetof(GlobalStateCheck, vectorcall), global_state_new,
             plain_dealloc, nullptr, nullptr)) {
    return nullptr;
  }
  PyObject* m = PyModule_Create(&module_def);
  if (m == nullptr) {
    return nullptr;
  }
  const std::pair<const char*, PyTypeObject*> types[] = {
      {"TensorCheck", &TensorCheckType},
      {"DispatchTlsCheck", &DispatchTlsCheckType},
      {"ModuleParamsCheck", &ModuleParamsCheckType},
      {"ModuleCallsCheck", &strata_guards::ModuleCallsCheckType},
      {"WeakTuple", &strata_guards::WeakTupleType},
      {"DictKeysCheck", &strata_guards::DictKeysCheckType},
      {"StateTree", &strata_guards::StateTreeType},
      {"GlobalStateCheck", &GlobalStateCheckType}};
  for (const auto& [name, type] : types) {
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, reinterpret_cast<PyObject*>(type)) < 0) {
      Py_DECREF(type);
      Py_DECREF(m);
      return nullptr;
    }
  }
  // The hash of the sources this build was made from (guards/build.py source_digest): the
  // loader rebuilds a build left from older sources rather than run with features missing.
  if (PyModule_AddStringConstant(m, "source_digest", STRATA_GUARDS_SOURCE_DIGEST) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
