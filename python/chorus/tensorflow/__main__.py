"""python -m chorus.tensorflow: builds the op library against this TensorFlow (or finds it in
the cache) and prints its path. Run it once before starting ranks, so that they do not
wait for the build; a failed build raises chorus.tensorflow._build.BuildError with the
compiler's command and output."""

from ._ops import LIBRARY_PATH

print(LIBRARY_PATH)
