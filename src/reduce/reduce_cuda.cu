/*
 * CUDA kernels of the reduction layer (device.h): dst = op over up to
 * CHORUS__DEVICE_REDUCE_MAX_SRCS inputs, the AVG finalize, and float32 to and
 * from float16 and bfloat16, all on device memory.
 *
 * Every (dtype, op) kernel comes from the definitions the CPU kernels use
 * (reduce_defs.h): REDUCE_DTYPES and REDUCE_OPS generate one functor per
 * pair around its ELEM_ operation, and one template kernel loops over it.
 * The inputs fold strictly in order, acc = srcs[0], acc = op(acc, srcs[1]),
 * ..., which is the CPU kernel applied pairwise in that order, so the result
 * has the same bits (NaN payloads aside: the GPU's arithmetic makes its own).
 * float16 and bfloat16 widen every input to float32, fold there with the
 * float32 operation and round once, with the bit conversions of half_bits.h.
 * The conversions give half_bits.h's bits too (see float_to_half).
 *
 * Memory moves in 16-byte accesses where dst and every input reach a 16-byte
 * boundary at the same element: a scalar head up to that element, 16-byte
 * vectors, a scalar tail. Inputs that never line up with dst take the scalar
 * path throughout. Every thread reads all inputs of its elements before it
 * writes them, so dst may be one of the inputs exactly.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <atomic>
#include <type_traits>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "reduce/device.h"
#include "reduce/reduce_defs.h"

namespace {

/*
 * 256 threads a block; the grid stops at 8 blocks per multiprocessor, the
 * 2048 threads an SM80/SM90 multiprocessor holds, and strides over the rest.
 */
constexpr unsigned kThreads = 256;
constexpr size_t kBlocksPerSm = 8;
/* The width of one vector access: uint4. */
constexpr size_t kVecBytes = 16;
/*
 * Loads in flight hide memory latency: a reduction loads kSrcBatch inputs of
 * kReduceUnroll vectors before it folds any, finalize and convert kUnroll
 * vectors. Two by two keeps a reduction at 4 loads and few enough registers
 * for 4 blocks per multiprocessor; batches of 4 inputs left a bfloat16 sum of
 * 2 inputs at 0.90 of copy bandwidth on an H200, two by two at 0.96.
 */
constexpr int kSrcBatch = 2;
constexpr int kReduceUnroll = 2;
constexpr int kUnroll = 2;
/*
 * Elements per vector of the conversions: 16 bytes of float32, 8 of float16
 * or bfloat16, so that each access of a warp covers one contiguous span (a
 * wider vector made the float32 side two interleaved accesses, which cost
 * the widening conversions almost half their bandwidth).
 */
constexpr int kConvertVec = 4;

/* The inputs and outputs travel by value as kernel parameters: no device copy of the arrays. */
struct src_list {
    const void *ptr[CHORUS__DEVICE_REDUCE_MAX_SRCS];
};

struct dst_list {
    void *ptr[CHORUS__DEVICE_REDUCE_MAX_SRCS];
};

/* ---- element types ------------------------------------------------------ */

/* A dtype's storage type, the type it folds in, and the conversions between the two. */
template <typename T>
struct same_conv {
    typedef T elem_t;
    typedef T acc_t;
    __device__ static acc_t widen(elem_t x) { return x; }
    __device__ static elem_t narrow(acc_t x) { return x; }
};

struct half_conv {
    typedef uint16_t elem_t;
    typedef float acc_t;
    __device__ static float widen(uint16_t h) { return f32_from_bits(half_to_f32_bits(h)); }
    __device__ static uint16_t narrow(float f) { return f32_bits_to_half(f32_bits(f)); }
};

struct bf16_conv {
    typedef uint16_t elem_t;
    typedef float acc_t;
    __device__ static float widen(uint16_t b) { return f32_from_bits(bf16_to_f32_bits(b)); }
    __device__ static uint16_t narrow(float f) { return f32_bits_to_bf16(f32_bits(f)); }
};

/* The conversion of each class; the HALF class names its converter family where others name U. */
#define CONV_SINT(T, U)  same_conv<T>
#define CONV_UINT(T, U)  same_conv<T>
#define CONV_FLT(T, U)   same_conv<T>
#define CONV_HALF(T, cv) cv##_conv

