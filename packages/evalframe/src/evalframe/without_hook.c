/*
 * Running with the thread's hook off: the helpers that save and restore a
 * thread's callback state, frames of code marked SKIP_RECURSIVE, and
 * evalframe.without_hook(fn), a callable that runs fn with this thread's hook
 * off, as set_callback(None) around the call would, without a Python frame.
 *
 * Calling a without_hook object saves the thread's callback state (callback
 * and run_only() depth), clears both so that every frame fn starts runs as is
 * (no callback, no cached entries), calls fn with the same arguments, and puts
 * the saved state back exactly, whether fn returned or raised.  While no
 * thread has a callback the interpreter's eval-frame function is uninstalled
 * (the usual bookkeeping of _evalframe.c), so fn's own Python calls are
 * inlined again.
 */
#include "_evalframe.h"

void
ef_hook_off(ThreadState *st, ef_saved_state *saved)
{
    int was_active = ef_thread_active(st);
    saved->callback = st->callback; /* the reference moves into `saved` */
    saved->run_only = st->run_only;
    st->callback = NULL;
    st->run_only = 0;
    ef_note_activity(was_active, 0);
}

void
ef_hook_restore(ThreadState *st, ef_saved_state *saved)
{
    int was_active = ef_thread_active(st);
    PyObject *current = st->callback;
    st->callback = saved->callback;
    st->run_only = saved->run_only;
    saved->callback = NULL;
    ef_note_activity(was_active, ef_thread_active(st));
    /* Last: dropping a callback that fn installed and left may run any code. */
    Py_XDECREF(current);
}

#if EF_HOOK
/* Run a frame of code marked SKIP_RECURSIVE: the thread's hook is off for it
 * and every frame it starts, as in without_hook (while no thread has a
 * callback the eval-frame function is uninstalled, so its Python calls are
 * inlined again); the thread's state comes back exactly after. */
PyObject *
ef_run_unhooked(PyThreadState *ts, ThreadState *st, _PyInterpreterFrame *frame)
{
    ef_saved_state saved;
    Py_INCREF(st);
    ef_hook_off(st, &saved);
    PyObject *result = ef_eval_default(ts, frame, 0);
    ef_hook_restore(st, &saved);
    Py_DECREF(st);
    return result;
}

#endif

/* Both callables share one layout: `callback` is NULL for without_hook. */
typedef struct {
    PyObject_HEAD
    PyObject *fn;
    PyObject *callback;
    PyObject *dict;
    vectorcallfunc vectorcall;
} WithoutHook;

static PyObject *
wh_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    WithoutHook *self = (WithoutHook *)op;
    ThreadState *st = ef_current_state(1);
    if (st == NULL) {
        return NULL;
    }
    /* The state lives in the thread-state dict; hold it for the call. */
    Py_INCREF(st);
    ef_saved_state saved;
    ef_hook_off(st, &saved);
    PyObject *result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    ef_hook_restore(st, &saved);
    Py_DECREF(st);
    return result;
}

/* with_callback: the thread's callback is `callback` for the call (its run_only()
 * depth is left as it is), then the saved state comes back exactly. */
static PyObject *
wc_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    WithoutHook *self = (WithoutHook *)op;
    ThreadState *st = ef_current_state(1);
    if (st == NULL) {
        return NULL;
    }
    Py_INCREF(st);
    ef_saved_state saved;
    int was_active = ef_thread_active(st);
    saved.callback = st->callback; /* the reference moves into `saved` */
    saved.run_only = st->run_only;
    st->callback = Py_NewRef(self->callback);
    ef_note_activity(was_active, 1);
    PyObject *result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    ef_hook_restore(st, &saved);
    Py_DECREF(st);
    return result;
}

static PyObject *
wc_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *callback, *fn;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "with_callback() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "with_callback", 2, 2, &callback, &fn)) {
        return NULL;
    }
#if !EF_HOOK
    PyErr_SetString(PyExc_RuntimeError,
                    "evalframe: the frame-evaluation hook is not available on this "
                    "CPython version (supported: 3.11, 3.12, 3.13)");
    return NULL;
#endif
    if (!PyCallable_Check(callback) || !PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "with_callback() takes two callables, not %.200s and %.200s",
                     Py_TYPE(callback)->tp_name, Py_TYPE(fn)->tp_name);
        return NULL;
    }
    WithoutHook *self = (WithoutHook *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->fn = Py_NewRef(fn);
    self->callback = Py_NewRef(callback);
    self->dict = NULL;
    self->vectorcall = wc_vectorcall;
    return (PyObject *)self;
}

static PyObject *
wh_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fn;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "without_hook() takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "without_hook", 1, 1, &fn)) {
        return NULL;
    }
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "without_hook() takes a callable, not %.200s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    WithoutHook *self = (WithoutHook *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->fn = Py_NewRef(fn);
    self->callback = NULL;
    self->dict = NULL;
    self->vectorcall = wh_vectorcall;
    return (PyObject *)self;
}

