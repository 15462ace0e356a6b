/* harness/cli/report_cmd.c — `attncheck report`: the HTML report of runs
 * (reports/html_report.py, Python with matplotlib), with a regression section
 * against a baseline run and a history of releases.
 *
 *   attncheck report FILE.jsonl... --html OUT.html [--title T] [--baseline OLD.jsonl] [--history DIR]
 *
 * The script is found the way budgets.txt is: $ATTNCHECK_SOURCE_DIR when set
 * (and only there), else the source tree this binary was configured from,
 * else beside the executable (a bundle: reports/ next to attncheck).  It is
 * exec'd, so its exit status is ours: 0 written, 2 bad usage or input, 3
 * environment (no python3, no matplotlib, no script). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "harness/cli/cli.h"

#define SCRIPT "reports/html_report.py"
#define MAX_ARGS 256

static const char usage[] =
    "usage: attncheck report FILE.jsonl... --html OUT.html [--title T] [--baseline OLD.jsonl] [--history DIR]\n"
    "  FILE: JSON Lines of fuzz|run|check|prove --json (merged shards too), attncheck bench output,\n"
    "        ci/torch_sdpa_bench.py output\n"
    "  --html OUT.html       the self-contained HTML report (SVG charts, no network)\n"
    "  --title T             its title\n"
    "  --baseline OLD.jsonl  a regression section: FILE's cases paired with OLD's by case line, per dtype x\n"
    "                        output the ratios of mean and max scaled error, sign and Wilcoxon p-values\n"
    "  --history DIR         one JSON Lines set per release (DIR/0.3.jsonl or DIR/0.3/*.jsonl): mean and max\n"
    "                        scaled error and cases/s per release, charted, and a text table on stdout\n"
    "                        (with --history alone, --html is optional)\n"
    "Exit status: 0 written, 2 bad usage or input, 3 environment (python3, matplotlib or the script missing).\n";

/* dir/SCRIPT into out when that file exists. */
static bool script_in(const char *dir, char *out, size_t len)
{
    if (!dir || !*dir)
        return false;
    snprintf(out, len, "%s/%s", dir, SCRIPT);
    return access(out, R_OK) == 0;
}

/* Where the script is; AC_ERR_ENV naming every place looked at. */
static int find_script(char *out, size_t len, ac_err *err)
{
    const char *env = getenv("ATTNCHECK_SOURCE_DIR");
    if (env && *env)
        return script_in(env, out, len)
            ? AC_OK
            : ac_fail(err, AC_ERR_ENV,
                      "%s/%s not found (ATTNCHECK_SOURCE_DIR is set: it must be an attncheck "
                      "checkout or bundle with reports/)",
                      env, SCRIPT);
    if (script_in(ATTNCHECK_SOURCE_DIR, out, len))
        return AC_OK;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    char *slash = n > 0 ? (self[n] = '\0', strrchr(self, '/')) : NULL;
    if (slash)
        *slash = '\0';
    if (slash && script_in(self, out, len))
        return AC_OK;
    return ac_fail(err, AC_ERR_ENV,
                   "%s not found in %s nor beside the executable (%s); set ATTNCHECK_SOURCE_DIR "
                   "to an attncheck checkout",
                   SCRIPT, ATTNCHECK_SOURCE_DIR, slash ? self : "unknown");
}

/* argv after "report" into the script's: --html becomes --out; the rest passes as is. */
static int script_args(int argc, char **argv, const char *script, char **args, ac_err *err)
{
    int n = 0;
    bool html = false, history = false;
    args[n++] = "python3";
    args[n++] = (char *)script;
    for (int i = 1; i < argc; i++) {
        if (n + 2 >= MAX_ARGS)
            return ac_fail(err, AC_ERR_INPUT, "too many arguments (at most %d)", MAX_ARGS - 3);
        if (!strcmp(argv[i], "--html") || !strncmp(argv[i], "--html=", 7)) {
            html = true;
            args[n++] = "--out";
            if (argv[i][6] == '=')
                args[n++] = argv[i] + 7;
            else if (i + 1 < argc)
                args[n++] = argv[++i];
            else
                return ac_fail(err, AC_ERR_INPUT, "--html needs a value");
            continue;
        }
        history |= !strcmp(argv[i], "--history") || !strncmp(argv[i], "--history=", 10);
        args[n++] = argv[i];
    }
    args[n] = NULL;
    if (!html && !history)
        return ac_fail(err, AC_ERR_INPUT, "--html OUT.html is required (see attncheck report --help)");
    return AC_OK;
}

int ac_cmd_report(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return AC_OK;
        }
    char script[PATH_MAX + 64];
    char *args[MAX_ARGS];
    ac_err err = {{0}};
    int st = script_args(argc, argv, "", args, &err);
    if (st == AC_OK)
        st = find_script(script, sizeof script, &err);
    if (st == AC_OK) {
        args[1] = script;
        fflush(NULL);
        execvp("python3", args);
        st =
            ac_fail(&err, AC_ERR_ENV, "cannot run python3 (%s): install it (ci/install-deps.sh does)", strerror(errno));
    }
    fprintf(stderr, "attncheck report: %s\n", err.msg);
    return st;
}
