/*
 * The TensorFlow ops of chorus.tensorflow: ChorusAllreduce, ChorusAllgather,
 * ChorusBroadcast and ChorusReducescatter, asynchronous CPU kernels that submit
 * their tensors to chorus's training engine (chorus_engine(3)).
 *
 * The engine pairs submissions across ranks by name, so TensorFlow may run the
 * ops of a graph in any order on each rank without deadlock. Each op's engine
 * name comes in its tensor_name attribute, chosen by _ops.py.
 *
 * A kernel checks its input, allocates what it can, and hands a Pending record
 * to the completer: one thread of this library that posts each op's stages on
 * the engine, polls their requests and calls the op's done callback once the
 * last stage is over or one failed. Every request is bounded by the
 * communicator's timeout (CHORUS_TIMEOUT), so no op waits forever.
 *
 * The engine and communicator come from chorus_tf_bind(), called through
 * ctypes by _ops.bind(); this library links the libchorus.so.0 that the
 * chorus package loaded first, so the handles are that library's objects.
 */

#include <chorus.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"

namespace chorus_tf {

using tensorflow::AsyncOpKernel;
using tensorflow::DataType;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using Status = absl::Status;

/* Statuses with messages made of pieces, as absl::StrCat joins them. */
template <typename... Args> Status invalid_argument(const Args &...args)
{
    return absl::InvalidArgumentError(absl::StrCat(args...));
}
template <typename... Args> Status unavailable(const Args &...args)
{
    return absl::UnavailableError(absl::StrCat(args...));
}
template <typename... Args> Status unimplemented(const Args &...args)
{
    return absl::UnimplementedError(absl::StrCat(args...));
}
template <typename... Args> Status internal_error(const Args &...args)
{
    return absl::InternalError(absl::StrCat(args...));
}
template <typename... Args> Status failed_precondition(const Args &...args)
{
    return absl::FailedPreconditionError(absl::StrCat(args...));
}

/* ---- the binding ---------------------------------------------------------- */

/* The engine and communicator that serve the ops, as chorus_tf_bind() set them. */
struct Binding {
    chorus_engine_t engine = nullptr;
    chorus_comm_t comm = nullptr;
    int rank = -1;
    int size = 0;
};

std::mutex binding_mutex;
Binding binding;

Binding current_binding()
{
    std::lock_guard<std::mutex> lock(binding_mutex);
    return binding;
}

/* ---- helpers -------------------------------------------------------------- */

/* The chorus dtype of a TensorFlow dtype, for the reductions; false when chorus has none. */
bool chorus_dtype_of(DataType type, chorus_dtype_t *dtype_p)
{
    switch (type) {
    case tensorflow::DT_INT8:     *dtype_p = CHORUS_INT8; return true;
    case tensorflow::DT_UINT8:    *dtype_p = CHORUS_UINT8; return true;
    case tensorflow::DT_INT32:    *dtype_p = CHORUS_INT32; return true;
    case tensorflow::DT_UINT32:   *dtype_p = CHORUS_UINT32; return true;
    case tensorflow::DT_INT64:    *dtype_p = CHORUS_INT64; return true;
    case tensorflow::DT_UINT64:   *dtype_p = CHORUS_UINT64; return true;
    case tensorflow::DT_HALF:     *dtype_p = CHORUS_FLOAT16; return true;
    case tensorflow::DT_BFLOAT16: *dtype_p = CHORUS_BFLOAT16; return true;
    case tensorflow::DT_FLOAT:    *dtype_p = CHORUS_FLOAT32; return true;
    case tensorflow::DT_DOUBLE:   *dtype_p = CHORUS_FLOAT64; return true;
    default:                      return false;
    }
}

bool chorus_op_of(const std::string &name, chorus_op_t *op_p)
{
    static const std::pair<const char *, chorus_op_t> ops[] = {
        {"sum", CHORUS_SUM}, {"avg", CHORUS_AVG}, {"min", CHORUS_MIN},
        {"max", CHORUS_MAX}, {"prod", CHORUS_PROD},
    };
    for (const auto &entry : ops) {
        if (name == entry.first) {
            *op_p = entry.second;
            return true;
        }
    }
    return false;
}

/* The wire compression flag of an allreduce; 0 where the engine takes none, so that
 * "fp16" or "bf16" on another dtype or op is ignored rather than refused. */
uint32_t compression_flag(const std::string &compression, chorus_dtype_t dtype, chorus_op_t op)
{
    if (dtype != CHORUS_FLOAT32 || (op != CHORUS_SUM && op != CHORUS_AVG)) {
        return 0;
    }
    if (compression == "fp16") {
        return CHORUS_COMPRESS_FP16;
    }
    if (compression == "bf16") {
        return CHORUS_COMPRESS_BF16;
    }
    return 0;
}

char *data_of(const Tensor &t)
{
    return const_cast<char *>(t.tensor_data().data());
}

/* The bytes of one row (one index of dimension 0) of t, which has a dimension. */
int64_t row_bytes_of(const Tensor &t)
{
    int64_t elements = 1;
    for (int d = 1; d < t.dims(); d++) {
        elements *= t.dim_size(d);
    }
    return elements * tensorflow::DataTypeSize(t.dtype());
}

/* A TensorFlow status for a chorus failure of one op. A peer that died, a timeout or
 * an abort make the communicator unusable (Unavailable); a description that differs
 * between ranks fails that round on every rank (InvalidArgument). */
Status chorus_error(chorus_status_t status, const std::string &what)
{
    const char *name = chorus_status_string(status);
    std::string text = absl::StrCat("chorus.tensorflow: ", what, " failed: ",
                                    name != nullptr ? std::string(name)
                                                    : absl::StrCat("status ", status));
    switch (status) {
    case CHORUS_ERR_INVALID_ARG:
    case CHORUS_ERR_TRUNCATED:
        return invalid_argument(
            text, " (every rank must submit this name with the same shape, dtype and "
                  "op; the chorus log names the ranks and what each submitted)");
    case CHORUS_ERR_TIMEOUT:
    case CHORUS_ERR_PEER_FAILED:
    case CHORUS_ERR_ABORTED:
    case CHORUS_ERR_PROTOCOL:
    case CHORUS_ERR_SYSTEM:
    case CHORUS_ERR_AUTH:
        return unavailable(text, " (the communicator is broken: a peer died, left or "
                           "passed CHORUS_TIMEOUT)");
    case CHORUS_ERR_UNSUPPORTED:
        return unimplemented(text);
    default:
        return internal_error(text);
    }
}

/* ---- pending operations ----------------------------------------------------- */

/*
 * One op in flight. Step() runs first when the op may start and then each time
 * its request completes successfully: it posts the next stage (setting req) or,
 * when nothing remains, returns with req NULL. The tensors the engine reads and
 * writes are members, so they live until the record is deleted.
 */
struct Pending {
    virtual ~Pending() = default;
    virtual Status Step() = 0;

