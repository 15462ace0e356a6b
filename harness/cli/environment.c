/* harness/cli/environment.c — the {"type":"environment"} record every JSON
 * Lines report starts with: what produced it, so a record found months later
 * says which attncheck, budgets, reference tier, machine and command made it.
 * The keys are those reports/html_report.py shows (gpu, driver, cuda, commit,
 * version, command, budgets_version, budgets_sha256, seed, reference,
 * cert_rows, host, date), then the campaign's own options.  Nothing here
 * starts CUDA: the GPU and driver come from /proc/driver/nvidia. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attncheck_config.h"
#include "attncheck_version.h"
#include "harness/case/generate.h"
#include "harness/cli/cli.h"
#include "harness/files/files.h"
#include "harness/run/reference.h"
#include "harness/verdict/budget.h"
#if ATTNCHECK_HAVE_NETTLE
#include <nettle/sha2.h>
#endif

#define MAX_FIELDS 40

typedef struct {
    ac_report_field f[MAX_FIELDS];
    size_t n;
    char text[MAX_FIELDS][512]; /* storage of the strings this file makes */
} fields;

static void add_string(fields *fs, const char *key, const char *value)
{
    if (fs->n < MAX_FIELDS && value && *value) {
        snprintf(fs->text[fs->n], sizeof fs->text[0], "%s", value);
        fs->f[fs->n] = (ac_report_field){key, AC_FIELD_STRING, fs->text[fs->n], 0};
        fs->n++;
    }
}

static void add_number(fields *fs, const char *key, double x)
{
    if (fs->n < MAX_FIELDS)
        fs->f[fs->n++] = (ac_report_field){key, AC_FIELD_NUMBER, NULL, x};
}

static void add_bool(fields *fs, const char *key, bool x)
{
    if (fs->n < MAX_FIELDS)
        fs->f[fs->n++] = (ac_report_field){key, AC_FIELD_BOOL, NULL, x};
}

/* ---- the machine ------------------------------------------------------------------- */

