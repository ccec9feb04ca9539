/*
 * evalframe._evalframe: the PEP 523 frame-evaluation hook.
 *
 * This file dispatches; Python decides.  For each fresh frame of a thread that
 * has a callback (or is inside run_only()), it consults the code object's cache
 * (kept in co_extra), calls the guards newest first, and on a hit runs the
 * entry's code in place of the frame.  On a miss it calls the thread's callback
 * with the hook disabled and honours its answer (None, SKIP or an Entry).
 *
 * Running another code object for a frame (CPython 3.11 and 3.12): the fresh
 * frame is the top of the thread's frame stack and has only its arguments set,
 * so we retarget it in place: swap f_code, reset the instruction pointer and
 * the non-argument slots, and grow the frame when the new code needs more room.
 * When the stack chunk has no room left, 3.12 moves the frame into a new chunk
 * (the evaluator pops it like any chunk-start frame); 3.11, whose caller clears
 * the frame it pushed, calls a function built from the new code instead.
 *
 * The frame object handed to the callback is a snapshot owned by the frame
 * object (same code, globals, builtins, arguments and f_back); the running
 * frame never sees it, so whatever the callback does to it cannot disturb the
 * frame that runs next.
 *
 * CPython 3.13 works like 3.12 (f_executable and instr_ptr renamed); 3.14+
 * builds without the hook: HOOK_AVAILABLE is False and the Python layer says why.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define EF_HOOK 1
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#else
#define EF_HOOK 0
#endif

#if PY_VERSION_HEX >= 0x030C0000
#define EF_GET_EXTRA PyUnstable_Code_GetExtra
#define EF_SET_EXTRA PyUnstable_Code_SetExtra
#define EF_REQUEST_EXTRA PyUnstable_Eval_RequestCodeExtraIndex
#else
#define EF_GET_EXTRA _PyCode_GetExtra
#define EF_SET_EXTRA _PyCode_SetExtra
#define EF_REQUEST_EXTRA _PyEval_RequestCodeExtraIndex
#endif

/* ------------------------------------------------------------------ */
/* Module-wide state (one interpreter; the GIL protects all of it).    */

static Py_ssize_t extra_index = -1;
static PyObject *entry_type = NULL;   /* evalframe.Entry, registered by Python */
static PyObject *skip_marker = NULL;  /* evalframe.SKIP, registered by Python */
static PyObject *registry = NULL;     /* weakref.WeakSet of code objects with a cache */
static PyObject *state_key = NULL;    /* key of our record in the thread-state dict */
static Py_tss_t tss_key = Py_tss_NEEDS_INIT;
static Py_ssize_t active_threads = 0; /* threads with a callback or inside run_only() */
static int force_slow_path = 0;       /* tests: take the no-room path every time */
static int passthrough = 0;           /* benchmarks: measure a do-nothing hook */

/* Counters of which path ran; tests read them to prove a path was taken. */
static struct {
    unsigned long long callbacks, hits, misses, in_place, relocated, chunk_replaced, called;
} stats;

/* ------------------------------------------------------------------ */
/* The per-code cache: entries as tuples (guard, code), oldest first.  An
 * entry whose code is the cache's own code object stores None instead: code
 * objects are invisible to the cycle collector, so a reference from a code
 * object's extra slot back to itself would keep it alive forever.  For the same
 * reason the Entry objects themselves are not kept (they hold their code);
 * cache_entries() makes equal ones. */

typedef struct {
    PyObject_HEAD
    PyObject *entries; /* list */
    int skip;
} CodeCache;

static void
codecache_dealloc(CodeCache *self)
{
    Py_XDECREF(self->entries);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject CodeCache_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "evalframe._evalframe._CodeCache",
    .tp_basicsize = sizeof(CodeCache),
    .tp_dealloc = (destructor)codecache_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Cache entries and the SKIP mark of one code object.",
};

static void
free_extra(void *extra)
{
    /* Runs when a code object dies: its cache goes with it. */
    Py_XDECREF((PyObject *)extra);
}

