/*
 * CUDA device memory: which buffers are on a device, page-locked staging
 * memory, asynchronous copies and the events that say when they are done
 * (device.h). Without HAVE_CUDA every buffer is host memory and the calls
 * that need a device return CHORUS_ERR_UNSUPPORTED.
 *
 * Every call that touches a device makes the buffer's device current for
 * its duration and then restores the caller's, because the calling thread
 * may be the user's own (a blocking call runs in it) as well as chorus's
 * progress thread.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "reduce/device.h"
#include "util/log.h"

#ifdef HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

/* Devices this process can address: the library's streams are kept per device. */
#define DEVICE_MAX 64
/* Freed staging blocks kept for reuse, and the unit their sizes are rounded to. */
#define PINNED_KEEP 8
#define PINNED_UNIT ((size_t)1 << 20)
/* A wait for a device event polls it without sleeping this long, then sleeps between polls. */
#define DEVICE_SPIN_US 100
#define DEVICE_POLL_NS 10000

static pthread_once_t present_once = PTHREAD_ONCE_INIT;
static int present;

static pthread_mutex_t stream_lock = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t streams[DEVICE_MAX];            /* blocking (chorus__device_stream) */
static cudaStream_t async_streams[DEVICE_MAX];      /* non-blocking */

typedef struct {
    void *ptr;
    size_t bytes;
    int in_use;
    cudaEvent_t after;          /* returned, but free only once this event is done */
} pinned_block_t;

static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;
static pinned_block_t *pinned;
static size_t pinned_count, pinned_cap;

chorus_status_t chorus__device_fail(const char *what, int err)
{
    chorus_error("%s: CUDA error %d: %s", what, err, cudaGetErrorString((cudaError_t)err));
    return CHORUS_ERR_DEVICE;
}

int chorus__device_built(void)
{
    return 1;
}

static void present_detect(void)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);

    present = err == cudaSuccess && n > 0;
    if (err != cudaSuccess)
        chorus_debug("no CUDA device in use: %s", cudaGetErrorString(err));
    (void)cudaGetLastError();
}

int chorus__device_present(void)
{
    pthread_once(&present_once, present_detect);
    return present;
}

/* The device that owns ptr, or -1 for memory that is not device memory. */
static int ptr_device(const void *ptr)
{
    struct cudaPointerAttributes attr;

    if (ptr == NULL || !chorus__device_present())
        return -1;
    if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
        /* Memory CUDA has never seen can report an error on old runtimes: it is host memory. */
        (void)cudaGetLastError();
        return -1;
    }
    return attr.type == cudaMemoryTypeDevice ? attr.device : -1;
}

int chorus__device_ptr(const void *ptr)
{
    return ptr_device(ptr) >= 0;
}

/* The library's stream of the current device in table (created with flags once), or NULL. */
static cudaStream_t library_stream(cudaStream_t *table, unsigned flags)
{
    int dev = 0;
    cudaStream_t s = NULL;

    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= DEVICE_MAX) {
        (void)cudaGetLastError();
        return NULL;
    }
    pthread_mutex_lock(&stream_lock);
    if (table[dev] == NULL && cudaStreamCreateWithFlags(&table[dev], flags) != cudaSuccess) {
        (void)cudaGetLastError();
        table[dev] = NULL;
    }
    s = table[dev];
    pthread_mutex_unlock(&stream_lock);
    return s;
}

void *chorus__device_stream(void *stream)
{
    if (stream != NULL)
        return stream;
    /*
     * A blocking stream: its work waits for what the legacy default stream
     * queued before it. A cudaMemcpy from pageable memory may return before
     * its data has reached the device; a call that follows it must see the
     * data, as it would on the default stream. NULL (no stream could be
     * made) means the legacy default stream: correct, only slower to overlap.
     */
    return library_stream(streams, cudaStreamDefault);
}

void *chorus__device_stream_async(void)
{
    /* NULL here would be the legacy stream, which could wait on a gated caller's stream. */
    return library_stream(async_streams, cudaStreamNonBlocking);
}