    /* A submission's status: OK, or the error naming this op. */
    Status Posted(chorus_status_t status, const char *stage)
    {
        if (status == CHORUS_OK) {
            return Status();
        }
        req = nullptr;
        return chorus_error(status, what + " (" + stage + " submission)");
    }

    std::string key;        /* the engine base name: one round of it in flight on this rank */
    std::string what;       /* "ChorusAllreduce 'node' as 'allreduce.x'", for messages */
    OpKernelContext *ctx = nullptr;
    AsyncOpKernel::DoneCallback done;
    Binding bound;          /* the engine and communicator when the op ran */
    chorus_request_t req = nullptr;
    int stage = 0;
    Tensor input;
};

/*
 * The thread that completes the ops. It polls every pending request with
 * chorus_request_test rather than waiting on one at a time: an allgather's
 * second stage must be posted as soon as its first is over, whatever other
 * requests are still pending, since another rank may be waiting for it.
 *
 * A name has one round in flight per rank: the engine refuses a name submitted
 * again before its earlier round went into a bucket, so a later round (an op in
 * a loop, a function run from two threads) waits here for the earlier one and
 * is started by this thread, in the order the rounds came.
 */
class Completer {
public:
    static Completer &Get()
    {
        /* Never destroyed: the thread runs until the process exits. */
        static Completer *completer = new Completer();
        return *completer;
    }

