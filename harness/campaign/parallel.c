/* harness/campaign/parallel.c — `attncheck fuzz --jobs N`: N workers, each a
 * fresh attncheck (fork + exec of /proc/self/exe, so no CUDA context or
 * OpenBLAS thread pool crosses a fork) running the loop over shard j of N of
 * this process's shard, streaming every finished case back through a pipe as
 * a fixed-size binary message.  One collector here takes them in any order
 * and writes the reports in case-index order, so the results are those of one
 * worker.  A failure is shrunk by the worker that found it.
 *
 * Each worker gets ATTNCHECK_THREADS and OPENBLAS_NUM_THREADS = CPUs / N
 * (unless set), one GPU each (CUDA_VISIBLE_DEVICES) when several are visible,
 * else the shared device and ATTNCHECK_GPU_LOCK (reference_tier.c).
 * --stop-first, a signal (SIGTERM from Slurm's time limit, SIGINT) and the end
 * of the time budget stop them all: SIGTERM, whose handler lets a worker end
 * its case in flight (and cut its shrinking short); after STOP_GRACE_S, or 10%
 * past the time budget, SIGKILL.  The cases that finished are reported. */
#define _GNU_SOURCE /* pipe2, sched_getaffinity */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/campaign/campaign.h"

#define MAX_JOBS 256
#define STOP_GRACE_S 20.0

enum { MSG_OUTCOME = 1, MSG_END = 2 };
typedef struct {
    uint32_t type, bytes;
} msg_header;

/* ---- the worker side ------------------------------------------------------------------ */

static bool write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        p += n, len -= (size_t)n;
    }
    return true;
}

static bool send_msg(int fd, uint32_t type, const void *body, size_t bytes)
{
    msg_header h = {type, (uint32_t)bytes};
    return write_all(fd, &h, sizeof h) && write_all(fd, body, bytes);
}

static bool emit_to_pipe(void *ctx, const ac_outcome *oc) { return send_msg(*(int *)ctx, MSG_OUTCOME, oc, sizeof *oc); }

int ac_campaign_worker(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, int fd)
{
    signal(SIGPIPE, SIG_IGN); /* a parent gone: the write fails and the loop stops */
    ac_outcome_sink sink = {emit_to_pipe, &fd};
    static ac_loop_end end;
    ac_campaign_loop(k, b, o, &sink, &end);
    send_msg(fd, MSG_END, &end, sizeof end);
    close(fd);
    return end.status;
}

/* ---- starting workers ----------------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int fd; /* read end; -1 once closed */
    char *buf; /* bytes of a message not yet complete */
    size_t have;
    bool ended; /* its MSG_END came */
    ac_loop_end end;
    long first, stride; /* the indices it runs */
} worker;

int ac_cpu_count(void)
{
    cpu_set_t set;
    long n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* The GPUs a worker may be given: CUDA_VISIBLE_DEVICES's entries, else the
 * driver's devices (/proc/driver/nvidia/gpus), without starting CUDA here. */
static int visible_gpus(char ids[][64], int max)
{
    const char *env = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    if (env) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", env);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
            snprintf(ids[n++], 64, "%s", t);
        return n;
    }
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    for (struct dirent *e; d && (e = readdir(d)) && n < max;)
        if (e->d_name[0] != '.')
            n++;
    if (d)
        closedir(d);
    for (int i = 0; i < n; i++) /* CUDA's default order is by PCI bus, as the driver lists them */
        snprintf(ids[i], 64, "%d", i);
    return n;
}

typedef struct {
    const ac_campaign_opts *o;
    int jobs, argc;
    char **argv;
    double t0;
    char gpu_ids[MAX_JOBS][64];
    int n_gpus;
    char lock_path[64];
} spawn_plan;

static void set_default_env(const char *name, long value)
{
    char v[32];
    snprintf(v, sizeof v, "%ld", value);
    setenv(name, v, 0);
}