/* Under pinned_lock: whether an idle block can be handed out or freed (its event is done). */
static int pinned_ready(pinned_block_t *b)
{
    if (b->in_use)
        return 0;
    if (b->after == NULL)
        return 1;
    if (cudaEventQuery(b->after) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    cudaEventDestroy(b->after);
    b->after = NULL;
    return 1;
}

void *chorus__device_pinned_get(size_t bytes)
{
    pinned_block_t *best = NULL;
    void *ptr = NULL;

    if (!chorus__device_present())
        return NULL;
    if (bytes == 0)
        bytes = 1;
    pthread_mutex_lock(&pinned_lock);
    for (size_t i = 0; i < pinned_count; i++)
        if (pinned[i].bytes >= bytes && (best == NULL || pinned[i].bytes < best->bytes) &&
            pinned_ready(&pinned[i]))
            best = &pinned[i];
    if (best != NULL) {
        best->in_use = 1;
        ptr = best->ptr;
    }
    pthread_mutex_unlock(&pinned_lock);
    if (ptr != NULL)
        return ptr;

    bytes = (bytes + PINNED_UNIT - 1) / PINNED_UNIT * PINNED_UNIT;
    /* Mapped: a word of a block can be a flag that a device stream waits on. */
    if (cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
        (void)chorus__device_fail("cudaHostAlloc of staging memory", cudaGetLastError());
        return NULL;
    }
    pthread_mutex_lock(&pinned_lock);
    if (pinned_count == pinned_cap) {
        size_t cap = pinned_cap ? pinned_cap * 2 : 16;
        pinned_block_t *grown = realloc(pinned, cap * sizeof(*grown));

        if (grown == NULL) {
            pthread_mutex_unlock(&pinned_lock);
            cudaFreeHost(ptr);
            return NULL;
        }
        pinned = grown;
        pinned_cap = cap;
    }
    pinned[pinned_count++] = (pinned_block_t){.ptr = ptr, .bytes = bytes, .in_use = 1};
    pthread_mutex_unlock(&pinned_lock);
    return ptr;
}

void chorus__device_pinned_put_after(void *ptr, void *event)
{
    void *drop = NULL;
    size_t idle = 0, smallest = 0;
    int found = 0;

    if (ptr == NULL)
        return;
    pthread_mutex_lock(&pinned_lock);
    for (size_t i = 0; i < pinned_count; i++) {
        if (pinned[i].ptr == ptr) {
            pinned[i].in_use = 0;
            pinned[i].after = (cudaEvent_t)event;
            event = NULL;
            found = 1;
        }
    }
    /* Keep at most PINNED_KEEP idle blocks: the smallest goes first. */
    for (size_t i = 0; i < pinned_count; i++) {
        if (!pinned_ready(&pinned[i]))
            continue;
        if (idle == 0 || pinned[i].bytes < pinned[smallest].bytes)
            smallest = i;
        idle++;
    }
    if (idle > PINNED_KEEP) {
        drop = pinned[smallest].ptr;
        pinned[smallest] = pinned[--pinned_count];
    }
    pthread_mutex_unlock(&pinned_lock);
    if (!found) {
        chorus_error("staging memory %p was not handed out by chorus", ptr);
        chorus__device_event_free(event);
    }
    if (drop != NULL)
        cudaFreeHost(drop);
}

void chorus__device_pinned_put(void *ptr)
{
    chorus__device_pinned_put_after(ptr, NULL);
}

chorus_status_t chorus__device_enter(int dev, int *old_p)
{
    cudaError_t err = cudaGetDevice(old_p);

    if (err == cudaSuccess && dev >= 0 && dev != *old_p)
        err = cudaSetDevice(dev);
    return err == cudaSuccess ? CHORUS_OK
                              : chorus__device_fail("selecting the buffer's device", err);
}

void chorus__device_leave(int dev, int old)
{
    if (dev >= 0 && dev != old)
        (void)cudaSetDevice(old);
}

chorus_status_t chorus__device_event_record(void *stream, void **event_p)
{
    cudaEvent_t event;
    cudaError_t err;

    if (!chorus__device_present())
        return CHORUS_ERR_UNSUPPORTED;
    err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (err != cudaSuccess)
        return chorus__device_fail("cudaEventCreate", err);
    err = cudaEventRecord(event, (cudaStream_t)chorus__device_stream(stream));
    if (err != cudaSuccess) {
        cudaEventDestroy(event);
        return chorus__device_fail("cudaEventRecord", err);
    }
    *event_p = event;
    return CHORUS_OK;
}

/* The driver's cuStreamWaitValue32, found once through the runtime; NULL when missing. */
typedef CUresult (*wait_value_fn)(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                                  unsigned int flags);
static pthread_once_t wait_value_once = PTHREAD_ONCE_INIT;
static wait_value_fn wait_value;

static void wait_value_find(void)
{
    enum cudaDriverEntryPointQueryResult found;
    void *fn = NULL;

    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
        wait_value = (wait_value_fn)fn;
    else
        chorus_debug("cuStreamWaitValue32 not found: stream-ordered calls wait for their work");
    (void)cudaGetLastError();
}

chorus_status_t chorus__device_stream_wait(void *stream, const uint32_t *flag, uint32_t value)
{
    void *dev_flag = NULL;
    CUresult res;

    if (!chorus__device_present())
        return CHORUS_ERR_UNSUPPORTED;
    pthread_once(&wait_value_once, wait_value_find);
    if (wait_value == NULL)
        return CHORUS_ERR_UNSUPPORTED;
    if (cudaHostGetDevicePointer(&dev_flag, (void *)flag, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        return CHORUS_ERR_UNSUPPORTED;
    }
    res = wait_value((CUstream)chorus__device_stream(stream), (CUdeviceptr)(uintptr_t)dev_flag,
                     value, CU_STREAM_WAIT_VALUE_GEQ);
    if (res != CUDA_SUCCESS) {
        chorus_debug("cuStreamWaitValue32 failed (%d): stream-ordered calls wait for their work",
                     (int)res);
        return CHORUS_ERR_UNSUPPORTED;
    }
    return CHORUS_OK;
}

chorus_status_t chorus__device_copy_start(void *dst, const void *src, size_t bytes, void *stream,
                                          void **event_p)
{
    int dev = ptr_device(dst), old = 0;
    chorus_status_t status;
    cudaError_t err;

    if (dev < 0)
        dev = ptr_device(src);
    if (!chorus__device_present())
        return CHORUS_ERR_UNSUPPORTED;
    status = chorus__device_enter(dev, &old);
    if (status != CHORUS_OK)
        return status;
    err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                          (cudaStream_t)chorus__device_stream(stream));
    status = err == cudaSuccess ? chorus__device_event_record(stream, event_p)
                                : chorus__device_fail("cudaMemcpyAsync", err);
    chorus__device_leave(dev, old);
    return status;
}

chorus_status_t chorus__device_copy_queue(void *dst, const void *src, size_t bytes,
                                          void *stream)
{
    cudaError_t err;

    if (bytes == 0 || dst == src)
        return CHORUS_OK;
    err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault,
                          (cudaStream_t)chorus__device_stream(stream));
    return err == cudaSuccess ? CHORUS_OK : chorus__device_fail("cudaMemcpyAsync", err);
}

