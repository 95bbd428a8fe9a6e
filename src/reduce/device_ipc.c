/*
 * Device memory shared between the processes of a node (device.h): which
 * allocation holds a buffer and how another process opens it (CUDA IPC
 * handles), and which devices can reach which. The driver's pointer
 * attributes are found through the runtime, so nothing links libcuda.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "reduce/device.h"
#include "util/log.h"

#ifdef HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>

#define UUID_DEVICES_MAX 64

_Static_assert(sizeof(cudaIpcMemHandle_t) == CHORUS__DEVICE_HANDLE_BYTES,
               "an IPC handle is CHORUS__DEVICE_HANDLE_BYTES");
_Static_assert(sizeof(cudaUUID_t) == CHORUS__DEVICE_UUID_BYTES, "a UUID is 16 bytes");

typedef CUresult (*attrs_fn)(unsigned int n, CUpointer_attribute *attrs, void **data,
                             CUdeviceptr ptr);
static pthread_once_t attrs_once = PTHREAD_ONCE_INIT;
static attrs_fn get_attrs;

static void attrs_find(void)
{
    enum cudaDriverEntryPointQueryResult found;
    void *fn = NULL;

    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000,
                                         cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
        get_attrs = (attrs_fn)fn;
    else
        chorus_debug("cuPointerGetAttributes not found: device buffers are not shared");
    (void)cudaGetLastError();
}

chorus_status_t chorus__device_share_id(const void *ptr, chorus__device_share_t *share)
{
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_BUFFER_ID,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                                   CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    unsigned long long id = 0;
    CUdeviceptr base = 0;
    int capable = 0, device = -1;
    unsigned int type = 0;
    void *data[] = {&id, &base, &capable, &type, &device};

    if (ptr == NULL || !chorus__device_present())
        return CHORUS_ERR_UNSUPPORTED;
    pthread_once(&attrs_once, attrs_find);
    /* Host memory CUDA has never seen fails here, or reports another type. */
    if (get_attrs == NULL ||
        get_attrs(5, which, data, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE || !capable || base == 0)
        return CHORUS_ERR_UNSUPPORTED;
    share->id = id;
    share->device = device;
    share->base = (uint64_t)base;
    share->offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)base);
    return CHORUS_OK;
}

chorus_status_t chorus__device_share_handle(chorus__device_share_t *share)
{
    cudaIpcMemHandle_t handle;

    if (cudaIpcGetMemHandle(&handle, (void *)(uintptr_t)share->base) != cudaSuccess) {
        (void)cudaGetLastError();
        return CHORUS_ERR_UNSUPPORTED;
    }
    memcpy(share->handle, &handle, sizeof(handle));
    return CHORUS_OK;
}

chorus_status_t chorus__device_open(const chorus__device_share_t *share, void **base_p)
{
    cudaIpcMemHandle_t handle;
    cudaError_t err;

    memcpy(&handle, share->handle, sizeof(handle));
    err = cudaIpcOpenMemHandle(base_p, handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
        /* The caller may try again (after closing what it kept): it logs a final failure. */
        chorus_debug("cudaIpcOpenMemHandle: CUDA error %d: %s", (int)err,
                     cudaGetErrorString(err));
        (void)cudaGetLastError();
        return CHORUS_ERR_DEVICE;
    }
    return CHORUS_OK;
}

void chorus__device_close(void *base)
{
    if (base != NULL && cudaIpcCloseMemHandle(base) != cudaSuccess)
        (void)cudaGetLastError();
}

/* Every visible device's UUID, asked once (cudaGetDeviceProperties is slow). */
static pthread_once_t uuids_once = PTHREAD_ONCE_INIT;
static cudaUUID_t uuids[UUID_DEVICES_MAX];
static int nuuids;

static void uuids_find(void)
{
    int n = 0;

    if (!chorus__device_present() || cudaGetDeviceCount(&n) != cudaSuccess)
        n = 0;
    for (int d = 0; d < n && d < UUID_DEVICES_MAX; d++) {
        struct cudaDeviceProp prop;

        if (cudaGetDeviceProperties(&prop, d) != cudaSuccess)
            break;
        uuids[d] = prop.uuid;
        nuuids = d + 1;
    }
    (void)cudaGetLastError();
}

chorus_status_t chorus__device_uuid(uint8_t uuid[CHORUS__DEVICE_UUID_BYTES], int *dev_p)
{
    int dev = -1;

    pthread_once(&uuids_once, uuids_find);
    if (nuuids == 0 || cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= nuuids) {
        (void)cudaGetLastError();
        return CHORUS_ERR_UNSUPPORTED;
    }
    memcpy(uuid, &uuids[dev], CHORUS__DEVICE_UUID_BYTES);
    *dev_p = dev;
    return CHORUS_OK;
}

int chorus__device_reaches(const uint8_t uuid[CHORUS__DEVICE_UUID_BYTES])
{
    int dev = -1, ok = 0;

    pthread_once(&uuids_once, uuids_find);
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= nuuids) {
        (void)cudaGetLastError();
        return 0;
    }
    for (int d = 0; d < nuuids; d++) {
        if (memcmp(&uuids[d], uuid, CHORUS__DEVICE_UUID_BYTES) != 0)
            continue;
        if (d == dev)
            return 1;
        if (cudaDeviceCanAccessPeer(&ok, dev, d) != cudaSuccess)
            ok = 0;
        /* Enabled already (another team, an earlier communicator) is as good. */
        if (ok && cudaDeviceEnablePeerAccess(d, 0) != cudaSuccess &&
            cudaGetLastError() != cudaErrorPeerAccessAlreadyEnabled)
            ok = 0;
        (void)cudaGetLastError();
        return ok;
    }
    return 0;   /* not visible to this process (CUDA_VISIBLE_DEVICES) */
}

void *chorus__device_alloc(size_t bytes)
{
    void *ptr = NULL;

    if (!chorus__device_present() || cudaMalloc(&ptr, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return ptr;
}

void chorus__device_free(void *ptr)
{
    if (ptr != NULL && cudaFree(ptr) != cudaSuccess)
        (void)cudaGetLastError();
}

#else

chorus_status_t chorus__device_share_id(const void *ptr, chorus__device_share_t *share)
{
    (void)ptr, (void)share;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_share_handle(chorus__device_share_t *share)
{
    (void)share;
    return CHORUS_ERR_UNSUPPORTED;
}

chorus_status_t chorus__device_open(const chorus__device_share_t *share, void **base_p)
{
    (void)share, (void)base_p;
    return CHORUS_ERR_UNSUPPORTED;
}

void chorus__device_close(void *base)
{
    (void)base;
}

chorus_status_t chorus__device_uuid(uint8_t uuid[CHORUS__DEVICE_UUID_BYTES], int *dev_p)
{
    (void)uuid, (void)dev_p;
    return CHORUS_ERR_UNSUPPORTED;
}

int chorus__device_reaches(const uint8_t uuid[CHORUS__DEVICE_UUID_BYTES])
{
    (void)uuid;
    return 0;
}

void *chorus__device_alloc(size_t bytes)
{
    (void)bytes;
    return NULL;
}

void chorus__device_free(void *ptr)
{
    (void)ptr;
}

#endif