    void Submit(Pending *p)
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++in_flight_;
            auto entry = rounds_.try_emplace(p->key);
            if (!entry.second) {
                entry.first->second.push_back(p);
                return;
            }
        }
        Advance(p);
    }

    /* Waits until every op handed to the completer is done. */
    void Drain()
    {
        std::unique_lock<std::mutex> lock(mutex_);
        idle_.wait(lock, [this] { return in_flight_ == 0; });
    }

private:
    Completer() : thread_([this] { Run(); }) { thread_.detach(); }

    /* Runs the op's next step: polls the request it posted, or finishes it. */
    void Advance(Pending *p)
    {
        Status status;
        try {
            status = p->Step();
        } catch (const std::exception &e) {
            /* Nothing in a step should throw; a throw must not leave the op hanging. */
            status = internal_error("chorus.tensorflow: ", p->what, ": ", e.what());
        }
        if (!status.ok() || p->req == nullptr) {
            Finish(p, status);
            return;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        polling_.push_back(p);
        work_.notify_one();
    }

    void Finish(Pending *p, const Status &status)
    {
        if (!status.ok()) {
            p->ctx->SetStatus(status);
        }
        Pending *next = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto entry = rounds_.find(p->key);
            if (entry->second.empty()) {
                rounds_.erase(entry);
            } else {
                next = entry->second.front();
                entry->second.pop_front();
            }
        }
        AsyncOpKernel::DoneCallback done = std::move(p->done);
        delete p;
        if (next != nullptr) {
            Advance(next);
        }
        done();
        std::lock_guard<std::mutex> lock(mutex_);
        if (--in_flight_ == 0) {
            idle_.notify_all();
        }
    }

    void Run()
    {
        /* Sleep between polls that complete nothing, from 20 us up to 1 ms: the ranks'
         * progress threads need the cores more than this thread does. */
        const auto shortest = std::chrono::microseconds(20);
        const auto longest = std::chrono::microseconds(1000);
        auto pause = shortest;
        std::vector<Pending *> batch, waiting;
        for (;;) {
            {
                std::unique_lock<std::mutex> lock(mutex_);
                work_.wait(lock, [this] { return !polling_.empty(); });
                batch.swap(polling_);
            }
            bool progress = false;
            waiting.clear();
            for (Pending *p : batch) {
                int complete = 0;
                chorus_status_t status = chorus_request_test(p->req, &complete);
                if (!complete) {
                    waiting.push_back(p);
                    continue;
                }
                progress = true;
                chorus_request_free(p->req);
                p->req = nullptr;
                if (status != CHORUS_OK) {
                    Finish(p, chorus_error(status, p->what));
                } else {
                    Advance(p);
                }
            }
            batch.clear();
            if (!waiting.empty()) {
                std::lock_guard<std::mutex> lock(mutex_);
                polling_.insert(polling_.end(), waiting.begin(), waiting.end());
            }
            if (progress) {
                pause = shortest;
            } else {
                std::this_thread::sleep_for(pause);
                pause = std::min(pause * 2, longest);
            }
        }
    }

    std::mutex mutex_;
    std::condition_variable work_;   /* polling_ is not empty */
    std::condition_variable idle_;   /* in_flight_ is 0 */
    std::vector<Pending *> polling_;
    /* engine base name -> the later rounds of it waiting for the one in flight */
    std::unordered_map<std::string, std::deque<Pending *>> rounds_;
    size_t in_flight_ = 0;
    std::thread thread_;
};

/* ---- the ops ---------------------------------------------------------------- */

/* Dtypes the engine reduces, and those it only moves (as bytes). */
#define CHORUS_TF_REDUCE_TYPES \
    "{int8, uint8, int32, uint32, int64, uint64, half, bfloat16, float, double}"
