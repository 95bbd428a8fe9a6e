#!/usr/bin/env python3
"""Draws perf/compare.py's PNG: busbw against size, one line per library, one subplot per
collective, with the same-run memcpy and non-temporal copy bandwidth as dashed lines.

compare.py runs it as: compare_plot.py RESULTS.json OUT.png, in its own Python or in
Debian's /usr/bin/python3 (python3-matplotlib). Exit code 4 when matplotlib is missing.
"""

import json
import math
import sys

EXIT_NO_MATPLOTLIB = 4


def main(argv):
    if len(argv) != 2:
        print("usage: compare_plot.py RESULTS.json OUT.png", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display: as root without a terminal too
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("compare_plot: %s" % e, file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    with open(argv[0]) as f:
        doc = json.load(f)
    colls = [c for c in doc["configuration"]["collectives"] if c in doc["tables"]]
    if not colls:
        print("compare_plot: no table to draw", file=sys.stderr)
        return 1
    cols = min(2, len(colls))
    rows = math.ceil(len(colls) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 4.5 * rows), squeeze=False)
    bound = (doc.get("membw") or {}).get("summary")
    for k, coll in enumerate(colls):
        ax = axes[k // cols][k % cols]
        t = doc["tables"][coll]
        for lib in t["libraries"]:
            pts = [(r["size"], r["busbw_median"][lib]) for r in t["rows"]
                   if r["busbw_median"][lib] == r["busbw_median"][lib]]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=lib)
        if bound:
            ax.axhline(bound["memcpy"]["median_gbs"], ls="--", c="grey", lw=1,
                       label="memcpy, 1 core")
            ax.axhline(bound["nt_copy"]["median_gbs"], ls=":", c="grey", lw=1,
                       label="NT copy, 1 core")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s, median)")
        ax.set_title("%s, float32, %d ranks" % (coll, doc["configuration"]["nranks"]))
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    for k in range(len(colls), rows * cols):
        axes[k // cols][k % cols].axis("off")
    fig.tight_layout()
    fig.savefig(argv[1], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
