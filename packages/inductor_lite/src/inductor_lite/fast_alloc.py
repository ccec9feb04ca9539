"""Buffers and views for the CPU wrapper without the dispatcher: a small libtorch extension.

A generated CPU wrapper allocates every buffer that leaves the call (a training forward's saved
activations, its outputs) with ``torch.empty_strided`` and names views of buffers with
``as_strided``; from Python each costs 1-2 us of argument parsing and dispatch, and a small
transformer's forward and backward make ~200 of them per step: a tenth of a tiny model's step.
The extension does the same two things in C++:

- ``empty(sizes, strides, dtype)``: a CPU tensor of that layout, uninitialised
  (``at::detail::empty_strided_cpu``, the allocation ``torch.empty_strided`` ends in);
- ``view(t, sizes, strides, offset)``: a tensor on ``t``'s storage at ``t``'s storage offset
  plus ``offset``, sharing ``t``'s version counter. Where that shortcut could differ from
  ``t.as_strided`` (``t`` needs autograd here, is a tensor subclass or functional wrapper, is
  not strided, a ``TorchDispatchMode`` is active (it sees ``empty_strided`` then too), or the view
  would not fit its storage: ``as_strided`` raises then) it calls
  ``as_strided``. The view is a plain ``torch.Tensor`` (a ``Parameter``'s view is too, as
  ``as_strided`` gives).

It is built at first use (against torch's headers and libraries; ~30 s) into
``$STRATA_CACHE_DIR/fast_alloc`` (else ``~/.cache/strata/fast_alloc``), one folder per torch
version, Python ABI, compiler and source hash, and loaded from there by later processes. The
compilers tried, in order: ``$CXX``, ``c++``, ``g++``, ``clang++``; the first whose library builds
*and loads* is kept (a compiler newer than the process's libstdc++ builds a library that does not
load). ``STRATA_FAST_ALLOC=0`` turns it off; where no compiler gives a library the wrapper keeps
``torch.empty_strided`` and ``as_strided``, ``build_error[0]`` holds each compiler's failure and
one DEBUG line on ``strata.inductor`` says it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType

import torch

from .kernel_call import load_extension

__all__ = ["SOURCE", "build_error", "fast_alloc_module"]

log = logging.getLogger("strata.inductor")

_MODULE = "_strata_fast_alloc"

SOURCE = r"""
#include <Python.h>
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

bool read_ints(PyObject* seq, c10::SmallVector<int64_t, 8>& out) {
  PyObject* fast = PySequence_Fast(seq, "sizes and strides are sequences of ints");
  if (fast == nullptr) return false;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject** items = PySequence_Fast_ITEMS(fast);
  out.resize(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    const long long v = PyLong_AsLongLong(items[i]);
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      return false;
    }
    out[i] = v;
  }
  Py_DECREF(fast);
  return true;
}

PyObject* empty(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3 || !THPDtype_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "empty(sizes, strides, dtype)");
    return nullptr;
  }
  c10::SmallVector<int64_t, 8> sizes, strides;
  if (!read_ints(args[0], sizes) || !read_ints(args[1], strides)) return nullptr;
  if (sizes.size() != strides.size()) {
    PyErr_SetString(PyExc_ValueError, "sizes and strides differ in length");
    return nullptr;
  }
  HANDLE_TH_ERRORS
  const auto dtype = reinterpret_cast<THPDtype*>(args[2])->scalar_type;
  if (c10::impl::TorchDispatchModeTLS::stack_len() > 0) {  // a mode sees every allocation
    return THPVariable_Wrap(
        at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype).device(at::kCPU)));
  }
  return THPVariable_Wrap(at::detail::empty_strided_cpu(sizes, strides, dtype));
  END_HANDLE_TH_ERRORS
}

// The largest byte the view reads, plus one; -1 where a stride is negative.
int64_t extent(c10::IntArrayRef sizes, c10::IntArrayRef strides, int64_t offset, int64_t item) {
  int64_t last = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return 0;
    if (strides[i] < 0) return -1;
    last += (sizes[i] - 1) * strides[i];
  }
  return (last + 1) * item;
}

