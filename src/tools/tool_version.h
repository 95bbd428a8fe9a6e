/*
 * --version for the chorus tools: every tool prints the same two lines, so
 * that a user can tell which tool and which library answered.
 *
 *   chorus-perf (chorus) 0.1.0
 *   library: libchorus 0.1.0
 *
 * The first line is the version the tool was built as; the second, printed
 * only by tools that load libchorus, the version of the library they
 * loaded (they differ when LD_LIBRARY_PATH points at another build).
 */
#ifndef CHORUS_TOOLS_TOOL_VERSION_H
#define CHORUS_TOOLS_TOOL_VERSION_H

#include <stdio.h>

/*
 * Prints the version lines of the tool named prog to out; lib_version is
 * chorus_version_string() for a tool that loads the library, else NULL.
 */
void tool_version_print(FILE *out, const char *prog, const char *lib_version);

#endif
