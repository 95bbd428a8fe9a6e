#!/usr/bin/env python3
"""chorus across emulated nodes: the default choice beside a second side, and the link.

Runs tests/netns/testbed.sh (root) for every repetition, interleaved: the default (no
variable set), then the second side chosen by --against, then again:

  --against flat     (the default) the flat algorithm forced through CHORUS_TUNE (ring, or
                     the pipelined chain for broadcast): on several nodes of several ranks
                     the default is the hierarchical algorithms (P7)
  --against shm-off  CHORUS_SHM=0: the node-local stages over TCP instead of shared memory
                     (P5, unshaped links by default)

Every run checks its results before timing (chorus-perf -c 1); a wrong element fails the
script. On shaped links (--rate), perf/link_rate.py measures before and after the runs what
one TCP stream gets through the link, the physical bound of the figures; unshaped links
(--rate none, the default with --against shm-off) have no such bound and skip it.

Prints, per collective, the median time of each side, the median ratio other/default of
the times (= default/other of busbw) with min-max over the paired repetitions, and busbw as
a fraction of the nominal and of the measured link rate. With --against shm-off it also
prints what chorus-info --tune predicts each side runs at that size (on a fixed model, so a
prediction, not a record).

Examples (from the top of the source tree, as root, after ./quickstart build):
  python3 perf/compare_nodes.py --build build --nodes 2 --ranks-per-node 2 --rate 500mbit \\
      --colls allreduce,allgather,broadcast --size 64M -r 5 --json nodes.json
  python3 perf/compare_nodes.py --against shm-off --chorus-perf install/bin/chorus-perf \\
      --nodes 2 --ranks-per-node 4 --colls allreduce,allgather,reduce_scatter --size 64M -r 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
from peers import install_lib_dir  # noqa: E402
import units  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "..", "tests", "netns", "testbed.sh")
FLAT = {"allreduce": "ring", "allgather": "ring", "reduce_scatter": "ring",
        "broadcast": "chain"}
BUSBW_FACTOR = {"allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0,
                "reduce": lambda n: 1.0, "alltoall": lambda n: (n - 1) / n}
# the second side: its name in tables, its key in the JSON, the variable it sets
AGAINST = {"flat": ("flat", "flat", "CHORUS_TUNE"),
           "shm-off": ("shm-off", "shm_off", "CHORUS_SHM")}


def other_env(a, coll):
    """The second side's variables for coll."""
    if a.against == "flat":
        return {"CHORUS_TUNE": f"{coll}={FLAT[coll]}"}
    return {"CHORUS_SHM": "0"}


def testbed(a, cmd, env_extra, ranks_per_node, nodes):
    argv = [TESTBED, "--nodes", str(nodes), "--ranks-per-node", ranks_per_node,
            "--timeout", "600", "--quiet"]
    if a.rate:
        argv += ["--rate", a.rate]
    if a.build:
        argv += ["--build", a.build]
    if a.cyclic:
        argv.append("--cyclic")
    env = dict(os.environ, **env_extra)
    r = subprocess.run(argv + ["--"] + cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"compare_nodes: {' '.join(argv + cmd)} failed ({r.returncode}):\n"
                 f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def link_rate(a):
    out = testbed(a, [sys.executable, os.path.join(HERE, "link_rate.py"), str(a.bytes)], {},
                  "1", 2)
    for line in out.splitlines():
        if line.startswith("link_rate_bytes_per_s "):
            return float(line.split()[1])
    sys.exit("compare_nodes: link_rate.py printed no rate")


def perf_once(a, coll, env_side, label):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = [a.perf_cmd, coll, "-b", str(a.bytes), "-e", str(a.bytes), "-n", str(a.iters),
               "-w", "1", "-c", "1", "--json", f.name]
        testbed(a, cmd, dict(a.lib_env, **a.env, **env_side), a.ranks_per_node, a.nodes)
        data = json.load(open(f.name))
    if data["wrong_total"] != 0:
        sys.exit(f"compare_nodes: {coll} {label}: {data['wrong_total']} wrong")
    row = data["results"][0]
    return data["nranks"], row["out_of_place"]["time_us"], row["in_place"]["time_us"]


def chorus_info(a):
    """chorus-info beside the chorus-perf used, or in the build tree; None if neither."""
    for d in ([os.path.dirname(a.chorus_perf)] if a.chorus_perf else []) + \
            ([os.path.join(a.build, "perf"), os.path.join(a.build, "src", "tools")]
             if a.build else []):
        cand = os.path.join(d, "chorus-info")
        if os.access(cand, os.X_OK):
            return cand
    return None


def parse_size(text):
    try:
        return units.parse_size(text)
    except ValueError:
        sys.exit(f"compare_nodes: '{text}' is not a size (bytes, with K, M or G)")


def rate_bytes(text):
    try:
        return units.rate_bytes(text)
    except ValueError:
        sys.exit(f"compare_nodes: rate '{text}' is not N[kmg]bit or none")


def tune_size(text):
    return float("inf") if text == "inf" else parse_size(text)


def predicted(a, coll, env_side):
    """The algorithm chorus-info --tune predicts for coll at a.bytes on this layout
    (consecutive ranks per node), with the side's variables; None when it cannot say."""
    info = chorus_info(a)
    if info is None:
        return None
    counts = a.ranks_per_node.split(",")
    counts = counts * a.nodes if len(counts) == 1 else counts
    try:
        r = subprocess.run([info, "--tune", "--nodes", ",".join(counts)], capture_output=True,
                           text=True, timeout=30, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, **a.lib_env, **a.env, **env_side))
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines() if r.returncode == 0 else []:
        f = line.split()
        if len(f) >= 4 and f[0] == coll and f[1].startswith("[") and f[2].endswith(")"):
            try:
                lo, hi = tune_size(f[1][1:-1]), tune_size(f[2][:-1])
            except ValueError:
                continue
            if lo <= a.bytes < hi:
                return f[3]
    return None


