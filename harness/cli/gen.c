/* harness/cli/gen.c — `attncheck gen --case LINE --out DIR`: a case line made
 * into files any framework can load (q k v do [mask].npy and problem.json,
 * the --exec kernels' format), so a minimal line from a campaign can be
 * reproduced by hand.  `attncheck reference DIR --out DIR/ref` then writes its
 * exact outputs, and `attncheck check DIR` judges outputs put beside the inputs. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "harness/case/case.h"
#include "harness/cli/cli.h"
#include "harness/exec/exec.h"
#include "harness/run/inputs.h"

static int write_case(const ac_cli *o, const ac_inputs *in, ac_err *err)
{
    char line[AC_CASE_LINE_MAX];
    if (ac_case_format(&in->c, line, sizeof line) < 0)
        return ac_fail(err, AC_ERR_INPUT, "--case: the line is too long to write back");
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST)
        return ac_fail(err, AC_ERR_INPUT, "--out %s: cannot create the directory: %s", o->out, strerror(errno));
    ac_case_files cf = {.p = &in->p,
                        .dtype = in->c.dtype,
                        .case_line = line,
                        .q = in->q,
                        .k = in->k,
                        .v = in->v,
                        .d_o = ac_problem_paged(&in->p) ? NULL : in->d_o, /* paged: forward only */
                        .out_dir = o->out};
    int st = ac_case_dir_write(o->out, &cf, err);
    if (st != AC_OK)
        return st;
    printf("gen: wrote q, k, v, do%s and %s for\n  %s\ninto %s\n", in->p.dense_mask ? ", mask" : "", AC_CASE_JSON, line,
           o->out);
    printf("then: put your kernel's o.npy lse.npy [dq.npy dk.npy dv.npy] there and run `attncheck check %s`;\n"
           "      `attncheck reference %s --out %s/ref` writes the exact outputs (f64)\n",
           o->out, o->out, o->out);
    return AC_OK;
}

static int run_gen(const ac_cli *o, ac_err *err)
{
    if (!o->case_line)
        return ac_fail(err, AC_ERR_INPUT, "--case 'LINE' is required (a case line, as fuzz prints it)");
    if (!o->out)
        return ac_fail(err, AC_ERR_INPUT, "--out DIR is required (the directory to write the case into)");
    ac_case c;
    ac_err why = {{0}};
    if (ac_case_parse(o->case_line, &c, &why) != AC_OK)
        return ac_fail(err, AC_ERR_INPUT, "--case: %s", why.msg);
    ac_inputs in;
    int st = ac_inputs_make(&c, &in, err);
    if (st == AC_OK)
        st = write_case(o, &in, err);
    ac_inputs_free(&in);
    return st;
}

int ac_cmd_gen(int argc, char **argv) { return ac_cli_main(argc, argv, run_gen); }
