"""chorus: collective communication for distributed training.

chorus.comm wraps libchorus's communicators, requests and training engine;
chorus.torch is the torch.distributed backend. The library is found as
chorus._lib describes (CHORUS_LIB first).
"""

from ._lib import ChorusError, LibraryNotFound, library, library_path

__version__ = "0.1.0"


def version():
    """The version of the libchorus this package loaded."""
    return library().chorus_version_string().decode()


__all__ = ["ChorusError", "LibraryNotFound", "library", "library_path", "version"]
