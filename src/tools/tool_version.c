/* --version for the chorus tools. */
#include "tools/tool_version.h"

#include <string.h>

#include "config.h"

int tool_version_requested(const char *arg)
{
    return arg != NULL && strcmp(arg, "--version") == 0;
}

void tool_version_print(FILE *out, const char *prog, const char *lib_version)
{
    fprintf(out, "%s (chorus) %s\n", prog, PACKAGE_VERSION);
    if (lib_version != NULL)
        fprintf(out, "library: libchorus %s\n", lib_version);
}