/* float16 and bfloat16 fold with the float32 element operations. */
#define ELEM_HALF_sum(T, cv, x, y)  ELEM_FLT_sum(float, uint32_t, x, y)
#define ELEM_HALF_prod(T, cv, x, y) ELEM_FLT_prod(float, uint32_t, x, y)
#define ELEM_HALF_min(T, cv, x, y)  ELEM_FLT_min(float, uint32_t, x, y)
#define ELEM_HALF_max(T, cv, x, y)  ELEM_FLT_max(float, uint32_t, x, y)

/* elem_<dtype>_<op>: the element operation of each pair, on the fold type. */
#define DEFINE_ELEM_OP(DT, name, cls, T, U, OP, op)                          \
    struct elem_##name##_##op {                                              \
        typedef CONV_##cls(T, U) conv;                                       \
        __device__ static conv::acc_t apply(conv::acc_t x, conv::acc_t y)    \
        {                                                                    \
            return ELEM_##cls##_##op(T, U, x, y);                            \
        }                                                                    \
    };
#define DEFINE_ELEM_OPS(DT, name, cls, T, U) REDUCE_OPS(DEFINE_ELEM_OP, DT, name, cls, T, U)
REDUCE_DTYPES(DEFINE_ELEM_OPS)

/*
 * finalize_<dtype>: AVG's division, as reduce.c's finalize does it: integers
 * truncate through 64 bits, floats divide by the rank count in their own
 * type, float16 and bfloat16 in float32.
 */
#define FINALIZE_SINT(A, p, n) ((A)((int64_t)(p) / (int64_t)(n)))
#define FINALIZE_UINT(A, p, n) ((A)((uint64_t)(p) / (uint64_t)(n)))
#define FINALIZE_FLT(A, p, n)  ((p) / (A)(n))
#define FINALIZE_HALF          FINALIZE_FLT

#define DEFINE_FINALIZE_OP(DT, name, cls, T, U)                              \
    struct finalize_##name {                                                 \
        typedef CONV_##cls(T, U) conv;                                       \
        __device__ static conv::acc_t apply(conv::acc_t p, int nranks)       \
        {                                                                    \
            return FINALIZE_##cls(conv::acc_t, p, nranks);                   \
        }                                                                    \
    };
REDUCE_DTYPES(DEFINE_FINALIZE_OP)

/*
 * The conversions of chorus__device_convert, on bits, with the results of
 * half_bits.h. float16 uses the hardware's conversion instead of the integer
 * arithmetic there, which is too many instructions per element to keep up
 * with memory (float32 to float16 ran at 0.77 of copy bandwidth on an H200,
 * 0.92 this way). The instruction rounds to nearest even just the same; only
 * NaN differs (it makes a canonical one), so NaN takes half_bits.h's rule by
 * hand: sign kept, quiet, the leading payload bits kept.
 */
struct float_to_half {
    typedef uint32_t in_t;
    typedef uint16_t out_t;
    __device__ static out_t apply(in_t x)
    {
        uint16_t h = __half_as_ushort(__float2half_rn(__uint_as_float(x)));
        uint16_t nan = (uint16_t)(((x >> 16) & 0x8000u) | 0x7E00u | ((x >> 13) & 0x3FFu));
        return (x & 0x7FFFFFFFu) > 0x7F800000u ? nan : h;
    }
};

struct half_to_float {
    typedef uint16_t in_t;
    typedef uint32_t out_t;
    __device__ static out_t apply(in_t h)
    {
        uint32_t f = __float_as_uint(__half2float(__ushort_as_half(h)));
        uint32_t nan =
            ((uint32_t)(h & 0x8000u) << 16) | 0x7FC00000u | ((uint32_t)(h & 0x3FFu) << 13);
        return (h & 0x7FFFu) > 0x7C00u ? nan : f;
    }
};

struct float_to_bf16 {
    typedef uint32_t in_t;
    typedef uint16_t out_t;
    __device__ static out_t apply(in_t x) { return f32_bits_to_bf16(x); }
};

struct bf16_to_float {
    typedef uint16_t in_t;
    typedef uint32_t out_t;
    __device__ static out_t apply(in_t b) { return bf16_to_f32_bits(b); }
};

/* ---- vector access ------------------------------------------------------ */

/*
 * Bytes as elements and back. memcpy keeps the reinterpretation defined; it
 * compiles to register moves. W is the access type.
 */
