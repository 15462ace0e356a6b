/* harness/run/worker_proto.h — the messages between attncheck and its kernel
 * worker (worker.h): one SOCK_SEQPACKET message each.  Both ends are the same
 * source; the hello carries the version and the message sizes, so a worker
 * from another build is refused, not misread. */
#ifndef ATTNCHECK_WORKER_PROTO_H
#define ATTNCHECK_WORKER_PROTO_H

#include <stdint.h>

#include "harness/files/files.h"
#include "harness/run/arena.h"

#define WORKER_MAGIC 0x41435752u /* "ACWR" */
#define WORKER_VERSION 2u /* 2: the variants (their arrays in the arena, their scalars in the problem) */
#define WORKER_SOCK_FD 3
#define WORKER_ARENA_FD 4
#define WORKER_ARG "__worker" /* argv[1] of a worker */

typedef struct {
    uint32_t magic, version;
    uint32_t request_bytes, reply_bytes;
    uint32_t n_plugins; /* followed by this many worker_path messages */
} worker_hello;

typedef struct {
    char path[AC_PATH_LEN];
} worker_path;

typedef struct {
    uint32_t magic;
    uint32_t entry; /* ac_entry */
    uint64_t seq;
    uint64_t arena_bytes; /* the memfd's size now */
    char kernel[AC_KERNEL_NAME_LEN];
    ac_problem problem; /* its array pointers are NULL: lengths, mask and the variants' arrays are in the arena */
    ac_arena_layout layout;
} worker_request;

typedef struct {
    uint32_t magic;
    int32_t status;
    uint64_t seq; /* the request's; 0 for the hello */
    char msg[sizeof(ac_err)];
} worker_reply;

#endif
