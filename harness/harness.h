/* harness/harness.h — every stage of the harness, for code that wants them all.
 *
 * The data flow, one header per stage (docs/DESIGN.md tells the whole story):
 *
 *   case line ........ case/case.h          parse, format, validate; mask kinds, distributions
 *   generator ........ case/generate.h      seed -> stream of cases inside a kernel's claims
 *   inputs ........... run/inputs.h         a case made concrete: problem, Q, K, V, dO
 *   kernel run ....... run/run.h            poison, forward, backward, then reference -> compare -> gate
 *                      run/plugin.h         kernels from shared libraries
 *                      exec/exec.h          kernels that are commands: case directories, caps files
 *   reference ........ run/reference.h      fp64 outputs, error scales, naive baseline, certification
 *   comparator ....... verdict/compare.h    one output against the reference -> ac_metrics
 *   budgets .......... verdict/budget.h     budgets.txt
 *   gate ............. verdict/gate.h       metrics + budgets -> verdict, why, kind (forward first)
 *                      verdict/diagnose.h   a failure's places per head and row, hints re-checked
 *   reports .......... report/report.h      the table of formats: JSON Lines, JUnit, Markdown
 *                      report/summary.h     per dtype x output aggregates (fuzz, run, check, Markdown)
 *                      report/failures.h    failures deduplicated by (kernel, kind, minimal line)
 *                      report/record.h      JSON Lines read back into results (merge)
 *   shrinker ......... campaign/shrink.h    a failure made minimal, same kind
 *   corpus ........... campaign/corpus.h    *.cases files: replay and --save-failures
 *   campaign ......... campaign/campaign.h  the fuzz loop of fuzz and prove: shards, --jobs workers,
 *                                           the collector, the time budget
 *   prove ............ campaign/prove.h     detection power over a kernel family's mutants
 *   files ............ files/files.h        atomic writes; files/tensor_io.h: .npy, .safetensors
 *   command line ..... cli/cli.h            one option table for every subcommand; fuzz, merge,
 *                                           check, reference
 */
#ifndef ATTNCHECK_HARNESS_H
#define ATTNCHECK_HARNESS_H

#include "harness/campaign/campaign.h"
#include "harness/campaign/corpus.h"
#include "harness/campaign/prove.h"
#include "harness/campaign/shrink.h"
#include "harness/case/case.h"
#include "harness/case/generate.h"
#include "harness/cli/cli.h"
#include "harness/exec/exec.h"
#include "harness/files/files.h"
#include "harness/files/tensor_io.h"
#include "harness/report/failures.h"
#include "harness/report/record.h"
#include "harness/report/report.h"
#include "harness/report/summary.h"
#include "harness/run/inputs.h"
#include "harness/run/plugin.h"
#include "harness/run/reference.h"
#include "harness/run/run.h"
#include "harness/verdict/budget.h"
#include "harness/verdict/compare.h"
#include "harness/verdict/diagnose.h"
#include "harness/verdict/gate.h"
#include "kernels/kernel.h"
#include "ref/ref.h"

#endif
