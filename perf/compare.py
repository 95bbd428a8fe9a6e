#!/usr/bin/env python3
"""Compare chorus with the collective libraries installed here, on this machine.

Runs the same sweep of sizes with chorus (chorus-perf -np N) and with each peer that is
available: Open MPI and MPICH (perf/mpi_bench.c, built now with each one's own mpicc and
started with its own mpirun) and torch.distributed's gloo backend (perf/gloo_worker.py);
ompi-pmpi and mpich-pmpi, when named, run the same MPI benchmark with chorus's MPI interposer
in LD_PRELOAD, and get a column of their busbw over the native MPI's.
Runs are interleaved (chorus, ompi, mpich, gloo, then ompi, mpich, gloo, chorus, ...: the
order rotates every repetition) for --reps repetitions, each repetition also measuring the
physical bound of one core first (perf/membw.c: memcpy and non-temporal copy bandwidth). Every library checks its results exactly before the figures
count; any wrong element stops the comparison with an error. A peer that is missing is
reported as not available and skipped.

Collectives: allreduce, allgather, reduce_scatter, broadcast and alltoall, float32 (sum
for the reductions). Sizes are whole buffers as in chorus-perf: for allgather and
reduce_scatter each rank contributes size / n, for alltoall size is each rank's send
buffer, size / n to every peer (busbw factor (n-1)/n, as nccl-tests). "-d all" is the four
collectives of the P1 figure; alltoall (P13) runs when named, e.g. "-d all,alltoall".

--baseline-perf PATH runs a second chorus build, "chorus-base" in tables and JSON, as one
more side of the interleaved runs, so that a new build is compared with an older one in
the same run; its column of ratios is new/base. Each chorus-perf of an installed tree
(PREFIX/bin) runs with its own PREFIX/lib first on LD_LIBRARY_PATH.

Prints per collective the median busbw of each library per size and the chorus/peer ratio
(median and min-max over repetitions, run i of chorus paired with run i of the peer);
--json writes every raw figure and each library's configuration, --plot a PNG of busbw
against size. See shared/BENCHMARKS.md for why it is done this way.

Examples (from the top of the source tree, after ./quickstart build):
  python3 perf/compare.py -n 4 -r 5 -d allreduce --json cmp.json --plot cmp.png
  python3 perf/compare.py -n 4 -r 5 -d alltoall --sizes 1K,64K,1M,16M --peers ompi
  python3 perf/compare.py -n 4 -r 5 -d all --peers none \\
      --baseline-perf /opt/chorus-0.1/bin/chorus-perf
"""

import argparse
import datetime
import json
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import peers  # noqa: E402
from peers import RunError, WrongResults
from units import parse_size  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SIZES = "8,64,512,1K,4K,16K,64K,256K,1M,4M,16M,64M,256M"
MEM = "chorus-mem"  # the same chorus-perf with its buffers from chorus_mem_alloc
PEER_ORDER = (MEM, "ompi", "ompi-pmpi", "mpich", "mpich-pmpi", "gloo")
DEFAULT_PEERS = (MEM, "ompi", "mpich", "gloo")
# Pairs (X, Y) shown as X/Y busbw: each interposed MPI over the native one, and chorus
# with chorus_mem_alloc buffers over each MPI.
INTERPOSED = (("ompi-pmpi", "ompi"), ("mpich-pmpi", "mpich"), (MEM, "ompi"), (MEM, "mpich"))
BASE = "chorus-base"  # the --baseline-perf build
CHORUS_LIKE = ("chorus", BASE, MEM)  # report both in_place and out_of_place figures
PEER_CLASSES = {MEM: lambda args: peers.Chorus(args, MEM, mem="chorus"),
                "ompi": peers.OpenMpi, "ompi-pmpi": peers.OpenMpiInterposed,
                "mpich": peers.Mpich, "mpich-pmpi": peers.MpichInterposed, "gloo": peers.Gloo}


