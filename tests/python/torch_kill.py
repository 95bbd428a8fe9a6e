"""A rank of a "chorus" process group dies (SIGKILL) while the others wait for a collective
it never joins: every other rank's wait() raises, within the group's timeout, instead of
hanging or returning as if the call had succeeded.

Run without torchrun (whose agent would stop the other ranks itself): this script starts
the ranks, with torch's variables and a free port, and checks what each one reports.

usage: torch_kill.py [NRANKS]
"""

import os
import signal
import sys
import time

from kill_job import free_port, run_job

TIMEOUT_S = 20      # the group's timeout
DEADLINE_S = 60     # the whole run, ranks started to ranks done


def rank_main():
    from datetime import timedelta
    import torch
    import torch.distributed as dist
    import chorus.torch  # noqa: F401

    dist.init_process_group("chorus", timeout=timedelta(seconds=TIMEOUT_S))
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1000)
    dist.all_reduce(t)
    assert float(t[0]) == size
    dist.barrier()
    if rank == size - 1:
        time.sleep(0.5)  # the others have posted their call by now: it fails in its wait
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    try:
        work.wait()
    except Exception as e:  # the survivors must come here
        print("RAISED from wait after %.1f s: %s"
              % (time.monotonic() - start, str(e).splitlines()[0]), flush=True)
        os._exit(0)  # the group is broken: leave without a collective shutdown
    print("NO ERROR from wait after the peer died", flush=True)
    os._exit(1)


def driver(n):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(n), TORCH_KILL_RANK="1")
    return run_job(__file__, n, env, lambda r: {"RANK": str(r), "LOCAL_RANK": str(r)},
                   "RAISED", DEADLINE_S)


if __name__ == "__main__":
    if os.environ.get("TORCH_KILL_RANK"):
        rank_main()
    sys.exit(1 if driver(int(sys.argv[1]) if len(sys.argv) > 1 else 3) else 0)
