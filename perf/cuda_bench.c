/*
 * chorus-cuda-bench: the CUDA kernels of device.h against the device's own
 * copy bandwidth, for the two kernel targets:
 *
 *   G1  float32 to float16 and back, float32 to bfloat16 and back, of S
 *       bytes of float32: bandwidth = (bytes read + bytes written) / time.
 *   G2  k-input sum (k = 2, 4, 8) of float32 and of bfloat16 into a separate
 *       dst, S bytes per input: bandwidth = (k + 1) * S / time.
 *
 * Each row is set against a device-to-device cudaMemcpyAsync of S bytes
 * (bandwidth 2 * S / time), measured afresh right before that row, so that
 * clock and thermal drift touch both alike; the target is a ratio of at
 * least 0.9. Every time is the median of -n runs (default 20) after 3
 * warm-ups, each run timed by its own pair of CUDA events on one stream.
 * The runs are queued back to back and waited for once, so the device never
 * idles between them and the host's launch time stays out of the figures.
 *
 * Usage: chorus-cuda-bench [-s MiB[,MiB...]] [-n iters]   (default -s 64,256 -n 20)
 * Exit: 0 measured, 1 a kernel or CUDA call failed, 2 bad usage, 77 no device.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "chorus.h"
#include "reduce/device.h"

#define PROG "chorus-cuda-bench"
#define WARMUPS 3
#define MAX_ITERS 1000
#define MAX_SIZES 16
#define MAX_K 8
#define TARGET_RATIO 0.9
#define FILL_BYTE 0x3C /* float32 0.0115, float16 1.06, bfloat16 0.0115: all normal */

enum job_kind { JOB_COPY, JOB_CONVERT, JOB_REDUCE };

/* One timed operation: what it runs and the bytes it moves through memory. */
struct job {
    enum job_kind kind;
    chorus_dtype_t to, from; /* JOB_CONVERT */
    chorus_dtype_t dtype;    /* JOB_REDUCE */
    int k;
    void *dst;
    const void *src;
    const void *srcs[MAX_K];
    size_t count; /* elements, or bytes for JOB_COPY */
    size_t bytes_moved;
};

static cudaStream_t stream;

static void cuda_check(cudaError_t err, const char *what)
{
    if (err != cudaSuccess) {
        fprintf(stderr, PROG ": %s: %s\n", what, cudaGetErrorString(err));
        exit(1);
    }
}

static void kernel_check(chorus_status_t status, const char *what)
{
    if (status != CHORUS_OK) {
        fprintf(stderr, PROG ": %s failed: %s\n", what, chorus_status_string(status));
        exit(1);
    }
}

static void launch(const struct job *job)
{
    switch (job->kind) {
    case JOB_COPY:
        cuda_check(cudaMemcpyAsync(job->dst, job->src, job->count, cudaMemcpyDeviceToDevice,
                                   stream),
                   "cudaMemcpyAsync");
        break;
    case JOB_CONVERT:
        kernel_check(chorus__device_convert(job->to, job->dst, job->from, job->src, job->count,
                                            stream),
                     "chorus__device_convert");
        break;
    case JOB_REDUCE:
        kernel_check(chorus__device_reduce(job->dtype, CHORUS_SUM, job->dst, job->srcs, job->k,
                                           job->count, stream),
                     "chorus__device_reduce");
        break;
    }
}

static int compare_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median seconds of one run of job, over iters runs queued back to back. */
static double median_seconds(const struct job *job, int iters)
{
    static cudaEvent_t start[MAX_ITERS], stop[MAX_ITERS];
    static int events_made;
    float ms[MAX_ITERS];

    for (; events_made < iters; events_made++) {
        cuda_check(cudaEventCreate(&start[events_made]), "cudaEventCreate");
        cuda_check(cudaEventCreate(&stop[events_made]), "cudaEventCreate");
    }
    /* The warm-ups also keep the device busy while the first timed run is queued. */
    for (int i = 0; i < WARMUPS; i++)
        launch(job);
    for (int i = 0; i < iters; i++) {
        cuda_check(cudaEventRecord(start[i], stream), "cudaEventRecord");
        launch(job);
        cuda_check(cudaEventRecord(stop[i], stream), "cudaEventRecord");
    }
    cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    for (int i = 0; i < iters; i++)
        cuda_check(cudaEventElapsedTime(&ms[i], start[i], stop[i]), "cudaEventElapsedTime");
    qsort(ms, (size_t)iters, sizeof(ms[0]), compare_float);
    double median = iters % 2 ? ms[iters / 2] : 0.5 * (ms[iters / 2 - 1] + ms[iters / 2]);
    return median * 1e-3;
}

