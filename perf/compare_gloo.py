#!/usr/bin/env python3
"""Compare chorus with torch.distributed's gloo backend over TCP loopback.

Runs chorus-perf and a torch gloo worker job in turn (chorus, gloo, chorus, gloo, ...)
on the same machine with the same rank count, for --reps repetitions, and prints per
size the median busbw of each and the median chorus/gloo ratio with its min-max over
the repetitions (run i of chorus paired with run i of gloo).  Both sides check their
results before timing; any wrong element fails the comparison.  See
shared/BENCHMARKS.md for why it is done this way.

Example (from the top of the source tree):
  python3 perf/compare_gloo.py -n 4 -r 5 --sizes 1K,64K,1M,16M,64M --json out.json
"""

import argparse
import datetime
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TORCH_PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "gloo_worker.py")
BUSBW_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
# chorus-perf measures both; torch's calls are in place except allgather's
MATCHED_VARIANT = {"allreduce": "in_place", "broadcast": "in_place",
                   "allgather": "out_of_place"}
DEFAULT_SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M"
WORKER_NO_TORCH = 4


class RunError(Exception):
    """A run that failed or timed out; the comparison goes on without it."""


class WrongResults(Exception):
    """A run whose results were checked wrong; the comparison stops."""


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().rstrip("B").replace("I", "")
    if t and t[-1] in mult:
        return int(t[:-1]) * mult[t[-1]]
    return int(t)


def human(size):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= m and size % m == 0:
            return "%d%s" % (size // m, unit)
    return str(size)


def default_chorus_perf():
    for p in ("install/bin/chorus-perf", "build/perf/chorus-perf"):
        if os.path.exists(p):
            return p
    return "build/perf/chorus-perf"


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="chorus vs torch.distributed gloo over TCP loopback, interleaved.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-n", "--nranks", type=int, default=4, help="ranks on each side")
    p.add_argument("-r", "--reps", type=int, default=5, help="repetitions (pairs of runs)")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help="comma-separated message sizes (K, M, G = powers of 1024)")
    p.add_argument("--with-256m", action="store_true", help="add 256M to the sizes")
    p.add_argument("--colls", default="allreduce",
                   help="comma-separated: allreduce, allgather, broadcast")
    p.add_argument("-i", "--iters", type=int, default=20, help="timed calls per size")
    p.add_argument("-w", "--warmup", type=int, default=5, help="untimed calls before them")
    p.add_argument("--buffers", type=int, default=4,
                   help="rotating buffers per size on the gloo side")
    p.add_argument("--chorus-perf", default=default_chorus_perf(), help="chorus-perf path")
    p.add_argument("--chorus-variant", default="matched",
                   choices=("matched", "in_place", "out_of_place", "best"),
                   help="which chorus-perf figure is compared: matched = the form torch "
                   "uses (in place, allgather out of place)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run at most")
    p.add_argument("--json", help="write every raw figure and the configuration here")
    args = p.parse_args(argv)
    if args.nranks < 2 or args.reps < 1 or args.iters < 1 or args.warmup < 0 \
            or args.buffers < 1 or args.timeout <= 0:
        p.error("need -n >= 2, -r >= 1, -i >= 1, -w >= 0, --buffers >= 1, --timeout > 0")
    try:
        args.size_list = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        p.error("bad --sizes '%s'" % args.sizes)
    if args.with_256m and (256 << 20) not in args.size_list:
        args.size_list.append(256 << 20)
    args.coll_list = [c.strip() for c in args.colls.split(",") if c.strip()]
    for c in args.coll_list:
        if c not in BUSBW_FACTOR:
            p.error("unknown collective '%s' (allreduce, allgather, broadcast)" % c)
    for c in args.coll_list:
        for s in args.size_list:
            if effective_size(c, s, args.nranks) == 0:
                p.error("size %d is too small for %s on %d ranks" % (s, c, args.nranks))
    return args