PyObject* view(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 4 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "view(tensor, sizes, strides, offset)");
    return nullptr;
  }
  c10::SmallVector<int64_t, 8> sizes, strides;
  if (!read_ints(args[1], sizes) || !read_ints(args[2], strides)) return nullptr;
  const long long offset = PyLong_AsLongLong(args[3]);
  if (offset == -1 && PyErr_Occurred()) return nullptr;
  HANDLE_TH_ERRORS
  {
    const at::Tensor& t = THPVariable_Unpack(args[0]);
    const int64_t start = t.storage_offset() + offset;
    const auto keys = t.key_set();
    const bool plain =
        t.layout() == at::kStrided && t.has_storage() && sizes.size() == strides.size() &&
        !keys.has(c10::DispatchKey::Python) && !keys.has(c10::DispatchKey::Functionalize) &&
        !(t.requires_grad() && at::GradMode::is_enabled()) && start >= 0 &&
        c10::impl::TorchDispatchModeTLS::stack_len() == 0;
    if (plain) {
      const int64_t need = extent(sizes, strides, start, t.element_size());
      if (need >= 0 && static_cast<size_t>(need) <= t.storage().nbytes()) {
        auto impl = c10::make_intrusive<c10::TensorImpl>(
            c10::TensorImpl::VIEW, c10::Storage(t.storage()), keys, t.dtype());
        impl->set_sizes_and_strides(sizes, strides, start);
        impl->set_version_counter(t.unsafeGetTensorImpl()->version_counter());
        return THPVariable_Wrap(at::Tensor(std::move(impl)));
      }
    }
    return THPVariable_Wrap(t.as_strided(sizes, strides, start));
  }
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"empty", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(empty)), METH_FASTCALL,
     "empty(sizes, strides, dtype): an uninitialised CPU tensor of that layout"},
    {"view", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(view)), METH_FASTCALL,
     "view(t, sizes, strides, offset): t.as_strided(sizes, strides, t.storage_offset() + offset)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_strata_fast_alloc", nullptr, -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__strata_fast_alloc(void) { return PyModule_Create(&module_def); }
"""


def _folder(compiler: str) -> Path:
    explicit = os.environ.get("STRATA_CACHE_DIR")
    root = (
        Path(explicit)
        if explicit
        else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "strata"
    )
    tag = sysconfig.get_config_var("SOABI") or f"py{sys.version_info[0]}{sys.version_info[1]}"
    digest = hashlib.sha256(f"{compiler}\n{SOURCE}".encode()).hexdigest()[:16]
    return root / "fast_alloc" / f"torch-{torch.__version__}-{tag}-{digest}"


def _compilers() -> list[str]:
    """The C++ compilers to try, in order, each once: ``$CXX``, then those on the PATH."""
    found: list[str] = []
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        path = shutil.which(name) if name else None
        if path and path not in found:
            found.append(path)
    return found


def _build(compiler: str) -> ModuleType:
    from torch.utils.cpp_extension import include_paths, library_paths

    folder = _folder(compiler)
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / f"{_MODULE}.so"
    if not lib.exists():
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            src = Path(tmp) / "fast_alloc.cpp"
            src.write_text(SOURCE)
            out = Path(tmp) / f"{_MODULE}.so"
            libs = library_paths()
            cmd = [
                compiler, "-O2", "-g0", "-shared", "-fPIC", "-std=c++17",
                f"-D_GLIBCXX_USE_CXX11_ABI={int(torch.compiled_with_cxx11_abi())}",
                *(f"-I{p}" for p in include_paths()),
                f"-I{sysconfig.get_paths()['include']}",
                str(src), "-o", str(out),
                *(f"-L{p}" for p in libs), *(f"-Wl,-rpath,{p}" for p in libs),
                "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
            ]  # fmt: skip
            done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
            if done.returncode:
                raise RuntimeError(f"the build failed: {done.stderr.strip()[-2000:]}")
            os.replace(out, lib)  # atomic: another process may build the same file
    return load_extension(_MODULE, lib)


def _first_that_loads() -> ModuleType | None:
    failures = []
    for compiler in _compilers():
        try:
            module = _build(compiler)
        except Exception as exc:  # a compiler error, or a library that does not load
            failures.append(f"{compiler}: {type(exc).__name__}: {exc}")
            continue
        build_error[0] = ""
        return module
    build_error[0] = "; ".join(failures) or "no C++ compiler found (set CXX)"
    log.debug("the CPU wrapper keeps torch.empty_strided and as_strided: %s", build_error[0])
    return None


_loaded: list[ModuleType | None] = []
#: why the extension is not loaded, where it is not ("" where it is)
build_error: list[str] = [""]


def fast_alloc_module() -> ModuleType | None:
    """The extension (built at the first call of a process where no build is cached), or None
    where it is turned off or cannot be built."""
    if not _loaded:
        module = None
        if os.environ.get("STRATA_FAST_ALLOC") != "0":
            module = _first_that_loads()
        _loaded.append(module)
    return _loaded[0]