template <typename W, typename T, int N>
__device__ inline void unpack(T (&x)[N], const W &raw)
{
    static_assert(sizeof(T) * N == sizeof(W), "a vector is one access");
    memcpy(x, &raw, sizeof(raw));
}

template <typename W, typename T, int N>
__device__ inline W pack(const T (&x)[N])
{
    static_assert(sizeof(T) * N == sizeof(W), "a vector is one access");
    W raw;
    memcpy(&raw, x, sizeof(raw));
    return raw;
}

/*
 * One vector of Bytes as the accesses that move it: a 16-byte access, or
 * several side by side, or one of Bytes where a vector is smaller.
 */
template <size_t Bytes>
struct unit_words {
    typedef typename std::conditional<(Bytes >= 16), uint4, uint2>::type word;
    static constexpr int count = (int)(Bytes / sizeof(word));
    static constexpr size_t align = sizeof(word);
    static_assert(Bytes % sizeof(word) == 0, "a vector is whole accesses");
};

__device__ inline size_t first_thread()
{
    return (size_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ inline size_t thread_count()
{
    return (size_t)gridDim.x * blockDim.x;
}

/*
 * Element i of the scalar part: the first head elements, then the tail that
 * starts at element tail. s runs over [0, head + count - tail).
 */
__device__ inline size_t scalar_index(size_t s, size_t head, size_t tail)
{
    return s < head ? s : tail + (s - head);
}

/* ---- kernels ------------------------------------------------------------ */

/*
 * Every one of the ndst outputs = Op over the nsrc inputs. Elements [head,
 * head + nvec * V) move as nvec 16-byte vectors, where every pointer is
 * 16-byte aligned; the elements before and after move one by one. head =
 * nvec = 0 is the scalar path. A thread reads all inputs of an element
 * before it writes any output of it, so an output may be an input.
 * The loops over the inputs unroll to the maximum and stop at nsrc, so that
 * every srcs.ptr index is a constant: an index known only at run time would
 * copy the parameter to local memory.
 */
template <class Op>
__global__ void __launch_bounds__(kThreads)
    reduce_kernel(src_list srcs, int nsrc, dst_list dsts, int ndst, size_t count, size_t head,
                  size_t nvec)
{
    typedef typename Op::conv conv;
    typedef typename conv::elem_t T;
    typedef typename conv::acc_t A;
    constexpr int V = (int)(kVecBytes / sizeof(T));

    const size_t stride = thread_count();

    for (size_t v0 = first_thread(); v0 < nvec; v0 += stride * kReduceUnroll) {
        A acc[kReduceUnroll][V];
#pragma unroll
        for (int j0 = 0; j0 < CHORUS__DEVICE_REDUCE_MAX_SRCS; j0 += kSrcBatch) {
            if (j0 >= nsrc)
                break;
            uint4 raw[kReduceUnroll][kSrcBatch];
#pragma unroll
            for (int u = 0; u < kReduceUnroll; u++) {
                size_t v = v0 + u * stride;
#pragma unroll
                for (int b = 0; b < kSrcBatch; b++) {
                    if (j0 + b < nsrc && v < nvec)
                        raw[u][b] = reinterpret_cast<const uint4 *>(
                            static_cast<const T *>(srcs.ptr[j0 + b]) + head)[v];
                }
            }
#pragma unroll
            for (int u = 0; u < kReduceUnroll; u++) {
                if (v0 + u * stride >= nvec)
                    break;
#pragma unroll
                for (int b = 0; b < kSrcBatch; b++) {
                    if (j0 + b >= nsrc)
                        break;
                    T x[V];
                    unpack(x, raw[u][b]);
                    if (j0 + b == 0) {
#pragma unroll
                        for (int k = 0; k < V; k++)
                            acc[u][k] = conv::widen(x[k]);
                    } else {
#pragma unroll
                        for (int k = 0; k < V; k++)
                            acc[u][k] = Op::apply(acc[u][k], conv::widen(x[k]));
                    }
                }
            }
        }
#pragma unroll
        for (int u = 0; u < kReduceUnroll; u++) {
            size_t v = v0 + u * stride;
            if (v >= nvec)
                break;
            T out[V];
#pragma unroll
            for (int k = 0; k < V; k++)
                out[k] = conv::narrow(acc[u][k]);
            const uint4 packed = pack<uint4>(out);
#pragma unroll
            for (int d = 0; d < CHORUS__DEVICE_REDUCE_MAX_SRCS; d++) {
                if (d >= ndst)
                    break;
                reinterpret_cast<uint4 *>(static_cast<T *>(dsts.ptr[d]) + head)[v] = packed;
            }
        }
    }

    const size_t tail = head + nvec * V;
    const size_t scalars = head + (count - tail);
    for (size_t s = first_thread(); s < scalars; s += stride) {
        size_t i = scalar_index(s, head, tail);
        A acc = conv::widen(static_cast<const T *>(srcs.ptr[0])[i]);
#pragma unroll
        for (int j = 1; j < CHORUS__DEVICE_REDUCE_MAX_SRCS; j++) {
            if (j >= nsrc)
                break;
            acc = Op::apply(acc, conv::widen(static_cast<const T *>(srcs.ptr[j])[i]));
        }
        const T out = conv::narrow(acc);
#pragma unroll
        for (int d = 0; d < CHORUS__DEVICE_REDUCE_MAX_SRCS; d++) {
            if (d >= ndst)
                break;
            static_cast<T *>(dsts.ptr[d])[i] = out;
        }
    }
}

/* buf = Fin(buf, nranks) in place, with reduce_kernel's head, vectors and tail. */
template <class Fin>
__global__ void __launch_bounds__(kThreads)
    finalize_kernel(void *buf_, size_t count, size_t head, size_t nvec, int nranks)
{
    typedef typename Fin::conv conv;
    typedef typename conv::elem_t T;
    constexpr int V = (int)(kVecBytes / sizeof(T));

    T *buf = static_cast<T *>(buf_);
    uint4 *vbuf = reinterpret_cast<uint4 *>(buf + head);
    const size_t stride = thread_count();

    for (size_t v0 = first_thread(); v0 < nvec; v0 += stride * kUnroll) {
        uint4 raw[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            size_t v = v0 + u * stride;
            if (v < nvec)
                raw[u] = vbuf[v];
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            size_t v = v0 + u * stride;
            if (v >= nvec)
                break;
            T x[V];
            unpack(x, raw[u]);
#pragma unroll
            for (int k = 0; k < V; k++)
                x[k] = conv::narrow(Fin::apply(conv::widen(x[k]), nranks));
            vbuf[v] = pack<uint4>(x);
        }
    }

    const size_t tail = head + nvec * V;
    const size_t scalars = head + (count - tail);
    for (size_t s = first_thread(); s < scalars; s += stride) {
        size_t i = scalar_index(s, head, tail);
        buf[i] = conv::narrow(Fin::apply(conv::widen(buf[i]), nranks));
    }
}

/*
 * dst = Cvt(src), with reduce_kernel's head, vectors and tail. The vectors
 * are stored with the streaming hint (evict first): the widening
 * conversions, two thirds of whose traffic is writes, gained 2% of copy
 * bandwidth by it.
 */
template <class Cvt>
__global__ void __launch_bounds__(kThreads)
    convert_kernel(void *dst_, const void *src_, size_t count, size_t head, size_t nvec)
{
    typedef typename Cvt::in_t In;
    typedef typename Cvt::out_t Out;
    typedef unit_words<sizeof(In) * kConvertVec> in_words;
    typedef unit_words<sizeof(Out) * kConvertVec> out_words;
    typedef typename in_words::word InWord;
    typedef typename out_words::word OutWord;

    const In *src = static_cast<const In *>(src_);
    Out *dst = static_cast<Out *>(dst_);
    const InWord *vsrc = reinterpret_cast<const InWord *>(src + head);
    OutWord *vdst = reinterpret_cast<OutWord *>(dst + head);
    const size_t stride = thread_count();

    for (size_t v0 = first_thread(); v0 < nvec; v0 += stride * kUnroll) {
        InWord raw[kUnroll][in_words::count];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            size_t v = v0 + u * stride;
            if (v < nvec) {
#pragma unroll
                for (int w = 0; w < in_words::count; w++)
                    raw[u][w] = vsrc[v * in_words::count + w];
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            size_t v = v0 + u * stride;
            if (v >= nvec)
                break;
            In x[kConvertVec];
            Out y[kConvertVec];
            memcpy(x, raw[u], sizeof(x));
#pragma unroll
            for (int k = 0; k < kConvertVec; k++)
                y[k] = Cvt::apply(x[k]);
            OutWord out[out_words::count];
            memcpy(out, y, sizeof(out));
#pragma unroll
            for (int w = 0; w < out_words::count; w++)
                __stcs(&vdst[v * out_words::count + w], out[w]);
        }
    }

    const size_t tail = head + nvec * kConvertVec;
    const size_t scalars = head + (count - tail);
    for (size_t s = first_thread(); s < scalars; s += stride) {
        size_t i = scalar_index(s, head, tail);
        dst[i] = Cvt::apply(src[i]);
    }
}

/* ---- launch ------------------------------------------------------------- */

bool aligned_to(const void *ptr, size_t bytes)
{
    return (uintptr_t)ptr % bytes == 0;
}

/* Whether ptr + offset bytes is on a 16-byte boundary. */
bool vector_aligned_at(const void *ptr, size_t offset)
{
    return ((uintptr_t)ptr + offset) % kVecBytes == 0;
}

/* Elements from ptr (aligned to elem) up to its next 16-byte boundary, at most count. */
size_t head_elements(const void *ptr, size_t elem, size_t count)
{
    size_t past = (uintptr_t)ptr % kVecBytes;
    size_t head = past == 0 ? 0 : (kVecBytes - past) / elem;
    return head < count ? head : count;
}

/*
 * Multiprocessors of the current device, asked once per device: the answer
 * never changes, so concurrent first calls that both store it store the same.
 */
constexpr int kSmCacheDevices = 64;
std::atomic<int> sm_count_cache[kSmCacheDevices];

chorus_status_t sm_count(int *count_p)
{
    int device;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess)
        return chorus__device_fail("cudaGetDevice", (int)err);
    bool cached = device >= 0 && device < kSmCacheDevices;
    if (cached) {
        int known = sm_count_cache[device].load(std::memory_order_relaxed);
        if (known > 0) {
            *count_p = known;
            return CHORUS_OK;
        }
    }
    int count = 0;
    err = cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    if (err != cudaSuccess)
        return chorus__device_fail("cudaDeviceGetAttribute(multiprocessors)", (int)err);
    if (count < 1)
        count = 1;
    if (cached)
        sm_count_cache[device].store(count, std::memory_order_relaxed);
    *count_p = count;
    return CHORUS_OK;
}

/* Blocks for work items (vectors plus scalar elements, at least 1): enough to cover them,
 * capped at what fills the device once; the kernels stride over the rest. */
chorus_status_t grid_blocks(size_t work, unsigned *blocks_p)
{
    int sms = 1;
    chorus_status_t status = sm_count(&sms);
    if (status != CHORUS_OK)
        return status;
    size_t want = (work + kThreads - 1) / kThreads;
    size_t cap = (size_t)sms * kBlocksPerSm;
    *blocks_p = (unsigned)(want < cap ? want : cap);
    return CHORUS_OK;
}

/*
 * The stream to launch on. chorus__device_stream() answers NULL, the legacy
 * default stream, only when the library's own could not be made: still
 * correct, so the kernels run there rather than fail.
 */
cudaStream_t launch_stream(void *stream)
{
    return static_cast<cudaStream_t>(chorus__device_stream(stream));
}

chorus_status_t launch_status(const char *what)
{
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? CHORUS_OK : chorus__device_fail(what, (int)err);
}

template <class Op>
chorus_status_t launch_reduce(void *const *dsts, int ndst, const void *const *srcs, int nsrc,
                              size_t count, cudaStream_t stream)
{
    typedef typename Op::conv::elem_t T;
    constexpr size_t V = kVecBytes / sizeof(T);

    /* Vectors start where the first output reaches 16 bytes; every pointer must be aligned
     * there too. */
    src_list list = {};
    dst_list outs = {};
    size_t head = head_elements(dsts[0], sizeof(T), count);
    bool vectors = true;
    for (int j = 0; j < nsrc; j++) {
        list.ptr[j] = srcs[j];
        vectors = vectors && vector_aligned_at(srcs[j], head * sizeof(T));
    }
    for (int d = 0; d < ndst; d++) {
        outs.ptr[d] = dsts[d];
        vectors = vectors && vector_aligned_at(dsts[d], head * sizeof(T));
    }
    size_t nvec = vectors ? (count - head) / V : 0;
    if (!vectors)
        head = 0;

    unsigned blocks = 1;
    chorus_status_t status = grid_blocks(nvec + (count - nvec * V), &blocks);
    if (status != CHORUS_OK)
        return status;
    reduce_kernel<Op><<<blocks, kThreads, 0, stream>>>(list, nsrc, outs, ndst, count, head,
                                                        nvec);
    return launch_status("reduce kernel launch");
}

template <class Fin>
chorus_status_t launch_finalize(void *buf, size_t count, int nranks, cudaStream_t stream)
{
    typedef typename Fin::conv::elem_t T;
    constexpr size_t V = kVecBytes / sizeof(T);

    size_t head = head_elements(buf, sizeof(T), count);
    size_t nvec = (count - head) / V;
    unsigned blocks = 1;
    chorus_status_t status = grid_blocks(nvec + (count - nvec * V), &blocks);
    if (status != CHORUS_OK)
        return status;
    finalize_kernel<Fin><<<blocks, kThreads, 0, stream>>>(buf, count, head, nvec, nranks);
    return launch_status("finalize kernel launch");
}

template <class Cvt>
chorus_status_t launch_convert(void *dst, const void *src, size_t count, cudaStream_t stream)
{
    typedef typename Cvt::in_t In;
    typedef typename Cvt::out_t Out;

    typedef unit_words<sizeof(In) * kConvertVec> in_words;
    typedef unit_words<sizeof(Out) * kConvertVec> out_words;

    /* Vectors start at the first element where both sides are aligned to their accesses. */
    size_t head = 0;
    bool vectors = false;
    for (; head < (size_t)kConvertVec && head < count; head++) {
        vectors = ((uintptr_t)src + head * sizeof(In)) % in_words::align == 0 &&
                  ((uintptr_t)dst + head * sizeof(Out)) % out_words::align == 0;
        if (vectors)
            break;
    }
    size_t nvec = vectors ? (count - head) / kConvertVec : 0;
    if (!vectors)
        head = 0;

    unsigned blocks = 1;
    chorus_status_t status = grid_blocks(nvec + (count - nvec * kConvertVec), &blocks);
    if (status != CHORUS_OK)
        return status;
    convert_kernel<Cvt><<<blocks, kThreads, 0, stream>>>(dst, src, count, head, nvec);
    return launch_status("convert kernel launch");
}

/* ---- dispatch ----------------------------------------------------------- */

typedef chorus_status_t (*reduce_launch_fn)(void *const *dsts, int ndst,
                                            const void *const *srcs, int nsrc, size_t count,
                                            cudaStream_t stream);
typedef chorus_status_t (*finalize_launch_fn)(void *buf, size_t count, int nranks,
                                              cudaStream_t stream);
typedef chorus_status_t (*convert_launch_fn)(void *dst, const void *src, size_t count,
                                             cudaStream_t stream);

/* The launcher of (dtype, op), or NULL when either is out of range. AVG reduces like SUM. */
reduce_launch_fn reduce_launcher(chorus_dtype_t dtype, chorus_op_t op)
{
    /* The casts to unsigned also reject negative values, as chorus__reduce_kernel does. */
    if ((unsigned)dtype >= CHORUS_DTYPE_COUNT || (unsigned)op >= CHORUS_OP_COUNT)
        return NULL;
    if (op == CHORUS_AVG)
        op = CHORUS_SUM;
#define LAUNCH_REDUCE_CASE(DT, name, cls, T, U, OP, op) \
    case OP:                                            \
        return launch_reduce<elem_##name##_##op>;
#define LAUNCH_REDUCE_DTYPE(DT, name, cls, T, U)                  \
    case DT:                                                      \
        switch (op) {                                             \
            REDUCE_OPS(LAUNCH_REDUCE_CASE, DT, name, cls, T, U)   \
        default:                                                  \
            return NULL;                                          \
        }
    switch (dtype) {
        REDUCE_DTYPES(LAUNCH_REDUCE_DTYPE)
    default:
        return NULL;
    }
#undef LAUNCH_REDUCE_DTYPE
#undef LAUNCH_REDUCE_CASE
}

finalize_launch_fn finalize_launcher(chorus_dtype_t dtype)
{
#define LAUNCH_FINALIZE_DTYPE(DT, name, cls, T, U) \
    case DT:                                       \
        return launch_finalize<finalize_##name>;
    switch (dtype) {
        REDUCE_DTYPES(LAUNCH_FINALIZE_DTYPE)
    default:
        return NULL;
    }
#undef LAUNCH_FINALIZE_DTYPE
}

size_t elem_size(chorus_dtype_t dtype)
{
#define ELEM_SIZE_DTYPE(DT, name, cls, T, U) \
    case DT:                                 \
        return sizeof(T);
    switch (dtype) {
        REDUCE_DTYPES(ELEM_SIZE_DTYPE)
    default:
        return 0;
    }
#undef ELEM_SIZE_DTYPE
}

convert_launch_fn convert_launcher(chorus_dtype_t to, chorus_dtype_t from)
{
    if (from == CHORUS_FLOAT32 && to == CHORUS_FLOAT16)
        return launch_convert<float_to_half>;
    if (from == CHORUS_FLOAT16 && to == CHORUS_FLOAT32)
        return launch_convert<half_to_float>;
    if (from == CHORUS_FLOAT32 && to == CHORUS_BFLOAT16)
        return launch_convert<float_to_bf16>;
    if (from == CHORUS_BFLOAT16 && to == CHORUS_FLOAT32)
        return launch_convert<bf16_to_float>;
    return NULL;
}

} // namespace

