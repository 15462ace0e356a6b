/* harness/exec/exec.c — an external command as the kernel under test (exec.h).
 *
 * Each call writes a case directory (casedir.c) into this kernel's scratch
 * directory, runs the command on it and reads the outputs back.  The command
 * runs in its own process group (so a deadline kills the shell and whatever
 * it started), with its stdout and stderr in a log whose last line goes into
 * the message of a fault.  A persistent command talks over two socket pairs
 * (stdin, stdout): send() with MSG_NOSIGNAL, so a dead process is an EPIPE
 * here, never a SIGPIPE that would kill attncheck. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/exec/exec.h"
#include "harness/files/files.h"
#include "harness/run/run.h"

typedef struct exec_ctx {
    ac_kernel k; /* k.ctx points back here */
    char name[AC_KERNEL_NAME_LEN], description[256];
    char *command;
    ac_exec_mode mode;
    double timeout_s;
    char dir[AC_PATH_LEN], in_dir[AC_PATH_LEN], out_dir[AC_PATH_LEN], log_path[AC_PATH_LEN];
    pid_t pid; /* the persistent process; 0 when none runs */
    int to_child, from_child;
    char reply[4096]; /* what it said, up to a newline */
    size_t reply_len;
    long starts;
    struct exec_ctx *next;
} exec_ctx;

static exec_ctx *all_kernels; /* for the clean-up at exit */

/* ---- scratch directories --------------------------------------------------------- */

/* Empties a directory of the previous call's files (the kernel may leave anything there). */
static int fresh_dir(const char *path, ac_err *err)
{
    ac_remove_tree(path);
    if (mkdir(path, 0700) != 0)
        return ac_fail(err, AC_ERR_ENV, "exec: cannot create %s: %s", path, strerror(errno));
    return AC_OK;
}

/* $ATTNCHECK_EXEC_TMPDIR, else /dev/shm (tmpfs: the files never reach a disk), else $TMPDIR or /tmp. */
static const char *scratch_base(void)
{
    const char *env = getenv("ATTNCHECK_EXEC_TMPDIR");
    struct stat s;
    if (env && *env)
        return env;
    if (stat("/dev/shm", &s) == 0 && S_ISDIR(s.st_mode) && access("/dev/shm", W_OK | X_OK) == 0)
        return "/dev/shm";
    env = getenv("TMPDIR");
    return env && *env ? env : "/tmp";
}

static int make_scratch(exec_ctx *c, ac_err *err)
{
    const char *base = scratch_base();
    if (snprintf(c->dir, sizeof c->dir, "%s/attncheck-exec-XXXXXX", base) >= (int)sizeof c->dir || !mkdtemp(c->dir))
        return ac_fail(err, AC_ERR_ENV, "exec: cannot create a scratch directory in %s: %s", base, strerror(errno));
    bool fits = snprintf(c->in_dir, sizeof c->in_dir, "%.4000s/in", c->dir) < (int)sizeof c->in_dir &&
        snprintf(c->out_dir, sizeof c->out_dir, "%.4000s/out", c->dir) < (int)sizeof c->out_dir &&
        snprintf(c->log_path, sizeof c->log_path, "%.4000s/log", c->dir) < (int)sizeof c->log_path;
    return fits ? AC_OK : ac_fail(err, AC_ERR_ENV, "exec: scratch path too long: %s", c->dir);
}

/* ---- the command line --------------------------------------------------------------- */

/* Appends len bytes of s to the growing string out (n used, cap allocated). */
static bool put(char **out, size_t *n, size_t *cap, const char *s, size_t len)
{
    if (*n + len + 1 > *cap) {
        size_t bigger = (*n + len + 1) * 2;
        char *b = realloc(*out, bigger);
        if (!b)
            return false;
        *out = b, *cap = bigger;
    }
    memcpy(*out + *n, s, len);
    *n += len;
    (*out)[*n] = '\0';
    return true;
}

