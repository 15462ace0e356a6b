/* harness/run/plugin.h — a kernel in a shared library (kernels/attncheck_plugin.h):
 * dlopen it, validate its descriptor, register it as a kernel like the built-in ones. */
#ifndef ATTNCHECK_PLUGIN_LOAD_H
#define ATTNCHECK_PLUGIN_LOAD_H

#include "kernels/kernel.h"

int ac_plugin_load(const char *path, const ac_kernel **out, ac_err *err);

#endif
