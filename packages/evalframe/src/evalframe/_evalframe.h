/*
 * Shared by the C files of evalframe._evalframe: _evalframe.c (the module, the
 * caches, the per-thread state and the eval-frame function that dispatches),
 * frames.c (what is done to a frame, per CPython version), without_hook.c
 * (running with a thread's hook off: without_hook, SKIP_RECURSIVE) and
 * recursion.c (the C stack guard and the 3.12 recursion credit).
 */
#ifndef EVALFRAME_INTERNAL_H
#define EVALFRAME_INTERNAL_H

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

/* Counters of which path ran; tests read them to prove a path was taken. */
struct ef_stats {
    unsigned long long callbacks, hits, misses, in_place, relocated, chunk_replaced, called;
};
extern struct ef_stats ef_stats;
extern int ef_force_slow_path; /* tests: take the no-room path every time */

/* Per-thread state: a Python object in the thread-state dict (so it dies with
 * the thread), reached on the hot path through a TSS key. */
typedef struct {
    PyObject_HEAD
    PyObject *callback; /* NULL when none */
    int run_only;       /* depth of run_only() */
    int disabled;       /* >0 while our callback or a guard runs */
    void *skip_code;    /* 3.11 fallback: the next fresh frame of this code runs as is */
} ThreadState;

/* A thread's callback state, saved while its hook is off (without_hook, and
 * frames of code marked SKIP_RECURSIVE).  `callback` is an owned reference. */
typedef struct {
    PyObject *callback;
    int run_only;
} ef_saved_state;

/* What the hot path needs of the running thread, in one thread-local record
 * (one TLS lookup per hooked frame): its state, and where its C stack is
 * (recursion.c): a 3.12 hooked frame is credited the C recursion units the
 * default evaluator takes while the stack pointer is above credit_above; a
 * fresh frame fails with RecursionError below guard_below. */
#if defined(__linux__) && defined(__GLIBC__) && (defined(__x86_64__) || defined(__aarch64__))
#define EF_STACK_BOUNDS 1
#else
#define EF_STACK_BOUNDS 0
#endif
typedef struct {
    ThreadState *state; /* NULL until the thread uses evalframe */
    uintptr_t credit_above, guard_below;
    int stack_known;
} ef_thread_t;
#if EF_STACK_BOUNDS
void ef_stack_marks_slow(ef_thread_t *t);
#endif

ThreadState *ef_current_state(int create);

static inline int
ef_thread_active(ThreadState *st)
{
    return st->callback != NULL || st->run_only > 0;
}

/* Count a thread becoming active or inactive; the eval-frame function is
 * installed while any thread is active. */
void ef_note_activity(int was_active, int now_active);
/* Turn the thread's hook off (no callback, not run-only), saving its state. */
void ef_hook_off(ThreadState *st, ef_saved_state *saved);
/* Put back exactly what ef_hook_off saved (and drop what is there now). */
void ef_hook_restore(ThreadState *st, ef_saved_state *saved);

extern PyTypeObject ef_WithoutHook_Type;
extern PyTypeObject ef_WithCallback_Type;

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
#else
#define FRAME_FUNC(f) ((f)->f_func)
#define SET_FRAME_FUNC(f, fn) ((f)->f_func = (fn))
#endif

extern _PyFrameEvalFunction ef_previous_eval;

#if EF_STACK_BOUNDS && PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030D0000
#define EF_STACK_CREDIT 1
#define EF_EVAL_C_UNITS 2 /* PY_EVAL_C_STACK_UNITS in 3.12's ceval.c */
#define EF_CREDIT_BELOW (C_RECURSION_LIMIT / 3)
#else
#define EF_STACK_CREDIT 0
#endif

/* The hot path: inline so that every frame pays as little as possible. */
static inline PyObject *
ef_eval_default(PyThreadState *ts, _PyInterpreterFrame *frame, int throwflag)
{
    return ef_previous_eval(ts, frame, throwflag);
}

static inline int
ef_frame_is_fresh(_PyInterpreterFrame *frame)
{
    /* Not a resumed generator, and no instruction has run yet. */
    return frame->owner == FRAME_OWNED_BY_THREAD && FRAME_UNSTARTED(frame);
}

PyObject *ef_snapshot_frame(_PyInterpreterFrame *frame);
PyObject *ef_fail_frame(PyThreadState *ts, _PyInterpreterFrame *frame);
/* Fail the frame with the callback's pending exception, placed in the frame when its
 * traceback names the snapshot `fobj` the callback was handed. */
PyObject *ef_fail_callback(PyThreadState *ts, _PyInterpreterFrame *frame, PyObject *fobj);
PyObject *ef_guard_locals(_PyInterpreterFrame *frame);
int ef_check_layout(PyCodeObject *orig, PyCodeObject *code);
/* Run a frame of code marked SKIP_RECURSIVE with the thread's hook off. */
PyObject *ef_run_unhooked(PyThreadState *ts, ThreadState *st, _PyInterpreterFrame *frame);
PyObject *ef_run_entry(PyThreadState *ts, ThreadState *st, _PyInterpreterFrame *frame,
                       PyCodeObject *code);
#endif /* EF_HOOK */

#endif /* EVALFRAME_INTERNAL_H */
