"""chorus for PyTorch.

Importing this module registers the torch.distributed backend "chorus" (CPU tensors):

    import chorus.torch
    torch.distributed.init_process_group("chorus")

Under chorus-run, mpirun or srun, which do not set torch's RANK and MASTER_* variables,
the import sets them, collectively (chorus.torch.launch).
"""

from . import launch
from .backend import ChorusBackend, register
from ._tensors import Unsupported

register()
launch.set_torch_env()

__all__ = ["ChorusBackend", "Unsupported"]
