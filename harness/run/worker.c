/* harness/run/worker.c — attncheck's side of the kernel worker (worker.h):
 * the shared arena, spawning, the request with its deadline, and what a
 * worker's death means.  One worker and one arena per thread (a pthread key
 * whose destructor kills the worker), so callers on several threads never
 * share a channel; a child process that inherits them from a fork leaves them
 * to its parent and starts its own. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/run/plugin.h"
#include "harness/run/run.h"
#include "harness/run/worker.h"
#include "harness/run/worker_proto.h"

extern char **environ;

/* How long a worker may take to start and load the plugins. */
#define START_SECONDS 60.0
/* After the socket closes, how long a worker may take to be reaped. */
#define REAP_SECONDS 2.0
/* The arena is replaced by a smaller one when it is this many times too big (and above 64 MiB). */
#define SHRINK_FACTOR 4

typedef struct {
    pid_t owner; /* the process these belong to */
    pid_t pid; /* the worker, 0 when none */
    int sock; /* -1 when none */
    int arena_fd; /* -1 when none */
    uint8_t *arena;
    size_t arena_bytes;
    size_t n_plugins; /* loaded by the worker */
    uint64_t seq;
} worker_state;

static pthread_key_t state_key;
static pthread_once_t state_once = PTHREAD_ONCE_INIT;

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Kills the worker's process group and reaps it. */
static void kill_worker(worker_state *w)
{
    if (w->pid > 0) {
        kill(-w->pid, SIGKILL);
        kill(w->pid, SIGKILL);
        while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    w->pid = 0;
    close_fd(&w->sock);
}

static void drop_arena(worker_state *w)
{
    if (w->arena)
        munmap(w->arena, w->arena_bytes);
    w->arena = NULL, w->arena_bytes = 0;
    close_fd(&w->arena_fd);
}

static void state_destroy(void *p)
{
    worker_state *w = p;
    kill_worker(w);
    drop_arena(w);
    free(w);
}

static void make_key(void) { (void)pthread_key_create(&state_key, state_destroy); }

/* This thread's state; after a fork, the child forgets (without killing) its parent's worker. */
static worker_state *state(void)
{
    pthread_once(&state_once, make_key);
    worker_state *w = pthread_getspecific(state_key);
    if (w && w->owner != getpid()) {
        close_fd(&w->sock);
        if (w->arena)
            munmap(w->arena, w->arena_bytes);
        close_fd(&w->arena_fd);
        free(w);
        w = NULL;
    }
    if (!w && (w = calloc(1, sizeof *w)) != NULL) {
        w->owner = getpid();
        w->sock = w->arena_fd = -1;
        pthread_setspecific(state_key, w);
    }
    return w;
}

void ac_worker_retire(void)
{
    worker_state *w = state();
    if (w)
        kill_worker(w);
}

long ac_worker_pid(void)
{
    worker_state *w = state();
    return w ? (long)w->pid : 0;
}

/* ---- the arena ------------------------------------------------------------------ */

/* A descriptor at 10 or above, close-on-exec: spawning dup2s onto 3 and 4. */
static int high_fd(int fd)
{
    if (fd < 0)
        return fd;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    return hi;
}

static int arena_new(worker_state *w, size_t bytes, ac_err *err)
{
    kill_worker(w); /* it holds the old memfd as fd 4 */
    drop_arena(w);
    int fd = high_fd(memfd_create("attncheck-arena", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd < 0 || ftruncate(fd, (off_t)bytes) != 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return ac_fail(err, AC_ERR_ENV, "cannot create the shared arena (%zu bytes): %s", bytes, strerror(e));
    }
    w->arena_fd = fd;
    return AC_OK;
}

uint8_t *ac_worker_arena(size_t bytes, ac_err *err)
{
    worker_state *w = state();
    if (!w) {
        ac_fail(err, AC_ERR_ENV, "out of memory for the worker's state");
        return NULL;
    }
    bytes = bytes ? bytes : 1;
    if (w->arena && bytes <= w->arena_bytes &&
        !(w->arena_bytes > ((size_t)64 << 20) && bytes < w->arena_bytes / SHRINK_FACTOR))
        return w->arena;
    bool shrink = w->arena_fd >= 0 && bytes < w->arena_bytes;
    if (w->arena)
        munmap(w->arena, w->arena_bytes);
    w->arena = NULL, w->arena_bytes = 0;
    if (w->arena_fd < 0 || shrink) { /* sealed against shrinking: a smaller arena is a new memfd */
        if (arena_new(w, bytes, err) != AC_OK)
            return NULL;
    } else if (ftruncate(w->arena_fd, (off_t)bytes) != 0) {
        ac_fail(err, AC_ERR_ENV, "cannot grow the shared arena to %zu bytes: %s", bytes, strerror(errno));
        return NULL;
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, w->arena_fd, 0);
    if (m == MAP_FAILED) {
        ac_fail(err, AC_ERR_ENV, "cannot map the shared arena (%zu bytes): %s", bytes, strerror(errno));
        return NULL;
    }
    w->arena = m, w->arena_bytes = bytes;
    return w->arena;
}

/* ---- waiting ----------------------------------------------------------------------- */

typedef enum { WAIT_REPLY, WAIT_DIED, WAIT_TIMEOUT, WAIT_GARBLED } wait_result;

/* Is the worker gone?  Fills *status when it was reaped. */
static bool worker_gone(worker_state *w, int *status)
{
    pid_t r = waitpid(w->pid, status, WNOHANG);
    if (r == w->pid || (r < 0 && errno == ECHILD)) {
        if (r < 0)
            *status = -1; /* reaped by someone else (SIGCHLD ignored): its status is lost */
        w->pid = 0;
        return true;
    }
    return false;
}

/* After the socket closed: the worker's exit status, waiting a little; -2 when it lives on (killed then). */
static int reap_after_eof(worker_state *w)
{
    int status = -2;
    for (double t0 = ac_now_seconds(); ac_now_seconds() - t0 < REAP_SECONDS;) {
        if (worker_gone(w, &status))
            return status;
        struct timespec pause = {0, 2000000};
        nanosleep(&pause, NULL);
    }
    return -2;
}

/* Waits for the reply to seq until deadline (monotonic seconds).  Polls in
 * slices so a worker that died while a descendant keeps the socket open is
 * still seen. */
static wait_result wait_reply(worker_state *w, uint64_t seq, double deadline, worker_reply *r, int *status)
{
    *status = -2;
    for (;;) {
        double left = deadline - ac_now_seconds();
        if (left <= 0)
            return WAIT_TIMEOUT;
        struct pollfd pfd = {.fd = w->sock, .events = POLLIN};
        int n = poll(&pfd, 1, (int)fmin(ceil(left * 1000.0), 50.0));
        if (n < 0 && errno != EINTR)
            return WAIT_GARBLED;
        if (n > 0) {
            ssize_t got = recv(w->sock, r, sizeof *r, MSG_DONTWAIT);
            if (got < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            if (got <= 0) {
                *status = reap_after_eof(w);
                return WAIT_DIED;
            }
            bool ok = got == (ssize_t)sizeof *r && r->magic == WORKER_MAGIC && r->seq == seq &&
                (r->status == AC_OK || r->status == AC_ERR_INPUT || r->status == AC_ERR_ENV ||
                 r->status == AC_KERNEL_FAULT);
            r->msg[sizeof r->msg - 1] = '\0';
            return ok ? WAIT_REPLY : WAIT_GARBLED;
        }
        if (n == 0 && worker_gone(w, status))
            return WAIT_DIED;
    }
}

/* ---- what a death means -------------------------------------------------------------- */

static const char *signal_name(int sig)
{
    const char *abbrev = sigabbrev_np(sig);
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "SIG%s", abbrev ? abbrev : "?");
    return abbrev ? buf : "an unknown signal";
}

/* The kernel ended the worker: crash (a signal) or exited (any exit status). */
static int death_fault(int status, ac_entry e, ac_err *err)
{
    const char *entry = ac_entry_name(e);
    if (status >= 0 && WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        return ac_fail(err, AC_KERNEL_FAULT, "crash: %s killed the worker process with %s (%s)%s", entry,
                       signal_name(sig), strsignal(sig),
                       sig == SIGKILL ? "; SIGKILL may also be the kernel's out-of-memory killer" : "");
    }
    if (status >= 0 && WIFEXITED(status))
        return ac_fail(err, AC_KERNEL_FAULT,
                       "exited: the worker process exited with status %d during %s (the "
                       "kernel called exit() or _exit(); a kernel must return)",
                       WEXITSTATUS(status), entry);
    return ac_fail(err, AC_KERNEL_FAULT, "crash: the worker process %s during %s",
                   status == -2 ? "closed its channel to attncheck and was killed" : "vanished (its status was lost)",
                   entry);
}

/* ---- spawning ---------------------------------------------------------------------------- */

static const char *worker_exe(void)
{
    const char *env = getenv("ATTNCHECK_WORKER_EXE");
    return env && *env ? env : "/proc/self/exe";
}

/* The worker's environment: attncheck's, with ASAN_OPTIONS ending in
 * WORKER_ASAN, so that in a sanitizer build a kernel's fault ends the worker
 * as it would without ASan: a SIGSEGV stays a SIGSEGV (crash), an error ASan
 * reports ends it by SIGABRT (crash), never by exit(1) (exited); the worker's
 * deliberate leaks (plugins stay loaded) are not reported at every exit.  A
 * build without ASan ignores it.  NULL when out of memory. */
#define WORKER_ASAN "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:abort_on_error=1:detect_leaks=0"
static char **worker_env(char *asan, size_t len)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (!env)
        return NULL;
    const char *old = getenv("ASAN_OPTIONS");
    snprintf(asan, len, "ASAN_OPTIONS=%s%s" WORKER_ASAN, old ? old : "", old && *old ? ":" : "");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "ASAN_OPTIONS=", 13) != 0)
            env[k++] = environ[i];
    env[k] = asan;
    return env;
}

