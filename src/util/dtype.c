/* Names and sizes of the public dtypes and ops. */
#include "chorus.h"

#include <stdint.h>

static const size_t dtype_sizes[CHORUS_DTYPE_COUNT] = {
    [CHORUS_INT8] = sizeof(int8_t),     [CHORUS_UINT8] = sizeof(uint8_t),
    [CHORUS_INT32] = sizeof(int32_t),   [CHORUS_UINT32] = sizeof(uint32_t),
    [CHORUS_INT64] = sizeof(int64_t),   [CHORUS_UINT64] = sizeof(uint64_t),
    [CHORUS_FLOAT16] = sizeof(uint16_t), [CHORUS_BFLOAT16] = sizeof(uint16_t),
    [CHORUS_FLOAT32] = sizeof(float),   [CHORUS_FLOAT64] = sizeof(double),
};

static const char *const dtype_names[CHORUS_DTYPE_COUNT] = {
    [CHORUS_INT8] = "int8",       [CHORUS_UINT8] = "uint8",
    [CHORUS_INT32] = "int32",     [CHORUS_UINT32] = "uint32",
    [CHORUS_INT64] = "int64",     [CHORUS_UINT64] = "uint64",
    [CHORUS_FLOAT16] = "float16", [CHORUS_BFLOAT16] = "bfloat16",
    [CHORUS_FLOAT32] = "float32", [CHORUS_FLOAT64] = "float64",
};

static const char *const op_names[CHORUS_OP_COUNT] = {
    [CHORUS_SUM] = "sum", [CHORUS_PROD] = "prod", [CHORUS_MIN] = "min",
    [CHORUS_MAX] = "max", [CHORUS_AVG] = "avg",
};

/* The casts to unsigned also reject negative values of a corrupted enum. */
size_t chorus_dtype_size(chorus_dtype_t dtype)
{
    return (unsigned)dtype < CHORUS_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

const char *chorus_dtype_name(chorus_dtype_t dtype)
{
    return (unsigned)dtype < CHORUS_DTYPE_COUNT ? dtype_names[dtype] : NULL;
}

const char *chorus_op_name(chorus_op_t op)
{
    return (unsigned)op < CHORUS_OP_COUNT ? op_names[op] : NULL;
}
