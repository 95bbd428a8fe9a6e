#!/usr/bin/env python3
"""Compare chorus with torch.distributed's gloo backend over TCP loopback.

A thin wrapper kept for the commands written before perf/compare.py existed: it runs
compare.py with gloo as the only peer, chorus on its TCP transport (CHORUS_SHM=0),
without the memcpy bound, and with the same iteration counts at every size. compare.py holds the whole method (interleaved runs,
results checked before the figures count, median ratio with min-max over paired runs).

Example (from the top of the source tree):
  python3 perf/compare_gloo.py -n 4 -r 5 --sizes 1K,64K,1M,16M,64M --json out.json
"""

import argparse
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import compare  # noqa: E402

DEFAULT_SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M"


def default_chorus_perf():
    for p in ("install/bin/chorus-perf", "build/perf/chorus-perf"):
        if os.path.exists(p):
            return p
    return "build/perf/chorus-perf"


def main(argv):
    p = argparse.ArgumentParser(
        description="chorus vs torch.distributed gloo over TCP loopback, interleaved "
        "(perf/compare.py --peers gloo).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-n", "--nranks", default="4")
    p.add_argument("-r", "--reps", default="5")
    p.add_argument("--sizes", default=DEFAULT_SIZES)
    p.add_argument("--colls", default="allreduce")
    p.add_argument("-i", "--iters", default="20")
    p.add_argument("-w", "--warmup", default="5")
    p.add_argument("--buffers", default="4")
    p.add_argument("--chorus-perf", default=default_chorus_perf())
    p.add_argument("--chorus-variant", default="matched",
                   choices=("matched", "in_place", "out_of_place", "best"))
    p.add_argument("--timeout", default="600")
    p.add_argument("--json")
    p.add_argument("--plot")
    a = p.parse_args(argv)
    # Both sides over TCP: chorus would otherwise take shared memory between local ranks.
    args = ["--peers", "gloo", "--no-membw", "--env", "CHORUS_SHM=0", "-n", a.nranks, "-r", a.reps,
            "--sizes", a.sizes, "-d", a.colls, "-i", a.iters, "-w", a.warmup,
            "--large-from", "2G", "--buffers", a.buffers, "--chorus-perf", a.chorus_perf,
            "--chorus-variant", a.chorus_variant, "--timeout", a.timeout]
    args += ["--json", a.json] if a.json else []
    args += ["--plot", a.plot] if a.plot else []
    return compare.main(args)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