static int spawn_process(worker_state *w, int child_sock, ac_err *err)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_adddup2(&fa, child_sock, WORKER_SOCK_FD);
    posix_spawn_file_actions_adddup2(&fa, w->arena_fd, WORKER_ARENA_FD);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    sigdelset(&all, SIGKILL), sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all); /* signals the parent ignores are not ignored in the worker */
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    char parent[32];
    snprintf(parent, sizeof parent, "%ld", (long)getpid());
    char *argv[] = {"attncheck", WORKER_ARG, parent, NULL};
    char asan[1024];
    char **env = worker_env(asan, sizeof asan);
    int e = env ? posix_spawn(&w->pid, worker_exe(), &fa, &at, argv, env) : ENOMEM;
    free(env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (e != 0) {
        w->pid = 0;
        return ac_fail(err, AC_ERR_ENV, "cannot start the kernel worker %s: %s", worker_exe(), strerror(e));
    }
    return AC_OK;
}

/* The hello and the plugin paths, then the worker's answer. */
static int greet(worker_state *w, ac_err *err)
{
    size_t n_plugins = ac_plugin_count();
    worker_hello h = {WORKER_MAGIC, WORKER_VERSION, sizeof(worker_request), sizeof(worker_reply), (uint32_t)n_plugins};
    bool sent = send(w->sock, &h, sizeof h, MSG_NOSIGNAL) == (ssize_t)sizeof h;
    for (size_t i = 0; sent && i < n_plugins; i++) {
        worker_path p;
        memset(&p, 0, sizeof p);
        snprintf(p.path, sizeof p.path, "%s", ac_plugin_path_at(i));
        sent = send(w->sock, &p, sizeof p, MSG_NOSIGNAL) == (ssize_t)sizeof p;
    }
    worker_reply r;
    int status;
    wait_result res = sent ? wait_reply(w, 0, ac_now_seconds() + START_SECONDS, &r, &status) : WAIT_DIED;
    if (res == WAIT_REPLY && r.status == AC_OK) {
        w->n_plugins = n_plugins;
        return AC_OK;
    }
    const char *why = res == WAIT_REPLY ? r.msg : res == WAIT_TIMEOUT ? "no answer within 60 s" : "it died";
    return ac_fail(err, AC_ERR_ENV,
                   "the kernel worker (%s %s) did not start: %s (--in-process runs kernels "
                   "without it)",
                   worker_exe(), WORKER_ARG, why);
}