/* In the child: environment, then exec attncheck with this worker's shard. */
static void exec_worker(const spawn_plan *sp, int j, int fd)
{
    const ac_campaign_opts *o = sp->o;
    int threads = ac_cpu_count() / sp->jobs;
    set_default_env("ATTNCHECK_THREADS", threads < 1 ? 1 : threads);
    set_default_env("OPENBLAS_NUM_THREADS", threads < 1 ? 1 : threads);
    if (sp->n_gpus > 1)
        setenv("CUDA_VISIBLE_DEVICES", sp->gpu_ids[j % sp->n_gpus], 1);
    else if (sp->lock_path[0])
        setenv("ATTNCHECK_GPU_LOCK", sp->lock_path, 1);
    long n = o->shard_count > 1 ? o->shard_count : 1, i = o->shard_count > 1 ? o->shard_index : 0;
    char fd_arg[16], shard[48], deadline[32];
    snprintf(fd_arg, sizeof fd_arg, "%d", fd);
    snprintf(shard, sizeof shard, "%ld/%ld", i + n * j, n * sp->jobs);
    snprintf(deadline, sizeof deadline, "%.6f", sp->t0 + o->max_seconds); /* the monotonic clock is the machine's */
    char **args = calloc((size_t)sp->argc + 16, sizeof *args);
    if (!args)
        _exit(127);
    int a = 0;
    args[a++] = "attncheck";
    for (int k = 0; k < sp->argc; k++)
        args[a++] = sp->argv[k];
    const char *extra[] = {"--worker", fd_arg, "--shard", shard, "--jobs", "1", "--quiet"};
    for (size_t k = 0; k < sizeof extra / sizeof extra[0]; k++)
        args[a++] = (char *)extra[k];
    if (o->max_seconds > 0)
        args[a++] = "--deadline", args[a++] = deadline;
    execv("/proc/self/exe", args);
    _exit(127);
}

static int start_worker(const spawn_plan *sp, int j, worker *w, ac_err *err)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return ac_fail(err, AC_ERR_ENV, "--jobs: pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        close(p[0]), close(p[1]);
        return ac_fail(err, AC_ERR_ENV, "--jobs: fork: %s", strerror(errno));
    }
    if (pid == 0) {
        int fd = dup(p[1]); /* without O_CLOEXEC: it survives the exec */
        exec_worker(sp, j, fd < 0 ? p[1] : fd);
    }
    close(p[1]);
    long n = sp->o->shard_count > 1 ? sp->o->shard_count : 1;
    *w = (worker){.pid = pid,
                  .fd = p[0],
                  .first = (sp->o->shard_count > 1 ? sp->o->shard_index : 0) + n * j,
                  .stride = n * sp->jobs};
    return AC_OK;
}

/* ---- the parent's loop ------------------------------------------------------------------ */

typedef struct {
    worker w[MAX_JOBS];
    int jobs, running;
    ac_collector *c;
    bool asked_to_stop; /* SIGTERM sent */
    double stop_sent_at;
    char stopped[1024];
    int status;
    ac_err err;
} pool;

static void signal_all(pool *pl, int sig)
{
    for (int j = 0; j < pl->jobs; j++)
        if (pl->w[j].fd >= 0)
            kill(pl->w[j].pid, sig);
}

static void stop_all(pool *pl, const char *why)
{
    if (!pl->asked_to_stop) {
        pl->asked_to_stop = true;
        pl->stop_sent_at = ac_now_seconds();
        if (why && !pl->stopped[0])
            snprintf(pl->stopped, sizeof pl->stopped, "%s", why);
        signal_all(pl, SIGTERM);
    }
}

static void note_stop(pool *pl, int j, const char *why)
{
    if (pl->asked_to_stop && !strncmp(why, "signal:", 7))
        return; /* stopped because this process asked: its own reason says why */
    size_t used = strlen(pl->stopped);
    if (why[0] && used + 1 < sizeof pl->stopped)
        snprintf(pl->stopped + used, sizeof pl->stopped - used, "%sworker %d: %s", used ? "; " : "", j, why);
}

/* A whole message from worker j. */
static void on_message(pool *pl, int j, const msg_header *h, const void *body)
{
    worker *w = &pl->w[j];
    if (h->type == MSG_OUTCOME && h->bytes == sizeof(ac_outcome)) {
        if (!ac_collector_add(pl->c, body))
            stop_all(pl, "--stop-first: stopped at the first failure");
    } else if (h->type == MSG_END && h->bytes == sizeof(ac_loop_end)) {
        memcpy(&w->end, body, sizeof w->end);
        w->ended = true;
        note_stop(pl, j, w->end.stopped);
        if (w->end.status != AC_OK && pl->status == AC_OK) {
            pl->status = w->end.status;
            ac_fail(&pl->err, w->end.status, "worker %d: %s", j, w->end.err.msg);
            stop_all(pl, NULL);
        }
    }
}