/* The first GPU's model, from the driver's /proc files ("" without one). */
static void gpu_model(char *out, size_t len)
{
    out[0] = '\0';
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    struct dirent *e;
    while (d && (e = readdir(d)) && !out[0]) {
        if (e->d_name[0] == '.')
            continue;
        char path[512], line[256];
        snprintf(path, sizeof path, "/proc/driver/nvidia/gpus/%s/information", e->d_name);
        FILE *f = fopen(path, "r");
        while (f && fgets(line, sizeof line, f)) {
            char model[256];
            if (sscanf(line, "Model: %255[^\n]", model) == 1) {
                snprintf(out, len, "%s", model);
                break;
            }
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
}

/* Whether tok is a dotted version number ("580.159.04"). */
static bool is_version(const char *tok)
{
    size_t digits = strspn(tok, "0123456789.");
    return digits > 0 && tok[digits] == '\0' && strchr(tok, '.') && isdigit((unsigned char)tok[0]);
}

/* The driver's version ("580.159.04"), "" without a driver: the first dotted
 * number after "Kernel Module" ("NVRM version: NVIDIA UNIX Open Kernel Module
 * for x86_64  580.159.04  Release Build ..." on the H100; no "for" elsewhere). */
static void driver_version(char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    char line[512];
    if (f && fgets(line, sizeof line, f)) {
        char *at = strstr(line, "Kernel Module"), *save = NULL;
        for (char *tok = at ? strtok_r(at, " \t\n", &save) : NULL; tok; tok = strtok_r(NULL, " \t\n", &save))
            if (is_version(tok)) {
                snprintf(out, len, "%s", tok);
                break;
            }
    }
    if (f)
        fclose(f);
}

static void iso_date(char *out, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* ---- the budgets file ---------------------------------------------------------------- */

static void budgets_hash(const char *path, char *out, size_t len)
{
    out[0] = '\0';
#if ATTNCHECK_HAVE_NETTLE
    char *data = NULL;
    size_t n = 0;
    if (ac_read_file(path, &data, &n, NULL) != AC_OK || !data)
        return;
    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, n, (const uint8_t *)data);
    sha256_digest(&ctx, sizeof digest, digest);
    free(data);
    for (size_t i = 0; i < sizeof digest && 2 * i + 2 < len; i++)
        snprintf(out + 2 * i, 3, "%02x", digest[i]);
#else
    (void)path, (void)len; /* built without nettle: the hash is left out */
#endif
}

static void add_budgets(fields *fs, const ac_cli *c)
{
    const char *path = c->budgets ? c->budgets : ac_budgets_default_path();
    ac_budgets b;
    char hash[80];
    add_string(fs, "budgets", path);
    if (ac_budgets_load(path, &b, NULL) == AC_OK)
        add_number(fs, "budgets_version", b.version);
    budgets_hash(path, hash, sizeof hash);
    add_string(fs, "budgets_sha256", hash);
}

/* ---- the command and the campaign ------------------------------------------------- */

static void add_command(fields *fs, const ac_cli *c)
{
    char cmd[512] = "attncheck";
    size_t used = strlen(cmd);
    for (int i = 0; i < c->argc && used + 2 < sizeof cmd; i++) {
        bool quote = strpbrk(c->argv[i], " \t'\"()") != NULL;
        used += (size_t)snprintf(cmd + used, sizeof cmd - used, quote ? " '%s'" : " %s", c->argv[i]);
    }
    add_string(fs, "command", cmd);
}

static void add_campaign_options(fields *fs, const ac_cli *c)
{
    if (!(c->cmd & (AC_CMD_FUZZ | AC_CMD_PROVE)))
        return;
    add_number(fs, "seed", (double)c->seed);
    if (c->cmd != AC_CMD_FUZZ)
        return;
    int index = 0, count = 1;
    char shard[48];
    if (ac_cli_shard(c, &index, &count, NULL) == AC_OK) {
        snprintf(shard, sizeof shard, "%d/%d", index, count);
        add_string(fs, "shard", shard);
    }
    if (c->seconds > 0 && !c->cases)
        add_number(fs, "time_budget", c->seconds);
    else
        add_number(fs, "case_budget", c->cases ? (double)c->cases : AC_DEFAULT_FUZZ_CASES);
    add_string(fs, "profile", c->profile ? c->profile : "default");
    if (c->min_seqlen)
        add_number(fs, "min_seqlen", c->min_seqlen);
    if (c->max_seqlen)
        add_number(fs, "max_seqlen", c->max_seqlen);
    add_string(fs, "dtypes", c->dtype);
    add_string(fs, "masks", c->mask);
    add_number(fs, "shrink_steps", c->shrink_steps);
}

void ac_cli_environment(const ac_cli *c, const char *kernel, ac_report *rep)
{
    static fields fs;
    char buf[256];
    memset(&fs, 0, sizeof fs);
    add_string(&fs, "subcommand", c->cmd_name);
    add_string(&fs, "kernel", kernel ? kernel : c->kernel ? c->kernel : c->base);
    gpu_model(buf, sizeof buf);
    add_string(&fs, "gpu", buf[0] ? buf : "none");
    driver_version(buf, sizeof buf);
    add_string(&fs, "driver", buf);
    add_string(&fs, "cuda", ATTNCHECK_HAVE_CUDA ? ATTNCHECK_CUDA_VERSION : "none (built without CUDA)");
    add_string(&fs, "commit", ATTNCHECK_COMMIT);
    add_string(&fs, "version", ATTNCHECK_VERSION);
    add_command(&fs, c);
    add_budgets(&fs, c);
    add_campaign_options(&fs, c);
    add_string(&fs, "reference", c->reference ? c->reference : "auto");
    add_number(&fs, "cert_rows", c->cert_rows);
    add_bool(&fs, "backward", !c->no_backward);
    add_number(&fs, "mem_budget_gib", (double)ac_mem_budget() / (double)(1u << 30));
    if (gethostname(buf, sizeof buf) == 0) {
        buf[sizeof buf - 1] = '\0';
        add_string(&fs, "host", buf);
    }
    iso_date(buf, sizeof buf);
    add_string(&fs, "date", buf);
    ac_report_record(rep, "environment", fs.f, fs.n);
}
