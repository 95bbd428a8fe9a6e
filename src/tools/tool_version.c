/* --version for the chorus tools. */
#include "tools/tool_version.h"

#include "config.h"

void tool_version_print(FILE *out, const char *prog, const char *lib_version)
{
    fprintf(out, "%s (chorus) %s\n", prog, PACKAGE_VERSION);
    if (lib_version != NULL)
        fprintf(out, "library: libchorus %s\n", lib_version);
}
