/* harness/cli/options.c — the one option table of every subcommand, its
 * parser and the help it prints.
 *
 * A row says which subcommands take the option, what its value is and where
 * it goes; a plain value (a string, a bounded integer, a positive number of
 * seconds, a flag) needs no code of its own.  The report options come from
 * report/report.h's table of formats.  Every option is written "--opt value"
 * or "--opt=value", in every subcommand. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "harness/case/case.h"
#include "harness/case/generate.h"
#include "harness/cli/cli.h"
#include "harness/exec/exec.h"
#include "harness/run/plugin.h"
#include "harness/run/reference.h"

enum { C_ALL = AC_CMD_FUZZ | AC_CMD_RUN | AC_CMD_LIST | AC_CMD_PROVE | AC_CMD_CHECK | AC_CMD_REFERENCE | AC_CMD_MERGE };
enum { C_FILES = AC_CMD_CHECK | AC_CMD_REFERENCE, C_CASES = AC_CMD_FUZZ | AC_CMD_RUN | AC_CMD_PROVE };
enum { C_REPORTS = C_CASES | AC_CMD_CHECK }; /* the subcommands that write reports */
enum { C_KERNELS = C_CASES | AC_CMD_LIST | AC_CMD_CHECK }; /* the subcommands that name kernels */
enum { C_REPORT_FILES = C_REPORTS | AC_CMD_MERGE }; /* and those that take the report options */

/* ---- the subcommands ------------------------------------------------------------ */

typedef struct {
    const char *name;
    ac_cmd cmd;
    const char *positional; /* its one argument, or NULL */
    const char *summary;
    const char *details; /* more usage lines, or NULL */
} cli_command;

static const cli_command commands[] = {
    {"fuzz", AC_CMD_FUZZ, NULL, "fuzz a kernel against the reference (default: the best kernel here)", NULL},
    {"run", AC_CMD_RUN, "FILE|DIR", "replay case lines: run FILE|DIR|--case 'LINE'", NULL},
    {"list", AC_CMD_LIST, NULL, "every kernel, its capabilities and whether it can run here", NULL},
    {"prove", AC_CMD_PROVE, NULL, "detection power: every mutant of a kernel family must be caught", NULL},
    {"check", AC_CMD_CHECK, "PATH", "check a kernel's saved tensors",
     "  PATH: a directory of q.npy k.npy v.npy o.npy [lse do dq dk dv] or one .safetensors file with those\n"
     "  tensors; --plugin PATH.so --kernel NAME runs that kernel on the inputs instead of reading o.npy ..."},
    {"reference", AC_CMD_REFERENCE, "PATH", "write reference outputs for saved inputs",
     "  PATH: a directory of q.npy k.npy v.npy [do.npy] or one .safetensors file with those tensors"},
    {"gen", AC_CMD_GEN, NULL, "write a case line's inputs as .npy files and problem.json",
     "  then run any framework on DIR, put o.npy lse.npy [dq dk dv].npy there and `attncheck check DIR`;\n"
     "  `attncheck reference DIR --out DIR/ref` writes the exact outputs"},
    {"merge", AC_CMD_MERGE, "FILE.jsonl...", "combine the --json of shards (fuzz --shard I/N) into one report",
     "  FILE.jsonl: the shards' JSON Lines, in any order; prints the summary the unsharded run prints"},
};
enum { N_COMMANDS = (int)(sizeof commands / sizeof commands[0]) };

/* ---- the options ------------------------------------------------------------------ */

typedef enum { OPT_FLAG, OPT_STRING, OPT_LONG, OPT_INT, OPT_U64, OPT_SECONDS, OPT_CUSTOM, OPT_RETIRED } opt_type;

typedef struct cli_option cli_option;
struct cli_option {
    const char *name;
    const char *arg; /* the value's name in --help; NULL for a flag */
    unsigned cmds; /* AC_CMD_* taking it */
    const char *help; /* for OPT_RETIRED: what to write instead */
    opt_type type;
    size_t offset; /* where in ac_cli */
    long min, max; /* OPT_LONG, OPT_INT */
    int (*apply)(const cli_option *o, ac_cli *c, const char *v, ac_err *err); /* OPT_CUSTOM */
};