static CodeCache *
cache_of(PyObject *code)
{
    void *extra = NULL;
    if (EF_GET_EXTRA(code, extra_index, &extra) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return (CodeCache *)extra;
}

static CodeCache *
cache_of_or_create(PyObject *code, int *disabled)
{
    CodeCache *cache = cache_of(code);
    if (cache != NULL) {
        return cache;
    }
    cache = PyObject_New(CodeCache, &CodeCache_Type);
    if (cache == NULL) {
        return NULL;
    }
    cache->skip = 0;
    cache->entries = PyList_New(0);
    if (cache->entries == NULL) {
        Py_DECREF(cache);
        return NULL;
    }
    if (EF_SET_EXTRA(code, extra_index, cache) < 0) {
        Py_DECREF(cache);
        return NULL;
    }
    /* The code object now owns our reference.  WeakSet.add is Python code:
     * keep the hook off for it. */
    (*disabled)++;
    PyObject *r = PyObject_CallMethod(registry, "add", "O", code);
    (*disabled)--;
    if (r == NULL) {
        return NULL;
    }
    Py_DECREF(r);
    return cache;
}

/* ------------------------------------------------------------------ */
/* Per-thread state: a Python object in the thread-state dict (so it dies
 * with the thread), reached on the hot path through a TSS key.        */

typedef struct {
    PyObject_HEAD
    PyObject *callback; /* NULL when none */
    int run_only;       /* depth of run_only() */
    int disabled;       /* >0 while our callback or a guard runs */
    void *skip_code;    /* 3.11 fallback: the next fresh frame of this code runs as is */
} ThreadState;

static int
thread_active(ThreadState *st)
{
    return st->callback != NULL || st->run_only > 0;
}

static void install_hook(void);
static void uninstall_hook(void);

static void
note_activity(int was_active, int now_active)
{
    if (!was_active && now_active) {
        if (active_threads++ == 0) {
            install_hook();
        }
    }
    else if (was_active && !now_active) {
        if (--active_threads == 0) {
            uninstall_hook();
        }
    }
}

static void
threadstate_dealloc(ThreadState *self)
{
    int was_active = thread_active(self);
    Py_CLEAR(self->callback);
    self->run_only = 0;
    note_activity(was_active, 0);
    if (PyThread_tss_get(&tss_key) == (void *)self) {
        PyThread_tss_set(&tss_key, NULL);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ThreadState_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "evalframe._evalframe._ThreadState",
    .tp_basicsize = sizeof(ThreadState),
    .tp_dealloc = (destructor)threadstate_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The hook's state for one thread.",
};

static ThreadState *
current_state(int create)
{
    ThreadState *st = (ThreadState *)PyThread_tss_get(&tss_key);
    if (st != NULL || !create) {
        return st;
    }
    PyObject *dict = PyThreadState_GetDict();
    if (dict == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "evalframe: no thread-state dict");
        return NULL;
    }
    st = PyObject_New(ThreadState, &ThreadState_Type);
    if (st == NULL) {
        return NULL;
    }
    st->callback = NULL;
    st->run_only = 0;
    st->disabled = 0;
    st->skip_code = NULL;
    if (PyDict_SetItem(dict, state_key, (PyObject *)st) < 0) {
        Py_DECREF(st);
        return NULL;
    }
    Py_DECREF(st); /* the thread dict holds it */
    if (PyThread_tss_set(&tss_key, st) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "evalframe: cannot set thread-local state");
        return NULL;
    }
    return st;
}

#if EF_HOOK
/* ------------------------------------------------------------------ */
/* Version-specific frame access.                                      */

#if PY_VERSION_HEX >= 0x030D0000
/* 3.13: f_executable, and instr_ptr points at the next instruction. */
#define FRAME_CODE(f) ((PyCodeObject *)(f)->f_executable)
#define SET_FRAME_CODE(f, c) ((f)->f_executable = (PyObject *)(c))
#define FRAME_UNSTARTED(f) ((f)->instr_ptr <= _PyCode_CODE(FRAME_CODE(f)))
#define FRAME_RESET_IP(f, c) ((f)->instr_ptr = _PyCode_CODE(c))
#else
#define FRAME_CODE(f) ((f)->f_code)
#define SET_FRAME_CODE(f, c) ((f)->f_code = (c))
#define FRAME_UNSTARTED(f) ((f)->prev_instr < _PyCode_CODE((f)->f_code))
#define FRAME_RESET_IP(f, c) ((f)->prev_instr = _PyCode_CODE(c) - 1)
#endif

#if PY_VERSION_HEX >= 0x030C0000
#define FRAME_FUNC(f) ((PyFunctionObject *)(f)->f_funcobj)
#define SET_FRAME_FUNC(f, fn) ((f)->f_funcobj = (PyObject *)(fn))
static int
frame_size(PyCodeObject *co)
{
    return co->co_framesize;
}
#else
#define FRAME_FUNC(f) ((f)->f_func)
#define SET_FRAME_FUNC(f, fn) ((f)->f_func = (fn))
static int
frame_size(PyCodeObject *co)
{
    return co->co_nlocalsplus + co->co_stacksize + (int)FRAME_SPECIALS_SIZE;
}
#endif

static _PyFrameEvalFunction previous_eval = NULL;

static PyObject *
eval_default(PyThreadState *ts, _PyInterpreterFrame *frame, int throwflag)
{
    return previous_eval(ts, frame, throwflag);
}

static int
frame_is_fresh(_PyInterpreterFrame *frame)
{
    /* Not a resumed generator, and no instruction has run yet. */
    return frame->owner == FRAME_OWNED_BY_THREAD && FRAME_UNSTARTED(frame);
}

