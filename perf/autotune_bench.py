#!/usr/bin/env python3
"""P10: the training engine's online autotuner (CHORUS_AUTOTUNE) against an exhaustive grid,
on the network-namespace test bed (tests/netns/testbed.sh, as root).

1. The grid, twice: chorus-train-step --engine-only at every point the autotuner can choose
   (bucket size x cycle time x network streams), one test bed run per point, first at the
   links' rates (--rates), then at the rates they change to (--change-to). A point's figure
   is its median step time (the slowest rank's).
2. The autotuner: one long run from the default settings with CHORUS_AUTOTUNE=1 and its log
   (CHORUS_AUTOTUNE_LOG), the links changed --change-at seconds in (testbed.sh --change).
3. Each sample of the log was measured at a point; a point is "within X%" when its grid step
   time is at most (1 + X) times the grid's best. Before the change: N, the first sample from
   which every sample until the change was at a point within --within of the first grid's
   best, and how far the point the tuner held at the change was from it. After the change:
   the same against the second grid, counted from the change, and in training steps: the
   seconds from the change to that sample over the run's median step time after the change.

The last line is
  autotune: within X% of grid best after N samples; re-tuned within M steps
and the exit code is 0 when both were reached (N and M at most --budget), 1 when not, 2 on a
usage error, 3 when a run failed. Everything measured is written to --out (CSV per grid, the
log, the run's JSON, and, where matplotlib is, the plot by perf/autotune_plot.py).

usage: autotune_bench.py [options]   (see --help; root, from the source tree)
"""

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
TESTBED = os.path.join(TOP, "tests", "netns", "testbed.sh")

# The autotuner's grid (src/engine/engine_tune.c); a log point outside it is an error here.
BUCKETS_MIB = [1, 2, 4, 8, 16, 32, 64]
CYCLES_MS = [0.5, 1, 2, 4, 8]


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="autotune_bench.py", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train-step", default=os.path.join(TOP, "install", "bin",
                                                        "chorus-train-step"),
                   help="chorus-train-step to run (default: install/bin/chorus-train-step)")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--ranks-per-node", type=int, default=2)
    p.add_argument("--rates", default="600mbit,200mbit",
                   help="eth0,eth1 rates at the start (testbed.sh --rates)")
    p.add_argument("--change-to", default="100mbit,200mbit",
                   help="eth0,eth1 rates after the change")
    p.add_argument("--change-at", type=int, default=40,
                   help="seconds into the autotuner's run at which the links change")
    p.add_argument("--streams", type=int, default=2,
                   help="CHORUS_TCP_STREAMS: streams opened per peer, the most the "
                        "autotuner uses (default 2: one per link)")
    p.add_argument("--model", default="200:64K", help="chorus-train-step --uniform N:BYTES")
    p.add_argument("--compute-ms", type=float, default=50)
    p.add_argument("--grid-steps", type=int, default=6, help="timed steps per grid point")
    p.add_argument("--window-ms", type=float, default=500,
                   help="CHORUS_AUTOTUNE_WINDOW_MS: a sample is the whole steps that end "
                        "after at least this (default 500, the engine's)")
    p.add_argument("--tune-seconds", type=float, default=0,
                   help="length of the autotuner's run at the grids' best step times "
                        "(default: 2.5 x --change-at)")
    p.add_argument("--within", type=float, default=0.05)
    p.add_argument("--budget", type=int, default=20,
                   help="samples before the change, steps after it, the target allows")
    p.add_argument("--out", default="autotune-bench", help="folder for what is measured")
    p.add_argument("--grids-from", metavar="DIR",
                   help="take both grids from an earlier run's DIR (its grid-before.csv and "
                        "grid-after.csv, measured at the same rates, model and streams) and "
                        "run the autotuner alone")
    a = p.parse_args(argv)
    if not os.access(a.train_step, os.X_OK):
        p.error("--train-step %s is not an executable" % a.train_step)
    if not 1 <= a.streams <= 8 or a.change_at < 5 or a.grid_steps < 3:
        p.error("--streams 1..8, --change-at >= 5, --grid-steps >= 3")
    if a.tune_seconds and a.tune_seconds <= a.change_at:
        p.error("--tune-seconds must be longer than --change-at")
    return a