static int apply_dtypes(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    c->dtype = v, c->dtypes = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        ac_dtype t;
        char names[64];
        ac_dtype_list(names, sizeof names);
        if (ac_dtype_parse(tok, &t) != AC_OK)
            return ac_fail(err, AC_ERR_INPUT, "%s: unknown dtype '%s' (%s)", o->name, tok, names);
        c->dtypes |= 1u << t;
    }
    if (!c->dtypes)
        return ac_fail(err, AC_ERR_INPUT, "%s: empty list", o->name);
    if ((c->cmd & C_FILES) && (c->dtypes & (c->dtypes - 1)))
        return ac_fail(err, AC_ERR_INPUT, "%s: %s takes one dtype, got '%s'", o->name, c->cmd_name, v);
    return AC_OK;
}

/* fuzz: a list of kinds to draw; check, reference: one kind with its
 * parameters, as a case line writes it (a boolean mask from a file is
 * --mask-file; a dense(KEEP) mask drawn from a seed means nothing there). */
static int apply_mask(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    c->mask = v;
    if (c->cmd == AC_CMD_FUZZ)
        return ac_mask_filter_parse(v, &c->masks, err);
    ac_case scratch = ac_case_default();
    ac_err why = {{0}};
    if (ac_case_mask_parse(v, &scratch, &why) != AC_OK)
        return ac_fail(err, AC_ERR_INPUT, "--%s (a boolean mask file goes to --mask-file)", why.msg);
    if (scratch.mask == AC_MASK_DENSE)
        return ac_fail(err, AC_ERR_INPUT,
                       "%s %s draws a random mask from a case seed; give the kernel's boolean "
                       "mask with --mask-file FILE",
                       o->name, v);
    return AC_OK;
}

/* --exec and --exec-persistent append a command; --caps and --exec-name pair with them in order. */
static int apply_exec(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    if (c->n_exec == AC_MAX_EXEC)
        return ac_fail(err, AC_ERR_INPUT, "at most %d --exec/--exec-persistent options", AC_MAX_EXEC);
    c->exec_persistent[c->n_exec] = strcmp(o->name, "--exec-persistent") == 0;
    c->exec_cmd[c->n_exec++] = v;
    return AC_OK;
}

static int apply_exec_pair(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    bool caps = strcmp(o->name, "--caps") == 0;
    int *n = caps ? &c->n_exec_caps : &c->n_exec_name;
    if (*n == AC_MAX_EXEC)
        return ac_fail(err, AC_ERR_INPUT, "at most %d %s options", AC_MAX_EXEC, o->name);
    (caps ? c->exec_caps : c->exec_name)[(*n)++] = v;
    return AC_OK;
}

/* "I/N": 0 <= I < N. */
static int apply_shard(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    char *end;
    errno = 0;
    long i = strtol(v, &end, 10), n = -1;
    if (!errno && end != v && *end == '/') {
        char *num = end + 1;
        n = strtol(num, &end, 10);
        if (end == num || *end || errno)
            n = -1;
    }
    if (n < 1 || n > 1000000 || i < 0 || i >= n)
        return ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not I/N with 0 <= I < N (e.g. 3/8)", o->name, v);
    c->shard_index = (int)i, c->shard_count = (int)n;
    return AC_OK;
}

static int apply_profile(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    (void)o;
    ac_profile p;
    c->profile = v;
    return ac_profile_parse(v, &p, err);
}

static int apply_reference(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    (void)o;
    ac_ref_tier t;
    c->reference = v;
    return ac_ref_tier_parse(v, &t, err);
}

static int apply_mem_budget(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    char *end;
    errno = 0;
    double gib = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(gib) || gib <= 0 || gib > 1 << 20)
        return ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not a positive number of GiB", o->name, v);
    c->mem_budget_gib = gib;
    return AC_OK;
}

static int apply_plugin(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    if (c->n_plugins == AC_MAX_PLUGINS)
        return ac_fail(err, AC_ERR_INPUT, "at most %d %s options", AC_MAX_PLUGINS, o->name);
    c->plugins[c->n_plugins++] = v;
    return AC_OK;
}

#define AT(member) offsetof(ac_cli, member)
#define STRING(name, arg, cmds, member, help) \
    { \
        name, arg, cmds, help, OPT_STRING, AT(member), 0, 0, NULL \
    }
#define FLAG(name, cmds, member, help) \
    { \
        name, NULL, cmds, help, OPT_FLAG, AT(member), 0, 0, NULL \
    }
