"""The compressors of the Horovod-style APIs: one set for chorus.torch and chorus.tensorflow.

Horovod gives each framework a Compression of its own; here both take these classes.
"""


class Compressor:
    """How an allreduce's values cross the network.

    wire is the compression chorus applies to float32 tensors reduced by Sum or Average
    ("fp16" or "bf16"; None: none): values travel as float16 or bfloat16 with a scale the
    ranks agree on and are added in float32 at every hop (chorus_allreduce(3), "Wire
    compression"). Other dtypes and ops travel as they are.

    A subclass that overrides compress() and decompress() is run in Python instead, as
    Horovod runs its compressors: compress(tensor) -> (tensor to reduce, context) before,
    decompress(reduced, context) -> result after.
    """

    wire = None

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    """No compression."""


class FP16Compressor(Compressor):
    """float32 values cross the network as float16, added in float32."""

    wire = "fp16"


class BF16Compressor(Compressor):
    """float32 values cross the network as bfloat16, added in float32."""

    wire = "bf16"


class Compression:
    """The compressors, by Horovod's names: Compression.none, .fp16, .bf16."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


def wire_compression(compression):
    """(wire, None) for a wire compressor, wire None for none; (None, compressor) for one
    run in Python."""
    if compression is None:
        return None, None
    if getattr(compression, "compress", None) is Compressor.compress:
        return getattr(compression, "wire", None), None
    return None, compression
