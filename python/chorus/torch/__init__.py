"""chorus for PyTorch.

Importing this module registers the torch.distributed backend "chorus" (CPU tensors):

    import chorus.torch
    torch.distributed.init_process_group("chorus")
"""

from .backend import ChorusBackend, register
from ._tensors import Unsupported

register()

__all__ = ["ChorusBackend", "Unsupported"]
