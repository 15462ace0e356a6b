/* harness/run/plugin.h — a kernel in a shared library (kernels/attncheck_plugin.h):
 * dlopen it, validate its descriptor, register it as a kernel like the built-in ones. */
#ifndef ATTNCHECK_PLUGIN_LOAD_H
#define ATTNCHECK_PLUGIN_LOAD_H

#include "kernels/kernel.h"

int ac_plugin_load(const char *path, const ac_kernel **out, ac_err *err);

/* The libraries loaded so far, in order (the kernel worker loads the same). */
size_t ac_plugin_count(void);
const char *ac_plugin_path_at(size_t i);
/* The library k came from, or NULL for a kernel that is not a plugin. */
const char *ac_plugin_path_of(const ac_kernel *k);

#endif