/* s in single quotes for sh, a quote inside written '\''. */
static bool put_quoted(char **out, size_t *n, size_t *cap, const char *s)
{
    bool ok = put(out, n, cap, "'", 1);
    for (; ok && *s; s++)
        ok = *s == '\'' ? put(out, n, cap, "'\\''", 4) : put(out, n, cap, s, 1);
    return ok && put(out, n, cap, "'", 1);
}

/* The one-shot command with {in} and {out} replaced by the quoted directories. */
static char *expand(const exec_ctx *c)
{
    char *out = NULL;
    size_t n = 0, cap = 0;
    bool ok = put(&out, &n, &cap, "", 0);
    for (const char *s = c->command; ok && *s;) {
        if (!strncmp(s, "{in}", 4) || !strncmp(s, "{out}", 5)) {
            bool in = s[1] == 'i';
            ok = put_quoted(&out, &n, &cap, in ? c->in_dir : c->out_dir);
            s += in ? 4 : 5;
        } else {
            ok = put(&out, &n, &cap, s++, 1);
        }
    }
    if (!ok)
        free(out);
    return ok ? out : NULL;
}

/* ---- processes -------------------------------------------------------------------- */

static double now(void) { return ac_now_seconds(); }

/* The last non-empty line of the command's log, for a fault's message. */
static void log_tail(const exec_ctx *c, char *buf, size_t len)
{
    char *text = NULL;
    size_t n = 0;
    snprintf(buf, len, "(it printed nothing)");
    if (ac_read_file(c->log_path, &text, &n, NULL) != AC_OK || !text)
        return;
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == ' '))
        n--;
    size_t start = n;
    while (start > 0 && text[start - 1] != '\n')
        start--;
    if (n > start)
        snprintf(buf, len, "last line of its output: %.*s", (int)(n - start > 300 ? 300 : n - start), text + start);
    free(text);
}

/* fork + exec /bin/sh -c cmd in its own process group; stdin/stdout from the
 * given fds (-1: /dev/null and the log), stderr to the log. */
static int spawn(const exec_ctx *c, const char *cmd, int child_in, int child_out, pid_t *pid, ac_err *err)
{
    int log = open(c->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (log < 0 || null < 0) {
        if (log >= 0)
            close(log);
        if (null >= 0)
            close(null);
        return ac_fail(err, AC_ERR_ENV, "exec: cannot open %s: %s", c->log_path, strerror(errno));
    }
    *pid = fork();
    if (*pid == 0) { /* the child: only async-signal-safe calls until exec */
        setpgid(0, 0);
        dup2(child_in >= 0 ? child_in : null, 0);
        dup2(child_out >= 0 ? child_out : log, 1);
        dup2(log, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int fork_errno = errno;
    close(log);
    close(null);
    if (*pid < 0)
        return ac_fail(err, AC_ERR_ENV, "exec: fork: %s", strerror(fork_errno));
    setpgid(*pid, *pid); /* also here: no race with the kill of a deadline */
    return AC_OK;
}

/* Waits for pid until the deadline; true when it ended (status filled). */
static bool wait_until(pid_t pid, double deadline, int *status)
{
    long pause_ns = 50000;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR))
            return true;
        if (now() >= deadline)
            return false;
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        pause_ns = pause_ns < 2000000 ? pause_ns * 2 : pause_ns; /* quick commands are seen quickly */
    }
}

static void kill_group(pid_t pid)
{
    int status;
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
}

