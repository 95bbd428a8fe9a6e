/*
 * Copies of the staging path. Results copied out of a large call are not
 * read again soon, so above CHORUS_SHM_NT_THRESHOLD they go out with
 * non-temporal stores: they do not evict the slots that peers are about to
 * read, and the destination lines are not read before being overwritten.
 */
#include <stdint.h>
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#include "transports/shm/shm_internal.h"

#if defined(__x86_64__)
static void copy_streaming(void *dst, const void *src, size_t bytes)
{
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;

    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, bytes);
    _mm_sfence();
}
#endif

void shm_copy(void *dst, const void *src, size_t bytes, int streaming)
{
    if (dst == src || bytes == 0)
        return;
#if defined(__x86_64__)
    if (streaming && bytes >= 4096) {
        copy_streaming(dst, src, bytes);
        return;
    }
#endif
    (void)streaming;
    memcpy(dst, src, bytes);
}