#define NUMBER(name, type, cmds, member, min, max, help) \
    { \
        name, "N", cmds, help, type, AT(member), min, max, NULL \
    }
#define CUSTOM(name, arg, cmds, fn, help) \
    { \
        name, arg, cmds, help, OPT_CUSTOM, 0, 0, 0, fn \
    }
#define RETIRED(name, cmds, instead) \
    { \
        name, NULL, cmds, instead, OPT_RETIRED, 0, 0, 0, NULL \
    }

static const cli_option options[] = {
    STRING("--kernel", "NAME", AC_CMD_FUZZ | AC_CMD_RUN | AC_CMD_CHECK, kernel,
           "kernel under test (fuzz, run: default the best available; check: run it on the files' inputs)"),
    {"--seed", "N", AC_CMD_FUZZ | AC_CMD_PROVE, "campaign seed (default 1)", OPT_U64, AT(seed), 0, 0, NULL},
    NUMBER("--cases", OPT_LONG, AC_CMD_FUZZ | AC_CMD_PROVE, cases, 1, 0, "number of cases (prove: per mutant)"),
    {"--time", "SECONDS", AC_CMD_FUZZ, "run for this long instead of a case count", OPT_SECONDS, AT(seconds), 0, 0,
     NULL},
    CUSTOM("--dtype", "LIST", AC_CMD_FUZZ | C_FILES, apply_dtypes,
           "f32,f16,bf16 (check, reference: the one dtype; needed for bf16 as <u2 bits in .npy)"),
    CUSTOM("--mask", "KIND", AC_CMD_FUZZ | C_FILES, apply_mask,
           "mask kinds in the case line's spelling; fuzz: a list of kinds to draw (none,causal-tl,causal-br,"
           "window-tl,window-br,dense; causal, window: both alignments); check, reference: the one mask, e.g. "
           "causal-tl (torch is_causal), causal-br (FlashAttention >= 2.1), window-br(128,0)"),
    STRING("--mask-file", "FILE", C_FILES, mask_file,
           "boolean keep-mask (Nq,Nk) or (1|B, 1|Hq, Nq, Nk), .npy or .safetensors (with --mask: both apply)"),
    NUMBER("--max-seqlen", OPT_INT, AC_CMD_FUZZ | AC_CMD_PROVE, max_seqlen, 1, AC_GEN_MAX_SEQLEN,
           "cap on nq and nk (default 512; --profile long or decode: 131072)"),
    NUMBER("--min-seqlen", OPT_INT, AC_CMD_FUZZ, min_seqlen, 1, AC_GEN_MAX_SEQLEN,
           "floor on the drawn nq and nk (default 1; --profile long: 2048, decode-like nq excepted)"),
    CUSTOM("--profile", "default|long|decode", AC_CMD_FUZZ, apply_profile,
           "what the shapes are weighted toward: default (small shapes, edges), long (2k..128k contexts, "
           "powers of two and +-1, tile-edge remainders, GQA, decode-like Nq << Nk, 2^31-element tensors), "
           "decode (Nq 1..16, Nk 1..128k, batches of unequal lengths, paged caches, split-KV)"),
    NUMBER("--jobs", OPT_INT, AC_CMD_FUZZ, jobs, 1, 256,
           "cases run at once, each worker a process (default: the CPUs, fewer when memory is short); the "
           "results do not depend on it"),
    CUSTOM("--shard", "I/N", AC_CMD_FUZZ, apply_shard,
           "run the cases k with k mod N = I (default: a Slurm job array's task; combine with attncheck merge)"),
    {"--worker", "FD", AC_CMD_FUZZ, NULL, OPT_INT, AT(worker_fd), 0, 1 << 20, NULL}, /* a --jobs worker: hidden */
    {"--deadline", "T", AC_CMD_FUZZ, NULL, OPT_SECONDS, AT(deadline), 0, 0, NULL}, /* its time budget's end */
    FLAG("--stop-first", AC_CMD_FUZZ, stop_first, "stop at the first failure"),
    STRING("--save-failures", "DIR", AC_CMD_FUZZ, save_dir, "append minimal failing lines to DIR/<kernel>.cases"),
    NUMBER("--shrink-steps", OPT_INT, AC_CMD_FUZZ | AC_CMD_PROVE, shrink_steps, 0, 1L << 30,
           "runs allowed to shrink one failure (default 200; 0 = no shrinking)"),
    FLAG("--no-backward", C_CASES, no_backward, "forward only"),
    FLAG("--in-process", C_CASES | AC_CMD_CHECK, in_process,
         "run the kernel in attncheck's own process, not in a worker (for gdb; a crash or hang is then attncheck's)"),
    {"--kernel-timeout", "S", C_CASES | AC_CMD_CHECK,
     "seconds one forward or backward call may take in the worker before it is a kernel:timeout failure "
     "(default max(10, FLOPs / 1e7) for a CPU kernel, max(10, FLOPs / 1e9) for a CUDA kernel)",
     OPT_SECONDS, AT(kernel_timeout_s), 0, 0, NULL},
    NUMBER("--cert-rows", OPT_INT, C_REPORTS, cert_rows, 0, AC_MAX_CERT_ROWS,
           "MPFR-certified rows per case (default 2)"),
    STRING("--case", "'LINE'", AC_CMD_RUN | AC_CMD_GEN, case_line,
           "replay this one case line (gen: the case to write)"),
    NUMBER("--clean-cases", OPT_LONG, AC_CMD_PROVE, clean_cases, 0, 0, "cases the base kernel must pass"),
    STRING("--base", "NAME", AC_CMD_PROVE, base, "the correct kernel whose mutants are proved (default cpu-flash)"),
    STRING("--out", "DIR|FILE.safetensors", AC_CMD_REFERENCE | AC_CMD_GEN, out,
           "where the reference outputs go (required; gen: the directory the case is written to)"),
    STRING("--layout", "bhsd|bshd|thd", C_FILES, layout,
           "(B,H,S,d) as torch SDPA (default), (B,S,H,d) as flash_attn_func, or packed (total,H,d) as "
           "flash_attn_varlen_func (with --cu-seqlens-q/-k)"),
    STRING("--cu-seqlens-q", "FILE|LIST", C_FILES, cu_seqlens_q,
           "--layout thd: the B + 1 row offsets of q's sequences"),
    STRING("--cu-seqlens-k", "FILE|LIST", C_FILES, cu_seqlens_k,
           "--layout thd: the B + 1 row offsets of k's sequences"),
    STRING("--seqlens-q", "FILE|LIST", C_FILES, seqlens_q, "per-sequence query lengths (padding beyond is ignored)"),
    STRING("--seqlens-k", "FILE|LIST", C_FILES, seqlens_k, "per-sequence key lengths"),
    STRING("--block-table", "FILE", C_FILES, block_table,
           "a paged KV cache: the (B, max_pages) int32 page ids; k, v are then (num_pages, P, Hkv, d)"),
    NUMBER("--page-size", OPT_INT, C_FILES, page_size, 1, 1 << 20, "--block-table: keys per page (P)"),
    FLAG("--v-from-k", C_FILES, v_from_k,
         "v is k's first d_v channels (MLA decode's latent cache; checked): kernels that read V from K may run"),
    STRING("--scale", "S", C_FILES, scale, "softmax scale (default 1/sqrt(d) as f32)"),
    STRING("--lse-base", "e|2", C_FILES, lse_base, "the base of lse (default e)"),
    /* the variants (ref/variants.h; harness/cli/check_variants.c) */
    STRING("--softcap", "C", C_FILES, softcap, "softcap c > 0: S' = c tanh(S / c) (Gemma 2; FlashAttention's softcap)"),
    STRING("--alibi", "FILE", C_FILES, alibi,
           "ALiBi slopes: (Hq) or (B, Hq) f32, .npy or .safetensors "
           "(FlashAttention's alibi_slopes: S' -= slope |i + nk - nq - j|)"),
    STRING("--bias", "FILE", C_FILES, bias,
           "additive bias (Nq, Nk) or (1|B, 1|Hq, Nq, Nk), f32 or the inputs' "
           "dtype, added last to the scores (-inf hides a pair); dbias in the files is then checked"),
    STRING("--sink-tokens", "K", C_FILES, sink_tokens,
           "with --mask window-*(L,R), L finite: the first K keys stay "
           "visible past the window's left edge (StreamingLLM)"),
    STRING("--dropout-p", "P", C_FILES, dropout_p,
           "dropout probability in (0,1), with --dropout-mask FILE or "
           "--kernel (judged against the keep mask that kernel draws)"),
    STRING("--dropout-mask", "FILE", C_FILES, dropout_mask,
           "the keep mask the kernel drew: bool/u8 (B, Hq, Nq, Nk), "
           "1 = kept"),
    STRING("--sinks", "FILE", C_FILES, sinks,
           "learnable sinks: (Hq) f32 logits, .npy or .safetensors (gpt-oss); "
           "dsink in the files is then checked"),
    STRING("--descale-q", "FILE", C_FILES, descale_q,
           "fp8 inputs: Q's f32 descale factors, (1), (B, Hkv) or "
           "(B, Hq, blocks) with --descale-block N (default: 1 per tensor)"),
    STRING("--descale-k", "FILE", C_FILES, descale_k, "fp8 inputs: K's f32 descale factors, as --descale-q's"),
    STRING("--descale-v", "FILE", C_FILES, descale_v, "fp8 inputs: V's f32 descale factors, as --descale-q's"),
    STRING("--fp8-acc", "f32|e8mB", C_FILES, fp8_acc,
           "fp8 inputs: the kernel's S accumulator (e8m13: Hopper's fp8 tensor cores; default: "
           "--kernel's, else f32)"),
    STRING("--descale-block", "N", C_FILES, descale_block,
           "fp8 inputs: rows per descale factor of a (B, H, "
           "blocks) descale file"),
    STRING("--budgets", "FILE", C_REPORTS, budgets, "budgets file (default: the repository's budgets.txt)"),
    CUSTOM("--reference", "auto|cpu|gpu", C_REPORTS, apply_reference,
           "reference tier: cpu (OpenBLAS), gpu (a CUDA device, MPFR-certified and spot-checked on the CPU), "
           "auto (default: gpu for cases big enough when a device is usable)"),
    CUSTOM("--mem-budget", "GIB", C_REPORTS, apply_mem_budget,
           "host memory one case may use (default 8); bigger cases are drawn smaller or refused"),
    CUSTOM("--plugin", "PATH.so", C_ALL, apply_plugin, "load a kernel plugin (repeatable)"),
    CUSTOM("--exec", "'CMD {in} {out}'", C_KERNELS, apply_exec,
           "an external command as the kernel: one process per call on a case directory {in}, outputs into "
           "{out} (repeatable; the first is the default --kernel)"),
    CUSTOM("--exec-persistent", "'CMD'", C_KERNELS, apply_exec,
           "an external kernel started once: it reads a case directory per line on stdin, answers \"ok\" or "
           "\"error MESSAGE\" on stdout"),
    CUSTOM("--caps", "FILE", C_KERNELS, apply_exec_pair,
           "what an --exec kernel claims, JSON (e.g. plugins/numpy_attention.caps.json); one per --exec, or one "
           "for all"),
    CUSTOM("--exec-name", "NAME", C_KERNELS, apply_exec_pair,
           "the --exec kernel's name, in order (default: the caps file's \"name\")"),
    {"--exec-timeout", "SECONDS", C_KERNELS, "deadline of one --exec call (default 60)", OPT_SECONDS, AT(exec_timeout),
     0, 0, NULL},
    FLAG("--quiet", C_CASES | AC_CMD_CHECK, quiet, "print failures and the summary only (check: no progress line)"),
    STRING("--baseline", "OLD.jsonl", AC_CMD_FUZZ | AC_CMD_RUN | AC_CMD_CHECK, baseline,
           "compare case by case with an old --json run: fuzz replays its case lines (the first --cases), run "
           "replays them when no FILE|DIR is given; a median error ratio above budgets.txt's regression-ratio "
           "at p < regression-p is a regression (exit 1)"),
    FLAG("--baseline", AC_CMD_PROVE, prove_baseline,
         "prove the baseline comparison instead: each <base>-precision-* mutant (inside every budget) must be "
         "flagged within --cases cases, the unchanged kernel and the controls never (over --clean-cases)"),
    RETIRED("--causal", C_FILES, "--mask causal-tl (torch is_causal) or --mask causal-br (FlashAttention >= 2.1)"),
    RETIRED("--window", C_FILES, "--mask window-br(L,R) or --mask window-tl(L,R)"),
    RETIRED("--align", C_FILES, "the alignment in the mask kind: --mask causal-br, --mask window-tl(L,R)"),
};
enum { N_OPTIONS = (int)(sizeof options / sizeof options[0]) };

