"""A cheaper call of a compiled C++ kernel than ctypes': one small CPython extension, built once
per Python and cached, whose ``KernelCall(address, nargs, keep)`` objects call a kernel
function by address with vectorcall.

A ctypes call converts each argument through its ``argtypes`` (``c_void_p``/``c_int64``
objects) and costs ~1.3-1.9 us for a kernel of 6 pointers; a mobilenet_v3_small call makes 65
of them.  A ``KernelCall`` reads each Python int into a 64-bit register argument and calls the
function pointer as a function of that many 64-bit integer arguments: every kernel parameter
is a pointer or an int64, which the x86-64 System V and AArch64 calling conventions pass
alike, so the call is the one the kernel's own signature describes.  It releases the GIL
around the kernel, as ctypes does.  Where the extension cannot be built or loaded (no C
compiler, another platform), ``fast_kernel`` returns the ctypes function unchanged.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import platform
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["MAX_ARGS", "fast_kernel", "kernel_call_module", "load_extension"]

log = logging.getLogger("strata.inductor")

#: Kernels with more parameters than this keep their ctypes call.
MAX_ARGS = 48
_MODULE = "_strata_kernel_call"


def _source() -> str:
    cases = []
    for n in range(MAX_ARGS + 1):
        params = ", ".join(["u"] * n) or "void"
        args = ", ".join(f"a[{i}]" for i in range(n))
        cases.append(f"    case {n}: ((void (*)({params}))fn)({args}); break;")
    switch = "\n".join(cases)
    return f"""\
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t u;

typedef struct {{
  PyObject_HEAD
  vectorcallfunc vectorcall;
  void* fn;
  Py_ssize_t nargs;
  PyObject* keep;
}} KernelCall;

static void run(void* fn, Py_ssize_t n, const u* a) {{
  switch (n) {{
{switch}
    default: break;
  }}
}}

