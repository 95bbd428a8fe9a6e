"""A rank dies (SIGKILL) after a few good steps of chorus.tensorflow's ops: every other
rank's next op raises (tf.errors.UnavailableError), eagerly and inside tf.function, within
the communicator's timeout, instead of hanging or returning as if it had succeeded.

This script is the driver: it starts the ranks itself (with torch's variables and a free
port, which Comm.from_env() reads, and CHORUS_TIMEOUT=5), since a launcher would stop the
other ranks itself when one dies, and checks what each one reports. Exits 0 when every
survivor raised in time and the killed rank died by SIGKILL.

usage: tf_kill.py [NRANKS]
"""

import os
import signal
import sys
import time

from kill_job import free_port, run_job

TIMEOUT_S = 5       # the communicator's timeout (CHORUS_TIMEOUT)
RAISE_BY_S = 30     # a survivor's failing op must raise within this
DEADLINE_S = 180    # the whole run, ranks started to ranks done (TensorFlow starts slowly)


def rank_main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    from chorus import comm as C
    from chorus.tensorflow import _ops

    comm = C.Comm.from_env()
    engine = C.Engine(comm)
    _ops.bind(engine, comm)
    rank, size = comm.rank, comm.size

    @tf.function
    def step(x):
        return _ops.allreduce(x, name="step.sum"), _ops.allgather(x[:rank + 1], name="step.rows")

    x = tf.ones([1000])
    for _ in range(3):   # good steps, eagerly and in a function
        total, rows = step(x)
        assert float(total[0]) == size and rows.shape[0] == size * (size + 1) // 2
        assert float(_ops.allreduce(x, name="eager.sum")[0]) == size
    if rank == size - 1:
        time.sleep(0.5)  # the others have submitted their next op by now: it fails waiting
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        if rank % 2:
            step(x)
        else:
            _ops.allreduce(x, name="eager.sum")
    except tf.errors.OpError as e:  # the survivors must come here
        took = time.monotonic() - start
        print("RAISED %s from %s after %.1f s: %s"
              % (type(e).__name__, "a tf.function" if rank % 2 else "an eager op", took,
                 e.message.replace("\n", " | ")[:1500]), flush=True)
        os._exit(0 if took < RAISE_BY_S else 2)  # the engine is broken: no collective exit
    print("NO ERROR from the op after the peer died", flush=True)
    os._exit(1)


def driver(n):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(n), CHORUS_TIMEOUT=str(TIMEOUT_S), TF_KILL_RANK="1")
    for var in ("CHORUS_RANK", "CHORUS_SIZE", "CHORUS_ADDR"):
        env.pop(var, None)
    return run_job(__file__, n, env, lambda r: {"RANK": str(r), "LOCAL_RANK": str(r)},
                   "RAISED UnavailableError", DEADLINE_S)


if __name__ == "__main__":
    if os.environ.get("TF_KILL_RANK"):
        rank_main()
    sys.exit(1 if driver(int(sys.argv[1]) if len(sys.argv) > 1 else 3) else 0)
