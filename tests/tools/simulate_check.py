#!/usr/bin/env python3
"""perf/simulate.py's training-step model on prices of its own: buckets cut as the engine cuts
them, cycles, overlap with compute, and clusters that are refused.

usage: simulate_check.py PERF_DIR   (prints one line per check; exit 1 on a failure)
"""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, sys.argv[1])
import simulate  # noqa: E402

failed = 0


def check(what, ok):
    global failed
    print(f"{'ok' if ok else 'FAIL'}: {what}")
    failed += 0 if ok else 1


class Prices:
    """alpha + bytes * beta for every allreduce; counts the calls priced."""

    def __init__(self, alpha=1e-3, beta=1e-9, copy_gbs=1.0):
        self.alpha, self.beta = alpha, beta
        self.c = type("C", (), {"copy_gbs": copy_gbs})()
        self.calls = []

    def prime(self, coll, sizes):
        pass

    @property
    def cache(self):
        """Every size has a price already (simulate._Sizes asks)."""
        prices = self

        class Every(dict):
            def __contains__(self, key):
                return True

            def __getitem__(self, key):
                return prices.price(*key)
        return Every()

    def price(self, coll, size):
        self.calls.append((coll, size))
        return "fake", self.alpha + size * self.beta


def close(a, b, tol=1e-9):
    return abs(a - b) <= tol * max(1.0, abs(b))


# Buckets: tensors of 1 MB against 4 MiB buckets fuse by four; one of a quarter or more goes
# alone.
MB = 1000000
p = Prices()
posted, end = simulate.run_buckets(p, [MB] * 6, 0, 6, 4 << 20, 0.0, 0.0)
sizes = [s for _, s in p.calls]
check(f"six 1 MB tensors in 4 MiB buckets run as 4 + 2 MB (got {sizes})",
      sizes == [4 * MB, 2 * MB])
# Packing (1 GB/s) on the engine's thread before each post; unpacking after each call.
check(f"the engine's thread has packed both by 6 ms ({posted:.6f} s)", close(posted, 6e-3))
want = max(4e-3 + (1e-3 + 4e-3) + 4e-3, 6e-3) + (1e-3 + 2e-3) + 2e-3
check(f"the second bucket's packing overlaps the first's call ({end:.6f} s, want {want:.6f})",
      close(end, want))
p = Prices()
simulate.run_buckets(p, [100, 1 << 20, 100], 0, 3, 4 << 20, 0.0, 0.0)
check(f"a tensor of a quarter of the bucket goes alone, the rest fuse (got {p.calls})",
      [s for _, s in p.calls] == [1 << 20, 200])
p = Prices()
posted, end = simulate.run_buckets(p, [1000], 0, 1, 4 << 20, 5.0, 7.0)
check("a bucket of one tensor is not packed, and waits for the one before it",
      close(posted, 5.0) and close(end, 7.0 + 1e-3 + 1000e-9))

# The engine: with no compute every tensor is ready at once, a bucket's worth wakes the engine
# and one cycle takes them all.
nb = [MB] * 8
p = Prices()
t = simulate.engine_step(p, [0.0] * 8, nb, 0.0, 4 << 20, 1e-3)
cycle = 1e-3 + (simulate.ENGINE_HEADER_BYTES + 8) * 1e-9
want = cycle + max(4e-3 + (1e-3 + 4e-3) + 4e-3, 8e-3) + (1e-3 + 4e-3) + 4e-3
check(f"no compute: one negotiation at once, two buckets ({t:.6f} s, want {want:.6f})",
      close(t, want))
# Less than a bucket's worth wakes nothing: the idle engine's stretched period, half of it.
p = Prices()
t = simulate.engine_step(p, [0.0], [1000], 0.0, 4 << 20, 1e-3)
cycle = 1e-3 + (simulate.ENGINE_HEADER_BYTES + 1) * 1e-9
want = simulate.ENGINE_IDLE_STRETCH * 1e-3 / 2 + cycle + 1e-3 + 1000e-9
check(f"a lone small tensor waits for the idle engine's cycle ({t:.6f} s, want {want:.6f})",
      close(t, want))
cycle = 1e-3 + (simulate.ENGINE_HEADER_BYTES + 8) * 1e-9

# Long compute: the buckets keep up, the step ends shortly after the last tensor.
ready = [0.1 * (k + 1) for k in range(8)]
p = Prices()
t = simulate.engine_step(p, ready, nb, 0.8, 4 << 20, 1e-3)
check(f"slow compute hides all but the last tensor's exchange ({t:.4f} s)",
      0.8 < t < 0.8 + 2e-3 + cycle + 1e-3 + MB * 1e-9 + 2 * MB / 1e9)

# train_step: the modes' relations hold on any prices.
p = Prices()
m = simulate.train_step(p, [4 << 20] * 4 + [1000] * 10, 50.0, 4 << 20, 1.0)
check("fused-after = compute + fused-only", close(m["fused-after"], m["compute-only"] +
                                                   m["fused-only"]))
check("compute-only is the compute", close(m["compute-only"], 0.05))
check(f"the engine overlaps: below fused-after ({m['engine']:.4f} s, {m['fused-after']:.4f} s)",
      m["engine"] < m["fused-after"])
want = 0.05 + 4 * (1e-3 + (4 << 20) * 1e-9) + 10 * (1e-3 + 1000e-9)
check(f"per-tensor: the compute plus every tensor's blocking call ({m['per-tensor']:.6f} s)",
      close(m["per-tensor"], want))

# Clusters: bad descriptions are refused with a message, good ones give the model's variables.
good = {"ranks_per_node": [2, 1], "net": {"alpha_us": 20, "gbytes_per_s": 0.1}}
c = simulate.Cluster(good)
env = c.model_env()
check("a cluster names its ranks", c.nranks == 3)
check("the network link sets CHORUS_TUNE_NET_*",
      env["CHORUS_TUNE_NET_ALPHA_US"] == "20.0" and env["CHORUS_TUNE_NET_BANDWIDTH_GBS"] == "0.1")
for bad in ({}, {"ranks_per_node": [0], "net": good["net"]},
            {"ranks_per_node": [1, 1]},
            {"ranks_per_node": [1, 1], "net": {"alpha_us": -1, "gbytes_per_s": 1}},
            {"ranks_per_node": [1, 1], "net": {"alpha_us": 1, "gbytes_per_s": 0}},
            {"ranks_per_node": [1, 1], "net": good["net"], "select": "fastest"},
            {"ranks_per_node": [1, 1], "net": good["net"], "cores_per_node": 0}):
    try:
        simulate.Cluster(bad)
        check(f"cluster {bad} is refused", False)
    except SystemExit as e:
        check(f"cluster {bad} is refused: {e}", str(e).startswith("simulate: cluster"))

print(f"simulate_check: {failed} failed")
sys.exit(1 if failed else 0)