/* ---- values --------------------------------------------------------------------- */

/* Numbers are read as strictly as case lines read theirs (case.h): digits
 * only, so " -1", "+5", "0x10" or "5 " is refused rather than read by strtol's
 * rules (strtoull took " -1" as 2^64 - 1). */
static int parse_long(const cli_option *o, const char *v, long *out, ac_err *err)
{
    unsigned long long x = 0;
    bool ok = ac_read_unsigned(v, o->max > 0 ? (unsigned long long)o->max : (unsigned long long)LONG_MAX, &x) &&
        x >= (unsigned long long)o->min;
    if (!ok)
        return o->max > 0
            ? ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not an integer in %ld..%ld", o->name, v, o->min, o->max)
            : ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not an integer >= %ld", o->name, v, o->min);
    *out = (long)x;
    return AC_OK;
}

static int parse_u64(const cli_option *o, const char *v, uint64_t *out, ac_err *err)
{
    unsigned long long x;
    if (!ac_read_unsigned(v, UINT64_MAX, &x))
        return ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not an unsigned 64-bit integer (digits only)", o->name, v);
    *out = x;
    return AC_OK;
}

static int parse_seconds(const cli_option *o, const char *v, double *out, ac_err *err)
{
    double x = 0;
    if (!ac_read_decimal(v, &x) || x <= 0)
        return ac_fail(err, AC_ERR_INPUT, "%s: '%s' is not a positive number of seconds", o->name, v);
    *out = x;
    return AC_OK;
}