static int spawn(worker_state *w, ac_err *err)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return ac_fail(err, AC_ERR_ENV, "cannot create the worker's socket: %s", strerror(errno));
    w->sock = high_fd(sv[0]);
    int child = high_fd(sv[1]);
    int st = w->sock < 0 || child < 0 ? ac_fail(err, AC_ERR_ENV, "out of file descriptors for the worker")
                                      : spawn_process(w, child, err);
    close_fd(&child);
    if (st == AC_OK)
        st = greet(w, err);
    if (st != AC_OK)
        kill_worker(w);
    return st;
}

/* A worker that matches the registry (the same plugins), started when needed. */
static int ensure_worker(worker_state *w, ac_err *err)
{
    if (w->pid > 0 && w->n_plugins != ac_plugin_count())
        kill_worker(w);
    return w->pid > 0 ? AC_OK : spawn(w, err);
}

/* ---- the call ------------------------------------------------------------------------------- */

static int send_request(worker_state *w, const ac_kernel *k, ac_entry e, const ac_problem *p, const ac_arena_layout *l)
{
    worker_request rq;
    memset(&rq, 0, sizeof rq);
    rq.magic = WORKER_MAGIC;
    rq.entry = (uint32_t)e;
    rq.seq = ++w->seq;
    rq.arena_bytes = w->arena_bytes;
    snprintf(rq.kernel, sizeof rq.kernel, "%s", k->name);
    rq.problem = *p; /* the scalars (d_v, softcap, sink tokens, dropout p and seed, ...) as they are */
    ac_problem_strip_arrays(&rq.problem); /* the arrays are in the arena */
    rq.layout = *l;
    return send(w->sock, &rq, sizeof rq, MSG_NOSIGNAL) == (ssize_t)sizeof rq ? 0 : -1;
}

