/* harness/run/worker_serve.c — the worker's side (worker.h): `attncheck
 * __worker PARENT_PID`, entered from main.  It loads the parent's plugins,
 * then answers requests until the parent closes the socket; it runs the
 * kernel and nothing else (no reference, no comparison), so what a kernel
 * does to this process is all it can do. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness/run/call.h"
#include "harness/run/plugin.h"
#include "harness/run/run.h"
#include "harness/run/worker_proto.h"

typedef struct {
    uint8_t *arena;
    size_t mapped;
} serve_state;

static void reply(int32_t status, uint64_t seq, const char *msg)
{
    worker_reply r;
    memset(&r, 0, sizeof r);
    r.magic = WORKER_MAGIC;
    r.status = status;
    r.seq = seq;
    snprintf(r.msg, sizeof r.msg, "%s", msg ? msg : "");
    (void)send(WORKER_SOCK_FD, &r, sizeof r, MSG_NOSIGNAL);
}

/* Dies with the parent, dumps no core, holds nothing of the parent's but its
 * two fds and stdio. */
static int confine(const char *parent)
{
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (!parent || getppid() != (pid_t)strtol(parent, NULL, 10))
        return -1; /* the parent is already gone (or this was not started by attncheck) */
    struct rlimit no_core = {0, 0};
    (void)setrlimit(RLIMIT_CORE, &no_core);
    if (close_range(WORKER_ARENA_FD + 1, ~0u, 0) != 0)
        for (int fd = WORKER_ARENA_FD + 1; fd < 1024; fd++)
            close(fd);
    if (fcntl(WORKER_SOCK_FD, F_SETFD, FD_CLOEXEC) != 0 || fcntl(WORKER_ARENA_FD, F_SETFD, FD_CLOEXEC) != 0)
        return -1;
    return 0;
}

/* The hello and the plugins; replies AC_OK or why not. */
static int greet(void)
{
    worker_hello h;
    ssize_t n = recv(WORKER_SOCK_FD, &h, sizeof h, 0);
    if (n != (ssize_t)sizeof h || h.magic != WORKER_MAGIC || h.version != WORKER_VERSION ||
        h.request_bytes != sizeof(worker_request) || h.reply_bytes != sizeof(worker_reply)) {
        reply(AC_ERR_ENV, 0, "the worker is another build of attncheck (protocol mismatch)");
        return -1;
    }
    for (uint32_t i = 0; i < h.n_plugins; i++) {
        worker_path p;
        if (recv(WORKER_SOCK_FD, &p, sizeof p, 0) != (ssize_t)sizeof p) {
            reply(AC_ERR_ENV, 0, "the worker lost the plugin list");
            return -1;
        }
        p.path[sizeof p.path - 1] = '\0';
        ac_err err = {{0}};
        if (ac_plugin_load(p.path, NULL, &err) != AC_OK) {
            reply(AC_ERR_ENV, 0, err.msg);
            return -1;
        }
    }
    reply(AC_OK, 0, "");
    return 0;
}

/* Maps the arena at the size the parent gave it. */
static int map_arena(serve_state *s, size_t bytes, ac_err *err)
{
    if (s->arena && s->mapped == bytes)
        return AC_OK;
    if (s->arena)
        munmap(s->arena, s->mapped);
    s->arena = NULL, s->mapped = 0;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, WORKER_ARENA_FD, 0);
    if (m == MAP_FAILED)
        return ac_fail(err, AC_ERR_ENV, "worker: cannot map the shared arena (%zu bytes): %s", bytes, strerror(errno));
    s->arena = m, s->mapped = bytes;
    return AC_OK;
}

static int serve_one(serve_state *s, worker_request *rq, ac_err *err)
{
    if (rq->magic != WORKER_MAGIC || rq->entry > AC_ENTRY_BACKWARD)
        return ac_fail(err, AC_ERR_ENV, "worker: a malformed request");
    rq->kernel[sizeof rq->kernel - 1] = '\0';
    const ac_kernel *k = ac_kernel_find(rq->kernel);
    if (!k)
        return ac_fail(err, AC_ERR_ENV,
                       "the worker has no kernel named '%s' (a kernel neither built in nor loaded "
                       "with --plugin cannot run isolated)",
                       rq->kernel);
    if (rq->entry == AC_ENTRY_BACKWARD && !k->backward)
        return ac_fail(err, AC_ERR_INPUT, "kernel %s has no backward", k->name);
    if (rq->layout.total > rq->arena_bytes)
        return ac_fail(err, AC_ERR_ENV, "worker: the layout is larger than the arena");
    int st = map_arena(s, rq->arena_bytes, err);
    if (st != AC_OK)
        return st;
    return ac_call_entry(k, (ac_entry)rq->entry, &rq->problem, &rq->layout, s->arena, err);
}

int ac_worker_main(int argc, char **argv)
{
    if (confine(argc > 1 ? argv[1] : NULL) != 0 || greet() != 0)
        return AC_ERR_ENV;
    serve_state s = {0};
    for (;;) {
        worker_request rq;
        ssize_t n = recv(WORKER_SOCK_FD, &rq, sizeof rq, 0);
        if (n == 0)
            return AC_OK; /* the parent is done */
        if (n < 0 && errno == EINTR)
            continue;
        ac_err err = {{0}};
        int st = n == (ssize_t)sizeof rq ? serve_one(&s, &rq, &err)
                                         : ac_fail(&err, AC_ERR_ENV, "worker: a request of %zd bytes", n);
        reply(st, n == (ssize_t)sizeof rq ? rq.seq : 0, err.msg);
        if (n < 0)
            return AC_ERR_ENV;
    }
}