static int apply(const cli_option *o, ac_cli *c, const char *v, ac_err *err)
{
    void *at = (char *)c + o->offset;
    long x = 0;
    int st;
    switch (o->type) {
    case OPT_FLAG:
        *(bool *)at = true;
        return AC_OK;
    case OPT_STRING:
        *(const char **)at = v;
        return AC_OK;
    case OPT_U64:
        return parse_u64(o, v, at, err);
    case OPT_SECONDS:
        return parse_seconds(o, v, at, err);
    case OPT_LONG:
        return parse_long(o, v, at, err);
    case OPT_INT:
        if ((st = parse_long(o, v, &x, err)) == AC_OK)
            *(int *)at = (int)x;
        return st;
    case OPT_RETIRED:
        return ac_fail(err, AC_ERR_INPUT, "%s is gone: write %s", o->name, o->help);
    default:
        return o->apply(o, c, v, err);
    }
}

/* ---- the parser ------------------------------------------------------------------- */

/* The row of option `name` for subcommand cmd (one name may have a row per
 * subcommand, e.g. --baseline), else any row of that name, else NULL. */
static const cli_option *find_option(const char *name, size_t len, ac_cmd cmd)
{
    const cli_option *any = NULL;
    for (int i = 0; i < N_OPTIONS; i++)
        if (strlen(options[i].name) == len && strncmp(options[i].name, name, len) == 0) {
            if (options[i].cmds & cmd)
                return &options[i];
            any = any ? any : &options[i];
        }
    return any;
}

