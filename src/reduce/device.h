/*
 * CUDA device memory and device kernels. Built with --with-cuda (HAVE_CUDA);
 * without it, or in a process that sees no CUDA device, every buffer is host
 * memory, chorus__device_present() is 0 and the calls below that need a
 * device return CHORUS_ERR_UNSUPPORTED.
 *
 * Streams are passed as void * (a cudaStream_t); NULL is the library's own
 * stream of the current device, a blocking one: its work is ordered after
 * the legacy default stream's earlier work, never run on that stream.
 *
 * memory: device.c        sharing memory between processes: device_ipc.c
 * kernels: reduce_cuda.cu (from reduce_defs.h)
 */
#ifndef CHORUS_DEVICE_H
#define CHORUS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "chorus.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- memory (device.c) --------------------------------------------------- */

/* Nonzero when this build has CUDA (whether or not a device is there). */
int chorus__device_built(void);

/* Nonzero when this build has CUDA and the process sees at least one device. */
int chorus__device_present(void);

/* The stream to run on: stream itself, or for NULL the library's own one (created once). */
void *chorus__device_stream(void *stream);
/*
 * The library's non-blocking stream of the current device (created once):
 * for work ordered by the host's own waits, which must not wait for the
 * legacy default stream (that may wait, in turn, on a caller's stream held
 * for this very work).
 */
void *chorus__device_stream_async(void);

/* Log "what: <CUDA's message for err>" and return CHORUS_ERR_DEVICE. err is a cudaError_t. */
chorus_status_t chorus__device_fail(const char *what, int err);

/*
 * Make device dev current in the calling thread (dev < 0: keep the current
 * one); *old_p gets the caller's, which chorus__device_leave(dev, old)
 * makes current again.
 */
chorus_status_t chorus__device_enter(int dev, int *old_p);
void chorus__device_leave(int dev, int old);

/* Nonzero when ptr is CUDA device memory (not host, pinned host or managed memory). */
int chorus__device_ptr(const void *ptr);

/* Page-locked host memory of at least bytes from a reuse pool; NULL when none can be had. */
void *chorus__device_pinned_get(size_t bytes);
/* Back to the pool (NULL is ignored). */
void chorus__device_pinned_put(void *ptr);
/* Back to the pool, to be handed out again once event is done (the pool then frees it). */
void chorus__device_pinned_put_after(void *ptr, void *event);

/*
 * Queue on stream a wait until *flag >= value (flag: a 32-bit word of a
 * block from chorus__device_pinned_get, which the device can read); the
 * stream's later work runs once the host has stored value there.
 * CHORUS_ERR_UNSUPPORTED where the driver cannot (nothing was queued).
 */
chorus_status_t chorus__device_stream_wait(void *stream, const uint32_t *flag, uint32_t value);

/* Queue a copy of bytes in either direction on stream (nothing when dst == src). */
chorus_status_t chorus__device_copy_queue(void *dst, const void *src, size_t bytes,
                                          void *stream);

/* A copy of bytes in either direction, over when it returns (the library's stream). */
chorus_status_t chorus__device_copy(void *dst, const void *src, size_t bytes);

/*
 * An asynchronous copy of bytes on stream (either direction; host memory
 * should be pinned for the copy to be asynchronous), followed by an event
 * that chorus__device_event_done() polls. *event_p is written on success.
 */
chorus_status_t chorus__device_copy_start(void *dst, const void *src, size_t bytes, void *stream,
                                          void **event_p);
/*
 * 1 once the work before event is done, 0 while it runs, a negative status
 * when it failed (the device's error is logged).
 */
int chorus__device_event_done(void *event);
/* Block the calling thread until event is done or max_us have passed, polling it. */
void chorus__device_event_wait(void *event, unsigned max_us);
/* Block until event is done: CHORUS_OK, or the status of the device's error (logged). */
chorus_status_t chorus__device_event_finish(void *event);
/* Release an event (NULL is ignored); the work before it may still run. */
void chorus__device_event_free(void *event);
/* An event recorded on stream now: the work before it on stream is what it waits for. */
chorus_status_t chorus__device_event_record(void *stream, void **event_p);

/* ---- device memory shared between processes (device_ipc.c) --------------- */