int ac_worker_call(const ac_kernel *k, ac_entry e, const ac_problem *p, const ac_arena_layout *l, double timeout_s,
                   ac_err *err)
{
    worker_state *w = state();
    if (!w || !w->arena || l->total > w->arena_bytes)
        return ac_fail(err, AC_ERR_ENV, "the worker's arena is not ready (ac_worker_arena first)");
    int st = ensure_worker(w, err);
    if (st != AC_OK)
        return st;
    worker_reply r;
    int status = -2;
    double deadline = ac_now_seconds() + timeout_s;
    wait_result res = send_request(w, k, e, p, l) == 0 ? wait_reply(w, w->seq, deadline, &r, &status) : WAIT_DIED;
    if (res == WAIT_DIED && w->pid > 0 && !worker_gone(w, &status))
        status = reap_after_eof(w);
    switch (res) {
    case WAIT_REPLY:
        st = r.status == AC_OK ? AC_OK : ac_fail(err, r.status, "%s", r.msg);
        break;
    case WAIT_TIMEOUT:
        st = ac_fail(err, AC_KERNEL_FAULT,
                     "timeout: %s ran past its deadline of %.3g s (--kernel-timeout) and was "
                     "killed",
                     ac_entry_name(e), timeout_s);
        break;
    case WAIT_DIED:
        st = death_fault(status, e, err);
        break;
    default:
        st = ac_fail(err, AC_KERNEL_FAULT,
                     "crash: the worker's reply to %s was garbled (the kernel wrote to "
                     "attncheck's channel?)",
                     ac_entry_name(e));
    }
    if (st != AC_OK && st != AC_ERR_INPUT) /* whatever failed may have left the process damaged */
        kill_worker(w);
    return st;
}
