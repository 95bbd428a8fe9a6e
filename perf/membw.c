/*
 * membw: the single-core copy bandwidth of this machine, the physical bound
 * that perf/compare.py prints beside the shared-memory collectives.
 *
 * Two figures, in bytes copied per second (GB = 1e9 B): memcpy, and a copy
 * whose stores are non-temporal (AVX when the CPU has it, else SSE2, else a
 * plain word loop, which is then no NT figure and says so). Each copy moves
 * -s bytes (default 64 MiB) and the copies walk through a pool of -p bytes
 * (default 512 MiB, source and destination halves), far larger than any
 * last-level cache, so that no copy finds its data cache-warm.
 *
 * Prints one JSON object on stdout. Built by compare.py with the system cc.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if (defined(__x86_64__) || defined(__i386__)) && !defined(MEMBW_PORTABLE)
#include <immintrin.h>
#define MEMBW_X86 1
#else
#define MEMBW_X86 0
#endif

#define MEMBW_MAX_REPS 1000

typedef void (*copy_fn_t)(void *dst, const void *src, size_t bytes);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void copy_memcpy(void *dst, const void *src, size_t bytes)
{
    memcpy(dst, src, bytes);
}

#if MEMBW_X86
/* bytes is a multiple of 64 and both pointers are 64-byte aligned (see main). */
static void copy_nt_sse2(void *dst, const void *src, size_t bytes)
{
    __m128i *d = dst;
    const __m128i *s = src;

    for (size_t i = 0; i < bytes / 16; i += 4) {
        __m128i a = _mm_load_si128(s + i), b = _mm_load_si128(s + i + 1);
        __m128i c = _mm_load_si128(s + i + 2), e = _mm_load_si128(s + i + 3);
        _mm_stream_si128(d + i, a);
        _mm_stream_si128(d + i + 1, b);
        _mm_stream_si128(d + i + 2, c);
        _mm_stream_si128(d + i + 3, e);
    }
    /* NT stores are weakly ordered: the copy is done only once they are fenced. */
    _mm_sfence();
}

__attribute__((target("avx"))) static void copy_nt_avx(void *dst, const void *src,
                                                        size_t bytes)
{
    __m256i *d = dst;
    const __m256i *s = src;

    for (size_t i = 0; i < bytes / 32; i += 2) {
        __m256i a = _mm256_load_si256(s + i), b = _mm256_load_si256(s + i + 1);
        _mm256_stream_si256(d + i, a);
        _mm256_stream_si256(d + i + 1, b);
    }
    _mm_sfence();
}

#else
/* The portable fallback: word copies with ordinary stores (not an NT figure). */
static void copy_words(void *dst, const void *src, size_t bytes)
{
    uint64_t *d = dst;
    const uint64_t *s = src;

    for (size_t i = 0; i < bytes / 8; i++)
        d[i] = s[i];
}
#endif

static copy_fn_t pick_nt(const char **name_p)
{
#if MEMBW_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx")) {
        *name_p = "avx _mm256_stream_si256";
        return copy_nt_avx;
    }
    *name_p = "sse2 _mm_stream_si128";
    return copy_nt_sse2;
#else
    *name_p = "portable word loop (no non-temporal stores on this architecture)";
    return copy_words;
#endif
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/*
 * reps copies of size bytes, each from the next slot of the source half to
 * the next slot of the destination half; GB/s of every copy into rates.
 */
static void measure(copy_fn_t fn, char *src, char *dst, size_t slots, size_t size,
                    int reps, double *rates)
{
    for (int r = 0; r < reps; r++) {
        size_t k = (size_t)r % slots;
        double t0 = now_s();
        fn(dst + k * size, src + k * size, size);
        rates[r] = (double)size / (now_s() - t0) / 1e9;
    }
    qsort(rates, (size_t)reps, sizeof(*rates), cmp_double);
}

static void print_figure(const char *name, const char *how, const double *rates, int reps,
                         int last)
{
    printf("  \"%s\": {\"method\": \"%s\", \"median_gbs\": %.4f, \"min_gbs\": %.4f, "
           "\"max_gbs\": %.4f}%s\n", name, how, rates[reps / 2], rates[0], rates[reps - 1],
           last ? "" : ",");
}

static int parse_mib(const char *text, size_t *bytes_p)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(text, &end, 10);
    if (errno != 0 || *end != '\0' || v == 0 || v > (1ul << 20))
        return -1;
    *bytes_p = (size_t)v << 20;
    return 0;
}

int main(int argc, char **argv)
{
    size_t size = 64ul << 20, pool = 512ul << 20, slots;
    int reps = 16;
    const char *nt_name;
    copy_fn_t nt = pick_nt(&nt_name);
    double rates_cpy[MEMBW_MAX_REPS], rates_nt[MEMBW_MAX_REPS];
    char *buf;

    for (int i = 1; i + 1 < argc; i += 2) {
        int ok = 0;
        if (strcmp(argv[i], "-s") == 0)
            ok = parse_mib(argv[i + 1], &size) == 0;
        else if (strcmp(argv[i], "-p") == 0)
            ok = parse_mib(argv[i + 1], &pool) == 0;
        else if (strcmp(argv[i], "-r") == 0)
            ok = (reps = atoi(argv[i + 1])) >= 1 && reps <= MEMBW_MAX_REPS;
        if (!ok) {
            fprintf(stderr, "usage: membw [-s COPY_MIB] [-p POOL_MIB] [-r REPS 1..%d]\n",
                    MEMBW_MAX_REPS);
            return 2;
        }
    }
    if (argc % 2 == 0 || pool < 2 * size) {
        fprintf(stderr, "membw: need -p >= 2 * -s (pool %zu B, copy %zu B) and value pairs\n",
                pool, size);
        return 2;
    }
    slots = pool / 2 / size;
    if (posix_memalign((void **)&buf, 4096, pool) != 0) {
        fprintf(stderr, "membw: cannot allocate %zu bytes\n", pool);
        return 1;
    }
    /* Touch every page first, so that no copy pays for page faults. */
    memset(buf, 1, pool);
    measure(copy_memcpy, buf, buf + pool / 2, slots, size, reps, rates_cpy);
    measure(nt, buf, buf + pool / 2, slots, size, reps, rates_nt);
    printf("{\n  \"tool\": \"membw\", \"copy_bytes\": %zu, \"pool_bytes\": %zu, "
           "\"reps\": %d, \"unit\": \"GB/s of bytes copied (1e9 B/s), one core\",\n",
           size, pool, reps);
    print_figure("memcpy", "libc memcpy", rates_cpy, reps, 0);
    print_figure("nt_copy", nt_name, rates_nt, reps, 1);
    printf("}\n");
    free(buf);
    return 0;
}
