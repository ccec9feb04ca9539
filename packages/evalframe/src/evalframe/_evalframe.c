/*
 * evalframe._evalframe: the PEP 523 frame-evaluation hook.
 *
 * This file dispatches; Python decides.  For each fresh frame of a thread that
 * has a callback (or is inside run_only()), it consults the code object's cache
 * (kept in co_extra), calls the guards newest first, and on a hit runs the
 * entry's code in place of the frame.  On a miss it calls the thread's callback
 * with the hook disabled and honours its answer (None, SKIP or an Entry).
 *
 * Running another code object for a frame (frames.c): the fresh frame is the
 * top of the thread's frame stack and has only its arguments set, so it is
 * retargeted in place: swap the code, reset the instruction pointer and the
 * non-argument slots, and grow the frame when the new code needs more room.
 * When the stack chunk has no room left, 3.12+ moves the frame into a new chunk
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
#include "_evalframe.h"

/* ------------------------------------------------------------------ */
/* Module-wide state (one interpreter; the GIL protects all of it).    */

static Py_ssize_t extra_index = -1;
static PyObject *entry_type = NULL;   /* evalframe.Entry, registered by Python */
static PyObject *skip_marker = NULL;  /* evalframe.SKIP, registered by Python */
static PyObject *skip_recursive_marker = NULL; /* evalframe.SKIP_RECURSIVE */
static PyObject *registry = NULL;     /* weakref.WeakSet of code objects with a cache */
static PyObject *state_key = NULL;    /* key of our record in the thread-state dict */
/* This thread's record (see _evalframe.h); static, so reaching it costs the
 * cheapest TLS access a shared object gets. */
static _Thread_local ef_thread_t ef_thread;

/* The hot path's way to this thread's record without a TLS lookup: the GIL
 * lets one thread run at a time, so the record of the thread state seen last
 * is cached, keyed by the thread state's id (unique for the interpreter's
 * lifetime, so a reused PyThreadState address never matches a dead thread's
 * record). */
static uint64_t cached_thread_id = 0; /* ids start at 1 */
static ef_thread_t *cached_thread = NULL;

static __attribute__((noinline)) ef_thread_t *
this_thread_slow(PyThreadState *ts)
{
    ef_thread_t *t = &ef_thread;
#if EF_STACK_BOUNDS
    if (!t->stack_known) {
        ef_stack_marks_slow(t);
    }
#endif
    cached_thread_id = ts->id;
    cached_thread = t;
    return t;
}

static inline ef_thread_t *
this_thread(PyThreadState *ts)
{
    return ts->id == cached_thread_id ? cached_thread : this_thread_slow(ts);
}
static Py_ssize_t active_threads = 0; /* threads with a callback or inside run_only() */
int ef_force_slow_path = 0;
static int passthrough = 0;           /* benchmarks: measure a do-nothing hook */

struct ef_stats ef_stats;

/* ------------------------------------------------------------------ */
/* The per-code cache: entries as tuples (guard, code), oldest first.  An
 * entry whose code is the cache's own code object stores None instead: code
 * objects are invisible to the cycle collector, so a reference from a code
 * object's extra slot back to itself would keep it alive forever.  For the same
 * reason the Entry objects themselves are not kept (they hold their code);
 * cache_entries() makes equal ones. */

/* CodeCache.skip */
#define SKIP_NONE 0
#define SKIP_FRAME 1     /* SKIP: the frame runs as is; its callees are hooked */
#define SKIP_RECURSIVE 2 /* the frame and all it calls run with the hook off */

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
/* Per-thread state (ThreadState, declared in _evalframe.h).             */

static void install_hook(void);
static void uninstall_hook(void);