/* A report format's flag: the path goes to its slot. */
static int report_option(const char *name, size_t len)
{
    for (size_t i = 0; i < ac_report_format_count(); i++) {
        const char *flag = ac_report_format_at(i)->flag;
        if (strlen(flag) == len && strncmp(flag, name, len) == 0)
            return (int)i;
    }
    return -1;
}

static const cli_command *find_command(const char *name)
{
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static void defaults(ac_cli *c)
{
    memset(c, 0, sizeof *c);
    c->seed = AC_DEFAULT_SEED;
    c->cert_rows = AC_DEFAULT_CERT_ROWS;
    c->shrink_steps = AC_DEFAULT_SHRINK_STEPS;
    c->clean_cases = -1;
    c->worker_fd = -1;
}

/* The value of option `name` (len chars of arg): after '=', or the next argument. */
static int option_value(const char *name, const char *eq, bool takes_value, int argc, char **argv, int *i,
                        const char **v, ac_err *err)
{
    *v = NULL;
    if (!takes_value)
        return eq ? ac_fail(err, AC_ERR_INPUT, "%s takes no value", name) : AC_OK;
    if (eq)
        *v = eq + 1;
    else if (*i + 1 < argc)
        *v = argv[++*i];
    else
        return ac_fail(err, AC_ERR_INPUT, "%s needs a value", name);
    return AC_OK;
}

/* One "--opt[=value]" at argv[*i]; consumes its value. */
static int parse_option(int argc, char **argv, int *i, ac_cli *c, ac_err *err)
{
    const char *a = argv[*i], *eq = strchr(a, '='), *v;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    int report = report_option(a, len);
    const cli_option *o = find_option(a, len, c->cmd);
    if (report >= 0 && (c->cmd & C_REPORT_FILES)) {
        int st = option_value(ac_report_format_at((size_t)report)->flag, eq, true, argc, argv, i, &v, err);
        if (st == AC_OK)
            c->report_path[report] = v;
        return st;
    }
    if (!o || !(o->cmds & c->cmd))
        return ac_fail(err, AC_ERR_INPUT, "unknown option '%.*s' (see attncheck %s --help)", (int)len, a, c->cmd_name);
    if (o->type == OPT_RETIRED) /* say what to write instead, whatever follows */
        return apply(o, c, NULL, err);
    int st = option_value(o->name, eq, o->arg != NULL, argc, argv, i, &v, err);
    return st == AC_OK ? apply(o, c, v, err) : st;
}

int ac_cli_parse(int argc, char **argv, ac_cli *c, ac_err *err)
{
    defaults(c);
    const cli_command *cmd = argc > 0 ? find_command(argv[0]) : NULL;
    if (!cmd)
        return ac_fail(err, AC_ERR_INPUT, "unknown subcommand '%s' (see attncheck --help)", argc > 0 ? argv[0] : "");
    c->cmd = cmd->cmd;
    c->cmd_name = cmd->name;
    c->argc = argc;
    c->argv = argv;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int st = AC_OK;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return AC_CLI_HELP;
        if (strncmp(a, "--", 2) == 0)
            st = parse_option(argc, argv, &i, c, err);
        else if (cmd->cmd == AC_CMD_MERGE && c->n_paths < AC_MAX_MERGE_FILES)
            c->paths[c->n_paths++] = a;
        else if (cmd->positional && !c->path)
            c->path = a;
        else
            st = ac_fail(err, AC_ERR_INPUT, "unexpected argument '%s' (see attncheck %s --help)", a, cmd->name);
        if (st != AC_OK)
            return st;
    }
    return AC_OK;
}