#define CHORUS_TF_MOVE_TYPES                                                             \
    "{bool, int8, uint8, int16, uint16, int32, uint32, int64, uint64, half, bfloat16, " \
    "float, double, complex64, complex128}"

/* [unknown] + the input's shape without its first dimension. */
Status gathered_shape(tensorflow::shape_inference::InferenceContext *c)
{
    tensorflow::shape_inference::ShapeHandle in, rest, out;
    TF_RETURN_IF_ERROR(c->WithRankAtLeast(c->input(0), 1, &in));
    TF_RETURN_IF_ERROR(c->Subshape(in, 1, &rest));
    TF_RETURN_IF_ERROR(c->Concatenate(c->Vector(c->UnknownDim()), rest, &out));
    c->set_output(0, out);
    return Status();
}

/*
 * The ops are stateful: TensorFlow must neither fold them as constants (which would
 * run them while optimizing a graph) nor merge two of them, and must run them even
 * when their result goes unused, since the other ranks wait for them. They are
 * distributed communication, so that a graph passes their Unavailable errors (a
 * peer died) on as such rather than as Internal ones.
 */
REGISTER_OP("ChorusAllreduce")
    .Input("tensor: T")
    .Output("output: T")
    .Attr("T: " CHORUS_TF_REDUCE_TYPES)
    .Attr("reduce_op: {'sum', 'avg', 'min', 'max', 'prod'} = 'sum'")
    .Attr("compression: {'none', 'fp16', 'bf16'} = 'none'")
    .Attr("tensor_name: string")
    .SetIsStateful()
    .SetIsDistributedCommunication()
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc("Every rank's tensor reduced elementwise by reduce_op, on every rank.");

REGISTER_OP("ChorusAllgather")
    .Input("tensor: T")
    .Output("output: T")
    .Output("sizes: int64")
    .Attr("T: " CHORUS_TF_MOVE_TYPES)
    .Attr("tensor_name: string")
    .SetIsStateful()
    .SetIsDistributedCommunication()
    .SetShapeFn([](tensorflow::shape_inference::InferenceContext *c) {
        TF_RETURN_IF_ERROR(gathered_shape(c));
        c->set_output(1, c->Vector(c->UnknownDim()));
        return Status();
    })
    .Doc("Every rank's tensor concatenated along dimension 0 in rank order; sizes: each "
         "rank's first dimension.");

REGISTER_OP("ChorusBroadcast")
    .Input("tensor: T")
    .Output("output: T")
    .Attr("T: " CHORUS_TF_MOVE_TYPES)
    .Attr("root_rank: int")
    .Attr("tensor_name: string")
    .SetIsStateful()
    .SetIsDistributedCommunication()
    .SetShapeFn(tensorflow::shape_inference::UnchangedShape)
    .Doc("root_rank's tensor, on every rank.");

REGISTER_OP("ChorusReducescatter")
    .Input("tensor: T")
    .Output("output: T")
    .Attr("T: " CHORUS_TF_REDUCE_TYPES)
    .Attr("reduce_op: {'sum', 'avg', 'min', 'max', 'prod'} = 'sum'")
    .Attr("tensor_name: string")
    .SetIsStateful()
    .SetIsDistributedCommunication()
    .SetShapeFn(gathered_shape)
    .Doc("This rank's rows of the reduction of every rank's tensor; dimension 0 is split "
         "as evenly as possible, the first ranks getting one more row.");

/* ---- kernels ---------------------------------------------------------------- */

