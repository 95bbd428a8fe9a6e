"""A rank dies (SIGKILL) in the middle of gluon training on chorus.mxnet: every other
rank's next step() raises chorus.ChorusError within the communicator's timeout
(CHORUS_TIMEOUT=5) instead of hanging or going on as if the reduction had succeeded.

Run without chorus-run (which would stop the other ranks itself when one dies): this
script starts the ranks, with chorus's variables and a free port, once with
DistributedTrainer and once with gluon.Trainer(kvstore="chorus"), and checks what each
rank reports. Prints one "ok"/"FAIL" line per rank and run; exits 1 on any failure.

usage: mx_kill.py [NRANKS]
"""

import os
import secrets
import signal
import sys
import time

from kill_job import free_port, run_job

TIMEOUT_S = 5       # the communicator's timeout (CHORUS_TIMEOUT)
RAISE_BY_S = 15     # a survivor's step must raise within this
DEADLINE_S = 90     # the whole run, ranks started to ranks done
KILL_AFTER = 3      # steps before the last rank kills itself


def rank_main(mode):
    import mxnet as mx
    from mxnet import autograd, gluon
    import chorus.mxnet as hvd

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    mx.random.seed(1)
    net = gluon.nn.Dense(4, in_units=16)
    net.initialize(ctx=mx.cpu())
    if mode == "trainer":
        trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                         {"learning_rate": 0.1})
    else:
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                kvstore="chorus")
    x = mx.nd.ones((8, 16)) * (rank + 1)
    for step in range(KILL_AFTER + 1):
        with autograd.record():
            loss = (net(x) ** 2).sum()
        loss.backward()
        if step == KILL_AFTER and rank == size - 1:
            time.sleep(0.5)  # the others are in their step by now: it fails in its wait
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            trainer.step(8)
        except hvd.ChorusError as e:
            took = time.monotonic() - start
            print("RAISED at step %d after %.1f s: %s" % (step, took,
                                                         str(e).splitlines()[0]), flush=True)
            # The job is broken: leave without a collective shutdown.
            os._exit(0 if step == KILL_AFTER and took <= RAISE_BY_S else 3)
        mx.nd.waitall()
    print("NO ERROR from step %d after the peer died" % KILL_AFTER, flush=True)
    os._exit(1)


def run_mode(n, mode):
    """Starts n ranks of mode; returns how many did not behave."""
    env = dict(os.environ, CHORUS_ADDR="127.0.0.1:%d" % free_port(),
               CHORUS_SECRET=secrets.token_hex(32), CHORUS_SIZE=str(n),
               CHORUS_LOCAL_SIZE=str(n), CHORUS_TIMEOUT=str(TIMEOUT_S),
               OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1", MX_KILL_MODE=mode)
    return run_job(__file__, n, env,
                   lambda r: {"CHORUS_RANK": str(r), "CHORUS_LOCAL_RANK": str(r)},
                   "RAISED", DEADLINE_S, label=mode)


if __name__ == "__main__":
    if os.environ.get("MX_KILL_MODE"):
        rank_main(os.environ["MX_KILL_MODE"])
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    failures = sum(run_mode(n, mode) for mode in ("trainer", "kvstore"))
    sys.exit(1 if failures else 0)