static int
n_arguments(PyCodeObject *co)
{
    return co->co_argcount + co->co_kwonlyargcount +
           ((co->co_flags & CO_VARARGS) ? 1 : 0) +
           ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

/* A frame object that owns a copy of the fresh frame (see the file comment). */
static PyObject *
snapshot_frame(_PyInterpreterFrame *frame)
{
    PyCodeObject *co = FRAME_CODE(frame);
    int nlocals = co->co_nlocalsplus;
    PyFrameObject *f =
        PyObject_GC_NewVar(PyFrameObject, &PyFrame_Type, nlocals + co->co_stacksize);
    if (f == NULL) {
        return NULL;
    }
    f->f_back = NULL;
    f->f_trace = NULL;
    f->f_lineno = 0;
    f->f_trace_lines = 1;
    f->f_trace_opcodes = 0;
#if PY_VERSION_HEX >= 0x030D0000
    f->f_extra_locals = NULL;
    f->f_locals_cache = NULL;
#else
    f->f_fast_as_locals = 0;
#endif
    _PyInterpreterFrame *copy = (_PyInterpreterFrame *)f->_f_frame_data;
    memcpy(copy, frame, (char *)&frame->localsplus[nlocals] - (char *)frame);
    Py_INCREF(FRAME_CODE(copy));
    Py_INCREF(FRAME_FUNC(copy));
    Py_XINCREF(copy->f_locals);
    for (int i = 0; i < nlocals; i++) {
        Py_XINCREF(copy->localsplus[i]);
    }
#if PY_VERSION_HEX >= 0x030D0000
    /* 3.13's f_locals proxy expects cells in cell and free slots, as if
     * MAKE_CELL and COPY_FREE_VARS had run; give the snapshot its own cells. */
    PyObject *closure = FRAME_FUNC(copy)->func_closure;
    const char *kinds = PyBytes_AS_STRING(co->co_localspluskinds);
    int nfree = co->co_nfreevars;
    for (int i = 0; i < nlocals; i++) {
        PyObject *value = copy->localsplus[i];
        if ((kinds[i] & CO_FAST_FREE) && value == NULL && closure != NULL &&
            i - (nlocals - nfree) < PyTuple_GET_SIZE(closure)) {
            copy->localsplus[i] = Py_NewRef(PyTuple_GET_ITEM(closure, i - (nlocals - nfree)));
        }
        else if ((kinds[i] & CO_FAST_CELL) && value != NULL) {
            copy->localsplus[i] = PyCell_New(value);
            Py_DECREF(value);
            if (copy->localsplus[i] == NULL) {
                PyErr_Clear(); /* out of memory: the snapshot shows the slot empty */
            }
        }
    }
#endif
    copy->stacktop = nlocals;
    copy->frame_obj = f;
    copy->previous = NULL;
    copy->owner = FRAME_OWNED_BY_FRAME_OBJECT;
#if PY_VERSION_HEX < 0x030C0000
    copy->is_entry = false;
#endif
    f->f_frame = copy;
    /* The caller is still the thread's current frame at hook time. */
    PyFrameObject *back = PyEval_GetFrame();
    f->f_back = (PyFrameObject *)Py_XNewRef(back);
    PyObject_GC_Track(f);
    return (PyObject *)f;
}

/* Propagate the pending exception out of an unstarted frame, with a
 * traceback entry that names the user's function. */
static PyObject *
fail_frame(PyThreadState *ts, _PyInterpreterFrame *frame)
{
#if PY_VERSION_HEX < 0x030D0000
    /* Before 3.13 the evaluator adds no traceback entry for an unstarted frame. */
    PyObject *f = snapshot_frame(frame);
    if (f != NULL) {
        PyTraceBack_Here((PyFrameObject *)f);
        Py_DECREF(f);
    }
#endif
#if PY_VERSION_HEX >= 0x030C0000
    /* 3.12+: the evaluator owns the frame it was given; unwinding it with the
     * exception pending (as generator.throw does) clears and pops it. */
    return eval_default(ts, frame, 1);
#else
    /* 3.11: the caller that pushed the frame clears it. */
    (void)ts;
    return NULL;
#endif
}

/* The dict handed to guards: arguments and free variables by name. */
static PyObject *
guard_locals(_PyInterpreterFrame *frame)
{
    PyCodeObject *co = FRAME_CODE(frame);
    PyObject *d;
    if (!(co->co_flags & CO_OPTIMIZED) && frame->f_locals != NULL &&
        PyDict_Check(frame->f_locals)) {
        d = PyDict_Copy(frame->f_locals);
    }
    else {
        d = PyDict_New();
    }
    if (d == NULL) {
        return NULL;
    }
    PyObject *names = co->co_localsplusnames;
    int nargs = n_arguments(co);
    for (int i = 0; i < nargs; i++) {
        PyObject *v = frame->localsplus[i];
        if (v != NULL && PyDict_SetItem(d, PyTuple_GET_ITEM(names, i), v) < 0) {
            Py_DECREF(d);
            return NULL;
        }
    }
    int nfree = co->co_nfreevars;
    PyObject *closure = FRAME_FUNC(frame)->func_closure;
    if (nfree > 0 && closure != NULL && PyTuple_Check(closure)) {
        int offset = co->co_nlocalsplus - nfree;
        for (int i = 0; i < nfree && i < PyTuple_GET_SIZE(closure); i++) {
            PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, i));
            if (v != NULL &&
                PyDict_SetItem(d, PyTuple_GET_ITEM(names, offset + i), v) < 0) {
                Py_DECREF(d);
                return NULL;
            }
        }
    }
    return d;
}

