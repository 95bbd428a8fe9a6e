"""chorus for PyTorch.

Importing this module registers the torch.distributed backend "chorus" (CPU tensors):

    import chorus.torch
    torch.distributed.init_process_group("chorus")

It is also Horovod's API (chorus.torch.horovod): `import chorus.torch as hvd`.

Under chorus-run, mpirun or srun, which do not set torch's RANK and MASTER_* variables,
the import sets them, collectively (chorus.torch.launch).
"""

from . import launch
from .backend import ChorusBackend, register
from ._tensors import Unsupported
from .horovod import *  # noqa: F401,F403  (Horovod's API: import chorus.torch as hvd)

register()
launch.set_torch_env()

__all__ = ["ChorusBackend", "Unsupported"]