/* Reads what worker j has; false at its end of file. */
static bool read_worker(pool *pl, int j)
{
    worker *w = &pl->w[j];
    size_t cap = sizeof(msg_header) + sizeof(ac_outcome) + sizeof(ac_loop_end);
    if (!w->buf && !(w->buf = malloc(cap)))
        return false;
    ssize_t n = read(w->fd, w->buf + w->have, cap - w->have);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return true;
    if (n <= 0)
        return false;
    w->have += (size_t)n;
    for (;;) {
        msg_header h;
        if (w->have < sizeof h)
            return true;
        memcpy(&h, w->buf, sizeof h);
        size_t whole = sizeof h + h.bytes;
        if (h.bytes > cap - sizeof h)
            return false; /* not a message this attncheck writes */
        if (w->have < whole)
            return true;
        on_message(pl, j, &h, w->buf + sizeof h);
        memmove(w->buf, w->buf + whole, w->have - whole);
        w->have -= whole;
    }
}

static void worker_gone(pool *pl, int j)
{
    worker *w = &pl->w[j];
    close(w->fd);
    w->fd = -1;
    pl->running--;
    int wst = 0;
    waitpid(w->pid, &wst, 0);
    ac_collector_worker_done(pl->c, w->first, w->stride);
    if (w->ended || pl->asked_to_stop)
        return;
    if (pl->status == AC_OK) {
        pl->status = AC_ERR_ENV;
        if (WIFSIGNALED(wst))
            ac_fail(&pl->err, AC_ERR_ENV, "worker %d (cases %ld, %ld, ...) was killed by signal %d", j, w->first,
                    w->first + w->stride, WTERMSIG(wst));
        else
            ac_fail(&pl->err, AC_ERR_ENV, "worker %d (cases %ld, %ld, ...) exited with status %d before its end", j,
                    w->first, w->first + w->stride, WIFEXITED(wst) ? WEXITSTATUS(wst) : -1);
    }
    stop_all(pl, NULL);
}

/* Signals, the time budget's hard end, the grace after SIGTERM. */
static void watch(pool *pl, const ac_campaign_opts *o, double t0)
{
    double now = ac_now_seconds();
    if (o->stop && *o->stop)
        stop_all(pl, "signal: stopped; the cases that finished are reported");
    double hard = o->max_seconds + (o->max_seconds / 10 > 5 ? o->max_seconds / 10 : 5);
    if (o->max_seconds > 0 && now - t0 > hard) {
        if (!pl->asked_to_stop)
            snprintf(pl->stopped + strlen(pl->stopped), sizeof pl->stopped - strlen(pl->stopped),
                     "%stime: workers still running 10%% past --time were killed; their cases in flight are not "
                     "reported",
                     pl->stopped[0] ? "; " : "");
        pl->asked_to_stop = true;
        signal_all(pl, SIGKILL);
    }
    if (pl->asked_to_stop && now - pl->stop_sent_at > STOP_GRACE_S)
        signal_all(pl, SIGKILL);
}

static void run_pool(pool *pl, const ac_campaign_opts *o, double t0)
{
    while (pl->running > 0) {
        struct pollfd fds[MAX_JOBS];
        int who[MAX_JOBS], n = 0;
        for (int j = 0; j < pl->jobs; j++)
            if (pl->w[j].fd >= 0)
                fds[n] = (struct pollfd){pl->w[j].fd, POLLIN, 0}, who[n++] = j;
        int ready = poll(fds, (nfds_t)n, 250);
        for (int i = 0; ready > 0 && i < n; i++)
            if (fds[i].revents && !read_worker(pl, who[i]))
                worker_gone(pl, who[i]);
        watch(pl, o, t0);
        ac_collector_progress(pl->c, false);
    }
}

