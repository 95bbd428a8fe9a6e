/* Sizes as the perf tools read them: see perf_size.h. */
#include "perf/perf_size.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int perf_parse_size(const char *text, size_t *bytes_p)
{
    unsigned long long v, mult = 1;
    char *end;

    if (text == NULL || *text < '0' || *text > '9')
        return -1;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0)
        return -1;
    switch (*end) {
    case 'k': case 'K': mult = 1ull << 10; end++; break;
    case 'm': case 'M': mult = 1ull << 20; end++; break;
    case 'g': case 'G': mult = 1ull << 30; end++; break;
    default: break;
    }
    if (*end != '\0' || (v != 0 && mult > SIZE_MAX / v))
        return -1;
    *bytes_p = (size_t)(v * mult);
    return 0;
}
