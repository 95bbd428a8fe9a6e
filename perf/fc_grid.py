#!/usr/bin/env python3
"""chorus_fc_weight_grad's automatic choice over a grid of shapes, layouts and links.

For every layout (2 emulated nodes of 1 or 2 ranks) and link (tbf rates, or unshaped), runs
`chorus-perf fc_weight_grad` under tests/netns/testbed.sh with every rows value and each
in = out value, with CHORUS_TUNE_NET_BANDWIDTH_GBS set to the link's rate (the cost model's
input; chorus does not measure links yet). Each point times late-multiply and allreduce
forced and the automatic choice, interleaved (chorus-perf does that). Writes the points as
JSON, prints a Markdown table (the choice, both times, and what a wrong choice cost), the
share of points where the choice was the faster strategy and the worst loss, and with
--plot a PNG: every point at its time ratio, marked by the strategy chosen.

A point is skipped when one allreduce of its gradient would take longer than --max-s at the
link's nominal rate (a 4096 x 4096 float32 gradient over 100 Mbit/s takes over 5 s).

usage (as root, from the repository root, after ./quickstart build):
    python3 perf/fc_grid.py --build build [--rows 8,64,512] [--features 256,1024,4096]
        [--links 100mbit,1gbit,unshaped] [--ranks-per-node 1,2] [-n 5] [-w 2]
        [--json out.json] [--plot out.png]
    python3 perf/fc_grid.py --from-json out.json [--plot out.png]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


# Strategies whose times differ by this little are within the run-to-run spread of a point.
TIE = 0.05


def link_gbs(link, unshaped_gbs):
    """The link's rate in GB/s (1e9 bytes/s) from a tbf rate such as 100mbit or 1gbit."""
    if link == "unshaped":
        return unshaped_gbs
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for suffix, scale in units.items():
        if link.endswith(suffix):
            return float(link[: -len(suffix)]) * scale / 8 / 1e9
    sys.exit(f"fc_grid: link '{link}' is not NNkbit, NNmbit, NNgbit or unshaped")


def iters_for(iters, feat):
    """-n holds from 1024 x 1024 up; smaller layers, whose calls are short and noisier, get
    proportionally more rounds, up to 40."""
    return max(iters, min(40, iters * (1024 * 1024) // (feat * feat)))


def run_point_set(args, rpn, link, feat):
    """One chorus-perf run: every rows value at in = out = feat. Returns its result rows."""
    gbs = link_gbs(link, args.unshaped_gbs)
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        out = tmp.name
    cmd = [os.path.join("tests", "netns", "testbed.sh"), "--nodes", "2", "--ranks-per-node",
           str(rpn), "--build", args.build, "--quiet", "--timeout", str(args.timeout)]
    if link != "unshaped":
        cmd += ["--rate", link]
    cmd += ["--", "chorus-perf", "fc_weight_grad", "--rows", ",".join(map(str, args.rows)),
            "--in", str(feat), "--out", str(feat), "-n", str(iters_for(args.iters, feat)),
            "-w", str(args.warmup),
            "--json", out]
    env = dict(os.environ, CHORUS_TUNE_NET_BANDWIDTH_GBS=str(gbs), OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=args.timeout + 60)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        sys.exit(f"fc_grid: {' '.join(cmd)} exited {proc.returncode}")
    with open(out) as f:
        results = json.load(f)["results"]
    os.unlink(out)
    points = []
    for r in results:
        late, allreduce = r["late"]["time_us"], r["allreduce"]["time_us"]
        if r["late"]["wrong"] or r["allreduce"]["wrong"] or r["auto"]["wrong"]:
            sys.exit(f"fc_grid: wrong elements at {r}")
        chosen_t = late if r["chosen"] == "late" else allreduce
        points.append({"ranks": 2 * rpn, "layout": f"2x{rpn}", "link": link, "rows": r["rows"],
                       "features": feat, "late_us": late, "allreduce_us": allreduce,
                       "auto_us": r["auto"]["time_us"], "chosen": r["chosen"],
                       "faster": "late" if late < allreduce else "allreduce",
                       "loss": chosen_t / min(late, allreduce) - 1})
    return points


def table(points):
    lines = ["| layout | link | rows/rank | in = out | late (ms) | allreduce (ms) | chosen | "
             "faster | loss |", "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        loss = "" if p["chosen"] == p["faster"] else f"{100 * p['loss']:.0f} %"
        lines.append(f"| {p['layout']} | {p['link']} | {p['rows']} | {p['features']} | "
                     f"{p['late_us'] / 1e3:.2f} | {p['allreduce_us'] / 1e3:.2f} | {p['chosen']} "
                     f"| {p['faster']} | {loss} |")
    right = sum(p["chosen"] == p["faster"] for p in points)
    near = sum(p["chosen"] == p["faster"] or p["loss"] <= TIE for p in points)
    worst = max((p["loss"] for p in points), default=0)
    n = max(len(points), 1)
    lines.append("")
    lines.append(f"chose the faster strategy at {right} of {len(points)} points "
                 f"({100 * right / n:.0f} %); worst loss {100 * worst:.0f} %; counting "
                 f"strategies within {100 * TIE:.0f} % of each other as ties, {near} of "
                 f"{len(points)} ({100 * near / n:.0f} %)")
    return "\n".join(lines)


def plot(points, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for chosen, marker, color in (("late", "o", "tab:blue"), ("allreduce", "s", "tab:orange")):
        sel = [p for p in points if p["chosen"] == chosen]
        ax.scatter([p["allreduce_us"] / p["late_us"] for p in sel],
                   [p["rows"] * (1.15 if p["ranks"] == 4 else 1) for p in sel],
                   marker=marker, color=color, label=f"chose {chosen}")
    ax.axvline(1.0, color="grey", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("allreduce time / late time (right of 1: late is faster)")
    ax.set_ylabel("rows per rank (4-rank points raised slightly)")
    ax.set_title("fc_weight_grad: the automatic choice at each grid point")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def int_list(text):
    return [int(v) for v in text.split(",") if v]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rows", type=int_list, default=[8, 64, 512])
    ap.add_argument("--features", type=int_list, default=[256, 1024, 4096])
    ap.add_argument("--links", default="100mbit,1gbit,unshaped")
    ap.add_argument("--ranks-per-node", type=int_list, default=[1, 2])
    ap.add_argument("--unshaped-gbs", type=float, default=1.0,
                    help="rate of an unshaped link for the model (perf/link_rate.py measures it)")
    ap.add_argument("--max-s", type=float, default=2.0)
    ap.add_argument("-n", "--iters", type=int, default=5)
    ap.add_argument("-w", "--warmup", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=800)
    ap.add_argument("--json", help="write the points here")
    ap.add_argument("--plot", help="draw them here (PNG; needs matplotlib)")
    ap.add_argument("--from-json", help="run nothing: the table and plot of earlier points")
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            points = json.load(f)
        print(table(points))
        if args.plot:
            plot(points, args.plot)
        return
    if os.geteuid() != 0:
        sys.exit("fc_grid: the test bed needs root")
    points = []
    for rpn in args.ranks_per_node:
        for link in args.links.split(","):
            for feat in args.features:
                gbs = link_gbs(link, args.unshaped_gbs)
                if feat * feat * 4 / (gbs * 1e9) > args.max_s:
                    continue
                points += run_point_set(args, rpn, link, feat)
                print(f"fc_grid: 2x{rpn} {link} {feat} done", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(points, f, indent=1)
    print(table(points))
    if args.plot:
        plot(points, args.plot)


if __name__ == "__main__":
    main()