void
ef_note_activity(int was_active, int now_active)
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
    int was_active = ef_thread_active(self);
    Py_CLEAR(self->callback);
    self->run_only = 0;
    ef_note_activity(was_active, 0);
    if (ef_thread.state == self) {
        ef_thread.state = NULL;
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

ThreadState *
ef_current_state(int create)
{
    ThreadState *st = ef_thread.state;
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
    ef_thread.state = st;
    return st;
}

#if EF_HOOK
/* The layout of a code object's co_extra block (private to CPython's
 * Objects/codeobject.c, the same from 3.6 through 3.13).  The hot path reads our
 * slot directly instead of calling the API; writes go through the API. */
typedef struct {
    Py_ssize_t size;
    void *slots[1];
} code_extra_block;

static inline CodeCache *
cache_of_code(PyCodeObject *co)
{
    code_extra_block *x = (code_extra_block *)co->co_extra;
    return x != NULL && extra_index < x->size ? (CodeCache *)x->slots[extra_index] : NULL;
}

static int take_answer(ThreadState *st, PyCodeObject *co, PyObject *answer,
                       PyCodeObject **target);

/* The eval-frame function's work (evalframe_hook below takes the common
 * cases itself and adds the 3.12 credit). */
static __attribute__((noinline)) PyObject *
hook_body(PyThreadState *ts, _PyInterpreterFrame *frame, int throwflag, ef_thread_t *t,
          uintptr_t sp)
{
    if (throwflag || !ef_frame_is_fresh(frame)) {
        return ef_eval_default(ts, frame, throwflag);
    }
#if EF_STACK_BOUNDS
    if (sp < t->guard_below) {
        PyErr_SetString(PyExc_RecursionError,
                        "maximum recursion depth exceeded (the C stack is nearly full: "
                        "with a frame-evaluation hook installed every Python call uses it)");
        return ef_fail_frame(ts, frame);
    }
#else
    (void)sp;
#endif
    ThreadState *st = t->state;
    if (st == NULL || st->disabled || !ef_thread_active(st)) {
        return ef_eval_default(ts, frame, 0);
    }
    PyCodeObject *co = FRAME_CODE(frame);
    if (st->skip_code == (void *)co) {
        st->skip_code = NULL;
        return ef_eval_default(ts, frame, 0);
    }
    CodeCache *cache = cache_of_code(co);
    Py_ssize_t n = cache ? PyList_GET_SIZE(cache->entries) : 0;
    if (n > 0) {
        PyObject *locals = ef_guard_locals(frame);
        if (locals == NULL) {
            return ef_fail_frame(ts, frame);
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
            return ef_fail_frame(ts, frame);
        }
        if (hit != NULL) {
            ef_stats.hits++;
            PyObject *stored = PyTuple_GET_ITEM(hit, 1);
            PyCodeObject *code = (PyCodeObject *)Py_NewRef(stored == Py_None ? (PyObject *)co
                                                                             : stored);
            Py_DECREF(hit);
            PyObject *result = ef_run_entry(ts, st, frame, code);
            Py_DECREF(code);
            return result;
        }
    }
    ef_stats.misses++;
    if (cache != NULL && cache->skip == SKIP_RECURSIVE) {
        return ef_run_unhooked(ts, st, frame);
    }
    if (st->run_only > 0 || st->callback == NULL || (cache != NULL && cache->skip)) {
        return ef_eval_default(ts, frame, 0);
    }

    /* Miss: ask the callback, with the hook off for its own frames. */
    PyObject *fobj = ef_snapshot_frame(frame);
    if (fobj == NULL) {
        return ef_fail_frame(ts, frame);
    }
    /* Guards may have changed the cache: count what is there now. */
    n = cache ? PyList_GET_SIZE(cache->entries) : 0;
    PyObject *size = PyLong_FromSsize_t(n);
    if (size == NULL) {
        Py_DECREF(fobj);
        return ef_fail_frame(ts, frame);
    }
    PyObject *callback = Py_NewRef(st->callback);
    ef_stats.callbacks++;
    st->disabled++;
    PyObject *args[2] = {fobj, size};
    PyObject *answer = PyObject_Vectorcall(callback, args, 2, NULL);
    Py_DECREF(callback);
    Py_DECREF(size);
    if (answer == NULL) {
        /* An error the callback placed in the frame (a traceback entry for fobj)
         * is shown from there on: the callback's own frames are dropped. */
        st->disabled--;
        PyObject *result = ef_fail_callback(ts, frame, fobj);
        Py_DECREF(fobj);
        return result;
    }
    Py_DECREF(fobj);
    /* The hook stays off while we look at the answer (it may run Python). */
    PyCodeObject *target = NULL;
    int verdict = take_answer(st, co, answer, &target);
    st->disabled--;
    Py_XDECREF(answer);
    if (verdict < 0) {
        return ef_fail_frame(ts, frame);
    }
    if (target == NULL) {
        cache = cache_of_code(co);
        if (cache != NULL && cache->skip == SKIP_RECURSIVE) {
            return ef_run_unhooked(ts, st, frame);
        }
        return ef_eval_default(ts, frame, 0);
    }
    PyObject *result = ef_run_entry(ts, st, frame, target);
    Py_DECREF(target);
    return result;
}

#if EF_STACK_CREDIT
/* A hooked frame credited the C recursion units that the default evaluator
 * takes on entry and gives back on return: it costs what an inlined call
 * costs (recursion.c says when).  Out of line, so the common path stays a
 * tail call. */
static __attribute__((noinline)) PyObject *
hook_credited(PyThreadState *ts, _PyInterpreterFrame *frame, int throwflag, ef_thread_t *t,
              uintptr_t sp)
{
    ts->c_recursion_remaining += EF_EVAL_C_UNITS;
    PyObject *result = hook_body(ts, frame, throwflag, t, sp);
    ts->c_recursion_remaining -= EF_EVAL_C_UNITS;
    return result;
}
#endif

/* The eval-frame function.  The common cases -- frames that are not fresh,
 * threads whose hook is off, code marked SKIP without entries -- are decided
 * here, in a function small enough to need no saved registers; everything
 * else is hook_body's. */
static PyObject *
evalframe_hook(PyThreadState *ts, _PyInterpreterFrame *frame, int throwflag)
{
    if (passthrough) {
        return ef_eval_default(ts, frame, throwflag);
    }
    ef_thread_t *t = this_thread(ts);
#if EF_STACK_BOUNDS
    char probe;
    uintptr_t sp = (uintptr_t)&probe;
#else
    uintptr_t sp = 0;
#endif
#if EF_STACK_CREDIT
    if (ts->c_recursion_remaining < EF_CREDIT_BELOW && sp > t->credit_above) {
        return hook_credited(ts, frame, throwflag, t, sp);
    }
#endif
    if (throwflag || !ef_frame_is_fresh(frame)) {
        return ef_eval_default(ts, frame, throwflag);
    }
#if EF_STACK_BOUNDS
    if (sp < t->guard_below) {
        return hook_body(ts, frame, throwflag, t, sp); /* fails the frame */
    }
#endif
    ThreadState *st = t->state;
    if (st == NULL || st->disabled || !ef_thread_active(st)) {
        return ef_eval_default(ts, frame, 0);
    }
    PyCodeObject *co = FRAME_CODE(frame);
    CodeCache *cache = cache_of_code(co);
    if (cache != NULL && cache->skip == SKIP_FRAME && PyList_GET_SIZE(cache->entries) == 0 &&
        st->skip_code != (void *)co) {
        ef_stats.misses++;
        return ef_eval_default(ts, frame, 0);
    }
    return hook_body(ts, frame, throwflag, t, sp);
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
    if (answer == skip_marker || answer == skip_recursive_marker) {
        cache = cache_of_or_create((PyObject *)co, &st->disabled);
        if (cache == NULL) {
            return -1;
        }
        cache->skip = answer == skip_marker ? SKIP_FRAME : SKIP_RECURSIVE;
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
    if (ef_check_layout(co, (PyCodeObject *)code) < 0) {
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
    ef_previous_eval = current ? current : _PyEval_EvalFrameDefault;
    _PyInterpreterState_SetEvalFrameFunc(interp, evalframe_hook);
}

static void
uninstall_hook(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    if (_PyInterpreterState_GetEvalFrameFunc(interp) == evalframe_hook) {
        _PyInterpreterState_SetEvalFrameFunc(interp, ef_previous_eval);
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
    if (entry_type == NULL || skip_marker == NULL || skip_recursive_marker == NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "evalframe._evalframe: import evalframe, not its C module alone");
        return -1;
    }
    return 0;
}

static PyObject *
ef_register(PyObject *module, PyObject *args)
{
    PyObject *etype, *skip, *skip_recursive;
    if (!PyArg_ParseTuple(args, "OOO:_register", &etype, &skip, &skip_recursive)) {
        return NULL;
    }
    if (!PyType_Check(etype)) {
        PyErr_SetString(PyExc_TypeError, "_register: first argument must be the Entry type");
        return NULL;
    }
    Py_XSETREF(entry_type, Py_NewRef(etype));
    Py_XSETREF(skip_marker, Py_NewRef(skip));
    Py_XSETREF(skip_recursive_marker, Py_NewRef(skip_recursive));
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
    ThreadState *st = ef_current_state(1);
    if (st == NULL) {
        return NULL;
    }
    int was_active = ef_thread_active(st);
    PyObject *previous = st->callback ? st->callback : Py_NewRef(Py_None);
    st->callback = callback == Py_None ? NULL : Py_NewRef(callback);
    ef_note_activity(was_active, ef_thread_active(st));
    return previous;
}

static PyObject *
ef_get_callback(PyObject *module, PyObject *unused)
{
    ThreadState *st = ef_current_state(0);
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
    ThreadState *st = ef_current_state(1);
    if (st == NULL) {
        return NULL;
    }
    int was_active = ef_thread_active(st);
    st->run_only++;
    ef_note_activity(was_active, ef_thread_active(st));
    Py_RETURN_NONE;
}

static PyObject *
ef_exit_run_only(PyObject *module, PyObject *unused)
{
    ThreadState *st = ef_current_state(0);
    if (st == NULL || st->run_only == 0) {
        PyErr_SetString(PyExc_RuntimeError, "_exit_run_only() without _enter_run_only()");
        return NULL;
    }
    int was_active = ef_thread_active(st);
    st->run_only--;
    ef_note_activity(was_active, ef_thread_active(st));
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
    return PyLong_FromLong(cache != NULL ? cache->skip : SKIP_NONE);
}

static PyObject *
ef_get_stats(PyObject *module, PyObject *unused)
{
    return Py_BuildValue("{sKsKsKsKsKsKsKsn}", "callbacks", ef_stats.callbacks, "hits",
                         ef_stats.hits, "misses", ef_stats.misses, "in_place", ef_stats.in_place,
                         "relocated", ef_stats.relocated, "chunk_replaced", ef_stats.chunk_replaced,
                         "called", ef_stats.called, "active_threads", active_threads);
}

static PyObject *
ef_set_force_slow_path(PyObject *module, PyObject *flag)
{
    int v = PyObject_IsTrue(flag);
    if (v < 0) {
        return NULL;
    }
    ef_force_slow_path = v;
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
    {"_is_skipped", ef_is_skipped, METH_O,
     "A code object's mark: 0 none, 1 SKIP, 2 SKIP_RECURSIVE."},
    {"_registered_codes", ef_registered_codes, METH_NOARGS, "Live code objects with a cache."},
    {"_stats", ef_get_stats, METH_NOARGS, "Counters of the paths the hook took."},
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
    if (PyType_Ready(&CodeCache_Type) < 0 || PyType_Ready(&ThreadState_Type) < 0 ||
        PyType_Ready(&ef_WithoutHook_Type) < 0 || PyType_Ready(&ef_WithCallback_Type) < 0) {
        return NULL;
    }
    if (extra_index < 0) {
        extra_index = EF_REQUEST_EXTRA(free_extra);
        if (extra_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "evalframe: no code-extra slot left");
            return NULL;
        }
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
    if (PyModule_AddObjectRef(m, "HOOK_AVAILABLE", EF_HOOK ? Py_True : Py_False) < 0 ||
        PyModule_AddObjectRef(m, "without_hook", (PyObject *)&ef_WithoutHook_Type) < 0 ||
        PyModule_AddObjectRef(m, "with_callback", (PyObject *)&ef_WithCallback_Type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