/* A command that ended: a kernel fault naming how, or bad usage when the shell could not start it. */
static int ended(const exec_ctx *c, int status, const char *what, ac_err *err)
{
    char tail[400];
    log_tail(c, tail, sizeof tail);
    if (WIFSIGNALED(status))
        return ac_fail(err, AC_KERNEL_FAULT, "crash: %s was killed by signal %d (%s); %s", what, WTERMSIG(status),
                       strsignal(WTERMSIG(status)), tail);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code == 126 || code == 127)
        return ac_fail(err, AC_ERR_INPUT, "--exec: the shell could not run '%s' (exit status %d); %s", c->command, code,
                       tail);
    if (code > 128 && code < 128 + 32) /* a shell reporting its child's signal */
        return ac_fail(err, AC_KERNEL_FAULT, "crash: %s ended with status %d (signal %d, %s); %s", what, code,
                       code - 128, strsignal(code - 128), tail);
    return ac_fail(err, AC_KERNEL_FAULT, "exited: %s ended with exit status %d%s; %s", what, code,
                   c->mode == AC_EXEC_PERSISTENT ? " without answering" : "", tail);
}

/* ---- one-shot ---------------------------------------------------------------------- */

static int run_oneshot(exec_ctx *c, ac_err *err)
{
    char *cmd = expand(c);
    if (!cmd)
        return ac_fail(err, AC_ERR_ENV, "exec: out of memory");
    pid_t pid;
    int st = spawn(c, cmd, -1, -1, &pid, err);
    free(cmd);
    if (st != AC_OK)
        return st;
    int status = 0;
    if (!wait_until(pid, now() + c->timeout_s, &status)) {
        kill_group(pid);
        return ac_fail(err, AC_KERNEL_FAULT,
                       "timeout: the command did not exit within %g s (--exec-timeout); "
                       "it was killed",
                       c->timeout_s);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return AC_OK;
    return ended(c, status, "the command", err);
}

/* ---- persistent --------------------------------------------------------------------- */

static void stop_persistent(exec_ctx *c, double grace_s)
{
    if (c->pid <= 0)
        return;
    close(c->to_child); /* EOF on its stdin: a well-behaved server exits */
    close(c->from_child);
    int status;
    if (!wait_until(c->pid, now() + grace_s, &status))
        kill_group(c->pid);
    c->pid = 0;
    c->reply_len = 0;
}

static int start_persistent(exec_ctx *c, ac_err *err)
{
    int in_pair[2], out_pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_pair) != 0)
        return ac_fail(err, AC_ERR_ENV, "exec: socketpair: %s", strerror(errno));
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, out_pair) != 0) {
        close(in_pair[0]), close(in_pair[1]);
        return ac_fail(err, AC_ERR_ENV, "exec: socketpair: %s", strerror(errno));
    }
    int st = spawn(c, c->command, in_pair[1], out_pair[1], &c->pid, err);
    close(in_pair[1]);
    close(out_pair[1]);
    if (st != AC_OK) {
        close(in_pair[0]), close(out_pair[0]);
        c->pid = 0;
        return st;
    }
    c->to_child = in_pair[0];
    c->from_child = out_pair[0];
    c->reply_len = 0;
    c->starts++;
    return AC_OK;
}

/* The process stopped talking (EOF, EPIPE): reap it and say how it ended. */
static int died(exec_ctx *c, ac_err *err)
{
    int status = 0;
    pid_t pid = c->pid;
    close(c->to_child), close(c->from_child);
    c->pid = 0;
    if (!wait_until(pid, now() + 2.0, &status)) {
        kill_group(pid);
        return ac_fail(err, AC_KERNEL_FAULT,
                       "exited: the persistent process closed its stdout without answering "
                       "and was killed");
    }
    return ended(c, status, "the persistent process", err);
}

/* One line from the process by the deadline, newline stripped, into c->reply. */
static int read_reply(exec_ctx *c, double deadline, ac_err *err)
{
    for (;;) {
        char *nl = memchr(c->reply, '\n', c->reply_len);
        if (nl)
            return AC_OK;
        if (c->reply_len + 1 >= sizeof c->reply)
            c->reply_len = 0; /* an endless line is not an answer: keep reading */
        double left = deadline - now();
        struct pollfd pf = {.fd = c->from_child, .events = POLLIN};
        int ready = left > 0 ? poll(&pf, 1, (int)(left * 1000) + 1) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready <= 0)
            return ac_fail(err, AC_KERNEL_FAULT,
                           "timeout: no answer within %g s (--exec-timeout); the persistent "
                           "process was killed and will be restarted",
                           c->timeout_s);
        ssize_t got = read(c->from_child, c->reply + c->reply_len, sizeof c->reply - 1 - c->reply_len);
        if (got <= 0)
            return died(c, err);
        c->reply_len += (size_t)got;
    }
}

