#!/usr/bin/env python3
"""Draws the training engine's autotuner log (CHORUS_AUTOTUNE_LOG, written by rank 0): the
agreed rate of every sample over time, and under it the bucket size, cycle time and network
streams the sample was measured at, with the samples of a search shaded, so a search, where
it settles, and a search begun again when the rate drifted are seen at a glance.

usage: autotune_plot.py LOG.csv OUT.png [CHANGE_S]
CHANGE_S: seconds (in the log's clock) at which the links changed; drawn as a dashed line.
Runs in Debian's /usr/bin/python3 (python3-matplotlib). Exit code 4 when matplotlib is
missing, 1 when the log has no sample.
"""

import csv
import sys

EXIT_NO_MATPLOTLIB = 4


def read_log(path):
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("cycle") not in (None, "cycle")]
    return [{"t": float(r["seconds"]), "bucket": int(r["bucket_bytes"]) / (1 << 20),
             "cycle_ms": float(r["cycle_ms"]), "streams": int(r["streams"]),
             "rate": float(r["rate"]) / 1e6,
             "search": r["phase"] == "search"} for r in rows]


def search_spans(samples):
    """[(t0, t1)] of consecutive search samples."""
    spans, start = [], None
    for i, s in enumerate(samples):
        if s["search"] and start is None:
            start = s["t"]
        if start is not None and (not s["search"] or i == len(samples) - 1):
            spans.append((start, s["t"]))
            start = None
    return spans


def main(argv):
    if len(argv) not in (2, 3):
        print("usage: autotune_plot.py LOG.csv OUT.png [CHANGE_S]", file=sys.stderr)
        return 2
    try:
        change = float(argv[2]) if len(argv) == 3 else None
    except ValueError:
        print("autotune_plot: CHANGE_S '%s' is not a number of seconds" % argv[2],
              file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display: as root without a terminal too
        import matplotlib.pyplot as plt
    except ImportError as e:
        print("autotune_plot: %s" % e, file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    samples = read_log(argv[0])
    if not samples:
        print("autotune_plot: %s has no sample" % argv[0], file=sys.stderr)
        return 1
    t = [s["t"] for s in samples]
    fig, (top, mid, low, streams) = plt.subplots(
        4, 1, figsize=(10, 8.5), sharex=True, gridspec_kw={"height_ratios": [3, 1.2, 1.2, 1]})
    for ax in (top, mid, low, streams):
        for t0, t1 in search_spans(samples):
            ax.axvspan(t0, t1, color="orange", alpha=0.15, lw=0)
        if change is not None:
            ax.axvline(change, color="red", ls="--", lw=1)
        ax.grid(True, alpha=0.3)
    top.plot(t, [s["rate"] for s in samples], marker="o", ms=3)
    top.set_ylabel("agreed rate (MB/s)")
    top.set_title("autotuner samples (shaded: searching%s)"
                  % ("; dashed: the links changed" if change is not None else ""))
    mid.step(t, [s["bucket"] for s in samples], where="post")
    mid.set_yscale("log", base=2)
    mid.set_ylabel("bucket (MiB)")
    low.step(t, [s["cycle_ms"] for s in samples], where="post", color="green")
    low.set_yscale("log", base=2)
    low.set_ylabel("cycle (ms)")
    streams.step(t, [s["streams"] for s in samples], where="post", color="purple")
    streams.set_ylabel("streams")
    streams.set_ylim(0.5, max(s["streams"] for s in samples) + 0.5)
    streams.set_xlabel("seconds since the engine started")
    fig.tight_layout()
    fig.savefig(argv[1], dpi=100)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