/* ---- help ------------------------------------------------------------------------- */

void ac_cli_usage(FILE *f, const ac_cli *c)
{
    const cli_command *cmd = find_command(c->cmd_name);
    fprintf(f, "usage: attncheck %s%s%s [options]\n", cmd->name, cmd->positional ? " " : "",
            cmd->positional ? cmd->positional : "");
    if (cmd->details)
        fprintf(f, "%s\n", cmd->details);
    fputs("\noptions (--opt value or --opt=value):\n", f);
    for (int i = 0; i < N_OPTIONS; i++)
        if ((options[i].cmds & cmd->cmd) && options[i].type != OPT_RETIRED && options[i].help)
            fprintf(f, "  %s%s%s  %s\n", options[i].name, options[i].arg ? " " : "",
                    options[i].arg ? options[i].arg : "", options[i].help);
    for (size_t i = 0; (cmd->cmd & C_REPORT_FILES) && i < ac_report_format_count(); i++)
        fprintf(f, "  %s %s\n", ac_report_format_at(i)->flag, ac_report_format_at(i)->help);
    fputs("  --help  this text\n", f);
}

void ac_cli_overview(FILE *f)
{
    fputs("usage: attncheck SUBCOMMAND [options]\n\n", f);
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fputs(
        "  report     the HTML report of runs: report FILE.jsonl... --html OUT.html [--baseline OLD] [--history DIR]\n"
        "  bench      GPU benchmark tables\n\n"
        "Exit status: 0 all passed, 1 accuracy failure, 2 bad usage or input, 3 environment.\n"
        "attncheck SUBCOMMAND --help lists its options.\n",
        f);
}

/* ---- what every subcommand does with its options ----------------------------------- */