/* Takes the first line off the reply buffer into line. */
static void take_line(exec_ctx *c, char *line, size_t len)
{
    char *nl = memchr(c->reply, '\n', c->reply_len);
    size_t n = (size_t)(nl - c->reply), used = n + 1;
    if (n > 0 && c->reply[n - 1] == '\r')
        n--;
    snprintf(line, len, "%.*s", (int)n, c->reply);
    memmove(c->reply, c->reply + used, c->reply_len - used);
    c->reply_len -= used;
}

/* Sends the case directory and waits for "ok" or "error MESSAGE"; any other
 * line (the kernel's own prints to stdout) is skipped. */
static int ask(exec_ctx *c, ac_err *err)
{
    char msg[AC_PATH_LEN + 2];
    int n = snprintf(msg, sizeof msg, "%s\n", c->in_dir);
    if (send(c->to_child, msg, (size_t)n, MSG_NOSIGNAL) != n)
        return died(c, err);
    double deadline = now() + c->timeout_s;
    for (;;) {
        int st = read_reply(c, deadline, err);
        if (st != AC_OK) {
            if (c->pid > 0)
                stop_persistent(c, 0.0);
            return st;
        }
        char line[sizeof c->reply];
        take_line(c, line, sizeof line);
        if (!strcmp(line, "ok"))
            return AC_OK;
        if (!strncmp(line, "error", 5) && (line[5] == ' ' || line[5] == '\0'))
            return ac_fail(err, AC_KERNEL_FAULT, "error: %s", line[5] ? line + 6 : "(no message)");
    }
}

static int run_persistent(exec_ctx *c, ac_err *err)
{
    int st = c->pid > 0 ? AC_OK : start_persistent(c, err);
    return st == AC_OK ? ask(c, err) : st;
}

/* ---- the kernel's entry points ------------------------------------------------------- */

static int call(exec_ctx *c, const ac_case_files *cf, void *o, float *lse, void *dq, void *dk, void *dv, ac_err *err)
{
    int st = fresh_dir(c->in_dir, err);
    if (st == AC_OK)
        st = fresh_dir(c->out_dir, err);
    if (st == AC_OK)
        st = ac_case_dir_write(c->in_dir, cf, err);
    if (st == AC_OK)
        st = c->mode == AC_EXEC_ONESHOT ? run_oneshot(c, err) : run_persistent(c, err);
    if (st == AC_OK)
        st = ac_case_dir_read_outputs(c->out_dir, cf->p, cf->dtype, cf->backward, o, lse, dq, dk, dv, err);
    return st;
}

static int exec_forward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_fwd_args *a, ac_err *err)
{
    exec_ctx *c = (exec_ctx *)self->ctx; /* the registry's copy is const; the state is ours */
    ac_case_files cf = {
        .p = p, .dtype = t, .case_line = ac_run_current_line(), .q = a->q, .k = a->k, .v = a->v, .out_dir = c->out_dir};
    return call(c, &cf, a->o, a->lse, NULL, NULL, NULL, err);
}

static int exec_backward(const ac_kernel *self, const ac_problem *p, ac_dtype t, const ac_bwd_args *a, ac_err *err)
{
    exec_ctx *c = (exec_ctx *)self->ctx;
    ac_case_files cf = {.p = p,
                        .dtype = t,
                        .case_line = ac_run_current_line(),
                        .q = a->q,
                        .k = a->k,
                        .v = a->v,
                        .d_o = a->d_o,
                        .o = a->o,
                        .lse = a->lse,
                        .backward = true,
                        .out_dir = c->out_dir};
    return call(c, &cf, NULL, NULL, a->dq, a->dk, a->dv, err);
}

