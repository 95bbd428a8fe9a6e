"""torch's launch variables for jobs that chorus-run, mpirun or srun started.

torch.distributed's default rendezvous (env://) reads RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT, which torchrun sets and other launchers do not. Where they are missing in a
job of several ranks that chorus can form from what the launcher gave (CHORUS_*, PMIx, or
the MPI and Slurm rank variables), the ranks meet once through chorus: rank 0 picks a free port for torch's
store (and keeps it bound until it exits, so that no other process is given it) and broadcasts "host:port", and every rank sets torch's variables from it. Then
dist.init_process_group("chorus") works with no other change.
"""

import contextlib
import ctypes
import os
import socket

from ..comm import Comm, UINT8

# The job's size as launchers other than torchrun give it (chorus_comm_create_from_env reads
# their rank variables). Slurm's count only inside a step that srun started: a batch script
# has SLURM_NTASKS too, and a single process there must not wait for ranks that never come.
_LAUNCHER_SIZE_VARS = ("CHORUS_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_SLURM_BATCH_STEP = "4294967294"
_ADDR_BYTES = 256


def _launcher_size():
    for var in _LAUNCHER_SIZE_VARS:
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    step = os.environ.get("SLURM_STEP_ID", "")
    if step.isdigit() and step != _SLURM_BATCH_STEP and os.environ.get("SLURM_NTASKS",
                                                                         "").isdigit():
        return int(os.environ["SLURM_NTASKS"])
    return 0


def _store_host():
    if os.environ.get("CHORUS_IFADDR"):
        return os.environ["CHORUS_IFADDR"]
    addr = os.environ.get("CHORUS_ADDR", "")
    if ":" in addr:
        return addr.rsplit(":", 1)[0].strip("[]")
    return socket.gethostbyname(socket.gethostname())


# Rank 0's hold on the port it picked for torch's store (_hold_port), for the process's life.
_held = []


def _hold_port(host):
    """A free port of host, kept bound (SO_REUSEADDR, not listening) while this process runs:
    released at once, it could be given to another process's connection before torch's
    store binds it. The store binds beside it, as chorus-run's rendezvous port does."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    _held.append(s)
    return s.getsockname()[1]


# The variables set_torch_env() set, with the values it gave them.
_applied = {}


@contextlib.contextmanager
def without_torch_env():
    """While it lasts, the variables set_torch_env() set are absent, so that chorus reads
    the launcher's own (chorus_comm_create_from_env prefers torch's to PMIx's)."""
    saved = {k: os.environ.pop(k) for k, v in _applied.items() if os.environ.get(k) == v}
    try:
        yield
    finally:
        os.environ.update(saved)


def needed():
    """Whether torch's variables are missing in a job of several ranks chorus can form."""
    return "RANK" not in os.environ and _launcher_size() > 1


def set_torch_env():
    """Sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    from a job chorus can form, collectively; a no-op where RANK is already set."""
    if not needed():
        return
    comm = Comm.from_env()
    try:
        buf = ctypes.create_string_buffer(_ADDR_BYTES)
        if comm.rank == 0:
            host = _store_host()
            buf.value = ("%s:%d" % (host, _hold_port(host))).encode()
        addr = ctypes.addressof(buf)
        comm.ibroadcast(addr, addr, _ADDR_BYTES, UINT8, 0, keep=(buf,)).wait()
        host, port = buf.value.decode().rsplit(":", 1)
        _applied.update(RANK=str(comm.rank), WORLD_SIZE=str(comm.size),
                        LOCAL_RANK=str(comm.local_rank()),
                        LOCAL_WORLD_SIZE=str(comm.local_size()),
                        MASTER_ADDR=host.strip("[]"), MASTER_PORT=port)
        os.environ.update(_applied)
    finally:
        comm.destroy()