static PyObject* kc_vectorcall(PyObject* obj, PyObject* const* args, size_t nargsf,
                               PyObject* kwnames) {{
  KernelCall* self = (KernelCall*)obj;
  const Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (n != self->nargs || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {{
    PyErr_Format(PyExc_TypeError, "this kernel takes %zd positional arguments", self->nargs);
    return NULL;
  }}
  u a[{MAX_ARGS} + 1];
  for (Py_ssize_t i = 0; i < n; ++i) {{
    if (args[i] == Py_None) {{
      a[i] = 0;
      continue;
    }}
    a[i] = (u)PyLong_AsUnsignedLongLongMask(args[i]);
    if (a[i] == (u)-1 && PyErr_Occurred()) {{
      return NULL;
    }}
  }}
  Py_BEGIN_ALLOW_THREADS
  run(self->fn, n, a);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}}

static PyObject* kc_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {{
  PyObject* address;
  Py_ssize_t nargs;
  PyObject* keep;
  if (!PyArg_ParseTuple(args, "OnO", &address, &nargs, &keep)) {{
    return NULL;
  }}
  if (nargs < 0 || nargs > {MAX_ARGS}) {{
    PyErr_SetString(PyExc_ValueError, "KernelCall: too many arguments");
    return NULL;
  }}
  void* fn = PyLong_AsVoidPtr(address);
  if (fn == NULL) {{
    if (!PyErr_Occurred()) {{
      PyErr_SetString(PyExc_ValueError, "KernelCall: a null function address");
    }}
    return NULL;
  }}
  KernelCall* self = (KernelCall*)type->tp_alloc(type, 0);
  if (self == NULL) {{
    return NULL;
  }}
  self->vectorcall = kc_vectorcall;
  self->fn = fn;
  self->nargs = nargs;
  Py_INCREF(keep);
  self->keep = keep;
  return (PyObject*)self;
}}

static void kc_dealloc(PyObject* obj) {{
  PyObject_GC_UnTrack(obj);
  Py_CLEAR(((KernelCall*)obj)->keep);
  Py_TYPE(obj)->tp_free(obj);
}}

static int kc_traverse(PyObject* obj, visitproc visit, void* arg) {{
  Py_VISIT(((KernelCall*)obj)->keep);
  return 0;
}}

static int kc_clear(PyObject* obj) {{
  Py_CLEAR(((KernelCall*)obj)->keep);
  return 0;
}}

static PyTypeObject KernelCallType = {{PyVarObject_HEAD_INIT(NULL, 0)}};

static struct PyModuleDef module_def = {{
    PyModuleDef_HEAD_INIT, "{_MODULE}", "Calls compiled kernels by address.", -1, NULL}};

PyMODINIT_FUNC PyInit_{_MODULE}(void) {{
  KernelCallType.tp_name = "{_MODULE}.KernelCall";
  KernelCallType.tp_basicsize = sizeof(KernelCall);
  KernelCallType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC;
  KernelCallType.tp_vectorcall_offset = offsetof(KernelCall, vectorcall);
  KernelCallType.tp_call = PyVectorcall_Call;
  KernelCallType.tp_new = kc_new;
  KernelCallType.tp_dealloc = kc_dealloc;
  KernelCallType.tp_traverse = kc_traverse;
  KernelCallType.tp_clear = kc_clear;
  if (PyType_Ready(&KernelCallType) < 0) {{
    return NULL;
  }}
  PyObject* m = PyModule_Create(&module_def);
  if (m == NULL) {{
    return NULL;
  }}
  Py_INCREF(&KernelCallType);
  if (PyModule_AddObject(m, "KernelCall", (PyObject*)&KernelCallType) < 0) {{
    Py_DECREF(&KernelCallType);
    Py_DECREF(m);
    return NULL;
  }}
  return m;
}}
"""


def _build(cache_dir: Path, cc: str) -> ModuleType:
    source = _source()
    tag = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    folder = cache_dir / "kernel_call"
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"{_MODULE}-{tag}-{digest}.so"
    if not lib.exists():
        include = sysconfig.get_paths()["include"]
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src = Path(tmp) / "kernel_call.c"
            src.write_text(source)
            out = Path(tmp) / "kernel_call.so"
            cmd = [cc, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", str(out), str(src)]
            subprocess.run(cmd, check=True, capture_output=True, timeout=120)
            os.replace(out, lib)  # atomic: another process may build the same file
    return load_extension(_MODULE, lib)


def load_extension(name: str, lib: Path) -> ModuleType:
    """The CPython extension module ``name`` built into the shared library ``lib``."""
    spec = importlib.util.spec_from_file_location(
        name, lib, loader=importlib.machinery.ExtensionFileLoader(name, str(lib))
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_loaded: dict[tuple[Path, str], ModuleType | None] = {}


def kernel_call_module(cache_dir: Path, cc: str = "cc") -> ModuleType | None:
    """The built extension (built at the first call of a process, cached on disk under
    ``cache_dir``), or None where it cannot be built or this platform's calling convention
    is not known to pass pointers and int64 alike (then kernels keep their ctypes call)."""
    key = (cache_dir, cc)
    if key not in _loaded:
        module = None
        if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64") and (
            os.environ.get("STRATA_INDUCTOR_CTYPES") != "1"
        ):
            try:
                module = _build(cache_dir, cc)
            except Exception as exc:
                log.debug("kernels keep their ctypes calls: %s", exc)
        _loaded[key] = module
    return _loaded[key]


def fast_kernel(fn: Any, nargs: int, module: ModuleType | None) -> Callable[..., None]:
    """``fn`` (a ctypes function of ``nargs`` pointer/int64 parameters) as a KernelCall
    where the extension is loaded and the kernel is not too wide, else ``fn`` itself."""
    if module is None or nargs > MAX_ARGS:
        return fn  # type: ignore[no-any-return]
    address = ctypes.cast(fn, ctypes.c_void_p).value
    return module.KernelCall(address, nargs, fn)  # type: ignore[no-any-return]
