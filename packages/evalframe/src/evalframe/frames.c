/*
 * What evalframe does to a frame, per CPython version (3.11, 3.12, 3.13): tell
 * a fresh frame, snapshot it for the callback, build the guard's dict, check an
 * entry's argument layout, run an entry's code in place of the frame (growing
 * it, or moving it to a new stack chunk, or on 3.11 calling a function instead
 * when there is no room), and fail an unstarted frame with an exception.
 */
#include "_evalframe.h"

#if EF_HOOK
#if PY_VERSION_HEX >= 0x030C0000
static int
frame_size(PyCodeObject *co)
{
    return co->co_framesize;
}
#else
static int
frame_size(PyCodeObject *co)
{
    return co->co_nlocalsplus + co->co_stacksize + (int)FRAME_SPECIALS_SIZE;
}
#endif

_PyFrameEvalFunction ef_previous_eval = NULL;

static int
n_arguments(PyCodeObject *co)
{
    return co->co_argcount + co->co_kwonlyargcount +
           ((co->co_flags & CO_VARARGS) ? 1 : 0) +
           ((co->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

/* A frame object that owns a copy of the fresh frame (see the file comment). */
PyObject *
ef_snapshot_frame(_PyInterpreterFrame *frame)
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
PyObject *
ef_fail_frame(PyThreadState *ts, _PyInterpreterFrame *frame)
{
#if PY_VERSION_HEX < 0x030D0000
    /* Before 3.13 the evaluator adds no traceback entry for an unstarted frame. */
    PyObject *f = ef_snapshot_frame(frame);
    if (f != NULL) {
        PyTraceBack_Here((PyFrameObject *)f);
        Py_DECREF(f);
    }
#endif
#if PY_VERSION_HEX >= 0x030C0000
    /* 3.12+: the evaluator owns the frame it was given; unwinding it with the
     * exception pending (as generator.throw does) clears and pops it. */
    return ef_eval_default(ts, frame, 1);
#else
    /* 3.11: the caller that pushed the frame clears it. */
    (void)ts;
    return NULL;
#endif
}

/* If the pending exception's traceback has an entry for `fobj`, make the
 * traceback start there: the entries before it are the callback's own frames
 * (and on 3.13 the evaluator's entry for the unstarted frame), which the user
 * does not need.  1 if it was placed, 0 if not (the exception is untouched). */
static int
place_in_frame(PyObject *fobj)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
    PyObject *tb = exc ? PyException_GetTraceback(exc) : NULL;
#else
    PyObject *type, *exc, *tb;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
#endif
    PyObject *at = tb;
    while (at != NULL && (PyObject *)((PyTracebackObject *)at)->tb_frame != fobj) {
        at = (PyObject *)((PyTracebackObject *)at)->tb_next;
    }
    if (at != NULL && at != tb && exc != NULL) {
        Py_INCREF(at);
        Py_SETREF(tb, at);
        PyException_SetTraceback(exc, tb);
    }
#if PY_VERSION_HEX >= 0x030C0000
    Py_XDECREF(tb);
    PyErr_SetRaisedException(exc);
#else
    PyErr_Restore(type, exc, tb);
#endif
    return at != NULL;
}

PyObject *
ef_fail_callback(PyThreadState *ts, _PyInterpreterFrame *frame, PyObject *fobj)
{
    if (!place_in_frame(fobj)) {
        return ef_fail_frame(ts, frame);
    }
    /* The callback placed its error in the frame: no entry at the def line. */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *result = ef_eval_default(ts, frame, 1);
    place_in_frame(fobj); /* 3.13's evaluator prepends an entry for the frame */
    return result;
#else
    (void)ts;
    (void)frame;
    return NULL;
#endif
}

/* The dict handed to guards: arguments and free variables by name. */
PyObject *
ef_guard_locals(_PyInterpreterFrame *frame)
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
        ef_stats.chunk_replaced++;
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
PyObject *
ef_run_entry(PyThreadState *ts, ThreadState *st, _PyInterpreterFrame *frame, PyCodeObject *code)
{
    PyCodeObject *old = FRAME_CODE(frame);
    int nargs = n_arguments(old);
    int new_size = frame_size(code);
    PyObject **base = (PyObject **)frame;
    int on_top = base + frame_size(old) == ts->datastack_top;
    int room = on_top && base + new_size <= ts->datastack_limit && !ef_force_slow_path;
#if PY_VERSION_HEX >= 0x030C0000
    if (!on_top && new_size > frame_size(old)) {
        /* A fresh frame is always the top of the stack; if that ever changes,
         * refuse rather than overwrite the frames above it. */
        PyErr_SetString(PyExc_RuntimeError,
                        "evalframe: the frame to retarget is not on top of the frame stack");
        return ef_fail_frame(ts, frame);
    }
#endif
#if PY_VERSION_HEX < 0x030C0000
    if (!room) {
        ef_stats.called++;
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
            return ef_fail_frame(ts, frame);
        }
    }
#if PY_VERSION_HEX >= 0x030C0000
    if (!room && on_top) {
        _PyInterpreterFrame *moved = move_to_new_chunk(ts, frame, new_size, nargs);
        if (moved == NULL) {
            Py_XDECREF(fn);
            return ef_fail_frame(ts, frame);
        }
        frame = moved;
        ef_stats.relocated++;
    }
    else
#endif
    {
        if (on_top) {
            ts->datastack_top = base + new_size;
        }
        ef_stats.in_place++;
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
    return ef_eval_default(ts, frame, 0);
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

int
ef_check_layout(PyCodeObject *orig, PyCodeObject *code)
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

#endif /* EF_HOOK */