/* A function of `code` with the frame's function's globals, builtins, closure
 * and names: what a generator made from the new code, or the 3.11 fallback
 * call, needs. */
static PyObject *
function_for(_PyInterpreterFrame *frame, PyCodeObject *code)
{
    PyFunctionObject *orig = FRAME_FUNC(frame);
    PyFunctionObject *fn = (PyFunctionObject *)PyFunction_NewWithQualName(
        (PyObject *)code, orig->func_globals, orig->func_qualname);
    if (fn == NULL) {
        return NULL;
    }
    if (PyFunction_SetClosure((PyObject *)fn,
                              orig->func_closure ? orig->func_closure : Py_None) < 0) {
        Py_DECREF(fn);
        return NULL;
    }
    Py_SETREF(fn->func_name, Py_NewRef(orig->func_name));
    Py_SETREF(fn->func_builtins, Py_NewRef(orig->func_builtins));
    return (PyObject *)fn;
}

#if PY_VERSION_HEX >= 0x030C0000
/* 3.12: no room after the frame in this chunk.  Move it (it is the top of the
 * stack and nothing points into it yet) to the start of a new chunk; the
 * evaluator pops that chunk when the frame ends, returning to the old one. */
static _PyInterpreterFrame *
move_to_new_chunk(PyThreadState *ts, _PyInterpreterFrame *frame, int new_size, int nargs)
{
    PyObjectArenaAllocator arena;
    PyObject_GetArenaAllocator(&arena);
    size_t bytes = 16 * 1024;
    /* Leave headroom for the frames this one will push, as CPython does. */
    while (bytes < sizeof(PyObject *) * ((size_t)new_size + 1000)) {
        bytes *= 2;
    }
    _PyStackChunk *chunk = (_PyStackChunk *)arena.alloc(arena.ctx, bytes);
    if (chunk == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    _PyStackChunk *old = ts->datastack_chunk;
    /* A frame that starts its chunk leaves it empty: the new chunk replaces it
     * (CPython never keeps an empty chunk on the stack; the root chunk never
     * starts with a frame). */
    int replaces_old = (PyObject **)frame == &old->data[0];
    chunk->previous = replaces_old ? old->previous : old;
    chunk->size = bytes;
    chunk->top = 0;
    if (!replaces_old) {
        old->top = (PyObject **)frame - &old->data[0];
    }
    _PyInterpreterFrame *moved = (_PyInterpreterFrame *)&chunk->data[0];
    /* Only the specials and the arguments carry anything (the other slots of an
     * unstarted frame are empty, and the new code may need fewer of them). */
    memcpy(moved, frame, (char *)&frame->localsplus[nargs] - (char *)frame);
    if (replaces_old) {
        arena.free(arena.ctx, old, old->size);
        stats.chunk_replaced++;
    }
    if (moved->frame_obj != NULL) {
        moved->frame_obj->f_frame = moved;
    }
    ts->datastack_chunk = chunk;
    ts->datastack_limit = (PyObject **)((char *)chunk + bytes);
    ts->datastack_top = (PyObject **)moved + new_size;
    return moved;
}
#else
/* 3.11: no room after the frame.  Call a function of the new code with the
 * frame's arguments; the caller clears the unstarted original as usual. */
static PyObject *
call_instead(ThreadState *st, _PyInterpreterFrame *frame, PyCodeObject *code)
{
    PyCodeObject *co = FRAME_CODE(frame);
    if (!(co->co_flags & CO_OPTIMIZED)) {
        /* Module and class bodies: run with the frame's namespace. */
        PyObject *closure = FRAME_FUNC(frame)->func_closure;
        st->skip_code = code;
        PyObject *result = PyEval_EvalCodeEx(
            (PyObject *)code, frame->f_globals,
            frame->f_locals ? frame->f_locals : frame->f_globals, NULL, 0, NULL, 0, NULL, 0,
            NULL, closure);
        st->skip_code = NULL;
        return result;
    }
    PyObject *fn = function_for(frame, code);
    if (fn == NULL) {
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *names = co->co_localsplusnames;
    int npos = co->co_argcount, nkw = co->co_kwonlyargcount;
    PyObject *varargs = (co->co_flags & CO_VARARGS) ? frame->localsplus[npos + nkw] : NULL;
    PyObject *varkw = NULL;
    if (co->co_flags & CO_VARKEYWORDS) {
        varkw = frame->localsplus[npos + nkw + ((co->co_flags & CO_VARARGS) ? 1 : 0)];
    }
    Py_ssize_t nvar = varargs ? PyTuple_GET_SIZE(varargs) : 0;
    PyObject *args = PyTuple_New(npos + nvar);
    PyObject *kwargs = varkw ? PyDict_Copy(varkw) : PyDict_New();
    if (args == NULL || kwargs == NULL) {
        goto done;
    }
    for (int i = 0; i < npos; i++) {
        PyTuple_SET_ITEM(args, i, Py_NewRef(frame->localsplus[i]));
    }
    for (Py_ssize_t i = 0; i < nvar; i++) {
        PyTuple_SET_ITEM(args, npos + i, Py_NewRef(PyTuple_GET_ITEM(varargs, i)));
    }
    for (int i = npos; i < npos + nkw; i++) {
        if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(names, i), frame->localsplus[i]) < 0) {
            goto done;
        }
    }
    st->skip_code = code;
    result = PyObject_Call(fn, args, kwargs);
    st->skip_code = NULL;
done:
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_DECREF(fn);
    return result;
}
#endif