/* What every kernel shares: the engine name, the binding check, the hand-off. */
class ChorusKernel : public AsyncOpKernel {
public:
    explicit ChorusKernel(OpKernelConstruction *ctx) : AsyncOpKernel(ctx)
    {
        OP_REQUIRES_OK(ctx, ctx->GetAttr("tensor_name", &tensor_name_));
        OP_REQUIRES(ctx, !tensor_name_.empty() && tensor_name_.size() <= 255,
                    invalid_argument("chorus.tensorflow: ", type_string(), " '", name(),
                                     "': tensor_name must have 1 to 255 bytes, not ",
                                     tensor_name_.size()));
    }

protected:
    /* Fills p's common fields; FailedPrecondition when no engine is bound. */
    Status Prepare(OpKernelContext *ctx, DoneCallback done, Pending *p)
    {
        p->bound = current_binding();
        p->key = tensor_name_;
        p->what = type_string() + " '" + name() + "' as '" + tensor_name_ + "'";
        p->ctx = ctx;
        p->done = std::move(done);
        p->input = ctx->input(0);
        if (p->bound.engine == nullptr) {
            return failed_precondition(
                "chorus.tensorflow: ", p->what, " ran while no engine is bound: call "
                "chorus.tensorflow._ops.bind(engine, comm) first (and unbind() only after "
                "the last op)");
        }
        return Status();
    }

    /* Hands p to the completer, or fails the op at once with status. */
    static void Launch(OpKernelContext *ctx, Pending *p, const Status &status)
    {
        if (!status.ok()) {
            ctx->SetStatus(status);
            DoneCallback done = std::move(p->done);
            delete p;
            done();
            return;
        }
        Completer::Get().Submit(p);
    }

    std::string tensor_name_;
};

/* -- allreduce -- */

struct AllreducePending : Pending {
    Status Step() override
    {
        if (stage++ > 0) {
            return Status();
        }
        chorus_opts_t opts = CHORUS_OPTS_INIT;
        opts.flags = flags;
        opts.mem_type = CHORUS_MEM_HOST;
        return Posted(chorus_engine_allreduce(bound.engine, key.c_str(), data_of(input),
                                              data_of(output), count, dtype, op, &opts, &req),
                      "allreduce");
    }

    Tensor output;
    size_t count = 0;
    chorus_dtype_t dtype = CHORUS_FLOAT32;
    chorus_op_t op = CHORUS_SUM;
    uint32_t flags = 0;
};

class AllreduceOp : public ChorusKernel {
public:
    explicit AllreduceOp(OpKernelConstruction *ctx) : ChorusKernel(ctx)
    {
        std::string op_name;
        OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce_op", &op_name));
        OP_REQUIRES_OK(ctx, ctx->GetAttr("compression", &compression_));
        OP_REQUIRES(ctx, chorus_op_of(op_name, &op_),
                    invalid_argument("chorus.tensorflow: no reduction '", op_name, "'"));
        OP_REQUIRES(ctx, chorus_dtype_of(ctx->input_type(0), &dtype_),
                    invalid_argument("chorus.tensorflow: chorus reduces no ",
                                     tensorflow::DataTypeString(ctx->input_type(0))));
    }

    void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override
    {
        auto *p = new AllreducePending();
        Status status = Prepare(ctx, std::move(done), p);
        if (status.ok()) {
            Tensor *out = nullptr;
            /* In place when TensorFlow lets the output take the input's buffer. */
            status = ctx->forward_input_or_allocate_output({0}, 0, p->input.shape(), &out);
            if (status.ok()) {
                p->output = *out;
                p->count = p->input.NumElements();
                p->dtype = dtype_;
                p->op = op_;
                p->flags = compression_flag(compression_, dtype_, op_);
            }
        }
        Launch(ctx, p, status);
    }

private:
    chorus_op_t op_ = CHORUS_SUM;
    chorus_dtype_t dtype_ = CHORUS_FLOAT32;
    std::string compression_;
};

/* -- broadcast -- */

struct BroadcastPending : Pending {
    Status Step() override
    {
        if (stage++ > 0) {
            return Status();
        }
        chorus_opts_t opts = CHORUS_OPTS_INIT;
        opts.mem_type = CHORUS_MEM_HOST;
        return Posted(chorus_engine_broadcast(bound.engine, key.c_str(), data_of(input),
                                              data_of(output), input.TotalBytes(),
                                              CHORUS_UINT8, root, &opts, &req),
                      "broadcast");
    }

    Tensor output;
    int root = 0;
};

class BroadcastOp : public ChorusKernel {
public:
    explicit BroadcastOp(OpKernelConstruction *ctx) : ChorusKernel(ctx)
    {
        OP_REQUIRES_OK(ctx, ctx->GetAttr("root_rank", &root_));
    }