/* ---- entry points ------------------------------------------------------- */

/*
 * A pointer that is NULL or not aligned to its element is refused up front:
 * on the device it would not fail the call but the whole CUDA context.
 */
extern "C" chorus_status_t chorus__device_reduce_to(chorus_dtype_t dtype, chorus_op_t op,
                                                    void *const *dsts, int ndst,
                                                    const void *const *srcs, int nsrc,
                                                    size_t count, void *stream)
{
    reduce_launch_fn launch = reduce_launcher(dtype, op);
    if (launch == NULL || nsrc < 1 || nsrc > CHORUS__DEVICE_REDUCE_MAX_SRCS || ndst < 1 ||
        ndst > CHORUS__DEVICE_REDUCE_MAX_SRCS)
        return CHORUS_ERR_INVALID_ARG;
    if (count == 0)
        return CHORUS_OK;

    size_t size = elem_size(dtype);
    if (srcs == NULL || dsts == NULL)
        return CHORUS_ERR_INVALID_ARG;
    for (int d = 0; d < ndst; d++) {
        if (dsts[d] == NULL || !aligned_to(dsts[d], size))
            return CHORUS_ERR_INVALID_ARG;
    }
    for (int j = 0; j < nsrc; j++) {
        if (srcs[j] == NULL || !aligned_to(srcs[j], size))
            return CHORUS_ERR_INVALID_ARG;
    }

    return launch(dsts, ndst, srcs, nsrc, count, launch_stream(stream));
}