/* Run `code` in place of the unstarted `frame` (same argument layout). */
static PyObject *
run_entry(PyThreadState *ts, ThreadState *st, _PyInterpreterFrame *frame, PyCodeObject *code)
{
    PyCodeObject *old = FRAME_CODE(frame);
    int nargs = n_arguments(old);
    int new_size = frame_size(code);
    PyObject **base = (PyObject **)frame;
    int on_top = base + frame_size(old) == ts->datastack_top;
    int room = on_top && base + new_size <= ts->datastack_limit && !force_slow_path;
#if PY_VERSION_HEX >= 0x030C0000
    if (!on_top && new_size > frame_size(old)) {
        /* A fresh frame is always the top of the stack; if that ever changes,
         * refuse rather than overwrite the frames above it. */
        PyErr_SetString(PyExc_RuntimeError,
                        "evalframe: the frame to retarget is not on top of the frame stack");
        return fail_frame(ts, frame);
    }
#endif
#if PY_VERSION_HEX < 0x030C0000
    if (!room) {
        stats.called++;
        return call_instead(st, frame, code);
    }
#else
    (void)st;
#endif
    /* A generator's frame is sized from its function's code, so a generator
     * code needs a function of its own. */
    PyObject *fn = NULL;
    if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) {
        fn = function_for(frame, code);
        if (fn == NULL) {
            return fail_frame(ts, frame);
        }
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (!room && on_top) {
        _PyInterpreterFrame *moved = move_to_new_chunk(ts, frame, new_size, nargs);
        if (moved == NULL) {
            Py_XDECREF(fn);
            return fail_frame(ts, frame);
        }
        frame = moved;
        stats.relocated++;
    }
    else
#endif
    {
        if (on_top) {
            ts->datastack_top = base + new_size;
        }
        stats.in_place++;
    }
    SET_FRAME_CODE(frame, (PyCodeObject *)Py_NewRef(code));
    Py_DECREF(old);
    if (fn != NULL) {
        PyFunctionObject *prev = FRAME_FUNC(frame);
        SET_FRAME_FUNC(frame, (PyFunctionObject *)fn);
        frame->f_globals = ((PyFunctionObject *)fn)->func_globals;
        frame->f_builtins = ((PyFunctionObject *)fn)->func_builtins;
        Py_DECREF(prev);
    }
    for (int i = nargs; i < code->co_nlocalsplus; i++) {
        frame->localsplus[i] = NULL;
    }
    frame->stacktop = code->co_nlocalsplus;
    FRAME_RESET_IP(frame, code);
    return eval_default(ts, frame, 0);
}

static PyObject *
layout_error(PyCodeObject *orig, PyCodeObject *code, const char *what)
{
    PyErr_Format(PyExc_ValueError,
                 "evalframe: the Entry's code %R does not keep the argument layout of "
                 "%R (%s differ); transformed code must take the same arguments and "
                 "free variables in the same order",
                 code, orig, what);
    return NULL;
}

static int
names_equal(PyObject *a, Py_ssize_t a_from, PyObject *b, Py_ssize_t b_from, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(a, a_from + i),
                                          PyTuple_GET_ITEM(b, b_from + i), Py_EQ);
        if (eq <= 0) {
            return eq;
        }
    }
    return 1;
}

static int
check_layout(PyCodeObject *orig, PyCodeObject *code)
{
    const int flags = CO_VARARGS | CO_VARKEYWORDS | CO_OPTIMIZED | CO_NEWLOCALS;
    if (orig->co_argcount != code->co_argcount ||
        orig->co_posonlyargcount != code->co_posonlyargcount ||
        orig->co_kwonlyargcount != code->co_kwonlyargcount) {
        layout_error(orig, code, "argument counts");
        return -1;
    }
    if ((orig->co_flags & flags) != (code->co_flags & flags)) {
        layout_error(orig, code, "*args/**kwargs/optimized flags");
        return -1;
    }
    int eq = names_equal(orig->co_localsplusnames, 0, code->co_localsplusnames, 0,
                         n_arguments(orig));
    if (eq < 0) {
        return -1;
    }
    if (!eq) {
        layout_error(orig, code, "argument names");
        return -1;
    }
    if (orig->co_nfreevars != code->co_nfreevars) {
        layout_error(orig, code, "free variables");
        return -1;
    }
    eq = names_equal(orig->co_localsplusnames, orig->co_nlocalsplus - orig->co_nfreevars,
                     code->co_localsplusnames, code->co_nlocalsplus - code->co_nfreevars,
                     orig->co_nfreevars);
    if (eq < 0) {
        return -1;
    }
    if (!eq) {
        layout_error(orig, code, "free variable names");
        return -1;
    }
    return 0;
}

