#!/usr/bin/env python3
"""chorus across emulated nodes: the default choice beside the flat algorithm, and the link.

Runs tests/netns/testbed.sh (root) for every repetition, interleaved: the default selection
(no CHORUS_TUNE: on several nodes of several ranks the hierarchical algorithms), then the
flat algorithm forced (ring, or the pipelined chain for broadcast), then again. Every run
checks its results before timing (chorus-perf -c 1); a wrong element fails the script.
Before and after the runs, perf/link_rate.py measures what one TCP stream gets through the
shaped link, the physical bound of the figures.

Prints, per collective, the median time of each side, the median ratio flat/default with
min-max over the paired repetitions, and busbw as a fraction of the nominal and of the
measured link rate.

Example (from the top of the source tree, as root, after ./quickstart build):
  python3 perf/compare_nodes.py --build build --nodes 2 --ranks-per-node 2 --rate 500mbit \\
      --colls allreduce,allgather,broadcast --size 64M -r 5 --json nodes.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TESTBED = os.path.join(HERE, "..", "tests", "netns", "testbed.sh")
FLAT = {"allreduce": "ring", "allgather": "ring", "reduce_scatter": "ring",
        "broadcast": "chain"}
BUSBW_FACTOR = {"allreduce": lambda n: 2.0 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
                "reduce_scatter": lambda n: (n - 1) / n, "broadcast": lambda n: 1.0}


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def rate_bytes(text):
    units = {"kbit": 125, "mbit": 125000, "gbit": 125000000}
    for u, f in units.items():
        if text.endswith(u):
            return int(text[:-len(u)]) * f
    sys.exit(f"compare_nodes: rate '{text}' is not N[kmg]bit")


def testbed(a, cmd, env_extra, ranks_per_node, nodes):
    argv = [TESTBED, "--nodes", str(nodes), "--ranks-per-node", ranks_per_node,
            "--rate", a.rate, "--timeout", "600", "--quiet", "--build", a.build]
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


def perf_once(a, coll, tune):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        cmd = ["chorus-perf", coll, "-b", str(a.bytes), "-e", str(a.bytes), "-n", str(a.iters),
               "-w", "1", "-c", "1", "--json", f.name]
        testbed(a, cmd, {"CHORUS_TUNE": tune} if tune else {}, a.ranks_per_node, a.nodes)
        data = json.load(open(f.name))
    if data["wrong_total"] != 0:
        sys.exit(f"compare_nodes: {coll} {tune or 'default'}: {data['wrong_total']} wrong")
    row = data["results"][0]
    return data["nranks"], row["out_of_place"]["time_us"], row["in_place"]["time_us"]


def summarize(a, coll, runs, rate_nominal, rate_measured):
    nranks = runs[0][0]
    out = {"collective": coll, "flat": FLAT[coll], "pairs": []}
    for kind, k in (("out_of_place", 1), ("in_place", 2)):
        dflt = [r[k] for r in runs[0::2]]
        flat = [r[k] for r in runs[1::2]]
        ratios = [f / d for d, f in zip(dflt, flat)]
        busbw = a.bytes / (statistics.median(dflt) * 1e-6) * BUSBW_FACTOR[coll](nranks)
        out[kind] = {"default_us": dflt, "flat_us": flat, "ratio_median": statistics.median(ratios),
                     "ratio_min": min(ratios), "ratio_max": max(ratios), "busbw": busbw}
        print(f"{coll:>14} {kind:>12} {statistics.median(dflt):>12.0f} "
              f"{statistics.median(flat):>12.0f} {statistics.median(ratios):>7.2f}x "
              f"[{min(ratios):.2f}-{max(ratios):.2f}] {busbw / 1e6:>8.1f} "
              f"{busbw / rate_nominal:>6.3f} {busbw / rate_measured:>6.3f}")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--ranks-per-node", default="2")
    p.add_argument("--rate", default="500mbit")
    p.add_argument("--cyclic", action="store_true", help="deal ranks round robin over nodes")
    p.add_argument("--colls", default="allreduce,allgather,broadcast")
    p.add_argument("--size", default="64M")
    p.add_argument("-r", "--reps", type=int, default=5)
    p.add_argument("-n", "--iters", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args()
    a.bytes = parse_size(a.size)
    nominal = rate_bytes(a.rate)
    rates = [link_rate(a)]
    results = []
    print(f"# {a.nodes} nodes, ranks per node {a.ranks_per_node}"
          f"{' dealt round robin' if a.cyclic else ''}, links at {a.rate}, {a.size}, "
          f"{a.reps} interleaved pairs, {a.iters} timed calls each")
    runs = {c: [] for c in a.colls.split(",")}
    for _ in range(a.reps):
        for coll in runs:
            runs[coll].append(perf_once(a, coll, ""))
            runs[coll].append(perf_once(a, coll, f"{coll}={FLAT[coll]}"))
    rates.append(link_rate(a))
    measured = statistics.mean(rates)
    print(f"# one TCP stream through the link: {rates[0] / 1e6:.1f} and {rates[1] / 1e6:.1f} "
          f"MB/s (nominal {nominal / 1e6:.1f} MB/s)")
    print(f"# {'collective':>12} {'call':>12} {'default_us':>12} {'flat_us':>12} "
          f"{'flat/default':>8} [min-max] busbw_MB/s /nominal /stream")
    for coll, r in runs.items():
        results.append(summarize(a, coll, r, nominal, measured))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"nodes": a.nodes, "ranks_per_node": a.ranks_per_node, "rate": a.rate,
                       "cyclic": a.cyclic, "bytes": a.bytes, "link_rate_measured": rates,
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