def summarize(a, coll, runs, rate_nominal, rate_measured):
    name, key, _ = AGAINST[a.against]
    nranks = runs[0][0]
    out = {"collective": coll, "against": a.against}
    if a.against == "flat":
        out["flat"] = FLAT[coll]
    out["pairs"] = []
    for kind, k in (("out_of_place", 1), ("in_place", 2)):
        dflt = [r[k] for r in runs[0::2]]
        other = [r[k] for r in runs[1::2]]
        ratios = [o / d for d, o in zip(dflt, other)]
        factor = BUSBW_FACTOR[coll](nranks)
        busbw = a.bytes / (statistics.median(dflt) * 1e-6) * factor
        busbw_other = a.bytes / (statistics.median(other) * 1e-6) * factor
        out[kind] = {"default_us": dflt, f"{key}_us": other,
                     "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                     "ratio_max": max(ratios), "busbw": busbw, f"busbw_{key}": busbw_other}
        line = (f"{coll:>14} {kind:>12} {statistics.median(dflt):>12.0f} "
                f"{statistics.median(other):>12.0f} {statistics.median(ratios):>7.2f}x "
                f"[{min(ratios):.2f}-{max(ratios):.2f}] {busbw / 1e6:>8.1f}")
        if a.against != "flat":
            line += f" {busbw_other / 1e6:>8.1f}"
        if rate_nominal:
            line += f" {busbw / rate_nominal:>6.3f} {busbw / rate_measured:>6.3f}"
        print(line)
    return out


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                epilog="\n".join(__doc__.split("\n")[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", choices=sorted(AGAINST), default="flat",
                   help="the second side: flat = the flat algorithm forced through "
                   "CHORUS_TUNE (default); shm-off = CHORUS_SHM=0, the node-local stages "
                   "over TCP")
    p.add_argument("--build", default="build",
                   help="chorus build directory, whose perf/chorus-perf runs (default build)")
    p.add_argument("--chorus-perf", metavar="PATH",
                   help="run this chorus-perf instead of the build's (an installed tree's "
                   "PREFIX/lib goes first on LD_LIBRARY_PATH)")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--ranks-per-node", default="2")
    p.add_argument("--rate", default=None,
                   help="tbf rate of every link, N[kmg]bit, or none for unshaped links "
                   "(no link-rate bound then); default 500mbit with --against flat, none "
                   "with --against shm-off")
    p.add_argument("--cyclic", action="store_true", help="deal ranks round robin over nodes")
    p.add_argument("--colls", default="allreduce,allgather,broadcast")
    p.add_argument("--size", default="64M")
    p.add_argument("-r", "--reps", type=int, default=5)
    p.add_argument("-n", "--iters", type=int, default=3)
    p.add_argument("--env", dest="env_items", action="append", metavar="VAR=VALUE",
                   help="set on both sides, e.g. CHORUS_TUNE=allreduce=hier with "
                   "--against shm-off (repeatable; not the variable --against sets)")
    p.add_argument("--json")
    a = p.parse_args()
    a.bytes = parse_size(a.size)
    if a.rate is None:
        a.rate = "500mbit" if a.against == "flat" else "none"
    a.rate = None if a.rate.lower() in ("", "none") else a.rate
    a.env, a.lib_env = {}, {}
    for item in a.env_items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            p.error(f"--env wants VAR=VALUE, got '{item}'")
        if k == AGAINST[a.against][2]:
            p.error(f"--env {k}: --against {a.against} sets it on one side")
        a.env[k] = v
    a.coll_list = [c for c in a.colls.split(",") if c]
    known = FLAT if a.against == "flat" else BUSBW_FACTOR
    for c in a.coll_list:
        if c not in known:
            p.error(f"--colls: '{c}' is not one of {', '.join(known)} "
                    f"(with --against {a.against})")
    if a.chorus_perf:
        a.chorus_perf = os.path.abspath(a.chorus_perf)
        if not os.access(a.chorus_perf, os.X_OK):
            p.error(f"--chorus-perf {a.chorus_perf} is not executable")
        lib = install_lib_dir(a.chorus_perf)
        if lib is not None and "LD_LIBRARY_PATH" not in a.env:
            outer = os.environ.get("LD_LIBRARY_PATH")
            a.lib_env["LD_LIBRARY_PATH"] = lib + (":" + outer if outer else "")
        a.perf_cmd = a.chorus_perf
        a.build = None
    else:
        a.perf_cmd = "chorus-perf"
    return a


def main():
    a = parse_args()
    name, key, _ = AGAINST[a.against]
    nominal = rate_bytes(a.rate) if a.rate else None
    rates = [link_rate(a)] if a.rate else []
    results = []
    print(f"# {a.nodes} nodes, ranks per node {a.ranks_per_node}"
          f"{' dealt round robin' if a.cyclic else ''}, "
          f"{f'links at {a.rate}' if a.rate else 'links unshaped'}, {a.size}, "
          f"{a.reps} interleaved pairs, {a.iters} timed calls each")
    if a.against != "flat":
        both = " ".join(f"{k}={v}" for k, v in a.env.items())
        print(f"# default beside CHORUS_SHM=0 (node-local stages over TCP); "
              f"{a.chorus_perf or 'chorus-perf of ' + a.build}"
              f"{', set on both: ' + both if both else ''}")
    runs = {c: [] for c in a.coll_list}
    for _ in range(a.reps):
        for coll in runs:
            runs[coll].append(perf_once(a, coll, {}, "default"))
            runs[coll].append(perf_once(a, coll, other_env(a, coll), name))
    if a.rate:
        rates.append(link_rate(a))
        measured = statistics.mean(rates)
        print(f"# one TCP stream through the link: {rates[0] / 1e6:.1f} and "
              f"{rates[1] / 1e6:.1f} MB/s (nominal {nominal / 1e6:.1f} MB/s)")
    else:
        measured = None
    pred = {c: {"default": predicted(a, c, {}), name: predicted(a, c, other_env(a, c))}
            for c in runs}
    if a.against != "flat":
        for c, p in pred.items():
            print(f"# chorus-info --tune predicts for {c} at {a.size}: default "
                  f"{p['default'] or '?'}, {name} {p[name] or '?'}")
    if a.against == "flat":
        print(f"# {'collective':>12} {'call':>12} {'default_us':>12} {'flat_us':>12} "
              f"{'flat/default':>8} [min-max] busbw_MB/s{' /nominal /stream' if a.rate else ''}")
    else:
        print(f"# {'collective':>12} {'call':>12} {'default_us':>12} {name + '_us':>12} "
              f"{name + '/default':>8} [min-max] busbw_MB/s {name + '_MB/s'}"
              f"{' /nominal /stream' if a.rate else ''}")
        print(f"# ratio: {name} time / default time = default busbw / {name} busbw")
    for coll, r in runs.items():
        results.append(summarize(a, coll, r, nominal, measured))
        results[-1]["predicted"] = pred[coll]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nodes": a.nodes, "ranks_per_node": a.ranks_per_node, "rate": a.rate,
                       "cyclic": a.cyclic, "bytes": a.bytes, "link_rate_measured": rates,
                       "against": a.against, "env": a.env, "lib_env": a.lib_env,
                       "chorus_perf": a.chorus_perf or os.path.join(a.build, "perf",
                                                                    "chorus-perf"),
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