static double gbps(size_t bytes, double seconds)
{
    return (double)bytes / seconds * 1e-9;
}

/* Measures job and, right before it, a copy of copy_bytes; prints the row. */
static void row(const char *target, const char *kernel, const char *dtype, int k,
                size_t size_bytes, const struct job *job, void *copy_dst, const void *copy_src,
                int iters)
{
    struct job copy = {
        .kind = JOB_COPY,
        .dst = copy_dst,
        .src = copy_src,
        .count = size_bytes,
        .bytes_moved = 2 * size_bytes,
    };
    double copy_bw = gbps(copy.bytes_moved, median_seconds(&copy, iters));
    double bw = gbps(job->bytes_moved, median_seconds(job, iters));
    double ratio = bw / copy_bw;
    char kcol[16];

    if (k > 0)
        snprintf(kcol, sizeof(kcol), "%d", k);
    else
        snprintf(kcol, sizeof(kcol), "-");
    printf("%-6s %-16s %-9s %2s %6zu %12zu %9.1f %9.1f %6.3f  %s\n", target, kernel, dtype, kcol,
           size_bytes >> 20, job->bytes_moved, bw, copy_bw, ratio,
           ratio >= TARGET_RATIO ? "ok" : "BELOW");
}

static void *device_buffer(size_t bytes)
{
    void *p = NULL;
    cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    cuda_check(cudaMemset(p, FILL_BYTE, bytes), "cudaMemset");
    return p;
}

static void g1(size_t size, void *f32_in, void *f32_out, void *narrow, int iters)
{
    static const struct {
        chorus_dtype_t dtype;
        const char *to_name, *from_name;
    } families[] = {
        {CHORUS_FLOAT16, "f32->f16", "f16->f32"},
        {CHORUS_BFLOAT16, "f32->bf16", "bf16->f32"},
    };
    size_t count = size / sizeof(float);

    for (size_t f = 0; f < sizeof(families) / sizeof(families[0]); f++) {
        chorus_dtype_t dt = families[f].dtype;
        struct job to = {
            .kind = JOB_CONVERT, .to = dt, .from = CHORUS_FLOAT32,
            .dst = narrow, .src = f32_in, .count = count,
            .bytes_moved = count * (sizeof(float) + sizeof(uint16_t)),
        };
        struct job from = {
            .kind = JOB_CONVERT, .to = CHORUS_FLOAT32, .from = dt,
            .dst = f32_out, .src = narrow, .count = count,
            .bytes_moved = count * (sizeof(uint16_t) + sizeof(float)),
        };
        row("G1", families[f].to_name, chorus_dtype_name(dt), 0, size, &to, f32_out, f32_in,
            iters);
        row("G1", families[f].from_name, chorus_dtype_name(dt), 0, size, &from, f32_out,
            f32_in, iters);
    }
}

static void g2(size_t size, void *const inputs[MAX_K], void *dst, int iters)
{
    static const chorus_dtype_t dtypes[] = {CHORUS_FLOAT32, CHORUS_BFLOAT16};
    static const int ks[] = {2, 4, 8};

    for (size_t d = 0; d < sizeof(dtypes) / sizeof(dtypes[0]); d++) {
        for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
            struct job job = {
                .kind = JOB_REDUCE, .dtype = dtypes[d], .k = ks[i], .dst = dst,
                .count = size / chorus_dtype_size(dtypes[d]),
                .bytes_moved = (size_t)(ks[i] + 1) * size,
            };
            for (int j = 0; j < ks[i]; j++)
                job.srcs[j] = inputs[j];
            row("G2", "reduce sum", chorus_dtype_name(dtypes[d]), ks[i], size, &job, dst,
                inputs[0], iters);
        }
    }
}

