/* harness/run/inputs_variants.c — a case's variants made concrete: the
 * problem's variant fields from the case line (docs/DESIGN.md, "Variants"). */
#include "harness/run/inputs_variants.h"

void inputs_variants_problem(const ac_case *c, ac_problem *p)
{
    p->softcap = c->softcap;
}