extern "C" chorus_status_t chorus__device_reduce(chorus_dtype_t dtype, chorus_op_t op, void *dst,
                                                 const void *const *srcs, int nsrc, size_t count,
                                                 void *stream)
{
    return chorus__device_reduce_to(dtype, op, &dst, 1, srcs, nsrc, count, stream);
}

extern "C" chorus_status_t chorus__device_finalize(chorus_dtype_t dtype, chorus_op_t op,
                                                   void *buf, size_t count, int nranks,
                                                   void *stream)
{
    if ((unsigned)dtype >= CHORUS_DTYPE_COUNT || (unsigned)op >= CHORUS_OP_COUNT || nranks <= 0)
        return CHORUS_ERR_INVALID_ARG;
    if (op != CHORUS_AVG || count == 0)
        return CHORUS_OK;

    finalize_launch_fn launch = finalize_launcher(dtype);
    if (launch == NULL || buf == NULL || !aligned_to(buf, elem_size(dtype)))
        return CHORUS_ERR_INVALID_ARG;

    return launch(buf, count, nranks, launch_stream(stream));
}

extern "C" chorus_status_t chorus__device_convert(chorus_dtype_t to, void *dst,
                                                  chorus_dtype_t from, const void *src,
                                                  size_t count, void *stream)
{
    convert_launch_fn launch = convert_launcher(to, from);
    if (launch == NULL)
        return CHORUS_ERR_INVALID_ARG;
    if (count == 0)
        return CHORUS_OK;
    if (dst == NULL || src == NULL || !aligned_to(dst, elem_size(to)) ||
        !aligned_to(src, elem_size(from)))
        return CHORUS_ERR_INVALID_ARG;

    return launch(dst, src, count, launch_stream(stream));
}
