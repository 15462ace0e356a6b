/* kernels/cuda/dispatch_path.c — the record of which kernel family each
 * dispatcher last launched (acd.h's acd_note_path), read by
 * attncheck-test-cuda --dispatch. */
#include <stdatomic.h>

#include "acd.h"

/* One slot per kind, the last writer's name.  Relaxed atomics keep a store
 * from another thread (the harness's workers) from being a data race; "last"
 * means the calling thread's last launch only when one thread launches, as
 * in the single-threaded test program that reads it. */
static _Atomic(const char *) last_path[ACD_DISPATCH_KINDS];

void acd_note_path(acd_path_kind kind, const char *name)
{
    if ((unsigned)kind < ACD_DISPATCH_KINDS)
        atomic_store_explicit(&last_path[kind], name, memory_order_relaxed);
}

const char *acd_last_path(acd_path_kind kind)
{
    const char *name =
        (unsigned)kind < ACD_DISPATCH_KINDS ? atomic_load_explicit(&last_path[kind], memory_order_relaxed) : NULL;
    return name ? name : "none";
}