    void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override
    {
        auto *p = new BroadcastPending();
        Status status = Prepare(ctx, std::move(done), p);
        if (status.ok() && (root_ < 0 || root_ >= p->bound.size)) {
            status = invalid_argument("chorus.tensorflow: ", p->what, ": root_rank ",
                                      root_, " is not a rank of ", p->bound.size);
        }
        if (status.ok()) {
            Tensor *out = nullptr;
            status = ctx->forward_input_or_allocate_output({0}, 0, p->input.shape(), &out);
            if (status.ok()) {
                p->output = *out;
                p->root = root_;
            }
        }
        Launch(ctx, p, status);
    }

private:
    int root_ = 0;
};

/* -- reduce-scatter: an engine allreduce, then this rank's rows -- */

/* The first row and the row count of rank's part of rows split over size ranks. */
void rows_of_rank(int64_t rows, int rank, int size, int64_t *first_p, int64_t *count_p)
{
    int64_t base = rows / size, extra = rows % size;
    *count_p = base + (rank < extra ? 1 : 0);
    *first_p = rank * base + std::min<int64_t>(rank, extra);
}

struct ReducescatterPending : Pending {
    Status Step() override
    {
        if (stage++ == 0) {
            chorus_opts_t opts = CHORUS_OPTS_INIT;
            opts.mem_type = CHORUS_MEM_HOST;
            return Posted(chorus_engine_allreduce(bound.engine, key.c_str(), data_of(input),
                                                  data_of(reduced), input.NumElements(),
                                                  dtype, op, &opts, &req),
                          "reduce-scatter's allreduce");
        }
        if (output.TotalBytes() > 0) {
            std::memcpy(data_of(output), data_of(reduced) + offset, output.TotalBytes());
        }
        return Status();
    }

    Tensor reduced, output;
    size_t offset = 0;     /* bytes before this rank's rows */
    chorus_dtype_t dtype = CHORUS_FLOAT32;
    chorus_op_t op = CHORUS_SUM;
};

class ReducescatterOp : public ChorusKernel {
public:
    explicit ReducescatterOp(OpKernelConstruction *ctx) : ChorusKernel(ctx)
    {
        std::string op_name;
        OP_REQUIRES_OK(ctx, ctx->GetAttr("reduce_op", &op_name));
        OP_REQUIRES(ctx, chorus_op_of(op_name, &op_),
                    invalid_argument("chorus.tensorflow: no reduction '", op_name, "'"));
        OP_REQUIRES(ctx, chorus_dtype_of(ctx->input_type(0), &dtype_),
                    invalid_argument("chorus.tensorflow: chorus reduces no ",
                                     tensorflow::DataTypeString(ctx->input_type(0))));
    }

    void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override
    {
        auto *p = new ReducescatterPending();
        Status status = Prepare(ctx, std::move(done), p);
        if (status.ok() && p->input.dims() == 0) {
            status = invalid_argument("chorus.tensorflow: ", p->what,
                                      ": the tensor needs a dimension to split");
        }
        if (status.ok()) {
            TensorShape shape = p->input.shape();
            int64_t first, rows;
            rows_of_rank(shape.dim_size(0), p->bound.rank, p->bound.size, &first, &rows);
            p->offset = first * row_bytes_of(p->input);
            shape.set_dim(0, rows);
            Tensor *out = nullptr;
            status = ctx->allocate_output(0, shape, &out);
            if (status.ok()) {
                p->output = *out;
                status = ctx->allocate_temp(p->input.dtype(), p->input.shape(), &p->reduced);
            }
            p->dtype = dtype_;
            p->op = op_;
        }
        Launch(ctx, p, status);
    }

private:
    chorus_op_t op_ = CHORUS_SUM;
    chorus_dtype_t dtype_ = CHORUS_FLOAT32;
};

/* -- allgather: every rank's dtype and shape, then the rows -- */