/* ---- registration and clean-up ---------------------------------------------------------- */

static void clean_up_all(void)
{
    for (exec_ctx *c = all_kernels; c; c = c->next) {
        stop_persistent(c, 1.0);
        ac_remove_tree(c->dir);
    }
}

static int check_spec(const ac_exec_spec *s, ac_err *err)
{
    const char *opt = s->mode == AC_EXEC_ONESHOT ? "--exec" : "--exec-persistent";
    bool has_in = s->command && strstr(s->command, "{in}");
    if (!s->command || !s->command[strspn(s->command, " \t")])
        return ac_fail(err, AC_ERR_INPUT, "%s: an empty command", opt);
    if (!s->caps_path)
        return ac_fail(err, AC_ERR_INPUT,
                       "%s needs --caps FILE: what the kernel claims (dtypes, head dims, masks, "
                       "layouts, ...; see plugins/numpy_attention.caps.json)",
                       opt);
    if (s->mode == AC_EXEC_ONESHOT && !has_in)
        return ac_fail(err, AC_ERR_INPUT,
                       "--exec '%s': the command needs {in} (the case directory) and usually "
                       "{out}, e.g. 'python3 k.py {in} {out}'",
                       s->command);
    if (s->mode == AC_EXEC_PERSISTENT && (has_in || strstr(s->command, "{out}")))
        return ac_fail(err, AC_ERR_INPUT,
                       "--exec-persistent '%s': the command is started once and reads case "
                       "directories on stdin: no {in} or {out} in it",
                       s->command);
    if (s->timeout_s < 0)
        return ac_fail(err, AC_ERR_INPUT, "--exec-timeout must be > 0");
    return AC_OK;
}

static int fill_kernel(exec_ctx *c, const ac_exec_spec *s, ac_err *err)
{
    int st = ac_exec_caps_load(s->caps_path, &c->k.caps, c->name, sizeof c->name, err);
    if (st != AC_OK)
        return st;
    if (s->name)
        snprintf(c->name, sizeof c->name, "%s", s->name);
    snprintf(c->description, sizeof c->description, "external command (%s): %.200s",
             s->mode == AC_EXEC_ONESHOT ? "one process per call" : "persistent", s->command);
    c->k.name = c->name;
    c->k.description = c->description;
    c->k.device = AC_DEV_CPU;
    c->k.memory = AC_MEM_HOST;
    c->k.own_process = true;
    c->k.forward = exec_forward;
    c->k.backward = c->k.caps.backward ? exec_backward : NULL;
    c->k.ctx = c;
    c->mode = s->mode;
    c->timeout_s = s->timeout_s > 0 ? s->timeout_s : AC_EXEC_DEFAULT_TIMEOUT;
    c->command = strdup(s->command);
    return c->command ? make_scratch(c, err) : ac_fail(err, AC_ERR_ENV, "exec: out of memory");
}

int ac_exec_register(const ac_exec_spec *spec, const ac_kernel **out, ac_err *err)
{
    int st = check_spec(spec, err);
    if (st != AC_OK)
        return st;
    exec_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return ac_fail(err, AC_ERR_ENV, "exec: out of memory");
    if ((st = fill_kernel(c, spec, err)) == AC_OK && (st = ac_kernel_add(&c->k, err)) == AC_OK) {
        if (!all_kernels)
            atexit(clean_up_all);
        c->next = all_kernels;
        all_kernels = c;
        *out = ac_kernel_find(c->name);
        return AC_OK;
    }
    if (c->dir[0])
        ac_remove_tree(c->dir);
    free(c->command);
    free(c);
    return st;
}

long ac_exec_starts(const ac_kernel *k)
{
    for (exec_ctx *c = all_kernels; c; c = c->next)
        if (k && k->ctx == c)
            return c->starts;
    return -1;
}
