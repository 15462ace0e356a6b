/* harness/run/call.h — one entry of a kernel on an arena, in this process or
 * the worker (internal to harness/run/). */
#ifndef ATTNCHECK_CALL_H
#define ATTNCHECK_CALL_H

#include "harness/run/arena.h"

/* Calls k's forward or backward on the buffers of the arena at base (p's
 * lengths and mask are taken from the arena).  The kernel's status, or for a
 * CUDA kernel AC_KERNEL_FAULT "device-fault: ..." when it faulted the device;
 * AC_ERR_ENV when staging failed. */
int ac_call_entry(const ac_kernel *k, ac_entry e, const ac_problem *p, const ac_arena_layout *l, uint8_t *base,
                  ac_err *err);

#endif
