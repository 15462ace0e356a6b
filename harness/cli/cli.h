/* harness/cli/cli.h — the command line's pieces that live outside main.c. */
#ifndef ATTNCHECK_CLI_H
#define ATTNCHECK_CLI_H

/* Each returns an exit status (the AC_* codes). */
int ac_cmd_check(int argc, char **argv);     /* check.c: attncheck check PATH [options] */
int ac_cmd_reference(int argc, char **argv); /* check.c: attncheck reference PATH [options] */

#endif