/*
 * Stage 0 gathers each rank's description ("<name>.meta": dtype, then every
 * dimension), so that every rank learns the first dimensions and sees the same
 * mismatch, if any: a different rank count of dimensions fails that exchange
 * itself, and a different dtype or later dimension fails the op on every rank
 * after it. Stage 1 gathers the rows ("<name>.data"), each rank's padded to the
 * most rows of any rank since the engine gathers equal counts; stage 2 drops the
 * padding. Without padding the engine reads the input and writes the output.
 */
struct AllgatherPending : Pending {
    Status Step() override
    {
        switch (stage++) {
        case 0:
            return PostMeta();
        case 1:
            return PostData();
        default:
            Unpad();
            return Status();
        }
    }

    Status PostMeta()
    {
        const int64_t fields = 1 + input.dims();
        TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT64, TensorShape({fields}),
                                              &meta));
        TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_INT64,
                                              TensorShape({bound.size * fields}), &metas));
        auto mine = meta.flat<int64_t>();
        mine(0) = input.dtype();
        for (int d = 0; d < input.dims(); d++) {
            mine(1 + d) = input.dim_size(d);
        }
        chorus_opts_t opts = CHORUS_OPTS_INIT;
        opts.mem_type = CHORUS_MEM_HOST;
        return Posted(chorus_engine_allgather(bound.engine, (key + ".meta").c_str(),
                                              data_of(meta), data_of(metas), fields,
                                              CHORUS_INT64, &opts, &req),
                      "allgather's shape");
    }

    /* Every rank's dtype and later dimensions must equal this rank's. */
    Status CheckMetas()
    {
        const int64_t fields = meta.NumElements();
        auto mine = meta.flat<int64_t>();
        auto all = metas.flat<int64_t>();
        for (int r = 0; r < bound.size; r++) {
            bool same = all(r * fields) == mine(0);
            for (int64_t f = 2; f < fields; f++) {
                same = same && all(r * fields + f) == mine(f);
            }
            if (!same) {
                TensorShape theirs;
                for (int64_t f = 1; f < fields; f++) {
                    theirs.AddDim(all(r * fields + f));
                }
                return invalid_argument(
                    "chorus.tensorflow: ", what, ": ranks gave tensors of different dtypes "
                    "or dimensions after the first (rank ", bound.rank, ": ",
                    tensorflow::DataTypeString(input.dtype()), " ", input.shape().DebugString(),
                    "; rank ", r, ": ",
                    tensorflow::DataTypeString(static_cast<DataType>(all(r * fields))), " ",
                    theirs.DebugString(), ")");
            }
        }
        return Status();
    }

    Status PostData()
    {
        TF_RETURN_IF_ERROR(CheckMetas());
        const int64_t fields = meta.NumElements();
        auto all = metas.flat<int64_t>();
        Tensor *sizes = nullptr;
        TF_RETURN_IF_ERROR(ctx->allocate_output(1, TensorShape({bound.size}), &sizes));
        int64_t total = 0;
        most = 0;
        equal = true;
        for (int r = 0; r < bound.size; r++) {
            int64_t n = all(r * fields + 1);
            sizes->flat<int64_t>()(r) = n;
            counts.push_back(n);
            total += n;
            most = std::max(most, n);
            equal = equal && n == all(1);
        }
        TensorShape shape = input.shape();
        shape.set_dim(0, total);
        Tensor *out = nullptr;
        TF_RETURN_IF_ERROR(ctx->allocate_output(0, shape, &out));
        output = *out;
        row_bytes = row_bytes_of(input);
        if (most * row_bytes == 0) {
            return Status();   /* nothing to move: done without a data stage */
        }
        char *send = data_of(input), *recv = data_of(output);
        if (!equal) {
            TF_RETURN_IF_ERROR(ctx->allocate_temp(tensorflow::DT_UINT8,
                                                  TensorShape({most * row_bytes}), &padded));
            TF_RETURN_IF_ERROR(ctx->allocate_temp(
                tensorflow::DT_UINT8, TensorShape({bound.size * most * row_bytes}), &gathered));
            send = data_of(padded);
            recv = data_of(gathered);
            size_t have = input.TotalBytes();
            if (have > 0) {
                std::memcpy(send, data_of(input), have);
            }
            std::memset(send + have, 0, most * row_bytes - have);
        }
        chorus_opts_t opts = CHORUS_OPTS_INIT;
        opts.mem_type = CHORUS_MEM_HOST;
        return Posted(chorus_engine_allgather(bound.engine, (key + ".data").c_str(), send,
                                              recv, most * row_bytes, CHORUS_UINT8, &opts,
                                              &req),
                      "allgather's data");
    }

    void Unpad()
    {
        if (equal) {
            return;
        }
        char *to = data_of(output);
        const char *from = data_of(gathered);
        for (int r = 0; r < bound.size; r++) {
            size_t bytes = counts[r] * row_bytes;
            if (bytes > 0) {
                std::memcpy(to, from + r * most * row_bytes, bytes);
            }
            to += bytes;
        }
    }

    Tensor meta, metas, output, padded, gathered;
    std::vector<int64_t> counts;
    int64_t most = 0, row_bytes = 0;
    bool equal = true;
};