static int take_answer(ThreadState *st, PyCodeObject *co, PyObject *answer,
                       PyCodeObject **target);

/* The eval-frame function. */
static PyObject *
evalframe_hook(PyThreadState *ts, _PyInterpreterFrame *frame, int throwflag)
{
    if (throwflag || passthrough || !frame_is_fresh(frame)) {
        return eval_default(ts, frame, throwflag);
    }
    ThreadState *st = (ThreadState *)PyThread_tss_get(&tss_key);
    if (st == NULL || st->disabled || !thread_active(st)) {
        return eval_default(ts, frame, 0);
    }
    PyCodeObject *co = FRAME_CODE(frame);
    if (st->skip_code == (void *)co) {
        st->skip_code = NULL;
        return eval_default(ts, frame, 0);
    }
    CodeCache *cache = cache_of((PyObject *)co);
    Py_ssize_t n = cache ? PyList_GET_SIZE(cache->entries) : 0;
    if (n > 0) {
        PyObject *locals = guard_locals(frame);
        if (locals == NULL) {
            return fail_frame(ts, frame);
        }
        Py_INCREF(cache);
        st->disabled++;
        PyObject *hit = NULL;
        int failed = 0;
        /* Newest first; the list may change while a guard runs. */
        for (Py_ssize_t i = n - 1; i >= 0; i--) {
            if (i >= PyList_GET_SIZE(cache->entries)) {
                continue;
            }
            PyObject *item = Py_NewRef(PyList_GET_ITEM(cache->entries, i));
            PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(item, 0), locals);
            int ok = r == NULL ? -1 : PyObject_IsTrue(r);
            Py_XDECREF(r);
            if (ok < 0) {
                Py_DECREF(item);
                failed = 1;
                break;
            }
            if (ok) {
                hit = item;
                break;
            }
            Py_DECREF(item);
        }
        st->disabled--;
        Py_DECREF(locals);
        Py_DECREF(cache);
        if (failed) {
            return fail_frame(ts, frame);
        }
        if (hit != NULL) {
            stats.hits++;
            PyObject *stored = PyTuple_GET_ITEM(hit, 1);
            PyCodeObject *code = (PyCodeObject *)Py_NewRef(stored == Py_None ? (PyObject *)co
                                                                             : stored);
            Py_DECREF(hit);
            PyObject *result = run_entry(ts, st, frame, code);
            Py_DECREF(code);
            return result;
        }
    }
    stats.misses++;
    if (st->run_only > 0 || st->callback == NULL || (cache != NULL && cache->skip)) {
        return eval_default(ts, frame, 0);
    }

    /* Miss: ask the callback, with the hook off for its own frames. */
    PyObject *fobj = snapshot_frame(frame);
    if (fobj == NULL) {
        return fail_frame(ts, frame);
    }
    /* Guards may have changed the cache: count what is there now. */
    n = cache ? PyList_GET_SIZE(cache->entries) : 0;
    PyObject *size = PyLong_FromSsize_t(n);
    if (size == NULL) {
        Py_DECREF(fobj);
        return fail_frame(ts, frame);
    }
    PyObject *callback = Py_NewRef(st->callback);
    stats.callbacks++;
    st->disabled++;
    PyObject *args[2] = {fobj, size};
    PyObject *answer = PyObject_Vectorcall(callback, args, 2, NULL);
    Py_DECREF(callback);
    Py_DECREF(size);
    Py_DECREF(fobj);
    /* The hook stays off while we look at the answer (it may run Python). */
    PyCodeObject *target = NULL;
    int verdict = take_answer(st, co, answer, &target);
    st->disabled--;
    Py_XDECREF(answer);
    if (verdict < 0) {
        return fail_frame(ts, frame);
    }
    if (target == NULL) {
        return eval_default(ts, frame, 0);
    }
    PyObject *result = run_entry(ts, st, frame, target);
    Py_DECREF(target);
    return result;
}

/* Honour the callback's answer: -1 on error, else 0 with *target set to the
 * code to run (a new reference) or left NULL to run the frame as is. */
static int
take_answer(ThreadState *st, PyCodeObject *co, PyObject *answer, PyCodeObject **target)
{
    CodeCache *cache;
    if (answer == NULL) {
        return -1;
    }
    if (answer == Py_None) {
        return 0;
    }
    if (answer == skip_marker) {
        cache = cache_of_or_create((PyObject *)co, &st->disabled);
        if (cache == NULL) {
            return -1;
        }
        cache->skip = 1;
        return 0;
    }
    int is_entry = PyObject_IsInstance(answer, entry_type);
    if (is_entry <= 0) {
        if (is_entry == 0) {
            PyErr_Format(PyExc_TypeError,
                         "evalframe: the callback must return None, SKIP or an Entry, "
                         "not %.200s",
                         Py_TYPE(answer)->tp_name);
        }
        return -1;
    }
    PyObject *guard = PyObject_GetAttrString(answer, "guard");
    PyObject *code = guard ? PyObject_GetAttrString(answer, "code") : NULL;
    PyObject *item = NULL;
    if (code == NULL) {
        goto bad_entry;
    }
    if (!PyCallable_Check(guard)) {
        PyErr_Format(PyExc_TypeError, "evalframe: Entry.guard must be callable, not %.200s",
                     Py_TYPE(guard)->tp_name);
        goto bad_entry;
    }
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "evalframe: Entry.code must be a code object, not %.200s",
                     Py_TYPE(code)->tp_name);
        goto bad_entry;
    }
    if (check_layout(co, (PyCodeObject *)code) < 0) {
        goto bad_entry;
    }
    cache = cache_of_or_create((PyObject *)co, &st->disabled);
    item = cache ? PyTuple_Pack(2, guard, code == (PyObject *)co ? Py_None : code) : NULL;
    if (item == NULL || PyList_Append(cache->entries, item) < 0) {
        goto bad_entry;
    }
    Py_DECREF(item);
    Py_DECREF(guard);
    *target = (PyCodeObject *)code;
    return 0;