def effective_size(coll, size, n):
    """The bytes chorus-perf (and the worker) really move for a requested size."""
    count = size // 4
    return (count // n) * n * 4 if coll == "allgather" else count * 4


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc):
    """End a process we started, with everything it started in its session."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def run_procs(cmds, env, timeout, logdir, tag):
    """Start cmds, each in its own session; wait for all within timeout.
    Returns the exit codes; kills every one of them on timeout or interrupt."""
    procs, logs = [], []
    deadline = time.monotonic() + timeout
    try:
        for k, cmd in enumerate(cmds):
            log = os.path.join(logdir, "%s.%d.log" % (tag, k))
            logs.append(log)
            with open(log, "w") as f:
                procs.append(subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL,
                                              start_new_session=True))
        for p in procs:
            left = deadline - time.monotonic()
            try:
                p.wait(timeout=max(left, 0.01))
            except subprocess.TimeoutExpired:
                raise RunError("%s: timed out after %.0f s\n%s"
                               % (tag, timeout, tail(logs[procs.index(p)])))
            # one rank that died leaves the others waiting: do not wait for them long
            if p.returncode not in (0, 3):
                deadline = min(deadline, time.monotonic() + 30)
        return [p.returncode for p in procs], logs
    finally:
        for p in procs:
            kill_group(p)


def chorus_plan(sizes):
    """chorus-perf -b -e -f covering the sizes in one run when they are geometric,
    else one run per size."""
    if len(sizes) == 1:
        return [(sizes[0], sizes[0], 2)]
    f = sizes[1] // sizes[0]
    if f >= 2 and all(b == a * f for a, b in zip(sizes, sizes[1:])):
        return [(sizes[0], sizes[-1], f)]
    return [(s, s, 2) for s in sizes]


def run_chorus(args, coll, rep, logdir):
    rows = {}
    for k, (lo, hi, f) in enumerate(chorus_plan(args.size_list)):
        out = os.path.join(logdir, "chorus.%s.%d.%d.json" % (coll, rep, k))
        cmd = [args.chorus_perf, coll, "-np", str(args.nranks), "-b", str(lo), "-e", str(hi),
               "-f", str(f), "-n", str(args.iters), "-w", str(args.warmup), "-c", "1",
               "--json", out]
        codes, logs = run_procs([cmd], os.environ.copy(), args.timeout, logdir,
                                "chorus.%s.%d.%d" % (coll, rep, k))
        data = None
        if os.path.exists(out):
            with open(out) as fj:
                data = json.load(fj)
        if data is not None and data.get("wrong_total", 0) != 0:
            raise WrongResults("chorus-perf %s: wrong_total %s\n%s"
                               % (coll, data["wrong_total"], tail(logs[0])))
        if codes[0] != 0 or data is None:
            raise RunError("chorus-perf %s exited %d: %s\n%s"
                           % (coll, codes[0], shlex.join(cmd), tail(logs[0])))
        for r in data["results"]:
            rows[r["size"]] = r
    return rows


def chorus_figure(args, coll, row):
    """(variant used, time_us) of a chorus-perf row for the comparison."""
    v = args.chorus_variant
    if v == "matched":
        v = MATCHED_VARIANT[coll]
    if v == "best":
        v = min(("in_place", "out_of_place"), key=lambda k: row[k]["time_us"])
    return v, row[v]["time_us"]


def run_gloo(args, coll, rep, logdir):
    port = free_port()
    out = os.path.join(logdir, "gloo.%s.%d.json" % (coll, rep))
    sizes = ",".join(str(s) for s in args.size_list)
    env = os.environ.copy()
    env.update({"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    cmds = []
    for rank in range(args.nranks):
        cmd = [TORCH_PYTHON, WORKER, "--rank", str(rank), "--world", str(args.nranks),
               "--port", str(port), "--coll", coll, "--sizes", sizes,
               "--iters", str(args.iters), "--warmup", str(args.warmup),
               "--buffers", str(args.buffers), "--timeout", str(args.timeout)]
        cmds.append(cmd + (["--out", out] if rank == 0 else []))
    codes, logs = run_procs(cmds, env, args.timeout, logdir, "gloo.%s.%d" % (coll, rep))
    if WORKER_NO_TORCH in codes:
        raise WrongResults("torch is missing: %s cannot import torch (install Debian's "
                           "python3-torch)\n%s" % (TORCH_PYTHON, tail(logs[0])))
    data = None
    if os.path.exists(out):
        with open(out) as f:
            data = json.load(f)
    if data is not None and data["wrong_total"] != 0:
        raise WrongResults("gloo %s: %d wrong elements\n%s"
                           % (coll, data["wrong_total"], tail(logs[0])))
    bad = [(k, c) for k, c in enumerate(codes) if c != 0]
    if bad or data is None:
        k = bad[0][0] if bad else 0
        raise RunError("gloo %s: rank exit codes %s: %s\n%s"
                       % (coll, codes, shlex.join(cmds[k]), tail(logs[k])))
    return data


def busbw(coll, n, size, time_us):
    return size / (time_us * 1e-6) / 1e9 * BUSBW_FACTOR[coll](n) if time_us > 0 else 0.0


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(args, coll, pairs):
    """Per size: the figures of every complete pair of runs, and their medians."""
    n = args.nranks
    table = []
    for s in args.size_list:
        es = effective_size(coll, s, n)
        cb, gb, ratios, ct, gt = [], [], [], [], []
        for chorus_rows, gloo_data in pairs:
            g = {r["size"]: r for r in gloo_data["results"]}.get(es)
            c = chorus_rows.get(es)
            if g is None or c is None:
                continue
            _, c_us = chorus_figure(args, coll, c)
            cb.append(busbw(coll, n, es, c_us))
            gb.append(busbw(coll, n, es, g["time_us"]))
            ct.append(c_us)
            gt.append(g["time_us"])
            ratios.append(g["time_us"] / c_us if c_us > 0 else float("nan"))
        table.append({"size": es, "pairs": len(ratios), "chorus_busbw_gbs": cb,
                      "gloo_busbw_gbs": gb, "chorus_time_us": ct, "gloo_time_us": gt,
                      "ratio": ratios, "chorus_busbw_median": med(cb),
                      "gloo_busbw_median": med(gb), "ratio_median": med(ratios),
                      "ratio_min": min(ratios) if ratios else float("nan"),
                      "ratio_max": max(ratios) if ratios else float("nan")})
    return table


def print_table(args, coll, table):
    variant = args.chorus_variant if args.chorus_variant != "matched" \
        else "matched: " + MATCHED_VARIANT[coll].replace("_", "-")
    print("\n# %s float32%s, %d ranks, busbw in GB/s (1e9 B/s), chorus figure %s"
          % (coll, " sum" if coll == "allreduce" else "", args.nranks, variant))
    print("# %10s %5s %12s %12s %12s %12s %9s %17s"
          % ("size", "pairs", "chorus_us", "gloo_us", "chorus_busbw", "gloo_busbw",
             "ratio", "[min-max]"))
    for t in table:
        if not t["pairs"]:
            print("  %10s %5d %s" % (human(t["size"]), 0, "no complete pair of runs"))
            continue
        print("  %10s %5d %12.1f %12.1f %12.4g %12.4g %8.2fx %17s"
              % (human(t["size"]), t["pairs"], med(t["chorus_time_us"]),
                 med(t["gloo_time_us"]), t["chorus_busbw_median"], t["gloo_busbw_median"],
                 t["ratio_median"], "[%.2f-%.2f]" % (t["ratio_min"], t["ratio_max"])))
    sys.stdout.flush()


def chorus_info_config(perf_path):
    """The chorus variables in effect, as chorus-info -c prints them, if it is there."""
    d = os.path.dirname(os.path.abspath(perf_path))
    for cand in (os.path.join(d, "chorus-info"), os.path.join(d, "..", "src", "tools",
                                                               "chorus-info")):
        if not os.path.exists(cand):
            continue
        try:
            out = subprocess.run([cand, "-c"], capture_output=True, text=True, timeout=20,
                                 stdin=subprocess.DEVNULL).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        conf = {}
        for line in out.splitlines():
            if line.startswith("CHORUS_") and "=" in line:
                k, v = line.split("=", 1)
                conf[k] = "(set)" if k == "CHORUS_SECRET" and v else v
        return conf
    return None


def configuration(args):
    env = {k: ("(set)" if k == "CHORUS_SECRET" else v)
           for k, v in os.environ.items() if k.startswith("CHORUS_")}
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "command": shlex.join([sys.executable] + sys.argv),
        "cwd": os.getcwd(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "nproc": os.cpu_count(),
        "nproc_usable": len(os.sched_getaffinity(0)),
        "loadavg_start": load,
        "nranks": args.nranks, "reps": args.reps, "iters": args.iters,
        "warmup": args.warmup, "sizes": args.size_list, "collectives": args.coll_list,
        "order": "interleaved per repetition: chorus then gloo",
        "timeout_s": args.timeout,
        "chorus": {"perf": os.path.abspath(args.chorus_perf),
                   "variant_compared": args.chorus_variant,
                   "check": 1,
                   "buffers": "chorus-perf's own: up to 4 rotating send/receive pairs per rank (1 GiB cap)",
                   "env": env,
                   "config_in_effect": chorus_info_config(args.chorus_perf)},
        "gloo": {"python": TORCH_PYTHON, "worker": WORKER,
                 "init_method": "tcp://127.0.0.1:<free port per run>",
                 "GLOO_SOCKET_IFNAME": "lo", "torch_num_threads": 1,
                 "torch_num_interop_threads": 1, "OMP_NUM_THREADS": "1",
                 "buffers_per_size": args.buffers,
                 "check": "one call on known values per size, before timing",
                 "timing": "barrier, then perf_counter around the loop of iters calls; "
                 "max over ranks of the average"},
    }


def print_header(conf):
    print("# command: %s" % conf["command"])
    print("# date %s, host %s, nproc %s, load %s"
          % (conf["date"], conf["hostname"], conf["nproc"],
             " ".join("%.2f" % x for x in conf["loadavg_start"] or [])))
    print("# chorus: %s, CHORUS_* set: %s" % (conf["chorus"]["perf"],
          " ".join("%s=%s" % kv for kv in sorted(conf["chorus"]["env"].items())) or "none"))
    g = conf["gloo"]
    print("# gloo: torch.distributed via %s, GLOO_SOCKET_IFNAME=lo, "
          "torch.set_num_threads(1), set_num_interop_threads(1), OMP_NUM_THREADS=1, "
          "%d rotating buffers per size" % (g["python"], g["buffers_per_size"]))
    print("# %d ranks each, %d reps, %d iters + %d warmup, sizes %s"
          % (conf["nranks"], conf["reps"], conf["iters"], conf["warmup"],
             ",".join(human(s) for s in conf["sizes"])))
    sys.stdout.flush()


def torch_version():
    try:
        r = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, str(e)
    if r.returncode != 0:
        return None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "exit %d" \
            % r.returncode
    return r.stdout.strip(), None


def write_json(path, doc):
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=True)
    os.replace(tmp, path)


def compare(args, doc, logdir):
    """All repetitions of every collective, recorded into doc as they end."""
    for coll in args.coll_list:
        pairs = []
        for rep in range(args.reps):
            run = {"collective": coll, "rep": rep}
            doc["runs"].append(run)
            try:
                run["chorus"] = run_chorus(args, coll, rep, logdir)
                run["gloo"] = run_gloo(args, coll, rep, logdir)
                pairs.append((run["chorus"], run["gloo"]))
                print("# %s rep %d/%d done" % (coll, rep + 1, args.reps), flush=True)
            except RunError as e:
                run["failure"] = str(e)
                doc["failures"].append("%s rep %d: %s" % (coll, rep, e))
                print("# %s rep %d FAILED: %s" % (coll, rep, e), flush=True)
        doc["tables"][coll] = summarize(args, coll, pairs)
        print_table(args, coll, doc["tables"][coll])


def main(argv):
    args = parse_args(argv)
    if not os.access(args.chorus_perf, os.X_OK):
        print("compare_gloo: chorus-perf not found or not executable: %s (build chorus, or "
              "give --chorus-perf PATH)" % args.chorus_perf, file=sys.stderr)
        return 2
    tv, err = torch_version()
    if tv is None:
        print("compare_gloo: torch is missing for %s (%s); the gloo side needs Debian's "
              "python3-torch" % (TORCH_PYTHON, err), file=sys.stderr)
        return 2
    conf = configuration(args)
    conf["gloo"]["torch_version"] = tv
    print_header(conf)
    print("# torch %s" % tv, flush=True)
    status = 0
    doc = {"configuration": conf, "runs": [], "tables": {}, "failures": []}
    with tempfile.TemporaryDirectory(prefix="compare_gloo.") as logdir:
        try:
            compare(args, doc, logdir)
        except WrongResults as e:
            print("compare_gloo: FAILED, wrong results: %s" % e, file=sys.stderr)
            doc["error"] = str(e)
            write_json(args.json, doc)
            return 1
    try:
        conf["loadavg_end"] = os.getloadavg()
    except OSError:
        pass
    write_json(args.json, doc)
    if doc["failures"]:
        print("compare_gloo: %d run(s) failed or timed out; see above" % len(doc["failures"]),
              file=sys.stderr)
        status = 1
    if args.json:
        print("# raw figures and configuration: %s" % args.json)
    return status


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