static int
wh_traverse(WithoutHook *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->callback);
    Py_VISIT(self->dict);
    return 0;
}

static int
wh_clear(WithoutHook *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->callback);
    Py_CLEAR(self->dict);
    return 0;
}

static void
wh_dealloc(WithoutHook *self)
{
    PyObject_GC_UnTrack(self);
    wh_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
wh_call(PyObject *op, PyObject *args, PyObject *kwargs)
{
    /* Reached only by callers that ignore vectorcall. */
    return PyVectorcall_Call(op, args, kwargs);
}

static PyObject *
wh_repr(WithoutHook *self)
{
    return PyUnicode_FromFormat("<evalframe.without_hook of %R>", self->fn);
}

static PyObject *
wc_repr(WithoutHook *self)
{
    return PyUnicode_FromFormat("<evalframe.with_callback %R of %R>", self->callback, self->fn);
}

static PyObject *
wc_get_callback(WithoutHook *self, void *closure)
{
    return Py_NewRef(self->callback);
}

static PyObject *
wh_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    /* Bind like a function, so that it can stand in for one on a class. */
    if (obj == NULL || obj == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, obj);
}

static PyObject *
wh_get_wrapped(WithoutHook *self, void *closure)
{
    return Py_NewRef(self->fn);
}

static int
wh_set_wrapped(WithoutHook *self, PyObject *value, void *closure)
{
    /* functools.update_wrapper() sets __wrapped__ to the callable itself:
     * allow that, and nothing that would change what the object runs. */
    if (value == self->fn) {
        return 0;
    }
    PyErr_SetString(PyExc_AttributeError,
                    "without_hook.__wrapped__ is the callable it runs and cannot be "
                    "changed; make a new without_hook to run another");
    return -1;
}

/* Like a function, a wrapper is atomic for copy and deepcopy: a copy of an object
 * holding one (a compiled nn.Module) shares it, as it would share a function. */
static PyObject *
wh_copy(PyObject *self, PyObject *unused)
{
    return Py_NewRef(self);
}

static PyObject *
wh_deepcopy(PyObject *self, PyObject *memo)
{
    return Py_NewRef(self);
}

static PyMethodDef wh_methods[] = {
    {"__copy__", wh_copy, METH_NOARGS, "The wrapper itself (atomic, like a function)."},
    {"__deepcopy__", wh_deepcopy, METH_O, "The wrapper itself (atomic, like a function)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef wh_getset[] = {
    {"__wrapped__", (getter)wh_get_wrapped, (setter)wh_set_wrapped, "The callable it runs.",
     NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

PyTypeObject ef_WithoutHook_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "evalframe.without_hook",
    .tp_basicsize = sizeof(WithoutHook),
    .tp_dealloc = (destructor)wh_dealloc,
    .tp_vectorcall_offset = offsetof(WithoutHook, vectorcall),
    .tp_repr = (reprfunc)wh_repr,
    .tp_call = wh_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "without_hook(fn)\n--\n\n"
              "A callable that runs fn(*args, **kwargs) with this thread's frame hook off\n"
              "(no callback, no cached entries, as set_callback(None) around the call)\n"
              "and then restores the thread's previous callback state exactly.",
    .tp_traverse = (traverseproc)wh_traverse,
    .tp_clear = (inquiry)wh_clear,
    .tp_getset = wh_getset,
    .tp_methods = wh_methods,
    .tp_descr_get = wh_descr_get,
    .tp_dictoffset = offsetof(WithoutHook, dict),
    .tp_new = wh_new,
};

static PyGetSetDef wc_getset[] = {
    {"__wrapped__", (getter)wh_get_wrapped, (setter)wh_set_wrapped, "The callable it runs.",
     NULL},
    {"callback", (getter)wc_get_callback, NULL, "The callback set while it runs.", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL},
};

PyTypeObject ef_WithCallback_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "evalframe.with_callback",
    .tp_basicsize = sizeof(WithoutHook),
    .tp_dealloc = (destructor)wh_dealloc,
    .tp_vectorcall_offset = offsetof(WithoutHook, vectorcall),
    .tp_repr = (reprfunc)wc_repr,
    .tp_call = wh_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "with_callback(callback, fn)\n--\n\n"
              "A callable that runs fn(*args, **kwargs) with this thread's callback set to\n"
              "callback (as set_callback(callback) around the call; run_only() depth kept)\n"
              "and then restores the thread's previous callback state exactly.",
    .tp_traverse = (traverseproc)wh_traverse,
    .tp_clear = (inquiry)wh_clear,
    .tp_getset = wc_getset,
    .tp_methods = wh_methods,
    .tp_descr_get = wh_descr_get,
    .tp_dictoffset = offsetof(WithoutHook, dict),
    .tp_new = wc_new,
};