class AllgatherOp : public ChorusKernel {
public:
    explicit AllgatherOp(OpKernelConstruction *ctx) : ChorusKernel(ctx)
    {
        OP_REQUIRES(ctx, tensor_name_.size() <= 250,
                    invalid_argument("chorus.tensorflow: ", type_string(), " '", name(),
                                     "': an allgather's tensor_name has at most 250 "
                                     "bytes (the engine adds '.meta' and '.data')"));
    }

    void ComputeAsync(OpKernelContext *ctx, DoneCallback done) override
    {
        auto *p = new AllgatherPending();
        Status status = Prepare(ctx, std::move(done), p);
        if (status.ok() && p->input.dims() == 0) {
            status = invalid_argument("chorus.tensorflow: ", p->what,
                                      ": the tensor needs a dimension to concatenate");
        }
        Launch(ctx, p, status);
    }
};

REGISTER_KERNEL_BUILDER(Name("ChorusAllreduce").Device(tensorflow::DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("ChorusAllgather").Device(tensorflow::DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("ChorusBroadcast").Device(tensorflow::DEVICE_CPU), BroadcastOp);
REGISTER_KERNEL_BUILDER(Name("ChorusReducescatter").Device(tensorflow::DEVICE_CPU),
                        ReducescatterOp);

}  // namespace chorus_tf

/* ---- the C entry points that _ops.py calls through ctypes ------------------- */

extern "C" {

/* Serves the ops with engine and comm (the chorus_engine_t and chorus_comm_t of the
 * libchorus this library linked). Returns CHORUS_ERR_INVALID_ARG for a NULL handle. */
__attribute__((visibility("default"))) int chorus_tf_bind(void *engine, void *comm)
{
    if (engine == nullptr || comm == nullptr) {
        return CHORUS_ERR_INVALID_ARG;
    }
    chorus_tf::Binding b;
    b.engine = static_cast<chorus_engine_t>(engine);
    b.comm = static_cast<chorus_comm_t>(comm);
    b.rank = chorus_comm_rank(b.comm);
    b.size = chorus_comm_size(b.comm);
    std::lock_guard<std::mutex> lock(chorus_tf::binding_mutex);
    chorus_tf::binding = b;
    return CHORUS_OK;
}

/* Ops that start from now on fail; returns once those in flight are done (each is
 * bounded by the communicator's timeout), so the engine may be destroyed after. */
__attribute__((visibility("default"))) int chorus_tf_unbind(void)
{
    {
        std::lock_guard<std::mutex> lock(chorus_tf::binding_mutex);
        chorus_tf::binding = chorus_tf::Binding();
    }
    chorus_tf::Completer::Get().Drain();
    return CHORUS_OK;
}

/* The address of a libchorus function as this library resolved it: _ops.py compares it
 * with the one the chorus package loaded, to make sure both are one library. */
__attribute__((visibility("default"))) const void *chorus_tf_libchorus_symbol(void)
{
    return reinterpret_cast<const void *>(&chorus_version_string);
}

}  // extern "C"