chorus_status_t chorus__device_copy(void *dst, const void *src, size_t bytes)
{
    void *event = NULL;
    chorus_status_t status = chorus__device_copy_start(dst, src, bytes, NULL, &event);

    if (status == CHORUS_OK)
        status = chorus__device_event_finish(event);
    chorus__device_event_free(event);
    return status;
}

chorus_status_t chorus__device_event_finish(void *event)
{
    int rc;

    while ((rc = chorus__device_event_done(event)) == 0)
        chorus__device_event_wait(event, 1000);
    return rc < 0 ? (chorus_status_t)rc : CHORUS_OK;
}

int chorus__device_event_done(void *event)
{
    cudaError_t err = cudaEventQuery((cudaEvent_t)event);

    if (err == cudaSuccess)
        return 1;
    if (err == cudaErrorNotReady)
        return 0;
    return (int)chorus__device_fail("waiting for a device copy", err);
}

void chorus__device_event_wait(void *event, unsigned max_us)
{
    struct timespec start, now, nap = {0, DEVICE_POLL_NS};

    clock_gettime(CLOCK_MONOTONIC, &start);
    while (cudaEventQuery((cudaEvent_t)event) == cudaErrorNotReady) {
        long waited;

        clock_gettime(CLOCK_MONOTONIC, &now);
        waited = (now.tv_sec - start.tv_sec) * 1000000L + (now.tv_nsec - start.tv_nsec) / 1000;
        if (waited >= (long)max_us)
            return;
        /* A short copy is over in microseconds; a sleep lasts tens (the timer's slack). */
        if (waited >= DEVICE_SPIN_US)
            nanosleep(&nap, NULL);
    }
}