def human(size):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= m and size % m == 0:
            return "%d%s" % (size // m, unit)
    return "%dB" % size


def parse_env_pairs(p, items, opt):
    env = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            p.error("%s wants VAR=VALUE, got '%s'" % (opt, item))
        env[k] = v
    return env


def build_parser():
    p = argparse.ArgumentParser(
        description="chorus vs Open MPI, MPICH and torch gloo on this machine, interleaved.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("-n", "--nranks", type=int, default=4, help="ranks of every library")
    p.add_argument("-r", "--reps", type=int, default=5, help="repetitions of every run")
    p.add_argument("-d", "--colls", default="all",
                   help="comma-separated: allreduce, allgather, reduce_scatter, broadcast, "
                   "alltoall; all = the first four (P1's figure), so alltoall runs only "
                   "when named, e.g. all,alltoall")
    p.add_argument("--sizes", default=DEFAULT_SIZES,
                   help="comma-separated whole-buffer sizes (K, M, G = powers of 1024)")
    p.add_argument("-i", "--iters", type=int, default=20, help="timed calls per size")
    p.add_argument("-w", "--warmup", type=int, default=10, help="untimed calls before them")
    p.add_argument("--large-from", default="32M",
                   help="sizes from here on run --large-iters and --large-warmup calls")
    p.add_argument("--large-iters", type=int, default=5)
    p.add_argument("--large-warmup", type=int, default=2)
    p.add_argument("--buffers", type=int, default=4,
                   help="rotating buffers per size on the peers' side (chorus-perf: its own 4)")
    p.add_argument("--build-dir", default=os.path.join(os.path.dirname(HERE), "build"),
                   help="chorus build directory (its perf/chorus-perf is used)")
    p.add_argument("--chorus-perf", help="chorus-perf path (default: BUILD_DIR/perf/chorus-perf)")
    p.add_argument("--baseline-perf", metavar="PATH",
                   help="a second chorus build's chorus-perf, run as '%s' beside chorus in "
                   "the same interleaved runs; ratios new/base (an installed tree's "
                   "PREFIX/lib is put first on its LD_LIBRARY_PATH)" % BASE)
    p.add_argument("--baseline-env", dest="baseline_env_items", action="append",
                   metavar="VAR=VALUE",
                   help="set for the baseline's runs only, over the --env values it "
                   "shares with chorus (repeatable)")
    p.add_argument("--peers", default=",".join(DEFAULT_PEERS),
                   help="comma-separated peers to run (%s) or none; X-pmpi is MPI X "
                   "running the same benchmark with chorus's interposer preloaded, and "
                   "gets a column X-pmpi/X beside X; %s is chorus-perf --mem chorus "
                   "(buffers from chorus_mem_alloc), with columns %s/X beside each MPI"
                   % (", ".join(PEER_ORDER), MEM, MEM))
    p.add_argument("--env", dest="chorus_env_items", action="append", metavar="VAR=VALUE",
                   help="set for chorus runs only, e.g. CHORUS_TUNE=... (repeatable)")
    p.add_argument("--ompi-env", dest="ompi_env_items", action="append", metavar="VAR=VALUE")
    p.add_argument("--mpich-env", dest="mpich_env_items", action="append", metavar="VAR=VALUE")
    p.add_argument("--ompi-args", help="mpirun.openmpi options replacing the default "
                   "'--mca pml ob1 --mca btl self,vader' (kept: --oversubscribe, "
                   "--allow-run-as-root as root, -n)")
    p.add_argument("--mpich-args", help="extra mpirun.mpich options")
    p.add_argument("--chorus-variant", default="matched",
                   choices=("matched", "in_place", "out_of_place", "best"),
                   help="chorus-perf figure compared: matched = the form the peer calls "
                   "(in place, MPI's alltoall too; out of place for torch's allgather, "
                   "reduce_scatter and alltoall; with the baseline, the same figure of "
                   "both builds: in place for matched)")
    p.add_argument("--no-membw", action="store_true", help="skip the memcpy/NT bound")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per run at most")
    p.add_argument("--json", help="write every raw figure and the configuration here")
    p.add_argument("--plot", help="write a PNG of busbw against size here")
    p.add_argument("--logdir", help="keep the runs' logs here (default: a temporary "
                   "directory, removed at the end)")
    return p


def parse_args(argv):
    p = build_parser()
    a = p.parse_args(argv)
    if a.nranks < 2 or a.reps < 1 or a.iters < 1 or a.warmup < 0 or a.large_iters < 1 \
            or a.large_warmup < 0 or not 1 <= a.buffers <= 16 or a.timeout <= 0:
        p.error("need -n >= 2, -r >= 1, -i >= 1, -w >= 0, --large-iters >= 1, "
                "--large-warmup >= 0, 1 <= --buffers <= 16, --timeout > 0")
    try:
        a.size_list = sorted({parse_size(s) for s in a.sizes.split(",") if s.strip()})
        a.large_from_bytes = parse_size(a.large_from)
    except ValueError:
        p.error("bad --sizes '%s' or --large-from '%s'" % (a.sizes, a.large_from))
    if not a.size_list or a.size_list[0] < 4 or a.size_list[-1] > 1 << 30:
        p.error("sizes must be between 4 B and 1 GiB")
    colls = []
    for c in (c.strip() for c in a.colls.split(",") if c.strip()):
        colls += list(peers.ALL_COLLECTIVES) if c == "all" else [c]
    a.coll_list = list(dict.fromkeys(colls))
    for c in a.coll_list:
        if c not in peers.COLLECTIVES:
            p.error("unknown collective '%s' (%s, or all)" % (c, ", ".join(peers.COLLECTIVES)))
    a.peer_list = [] if a.peers.strip() == "none" else \
        [x.strip() for x in a.peers.split(",") if x.strip()]
    for x in a.peer_list:
        if x not in PEER_CLASSES:
            p.error("unknown peer '%s' (%s, or none)" % (x, ", ".join(PEER_ORDER)))
    a.chorus_perf = a.chorus_perf or os.path.join(a.build_dir, "perf", "chorus-perf")
    a.chorus_env = parse_env_pairs(p, a.chorus_env_items, "--env")
    a.baseline_env = dict(a.chorus_env, **parse_env_pairs(p, a.baseline_env_items,
                                                          "--baseline-env"))
    if a.baseline_env_items and not a.baseline_perf:
        p.error("--baseline-env needs --baseline-perf")
    a.ompi_env = parse_env_pairs(p, a.ompi_env_items, "--ompi-env")
    a.mpich_env = parse_env_pairs(p, a.mpich_env_items, "--mpich-env")
    a.ompi_args = shlex.split(a.ompi_args) if a.ompi_args is not None else None
    a.mpich_args = shlex.split(a.mpich_args) if a.mpich_args else []
    return a


def size_plan(args, coll):
    """[(requested size, iters, warmup)] of the sizes that hold at least one element per
    rank, one per distinct effective size; and the sizes skipped."""
    plan, seen, skipped = [], set(), []
    for s in args.size_list:
        es = peers.effective_size(coll, s, args.nranks)
        if es == 0:
            skipped.append(s)
            continue
        if es in seen:
            continue
        seen.add(es)
        large = s >= args.large_from_bytes
        plan.append((s, args.large_iters if large else args.iters,
                     args.large_warmup if large else args.warmup))
    return plan, skipped


# ---- the physical bound ------------------------------------------------------------------


class MemBw:
    """perf/membw.c, built now with the system cc."""

    def __init__(self):
        self.exe, self.config, self.results = None, {}, []

    def probe(self, tmpdir):
        cc = next((c for c in ("cc", "gcc", "clang") if peers.shutil.which(c)), None)
        if cc is None:
            return "no C compiler (cc, gcc, clang) found"
        self.exe = os.path.join(tmpdir, "membw")
        cmd = [cc, "-O2", "-std=c11", "-o", self.exe, os.path.join(HERE, "membw.c")]
        why = peers.build(cmd)
        if why is not None:
            return why
        self.config = {"build": shlex.join(cmd), "command": self.exe}
        return None

    def run(self, timeout):
        try:
            r = subprocess.run([self.exe], capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)
            data = json.loads(r.stdout) if r.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError):
            data = None
        if data is not None:
            self.results.append(data)
        return data

    def summary(self):
        if not self.results:
            return None
        out = {}
        for key in ("memcpy", "nt_copy"):
            xs = [d[key]["median_gbs"] for d in self.results]
            out[key] = {"method": self.results[0][key]["method"], "median_gbs": med(xs),
                        "min_gbs": min(xs), "max_gbs": max(xs), "runs": len(xs)}
        return out


# ---- summary -----------------------------------------------------------------------------


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(rs):
    """Paired ratios: each, their median, min and max (NaN when there are none)."""
    return {"per_rep": rs, "median": med(rs), "min": min(rs) if rs else float("nan"),
            "max": max(rs) if rs else float("nan")}


def chorus_variant(peer_name, coll, choice="matched"):
    """chorus-perf's figure compared with the peer's: by default the one that matches the
    calls the peer makes (MPI: in place; torch: as it calls each collective). The baseline
    build is a chorus-perf too: the same figure of both, in place for matched."""
    if choice != "matched":
        return choice
    return peers.GLOO_MATCHED_VARIANT[coll] if peer_name == "gloo" else "in_place"


def chorus_time(t, variant):
    return min(t["in_place"], t["out_of_place"]) if variant == "best" else t[variant]


def side_time(lib, t, variant):
    """A run's time for the ratio: a chorus-perf's figure of that variant, a peer's one."""
    return chorus_time(t, variant) if lib in CHORUS_LIKE else t


def summarize(args, coll, plan, runs, libs):
    """Per effective size: each library's figures per repetition (None where the run
    failed), and the chorus/peer ratios of the repetitions both completed."""
    n, table = args.nranks, []
    for s, _, _ in plan:
        es = peers.effective_size(coll, s, n)
        row = {"size": es, "requested": s, "busbw": {}, "time_us": {}, "ratio": {}}
        for lib in libs:
            times = []
            for rep in range(args.reps):
                r = runs.get((lib, rep), {}).get(es)
                if r is None:
                    times.append(None)
                elif lib in CHORUS_LIKE:
                    times.append({v: r[v]["time_us"] for v in ("in_place", "out_of_place")})
                else:
                    times.append(r["time_us"])
            row["time_us"][lib] = times
        for lib in libs:
            ts = [t["in_place"] if lib in CHORUS_LIKE and t else t
                  for t in row["time_us"][lib]]
            row["busbw"][lib] = [peers.busbw(coll, n, es, t) if t else None for t in ts]
        for lib in libs[1:]:
            v, rs = chorus_variant(lib, coll, args.chorus_variant), []
            for c, p in zip(row["time_us"]["chorus"], row["time_us"][lib]):
                if c and p and chorus_time(c, v) > 0:
                    rs.append(side_time(lib, p, v) / chorus_time(c, v))
            row["ratio"][lib] = dict(spread(rs), chorus_variant=v)
        for lib, native in INTERPOSED:
            if lib in libs and native in libs:
                v = chorus_variant(native, coll, args.chorus_variant)
                rs = [side_time(native, n, v) / side_time(lib, i, v)
                      for i, n in zip(row["time_us"][lib], row["time_us"][native]) if i and n]
                row["ratio"][lib + "/" + native] = spread(rs)
        row["busbw_median"] = {lib: med([b for b in row["busbw"][lib] if b is not None])
                               for lib in libs}
        table.append(row)
    return table


def print_table(args, coll, table, libs, notes, bound):
    print("\n# %s float32%s, %d ranks, busbw in GB/s (1e9 B/s), median of %d reps; "
          "ratio = chorus/peer busbw, median [min-max] over paired reps"
          % (coll, "" if coll in ("allgather", "broadcast", "alltoall") else " sum",
             args.nranks, args.reps))
    width = {lib: max(9, len(lib)) for lib in libs}
    pairs = [lib + "/" + native for lib, native in INTERPOSED if lib in libs and native in libs]
    head = "# %8s" % "size" + "".join(" %*s" % (width[lib], lib) for lib in libs) + \
        "".join(" %23s" % ("vs " + lib) for lib in libs[1:]) + \
        "".join(" %23s" % pair for pair in pairs)
    print(head)
    for row in table:
        line = "  %8s" % human(row["size"])
        for lib in libs:
            b = row["busbw_median"][lib]
            line += " %*s" % (width[lib], "-" if b != b else "%.4g" % b)
        for key in libs[1:] + pairs:
            r = row["ratio"][key]
            line += " %23s" % ("-" if not r["per_rep"] else "%6.2fx [%.2f-%.2f]"
                                % (r["median"], r["min"], r["max"]))
        print(line)
    how = []
    if "ompi" in libs or "mpich" in libs:
        how.append("%s with MPI" % chorus_variant("ompi", coll, args.chorus_variant)
                   .replace("_", " "))
    if "gloo" in libs:
        how.append("%s with gloo%s" % (chorus_variant("gloo", coll, args.chorus_variant)
                                       .replace("_", " "), ", as torch calls it"
                                       if args.chorus_variant == "matched" else ""))
    if BASE in libs:
        how.append("%s with the baseline build (new/base)"
                   % chorus_variant(BASE, coll, args.chorus_variant).replace("_", " "))
    print("# %s: in-place figure; chorus compared %s"
          % ("chorus-like columns" if BASE in libs or MEM in libs else "chorus column",
             "; ".join(how) or "with no peer"))
    if bound:
        print("# physical bound, one core, same run: memcpy %.2f GB/s [%.2f-%.2f], "
              "NT copy %.2f GB/s [%.2f-%.2f] (%s)"
              % (bound["memcpy"]["median_gbs"], bound["memcpy"]["min_gbs"],
                 bound["memcpy"]["max_gbs"], bound["nt_copy"]["median_gbs"],
                 bound["nt_copy"]["min_gbs"], bound["nt_copy"]["max_gbs"],
                 bound["nt_copy"]["method"]))
    if any("-pmpi/" in pair for pair in pairs):
        print("# X-pmpi/X: busbw of MPI X with chorus's interposer over X alone, the same "
              "benchmark in the same interleaved runs")
    if MEM in libs:
        print("# %s: chorus-perf --mem chorus, its buffers from chorus_mem_alloc; "
              "%s/X: its busbw over MPI X's" % (MEM, MEM))
    for note in notes:
        print("# %s" % note)
    sys.stdout.flush()


# ---- the comparison ------------------------------------------------------------------------


def configuration(args):
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "command": shlex.join([sys.executable] + sys.argv),
        "cwd": os.getcwd(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(), "nproc": os.cpu_count(),
        "nproc_usable": len(os.sched_getaffinity(0)), "loadavg_start": load,
        "nranks": args.nranks, "reps": args.reps, "iters": args.iters,
        "warmup": args.warmup, "large_from": args.large_from_bytes,
        "large_iters": args.large_iters, "large_warmup": args.large_warmup,
        "sizes": args.size_list, "collectives": args.coll_list,
        "order": "per collective and repetition: membw, then chorus, the baseline chorus "
                 "(--baseline-perf) and each peer in turn, the list rotated by one each "
                 "repetition",
        "timeout_s": args.timeout, "type": "float32", "op": "sum", "libraries": {},
    }


def probe_all(args, tmpdir, conf):
    """The libraries that can run, chorus first; prints and records the others."""
    libs = {"chorus": peers.Chorus(args)}
    if args.baseline_perf:
        libs[BASE] = peers.Chorus(args, BASE, args.baseline_perf, args.baseline_env)
    for name in PEER_ORDER:
        if name in args.peer_list:
            libs[name] = PEER_CLASSES[name](args)
    usable = {}
    for name, lib in libs.items():
        why = lib.probe(tmpdir)
        if why is None:
            usable[name] = lib
            conf["libraries"][name] = lib.config
            print("# %s: %s" % (name, describe(name, lib.config)), flush=True)
        else:
            conf["libraries"][name] = {"available": False, "reason": why}
            print("# %s: not available (%s)" % (name, why), flush=True)
    return usable


def describe(name, c):
    if name in CHORUS_LIKE:
        return "%s%s, CHORUS_* set: %s" % (
            c["perf"], ", libchorus %s" % c["libchorus"] if c.get("libchorus") else "",
            " ".join("%s=%s" % kv for kv in sorted(c["env"].items())) or "none")
    if name == "gloo":
        return "torch %s via %s, %s, 1 thread" % (c["version"], c["python"], c["transport"])
    return "%s; %s; %s" % (c["version"], c["command"], c["transport"])


def run_one(lib, plan, coll, rep, logdir, doc, runs):
    rec = {"collective": coll, "rep": rep, "library": lib.name}
    doc["runs"].append(rec)
    try:
        rec["results"] = lib.run(plan, coll, rep, logdir)
        runs[(lib.name, rep)] = rec["results"]
    except RunError as e:
        rec["failure"] = str(e)
        if lib.supports(coll) is None:
            doc["failures"].append("%s %s rep %d: %s" % (lib.name, coll, rep, e))
            print("# %s %s rep %d FAILED: %s" % (lib.name, coll, rep, e), flush=True)


def compare_coll(args, coll, libs, membw, doc, logdir):
    plan, skipped = size_plan(args, coll)
    runs, notes = {}, []
    why = libs["chorus"].supports(coll)
    if why is not None:  # nothing to compare with
        note = "chorus: not available for %s (%s)" % (coll, why)
        print("\n# %s skipped: %s" % (coll, note), flush=True)
        doc["tables"][coll] = {"libraries": [], "rows": [], "notes": [note]}
        return
    if skipped:
        notes.append("sizes below one float per rank skipped: %s"
                     % ",".join(human(s) for s in skipped))
    for rep in range(args.reps):
        # Each repetition starts with another library, so that no library always runs
        # right after the bound's memory sweep or right after the same neighbour.
        order = list(libs.values())
        order = order[rep % len(order):] + order[:rep % len(order)]
        if membw is not None:
            membw.run(min(args.timeout, 120))
        for lib in order:
            if lib.supports(coll) is None:
                run_one(lib, plan, coll, rep, logdir, doc, runs)
        print("# %s rep %d/%d done" % (coll, rep + 1, args.reps), flush=True)
    names = [n for n in libs if libs[n].supports(coll) is None]
    for n in libs:
        if n not in names:
            notes.append("%s: not available for %s (%s)" % (n, coll, libs[n].supports(coll)))
    table = summarize(args, coll, plan, runs, names)
    doc["tables"][coll] = {"libraries": names, "rows": table, "notes": notes}
    bound = membw.summary() if membw is not None else None
    print_table(args, coll, table, names, notes, bound)


def write_json(path, doc):
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, allow_nan=True)
    os.replace(tmp, path)


