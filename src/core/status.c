/* Status strings and the library version. */
#include "chorus.h"
#include "config.h"

const char *chorus_status_string(chorus_status_t status)
{
    switch (status) {
    case CHORUS_OK: return "success";
    case CHORUS_ERR_INVALID_ARG: return "invalid argument";
    case CHORUS_ERR_NO_MEMORY: return "out of memory";
    case CHORUS_ERR_TIMEOUT: return "timed out";
    case CHORUS_ERR_PEER_FAILED: return "peer failed";
    case CHORUS_ERR_ABORTED: return "aborted";
    case CHORUS_ERR_AUTH: return "authentication failed";
    case CHORUS_ERR_PROTOCOL: return "protocol error (malformed message)";
    case CHORUS_ERR_SYSTEM: return "system call failed";
    case CHORUS_ERR_UNSUPPORTED: return "unsupported";
    case CHORUS_ERR_TRUNCATED: return "message truncated";
    case CHORUS_ERR_INTERNAL: return "internal error";
    case CHORUS_ERR_IN_USE: return "already in use";
    case CHORUS_ERR_DEVICE: return "CUDA device error";
    }
    return "unknown status";
}

void chorus_version(int *major_p, int *minor_p, int *patch_p)
{
    if (major_p)
        *major_p = CHORUS_VERSION_MAJOR;
    if (minor_p)
        *minor_p = CHORUS_VERSION_MINOR;
    if (patch_p)
        *patch_p = CHORUS_VERSION_PATCH;
}

const char *chorus_version_string(void)
{
    return PACKAGE_VERSION;
}