int ac_cli_main(int argc, char **argv, int (*run)(const ac_cli *c, ac_err *err))
{
    ac_cli c;
    ac_err err = {{0}};
    int st = ac_cli_parse(argc, argv, &c, &err);
    if (st == AC_CLI_HELP) {
        ac_cli_usage(stdout, &c);
        return AC_OK;
    }
    if (st == AC_OK) { /* process-wide: every reference this command builds */
        ac_ref_tier tier = AC_REF_AUTO;
        if (c.reference)
            ac_ref_tier_parse(c.reference, &tier, NULL);
        ac_reference_set_tier(tier);
        ac_set_mem_budget((size_t)(c.mem_budget_gib * (double)(1u << 30)));
        st = ac_reference_tier_check(&err);
    }
    if (st == AC_OK)
        st = ac_cli_load_plugins(&c, &err);
    if (st == AC_OK)
        st = run(&c, &err);
    if (st >= AC_ERR_INPUT && err.msg[0])
        fprintf(stderr, "attncheck %s: %s\n", argc > 0 ? argv[0] : "", err.msg);
    return st;
}

/* The --exec kernels, each with its caps file and name (paired in order). */
static int register_exec(ac_cli *c, ac_err *err)
{
    if ((c->n_exec_caps || c->n_exec_name || c->exec_timeout > 0) && !c->n_exec)
        return ac_fail(err, AC_ERR_INPUT, "--caps, --exec-name and --exec-timeout go with --exec or --exec-persistent");
    if (c->n_exec_caps > 1 && c->n_exec_caps != c->n_exec)
        return ac_fail(err, AC_ERR_INPUT, "%d --caps for %d --exec commands: give one for all, or one each",
                       c->n_exec_caps, c->n_exec);
    if (c->n_exec_name > c->n_exec)
        return ac_fail(err, AC_ERR_INPUT, "%d --exec-name for %d --exec commands", c->n_exec_name, c->n_exec);
    for (int i = 0; i < c->n_exec; i++) {
        ac_exec_spec s = {.command = c->exec_cmd[i],
                          .mode = c->exec_persistent[i] ? AC_EXEC_PERSISTENT : AC_EXEC_ONESHOT,
                          .caps_path = c->n_exec_caps ? c->exec_caps[c->n_exec_caps > 1 ? i : 0] : NULL,
                          .name = i < c->n_exec_name ? c->exec_name[i] : NULL,
                          .timeout_s = c->exec_timeout};
        const ac_kernel *k;
        ac_err why = {{0}};
        int st = ac_exec_register(&s, &k, &why);
        if (st != AC_OK)
            return ac_fail(err, st, "%s%s", why.msg,
                           strstr(why.msg, "already registered") && c->n_exec > 1
                               ? " (give each --exec its own --exec-name)"
                               : "");
        if (i == 0 && !c->kernel)
            c->kernel = k->name; /* the registry keeps the name */
        if (i == 0 && !c->base)
            c->base = k->name;
    }
    return AC_OK;
}

int ac_cli_load_plugins(ac_cli *c, ac_err *err)
{
    for (int i = 0; i < c->n_plugins; i++) {
        const ac_kernel *k;
        ac_err why = {{0}};
        int st = ac_plugin_load(c->plugins[i], &k, &why);
        if (st != AC_OK)
            return ac_fail(err, st, "--plugin %s: %s", c->plugins[i], why.msg);
    }
    return register_exec(c, err);
}

int ac_cli_open_report(const ac_cli *c, bool skip_markdown, ac_report **rep, ac_err *err)
{
    int st = ac_report_open(rep, err);
    for (size_t i = 0; st == AC_OK && i < ac_report_format_count(); i++) {
        const char *flag = ac_report_format_at(i)->flag;
        if (c->report_path[i] && !(skip_markdown && strcmp(flag, "--markdown") == 0))
            st = ac_report_want(*rep, flag, c->report_path[i], err);
    }
    if (st != AC_OK && *rep) {
        ac_report_discard(*rep); /* the formats already opened write nothing */
        *rep = NULL;
    }
    if (st == AC_OK && c->cmd != AC_CMD_MERGE) /* merge writes the shards' own */
        ac_cli_environment(c, NULL, *rep);
    return st;
}

/* How every subcommand runs a case: backward, certification, the worker. */
ac_run_opts ac_cli_run_opts(const ac_cli *c)
{
    ac_run_opts o = {.backward = !c->no_backward,
                     .cert_rows = c->cert_rows,
                     .isolate = !c->in_process,
                     .kernel_timeout_s = c->kernel_timeout_s};
    return o;
}