def make_plot(args, doc, tmpdir):
    """The PNG, drawn by compare_plot.py in this Python or in Debian's (which has
    python3-matplotlib); a missing matplotlib is said and skipped."""
    if not args.plot:
        return
    src = os.path.join(tmpdir, "plot.json")
    write_json(src, doc)
    script = os.path.join(HERE, "compare_plot.py")
    for py in dict.fromkeys((sys.executable, peers.SYSTEM_PYTHON)):
        try:
            r = subprocess.run([py, script, src, args.plot], capture_output=True, text=True,
                               timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            print("# plot with %s failed: %s" % (py, e))
            continue
        if r.returncode == 0:
            print("# plot: %s" % args.plot)
            return
        why = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        if r.returncode != 4:  # 4: no matplotlib in that Python, try the next
            print("# plot with %s failed: %s" % (py, why))
            return
    print("# plot skipped: matplotlib is not installed (apt-get install python3-matplotlib)")


def run_all(args, doc, tmpdir, logdir):
    libs = probe_all(args, tmpdir, doc["configuration"])
    for name in CHORUS_LIKE:  # asked for by path: missing is an error, not a skipped peer
        if name in doc["configuration"]["libraries"] and name not in libs:
            raise SystemExit("compare: %s: %s"
                             % (name, doc["configuration"]["libraries"][name]["reason"]))
    membw = None
    if not args.no_membw:
        membw = MemBw()
        why = membw.probe(tmpdir)
        doc["configuration"]["membw"] = membw.config or {"available": False, "reason": why}
        if why is not None:
            print("# membw: not available (%s)" % why)
            membw = None
    print("# %d ranks each, %d reps, %d iters + %d warmup (%d + %d from %s), sizes %s"
          % (args.nranks, args.reps, args.iters, args.warmup, args.large_iters,
             args.large_warmup, human(args.large_from_bytes),
             ",".join(human(s) for s in args.size_list)), flush=True)
    try:
        for coll in args.coll_list:
            compare_coll(args, coll, libs, membw, doc, logdir)
    finally:
        if membw is not None:
            doc["membw"] = {"runs": membw.results, "summary": membw.summary()}


def main(argv):
    args = parse_args(argv)
    conf = configuration(args)
    doc = {"configuration": conf, "runs": [], "tables": {}, "failures": [], "membw": None}
    print("# command: %s" % conf["command"])
    print("# date %s, host %s, nproc %s, load %s" % (conf["date"], conf["hostname"],
          conf["nproc"], " ".join("%.2f" % x for x in conf["loadavg_start"] or [])))
    with tempfile.TemporaryDirectory(prefix="chorus-compare.") as tmpdir:
        logdir = args.logdir or tmpdir
        os.makedirs(logdir, exist_ok=True)
        try:
            run_all(args, doc, tmpdir, logdir)
        except WrongResults as e:
            print("compare: FAILED, wrong results: %s" % e, file=sys.stderr)
            doc["error"] = str(e)
            write_json(args.json, doc)
            return 1
        try:
            conf["loadavg_end"] = os.getloadavg()
        except OSError:
            pass
        write_json(args.json, doc)
        make_plot(args, doc, tmpdir)
    if args.json:
        print("# raw figures and configuration: %s" % args.json)
    if doc["failures"]:
        print("compare: %d run(s) failed or timed out; see above" % len(doc["failures"]),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