static void usage(FILE *out)
{
    fprintf(out, "usage: " PROG " [-s MiB[,MiB...]] [-n iters]\n"
                 "  -s  sizes in MiB: of the float32 buffer (G1), of each input (G2);"
                 " default 64,256\n"
                 "  -n  timed runs per measurement, the median is reported; default 20\n");
}

/* "64,256" into sizes in bytes; 0 on a malformed list. */
static int parse_sizes(const char *arg, size_t *sizes, int *n_p)
{
    int n = 0;
    const char *p = arg;

    while (*p != '\0') {
        char *end;
        errno = 0;
        unsigned long long mib = strtoull(p, &end, 10);
        if (end == p || errno != 0 || mib == 0 || mib > (1ull << 20) || n == MAX_SIZES)
            return 0;
        sizes[n++] = (size_t)mib << 20;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return 0;
        p = end;
    }
    *n_p = n;
    return n > 0;
}

static void print_device(void)
{
    int device, driver = 0, runtime = 0;
    struct cudaDeviceProp prop;

    cuda_check(cudaGetDevice(&device), "cudaGetDevice");
    cuda_check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    cuda_check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    cuda_check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    printf("device %d: %s (sm_%d%d, %d multiprocessors, %.1f GiB), CUDA driver %d.%d, "
           "runtime %d.%d\n",
           device, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
           (double)prop.totalGlobalMem / (1 << 30), driver / 1000, driver % 1000 / 10,
           runtime / 1000, runtime % 1000 / 10);
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {64u << 20, 256u << 20};
    int n_sizes = 2;
    int iters = 20;
    int opt;

    while ((opt = getopt(argc, argv, "s:n:h")) != -1) {
        switch (opt) {
        case 's':
            if (!parse_sizes(optarg, sizes, &n_sizes)) {
                fprintf(stderr, PROG ": -s wants MiB sizes separated by commas, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'n': {
            char *end;
            long n = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || n < 1 || n > MAX_ITERS) {
                fprintf(stderr, PROG ": -n wants 1 to %d, got '%s'\n", MAX_ITERS, optarg);
                return 2;
            }
            iters = (int)n;
            break;
        }
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return 2;
    }

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!chorus__device_present()) {
        fprintf(stderr, PROG ": no CUDA device, nothing to measure\n");
        return 77;
    }
    print_device();
    cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    printf("time: median of %d runs after %d warm-ups, CUDA events on one stream; "
           "GB/s = 1e9 bytes read + written per second\n"
           "copy GB/s: device-to-device cudaMemcpyAsync of MiB bytes (2 x MiB moved), "
           "measured afresh right before each row; target ratio >= %.1f\n",
           iters, WARMUPS, TARGET_RATIO);
    printf("%-6s %-16s %-9s %2s %6s %12s %9s %9s %6s\n", "target", "kernel", "dtype", "k", "MiB",
           "bytes", "GB/s", "copy GB/s", "ratio");

    for (int s = 0; s < n_sizes; s++) {
        size_t size = sizes[s];
        void *inputs[MAX_K];
        void *dst;

        for (int j = 0; j < MAX_K; j++)
            inputs[j] = device_buffer(size);
        dst = device_buffer(size);
        cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

        /* G1 borrows the same buffers: float32 in, float32 out, the 16-bit side. */
        g1(size, inputs[0], dst, inputs[1], iters);
        g2(size, inputs, dst, iters);

        for (int j = 0; j < MAX_K; j++)
            cuda_check(cudaFree(inputs[j]), "cudaFree");
        cuda_check(cudaFree(dst), "cudaFree");
    }
    cuda_check(cudaStreamDestroy(stream), "cudaStreamDestroy");
    return 0;
}