/* What another process needs to open the allocation that holds a buffer. */
#define CHORUS__DEVICE_HANDLE_BYTES 64
typedef struct {
    uint8_t handle[CHORUS__DEVICE_HANDLE_BYTES];    /* a cudaIpcMemHandle_t */
    uint64_t id;            /* the allocation's id, never reused in the exporting process */
    uint64_t base;          /* the allocation's address in the exporting process */
    uint64_t offset;        /* of the buffer from base */
    int32_t device;         /* the allocation's device, its ordinal in the exporting process */
    uint32_t pad;
} chorus__device_share_t;

/*
 * How another process can open the allocation that holds ptr, in two parts:
 * which allocation it is (id, base, offset), then its handle (a system call:
 * worth keeping by id). CHORUS_OK, or CHORUS_ERR_UNSUPPORTED for memory
 * that cannot be shared that way (host memory, memory from a stream-ordered
 * pool or the virtual memory API).
 */
chorus_status_t chorus__device_share_id(const void *ptr, chorus__device_share_t *share);
chorus_status_t chorus__device_share_handle(chorus__device_share_t *share);
/*
 * Open another process's allocation on the current device: *base_p is its
 * address here. CHORUS_ERR_DEVICE (logged at debug level only) when the
 * driver refuses, for instance an allocation this process has open already.
 */
chorus_status_t chorus__device_open(const chorus__device_share_t *share, void **base_p);
/* Close what chorus__device_open opened. */
void chorus__device_close(void *base);

/* The current device: its identity (UUID) and ordinal; CHORUS_ERR_UNSUPPORTED without one. */
#define CHORUS__DEVICE_UUID_BYTES 16
chorus_status_t chorus__device_uuid(uint8_t uuid[CHORUS__DEVICE_UUID_BYTES], int *dev_p);
/*
 * Nonzero when kernels on the current device can reach memory on the device
 * uuid names: the same device, or another with peer access, which this
 * enables (for pointers of this process; opened allocations enable their own).
 */
int chorus__device_reaches(const uint8_t uuid[CHORUS__DEVICE_UUID_BYTES]);

/* Device memory of the current device (cudaMalloc), NULL when none; freed by _free. */
void *chorus__device_alloc(size_t bytes);
void chorus__device_free(void *ptr);

/* ---- kernels (reduce_cuda.cu) -------------------------------------------- */

/*
 * dst[i] = op over srcs[0..nsrc)[i], for i < count, on stream. Every
 * pointer is device memory; dst may be one of srcs exactly. float16 and
 * bfloat16 accumulate all nsrc inputs in float32 and round once. AVG
 * reduces like SUM. 1 <= nsrc <= CHORUS__DEVICE_REDUCE_MAX_SRCS.
 */
#define CHORUS__DEVICE_REDUCE_MAX_SRCS 16
chorus_status_t chorus__device_reduce(chorus_dtype_t dtype, chorus_op_t op, void *dst,
                                      const void *const *srcs, int nsrc, size_t count,
                                      void *stream);

/*
 * chorus__device_reduce written to every one of dsts[0..ndst), in one pass
 * (1 <= ndst <= CHORUS__DEVICE_REDUCE_MAX_SRCS); an output may be one of
 * srcs exactly.
 */
chorus_status_t chorus__device_reduce_to(chorus_dtype_t dtype, chorus_op_t op, void *const *dsts,
                                         int ndst, const void *const *srcs, int nsrc,
                                         size_t count, void *stream);

/* chorus__reduce_finalize on device memory: AVG divides by nranks; other ops do nothing. */
chorus_status_t chorus__device_finalize(chorus_dtype_t dtype, chorus_op_t op, void *buf,
                                        size_t count, int nranks, void *stream);

/*
 * dst = src converted, count elements, on stream: float32 to float16 or
 * bfloat16 and back (the bits of chorus__float_to_half() and its family).
 * Other pairs: CHORUS_ERR_INVALID_ARG.
 */
chorus_status_t chorus__device_convert(chorus_dtype_t to, void *dst, chorus_dtype_t from,
                                       const void *src, size_t count, void *stream);

#ifdef __cplusplus
}
#endif

#endif
