/*
 * The hook and the C stack: a guard on every version, and on CPython 3.12 a
 * credit that keeps hooked Python calls from halving the recursion depth.
 *
 * Why 3.12 stops at ~750 (3.12.1's Python/ceval.c and Include/cpython/
 * pystate.h): every entry into _PyEval_EvalFrameDefault takes
 * PY_EVAL_C_STACK_UNITS (2) units of the thread's C recursion budget
 * (c_recursion_remaining, C_RECURSION_LIMIT = 1500) and gives them back when
 * it returns.  A Python-to-Python call that the interpreter inlines never
 * enters it again, so unhooked code recurses until the Python limit
 * (sys.getrecursionlimit()).  With any eval-frame function installed, the CALL
 * instructions stop inlining: each call goes through PyObject_Vectorcall ->
 * _PyEval_Vector -> the eval-frame function -> a fresh
 * _PyEval_EvalFrameDefault, which takes 2 units, so nested calls stop at
 * 1500 / 2 = 750.  3.11 has a single counter, charged once per frame either
 * way; 3.13.0 charges the same 2 units but its limit is 10000, so the Python
 * limit is reached first.
 *
 * The units stand for real C stack, so they are not simply handed back.  On
 * 3.12 hooked frames are counted as CPython counts them until the thread has
 * less than a third of its budget left (C_RECURSION_LIMIT / 3); from there on
 * a hooked frame is credited its 2 units, but only while more than half of
 * this thread's C stack (and at least 2 MiB) is free, measured against the
 * thread's stack bounds (pthread_getattr_np).  So at any depth the thread has
 * at least as many units left as it would without the credit, the uncounted
 * hooked frames lie in the first half of the stack (the Python limit normally
 * stops them far earlier), and past the half CPython's accounting applies
 * unchanged.  Stacks under 4 MiB, or with unknown bounds, get no credit.
 * Crediting only when the budget runs low keeps the common case a tail call
 * (crediting every frame cost about 4 ns per call).
 *
 * The guard (every version): a hooked call runs on the C stack even where the
 * same unhooked call would not, so a high sys.setrecursionlimit() that is safe
 * unhooked (3.11-3.13 inline Python calls) would overflow it: 3.11 counts
 * hooked frames only against the Python limit, and 3.12/3.13 threads with
 * small stacks cannot hold the C budget's worth of eval frames.  When less
 * than an eighth of the stack (at least 64 KiB) is free, a fresh frame is
 * failed with RecursionError instead of being run.
 */
#include "_evalframe.h"

#if EF_STACK_BOUNDS
#include <pthread.h>

void
ef_stack_marks_slow(ef_thread_t *t)
{
    /* Unknown bounds: never credit, never trip. */
    uintptr_t credit_above = UINTPTR_MAX, guard_below = 0;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        void *low = NULL;
        size_t size = 0;
        uintptr_t here = (uintptr_t)__builtin_frame_address(0);
        if (pthread_attr_getstack(&attr, &low, &size) == 0 && low != NULL && size > 0 &&
            here > (uintptr_t)low && here <= (uintptr_t)low + size) {
            /* The stack grows down from low + size. */
            size_t reserve = size / 8 > 64 * 1024 ? size / 8 : 64 * 1024;
            size_t credit_free = size / 2 > 2 * 1024 * 1024 ? size / 2 : 2 * 1024 * 1024;
            if (reserve < size) {
                guard_below = (uintptr_t)low + reserve;
            }
            if (credit_free < size) {
                credit_above = (uintptr_t)low + credit_free;
            }
        }
        pthread_attr_destroy(&attr);
    }
    t->credit_above = credit_above;
    t->guard_below = guard_below;
    t->stack_known = 1;
}
#endif