bad_entry:
    Py_XDECREF(item);
    Py_XDECREF(guard);
    Py_XDECREF(code);
    return -1;
}

static void
install_hook(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (current == evalframe_hook) {
        return;
    }
    previous_eval = current ? current : _PyEval_EvalFrameDefault;
    _PyInterpreterState_SetEvalFrameFunc(interp, evalframe_hook);
}

static void
uninstall_hook(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == evalframe_hook) {
        _PyInterpreterState_SetEvalFrameFunc(interp, previous_eval);
    }
}

#else /* !EF_HOOK */

static void
install_hook(void)
{
}

static void
uninstall_hook(void)
{
}

#endif /* EF_HOOK */

/* ------------------------------------------------------------------ */
/* Module functions.                                                   */

static int
require_registered(void)
{
    if (entry_type == NULL || skip_marker == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "evalframe._evalframe: import evalframe, not its C module alone");
        return -1;
    }
    return 0;
}

static PyObject *
ef_register(PyObject *module, PyObject *args)
{
    PyObject *etype, *skip;
    if (!PyArg_ParseTuple(args, "OO:_register", &etype, &skip)) {
        return NULL;
    }
    if (!PyType_Check(etype)) {
        PyErr_SetString(PyExc_TypeError, "_register: first argument must be the Entry type");
        return NULL;
    }
    Py_XSETREF(entry_type, Py_NewRef(etype));
    Py_XSETREF(skip_marker, Py_NewRef(skip));
    Py_RETURN_NONE;
}

static PyObject *
ef_set_callback(PyObject *module, PyObject *callback)
{
    if (require_registered() < 0) {
        return NULL;
    }
#if !EF_HOOK
    PyErr_SetString(PyExc_RuntimeError,
                    "evalframe: the frame-evaluation hook is not available on this "
                    "CPython version (supported: 3.11, 3.12, 3.13)");
    return NULL;
#endif
    if (callback != Py_None && !PyCallable_Check(callback)) {
        PyErr_Format(PyExc_TypeError,
                     "set_callback() takes a callable or None, not %.200s",
                     Py_TYPE(callback)->tp_name);
        return NULL;
    }
    ThreadState *st = current_state(1);
    if (st == NULL) {
        return NULL;
    }
    int was_active = thread_active(st);
    PyObject *previous = st->callback ? st->callback : Py_NewRef(Py_None);
    st->callback = callback == Py_None ? NULL : Py_NewRef(callback);
    note_activity(was_active, thread_active(st));
    return previous;
}

static PyObject *
ef_get_callback(PyObject *module, PyObject *unused)
{
    ThreadState *st = current_state(0);
    if (st == NULL || st->callback == NULL) {
        Py_RETURN_NONE;
    }
    return Py_NewRef(st->callback);
}

static PyObject *
ef_enter_run_only(PyObject *module, PyObject *unused)
{
#if !EF_HOOK
    PyErr_SetString(PyExc_RuntimeError,
                    "evalframe: the frame-evaluation hook is not available on this "
                    "CPython version (supported: 3.11, 3.12, 3.13)");
    return NULL;
#endif
    ThreadState *st = current_state(1);
    if (st == NULL) {
        return NULL;
    }
    int was_active = thread_active(st);
    st->run_only++;
    note_activity(was_active, thread_active(st));
    Py_RETURN_NONE;
}

static PyObject *
ef_exit_run_only(PyObject *module, PyObject *unused)
{
    ThreadState *st = current_state(0);
    if (st == NULL || st->run_only == 0) {
        PyErr_SetString(PyExc_RuntimeError, "_exit_run_only() without _enter_run_only()");
        return NULL;
    }
    int was_active = thread_active(st);
    st->run_only--;
    note_activity(was_active, thread_active(st));
    Py_RETURN_NONE;
}