def testbed(a, rates, env, args, timeout, change=None):
    """One test bed run of chorus-train-step --engine-only; rank 0's output."""
    cmd = ["bash", TESTBED, "--nodes", str(a.nodes), "--ranks-per-node",
           str(a.ranks_per_node), "--rates", rates, "--quiet", "--timeout", str(int(timeout))]
    if change is not None:
        cmd += ["--change", change]
    cmd += ["--", "/usr/bin/env"] + ["%s=%s" % kv for kv in sorted(env.items())]
    cmd += [a.train_step, "--engine-only", "--uniform", a.model, "--compute-ms",
            str(a.compute_ms)] + args
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout + 60)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:])
        raise RuntimeError("test bed run failed (exit %d): %s" % (r.returncode, " ".join(cmd)))
    return r.stdout


def grid(a, rates, path):
    """{(bucket_mib, cycle_ms, streams): median step ms} over the whole grid, into path."""
    points = [(b, c, s) for s in range(1, a.streams + 1) for b in BUCKETS_MIB for c in CYCLES_MS]
    result = {}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bucket_mib", "cycle_ms", "streams", "median_step_ms"])
        for i, (b, c, s) in enumerate(points):
            js = os.path.join(a.out, "grid-point.json")
            # A grid point is fixed: the autotuner, on by default, would tune the streams.
            testbed(a, rates, {"CHORUS_TCP_STREAMS": str(s), "CHORUS_AUTOTUNE": "0"},
                    ["--bucket-bytes", "%dM" % b, "--cycle-ms", "%g" % c,
                     "--steps", str(a.grid_steps), "--warmup", "2", "--json", js], 120)
            with open(js) as jf:
                ms = json.load(jf)["modes"][0]["median_ms"]
            result[(b, c, s)] = ms
            w.writerow([b, c, s, "%.3f" % ms])
            f.flush()
            print("autotune_bench: grid at %s: point %d/%d: %d MiB, %g ms, %d streams: "
                  "%.2f ms" % (rates, i + 1, len(points), b, c, s, ms), flush=True)
    return result


def read_grid(a, path):
    """A grid written by grid(); it must hold every point of this run's grid."""
    with open(path, newline="") as f:
        result = {(int(r["bucket_mib"]), float(r["cycle_ms"]), int(r["streams"])):
                  float(r["median_step_ms"]) for r in csv.DictReader(f)}
    want = {(b, c, s) for s in range(1, a.streams + 1) for b in BUCKETS_MIB for c in CYCLES_MS}
    if set(result) != want:
        raise ValueError("%s is not a grid of %d streams" % (path, a.streams))
    return result


def read_log(path):
    with open(path, newline="") as f:
        return [{"t": float(r["seconds"]),
                 "point": (int(r["bucket_bytes"]) >> 20, float(r["cycle_ms"]),
                           int(r["streams"])),
                 "rate": float(r["rate"]), "phase": r["phase"]} for r in csv.DictReader(f)]


def settle(samples, grid_ms, within):
    """(n, gap): n, 1-based, the first sample from which every sample is at a point within
    `within` of the grid's best (None if the last is not); gap, the last sample's point's
    distance from the best, as a fraction."""
    best = min(grid_ms.values())
    ok = [grid_ms[s["point"]] <= best * (1 + within) for s in samples]
    n = None
    for i in range(len(ok) - 1, -1, -1):
        if not ok[i]:
            break
        n = i + 1
    gap = grid_ms[samples[-1]["point"]] / best - 1 if samples else math.inf
    return n, gap


def best_line(grid_ms):
    (b, c, s), ms = min(grid_ms.items(), key=lambda kv: kv[1])
    return "%d MiB, %g ms, %d streams: %.2f ms" % (b, c, s, ms)