void chorus__device_event_free(void *event)
{
    if (event != NULL)
        cudaEventDestroy((cudaEvent_t)event);
}

#else /* !HAVE_CUDA */

chorus_status_t chorus__device_fail(const char *what, int err)
{
    chorus_error("%s: CUDA error %d (this build has no CUDA)", what, err);
    return CHORUS_ERR_DEVICE;
}

int chorus__device_built(void)
{
    return 0;
}

int chorus__device_present(void)
{
    return 0;
}

int chorus__device_ptr(const void *ptr)
{
    (void)ptr;
    return 0;
}

void *chorus__device_stream(void *stream)
{
    return stream;
}

void *chorus__device_pinned_get(size_t bytes)
{
    (void)bytes;
    return NULL;
}

void *chorus__device_stream_async(void)
{
    return NULL;
}

void chorus__device_pinned_put_after(void *ptr, void *event)
{
    (void)ptr, (void)event;
}

void chorus__device_pinned_put(void *ptr)
{
    (void)ptr;
}

chorus_status_t chorus__device_enter(int dev, int *old_p)
{
    (void)dev;
    *old_p = -1;
    return CHORUS_ERR_UNSUPPORTED;
}

void chorus__device_leave(int dev, int old)
{
    (void)dev, (void)old;
}

chorus_status_t chorus__device_copy_queue(void *dst, const void *src, size_t bytes,
                                          void *stream)
{
    (void)dst, (void)src, (void)bytes, (void)stream;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_event_record(void *stream, void **event_p)
{
    (void)stream;
    (void)event_p;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_stream_wait(void *stream, const uint32_t *flag, uint32_t value)
{
    (void)stream;
    (void)flag;
    (void)value;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_copy_start(void *dst, const void *src, size_t bytes, void *stream,
                                          void **event_p)
{
    (void)dst;
    (void)src;
    (void)bytes;
    (void)stream;
    (void)event_p;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_copy(void *dst, const void *src, size_t bytes)
{
    (void)dst;
    (void)src;
    (void)bytes;
    return CHORUS_ERR_UNSUPPORTED;
}

int chorus__device_event_done(void *event)
{
    (void)event;
    return CHORUS_ERR_UNSUPPORTED;
}

void chorus__device_event_wait(void *event, unsigned max_us)
{
    (void)event;
    (void)max_us;
}

chorus_status_t chorus__device_event_finish(void *event)
{
    (void)event;
    return CHORUS_ERR_UNSUPPORTED;
}

void chorus__device_event_free(void *event)
{
    (void)event;
}

chorus_status_t chorus__device_reduce(chorus_dtype_t dtype, chorus_op_t op, void *dst,
                                      const void *const *srcs, int nsrc, size_t count,
                                      void *stream)
{
    (void)dtype, (void)op, (void)dst, (void)srcs, (void)nsrc, (void)count, (void)stream;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_reduce_to(chorus_dtype_t dtype, chorus_op_t op, void *const *dsts,
                                         int ndst, const void *const *srcs, int nsrc,
                                         size_t count, void *stream)
{
    (void)dtype, (void)op, (void)dsts, (void)ndst, (void)srcs, (void)nsrc, (void)count;
    (void)stream;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_finalize(chorus_dtype_t dtype, chorus_op_t op, void *buf,
                                        size_t count, int nranks, void *stream)
{
    (void)dtype, (void)op, (void)buf, (void)count, (void)nranks, (void)stream;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_convert(chorus_dtype_t to, void *dst, chorus_dtype_t from,
                                       const void *src, size_t count, void *stream)
{
    (void)to, (void)dst, (void)from, (void)src, (void)count, (void)stream;
    return CHORUS_ERR_UNSUPPORTED;
}

#endif