static int run_parallel(const ac_campaign_opts *o, int jobs, int argc, char **argv, ac_collector *c,
                        ac_campaign_result *res, ac_err *err)
{
    static spawn_plan sp;
    static pool pl;
    memset(&sp, 0, sizeof sp);
    memset(&pl, 0, sizeof pl);
    sp = (spawn_plan){.o = o, .jobs = jobs, .argc = argc, .argv = argv, .t0 = ac_now_seconds()};
    sp.n_gpus = visible_gpus(sp.gpu_ids, MAX_JOBS);
    if (sp.n_gpus == 1) { /* one device for every worker: its reference runs one at a time */
        snprintf(sp.lock_path, sizeof sp.lock_path, "/tmp/attncheck-gpu-%d.lock", (int)getpid());
        int fd = open(sp.lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
            close(fd);
    }
    pl.jobs = jobs;
    pl.c = c;
    int st = AC_OK;
    for (int j = 0; j < jobs && st == AC_OK; j++)
        if ((st = start_worker(&sp, j, &pl.w[j], err)) == AC_OK)
            pl.running++;
    if (st != AC_OK)
        stop_all(&pl, NULL);
    run_pool(&pl, o, sp.t0);
    for (int j = 0; j < jobs; j++)
        free(pl.w[j].buf);
    if (sp.lock_path[0])
        unlink(sp.lock_path);
    snprintf(res->stopped, sizeof res->stopped, "%s", pl.stopped);
    if (st == AC_OK && pl.status != AC_OK)
        st = ac_fail(err, pl.status, "%s", pl.err.msg);
    return st;
}

int ac_campaign_jobs(const ac_campaign_opts *o, int jobs)
{
    long step = o->shard_count > 1 ? o->shard_count : 1, first = o->shard_count > 1 ? o->shard_index : 0;
    long cases = o->max_cases > first ? (o->max_cases - first + step - 1) / step : o->max_cases ? 0 : MAX_JOBS;
    if (jobs > cases) /* no worker without a case */
        jobs = (int)cases;
    return jobs > 1 ? (jobs > MAX_JOBS ? MAX_JOBS : jobs) : 1;
}

int ac_fuzz_campaign(const ac_kernel *k, const ac_budgets *b, const ac_campaign_opts *o, int jobs, int argc,
                     char **argv, ac_report *rep, ac_campaign_result *res, ac_err *err)
{
    memset(res, 0, sizeof *res);
    res->jobs = ac_campaign_jobs(o, jobs);
    ac_collector *c = ac_collector_open(k->name, o, rep);
    if (!c)
        return ac_fail(err, AC_ERR_ENV, "out of memory");
    double t0 = ac_now_seconds();
    int st = AC_OK;
    if (res->jobs > 1) {
        st = run_parallel(o, res->jobs, argc, argv, c, res, err);
    } else {
        ac_outcome_sink sink = ac_collector_sink(c);
        static ac_loop_end end;
        ac_campaign_loop(k, b, o, &sink, &end);
        snprintf(res->stopped, sizeof res->stopped, "%s", end.stopped);
        if (end.status != AC_OK)
            st = ac_fail(err, end.status, "%s", end.err.msg);
    }
    ac_collector_progress(c, true);
    ac_err save_err = {{0}};
    int fst = ac_collector_finish(c, &res->s, &save_err);
    res->s.seconds = ac_now_seconds() - t0;
    ac_collector_take_failures(c, &res->failures);
    ac_collector_free(c);
    if (st == AC_OK && fst != AC_OK)
        st = ac_fail(err, fst, "%s", save_err.msg);
    return st;
}

/* ---- how many workers by default ------------------------------------------------------ */

static double mem_available_bytes(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    double kb = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb * 1024;
}

/* The default profile's cases stay small (lengths <= 512 unless raised, the
 * work cap): measured peak of `attncheck fuzz` (cpu-flash, 300 cases) is under
 * 100 MB; 512 MiB a worker leaves room for a raised --max-seqlen. */
#define SMALL_CASE_BYTES ((double)(512u << 20))

int ac_default_jobs(const ac_campaign_opts *o)
{
    int cpus = ac_cpu_count();
    bool small = o->profile == AC_PROFILE_DEFAULT && o->max_seqlen <= AC_GEN_DEFAULT_MAX_SEQLEN;
    double per_job = small ? SMALL_CASE_BYTES : (double)ac_mem_budget(), avail = mem_available_bytes();
    int by_memory = avail > 0 ? (int)(avail / per_job) : cpus;
    int jobs = cpus < by_memory ? cpus : by_memory;
    return jobs < 1 ? 1 : jobs > MAX_JOBS ? MAX_JOBS : jobs;
}