def main(argv):
    a = parse_args(argv)
    if os.geteuid() != 0:
        print("autotune_bench: the test bed needs root", file=sys.stderr)
        return 2
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    try:
        if a.grids_from:
            before = read_grid(a, os.path.join(a.grids_from, "grid-before.csv"))
            after = read_grid(a, os.path.join(a.grids_from, "grid-after.csv"))
        else:
            before = grid(a, a.rates, os.path.join(a.out, "grid-before.csv"))
            after = grid(a, a.change_to, os.path.join(a.out, "grid-after.csv"))
        # The run: about `seconds` long if every step took the best grid point's time, before
        # the change and after it (the steps end the run, not a clock).
        seconds = a.tune_seconds or 2.5 * a.change_at
        steps = int(a.change_at * 1000 / min(before.values()) +
                    (seconds - a.change_at) * 1000 / min(after.values())) + 1
        log = os.path.join(a.out, "autotune-log.csv")
        if os.path.exists(log):
            os.remove(log)
        run_json = os.path.join(a.out, "autotune-run.json")
        testbed(a, a.rates, {"CHORUS_TCP_STREAMS": str(a.streams), "CHORUS_AUTOTUNE": "1",
                             "CHORUS_AUTOTUNE_WINDOW_MS": "%g" % a.window_ms,
                             "CHORUS_AUTOTUNE_LOG": log},
                ["--steps", str(steps), "--warmup", "0", "--json", run_json],
                4 * seconds + 60, change="%d:%s" % (a.change_at, a.change_to))
    except (RuntimeError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
        print("autotune_bench: %s" % e, file=sys.stderr)
        return 3
    samples = read_log(log)
    for s in samples:
        if s["point"] not in before:
            print("autotune_bench: the log has a point outside the grid: %s" % (s["point"],),
                  file=sys.stderr)
            return 3
    # The log's clock starts at the engine's creation, a moment after the ranks start, when
    # the test bed's clock for --change starts: a sample is before the change if it ended
    # before it in the log's clock, which shifts the change by that moment at most.
    pre = [s for s in samples if s["t"] <= a.change_at]
    post = [s for s in samples if s["t"] > a.change_at]
    with open(run_json) as f:
        step_ms = json.load(f)["modes"][0]["step_ms"]
    late = step_ms[len(step_ms) // 2:]
    step_after = statistics.median(late) if late else math.inf
    n, gap = settle(pre, before, a.within)
    m, gap_after = settle(post, after, a.within)
    m_steps = None
    if m is not None:
        since = (post[m - 2]["t"] if m >= 2 else a.change_at) - a.change_at
        m_steps = max(1, math.ceil(since * 1000 / step_after))
    print("autotune_bench: grid best at %s: %s" % (a.rates, best_line(before)))
    print("autotune_bench: grid best at %s: %s" % (a.change_to, best_line(after)))
    print("autotune_bench: %d samples before the change at %d s, %d after; %.0f s in all"
          % (len(pre), a.change_at, len(post), time.time() - t0))
    print("autotune_bench: before: within %.0f%% from sample %s on, held a point %.1f%% "
          "from the best" % (a.within * 100, n, gap * 100))
    print("autotune_bench: after: within %.0f%% from sample %s after the change on (%s steps "
          "of %.1f ms), held a point %.1f%% from the best" % (a.within * 100, m, m_steps,
                                                              step_after, gap_after * 100))
    plot = os.path.join(a.out, "autotune.png")
    r = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "autotune_plot.py"), log, plot,
                        str(a.change_at)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    print("autotune_bench: plot: %s" % (plot if r.returncode == 0 else
                                        "not drawn (%s)" % r.stdout.strip()))
    print("autotune: within %.1f%% of grid best after %s samples; re-tuned within %s steps"
          % (gap * 100, n if n is not None else "no", m_steps if m_steps is not None else "no"))
    met = n is not None and n <= a.budget and m_steps is not None and m_steps <= a.budget
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