static PyObject *
ef_cache_entries(PyObject *module, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "cache_entries() takes a code object, not %.200s",
                     Py_TYPE(code)->tp_name);
        return NULL;
    }
    CodeCache *cache = cache_of(code);
    PyObject *out = PyList_New(0);
    if (out == NULL || cache == NULL || PyList_GET_SIZE(cache->entries) == 0) {
        return out;
    }
    if (require_registered() < 0) {
        Py_DECREF(out);
        return NULL;
    }
    /* A copy: making Entry objects runs Python code, which may change the cache. */
    PyObject *items = PySequence_List(cache->entries);
    if (items == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    for (Py_ssize_t i = PyList_GET_SIZE(items) - 1; i >= 0; i--) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *stored = PyTuple_GET_ITEM(item, 1);
        PyObject *entry = PyObject_CallFunctionObjArgs(
            entry_type, PyTuple_GET_ITEM(item, 0), stored == Py_None ? code : stored, NULL);
        if (entry == NULL || PyList_Append(out, entry) < 0) {
            Py_XDECREF(entry);
            Py_DECREF(items);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(entry);
    }
    Py_DECREF(items);
    return out;
}

static PyObject *
ef_clear_code(PyObject *module, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_Format(PyExc_TypeError, "clear_cache() takes a code object or None, not %.200s",
                     Py_TYPE(code)->tp_name);
        return NULL;
    }
    CodeCache *cache = cache_of(code);
    if (cache != NULL) {
        /* Keep the (empty) cache object: a guard may be iterating it. */
        cache->skip = 0;
        if (PyList_SetSlice(cache->entries, 0, PyList_GET_SIZE(cache->entries), NULL) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

static PyObject *
ef_is_skipped(PyObject *module, PyObject *code)
{
    if (!PyCode_Check(code)) {
        PyErr_SetString(PyExc_TypeError, "_is_skipped() takes a code object");
        return NULL;
    }
    CodeCache *cache = cache_of(code);
    return PyBool_FromLong(cache != NULL && cache->skip);
}

static PyObject *
ef_stats(PyObject *module, PyObject *unused)
{
    return Py_BuildValue("{sKsKsKsKsKsKsKsn}", "callbacks", stats.callbacks, "hits",
                         stats.hits, "misses", stats.misses, "in_place", stats.in_place,
                         "relocated", stats.relocated, "chunk_replaced", stats.chunk_replaced,
                         "called", stats.called, "active_threads", active_threads);
}

static PyObject *
ef_set_force_slow_path(PyObject *module, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0) {
        return NULL;
    }
    force_slow_path = v;
    Py_RETURN_NONE;
}

static PyObject *
ef_set_passthrough(PyObject *module, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0) {
        return NULL;
    }
    passthrough = v;
    Py_RETURN_NONE;
}

static PyObject *
ef_registered_codes(PyObject *module, PyObject *unused)
{
    return PySequence_List(registry);
}

static PyMethodDef methods[] = {
    {"_register", ef_register, METH_VARARGS, "Register the Entry type and the SKIP marker."},
    {"set_callback", ef_set_callback, METH_O, "Set this thread's callback; return the previous."},
    {"get_callback", ef_get_callback, METH_NOARGS, "This thread's callback, or None."},
    {"_enter_run_only", ef_enter_run_only, METH_NOARGS, "Enter run-only mode (this thread)."},
    {"_exit_run_only", ef_exit_run_only, METH_NOARGS, "Leave run-only mode (this thread)."},
    {"cache_entries", ef_cache_entries, METH_O, "Entries cached for a code object, newest first."},
    {"_clear_code", ef_clear_code, METH_O, "Drop a code object's entries and SKIP mark."},
    {"_is_skipped", ef_is_skipped, METH_O, "Whether a code object is marked SKIP."},
    {"_registered_codes", ef_registered_codes, METH_NOARGS, "Live code objects with a cache."},
    {"_stats", ef_stats, METH_NOARGS, "Counters of the paths the hook took."},
    {"_set_force_slow_path", ef_set_force_slow_path, METH_O,
     "Tests: always take the no-room path when running an entry."},
    {"_set_passthrough", ef_set_passthrough, METH_O,
     "Benchmarks: the installed hook does nothing but call the default evaluator."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "evalframe._evalframe",
    .m_doc = "The PEP 523 frame-evaluation hook (C part of evalframe).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__evalframe(void)
{
    if (PyType_Ready(&CodeCache_Type) < 0 || PyType_Ready(&ThreadState_Type) < 0) {
        return NULL;
    }
    if (extra_index < 0) {
        extra_index = EF_REQUEST_EXTRA(free_extra);
        if (extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "evalframe: no code-extra slot left");
            return NULL;
        }
    }
    if (!PyThread_tss_is_created(&tss_key) && PyThread_tss_create(&tss_key) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "evalframe: cannot create a TSS key");
        return NULL;
    }
    if (state_key == NULL) {
        state_key = PyUnicode_InternFromString("strata.evalframe.state");
        if (state_key == NULL) {
            return NULL;
        }
    }
    if (registry == NULL) {
        PyObject *weakref = PyImport_ImportModule("weakref");
        if (weakref == NULL) {
            return NULL;
        }
        registry = PyObject_CallMethod(weakref, "WeakSet", NULL);
        Py_DECREF(weakref);
        if (registry == NULL) {
            return NULL;
        }
    }
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "HOOK_AVAILABLE", EF_HOOK ? Py_True : Py_False) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
