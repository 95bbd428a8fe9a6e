#!/usr/bin/env python3
"""chorus's scaling model: what chorus would do, and how long it would take, on a described cluster.

The collectives are priced by chorus itself: `chorus-info --estimate` runs the library's own
selection table and cost model (src/coll, tuning/) over the cluster's layout. Two passes:

  1. the algorithm: the table chorus builds with the model it is configured with, which is
     chorus's defaults unless the cluster says `"select": "cluster"` (a deployment that sets
     CHORUS_TUNE_NET_BANDWIDTH_GBS and the like to its links' figures);
  2. the time: that algorithm priced on the cluster's measured links (CHORUS_TUNE forces it).

A training step replays chorus-train-step's model (its tensors, from
`chorus-train-step --print-tensors`) through an event simulation of the training engine
(src/engine): tensors produced in reverse layer order after compute gaps in proportion to their
sizes; negotiation cycles every cycle time, or sooner when a bucket's worth waits, each one
allreduce of the readiness bitmap; the tensors ready everywhere cut into buckets in id order
(a tensor of a quarter of the bucket size or more goes alone); buckets run one after another on
the bucket communicator, packed and unpacked when they hold several tensors. It predicts the
five modes chorus-train-step times (per-tensor: the compute, then every tensor's blocking
allreduce, as none overlaps the compute after it).

A cluster is a JSON file:

  {"ranks_per_node": [1, 1],          # or "nodes": 2 with "ranks_per_node": 1
   "cores_per_node": 2,
   "net":  {"alpha_us": 23, "gbytes_per_s": 0.117},   # each node's network link
   "node": {"alpha_us": 30, "gbytes_per_s": 2},       # between ranks of one node
   "reduce_gbytes_per_s": 4,                          # optional: reduction speed
   "copy_gbytes_per_s": 8,                            # optional: the engine's packing
   "select": "default"}                               # or "cluster" (see above)

Subcommands:
  coll        predicted time of collectives at sizes
  train-step  predicted step of each chorus-train-step mode
  calibrate   (root) measure the test bed's link: alpha from 2-node 8-byte allreduces,
              the rate from perf/link_rate.py; writes a cluster file
  validate    (root) measure collectives and train steps on the test bed at node counts and
              link rates, beside the predictions; prints the error of each
  project     scaling efficiency of a training step at rank counts on a described cluster,
              with a plot (python3-matplotlib)

Examples (from the top of the source tree, after ./quickstart build):
  python3 perf/simulate.py coll --cluster c.json --coll allreduce --sizes 8,64K,64M
  python3 perf/simulate.py train-step --cluster c.json --compute-ms 400
  sudo python3 perf/simulate.py validate --nodes 2,3,4 --rates 1gbit,400mbit --train-steps 0,500
  python3 perf/simulate.py project --gbit 100 --ranks-per-node 8 --plot scaling.png
"""
import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
import units  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
TESTBED = os.path.join(TOP, "tests", "netns", "testbed.sh")
# The engine's negotiation vector: its header bytes (HDR_BYTES), then one byte per agreed name
# (engine_cycle.c).
ENGINE_HEADER_BYTES = 4
# A tensor of at least bucket_bytes / this goes alone (engine_bucket.c).
ENGINE_ALONE_FRACTION = 4
# Cycles with nothing waiting anywhere stretch up to this many periods (engine_cycle.c): the
# engine comes to a step from idle (another mode, the forward pass).
ENGINE_IDLE_STRETCH = 8
# The model's variables: set from the cluster, never inherited from the caller's environment.
MODEL_VARS = ("CHORUS_TUNE", "CHORUS_TUNE_ALPHA_US", "CHORUS_TUNE_BANDWIDTH_GBS",
              "CHORUS_TUNE_REDUCE_GBS", "CHORUS_TUNE_NET_ALPHA_US",
              "CHORUS_TUNE_NET_BANDWIDTH_GBS")
MODES = ("engine", "per-tensor", "fused-after", "compute-only", "fused-only")
# Sizes from which the link's rate, not its latency, sets a call's time on the test bed.
LARGE = 256 << 10


def die(msg):
    sys.exit(f"simulate: {msg}")


def parse_size(text):
    try:
        return units.parse_size(text)
    except ValueError:
        die(f"'{text}' is not a size (bytes, with K, M or G)")


def rate_bytes(text):
    try:
        return units.rate_bytes(text)
    except ValueError:
        die(f"rate '{text}' is not N[kmg]bit")


def find_tool(build, name, subdir):
    """name in the build tree, else beside this script's install, else on PATH."""
    cands = [os.path.join(build, subdir, name), os.path.join(TOP, "install", "bin", name)]
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    die(f"no {name}: build chorus first (./quickstart build) or give --build")


# ---- the cluster --------------------------------------------------------------------------

class Cluster:
    def __init__(self, d):
        rpn = d.get("ranks_per_node")
        if isinstance(rpn, int):
            rpn = [rpn] * int(d.get("nodes", 1))
        if not isinstance(rpn, list) or not rpn or any(
                not isinstance(r, int) or r < 1 for r in rpn):
            die("cluster: ranks_per_node must be a positive integer or a list of them")
        self.ranks_per_node = rpn
        self.cores = int(d.get("cores_per_node", max(rpn)))
        if self.cores < 1:
            die("cluster: cores_per_node must be 1 or more")
        self.net = self.link(d, "net")
        self.node = self.link(d, "node", {"alpha_us": 30, "gbytes_per_s": 2})
        self.reduce_gbs = self.positive(d, "reduce_gbytes_per_s", 4)
        self.copy_gbs = self.positive(d, "copy_gbytes_per_s", 8)
        self.select = d.get("select", "default")
        if self.select not in ("default", "cluster"):
            die("cluster: select must be 'default' or 'cluster'")

    @staticmethod
    def positive(d, key, default):
        v = d.get(key, default)
        if not isinstance(v, (int, float)) or not v > 0:
            die(f"cluster: {key} must be a number above 0")
        return float(v)

    @classmethod
    def link(cls, d, key, default=None):
        link = d.get(key, default)
        if not isinstance(link, dict):
            die(f"cluster: '{key}' must be an object with alpha_us and gbytes_per_s")
        alpha = link.get("alpha_us")
        if not isinstance(alpha, (int, float)) or alpha < 0:
            die(f"cluster: {key}.alpha_us must be 0 or more")
        return {"alpha_us": float(alpha), "gbytes_per_s": cls.positive(link, "gbytes_per_s", 0)}

    @property
    def nranks(self):
        return sum(self.ranks_per_node)

    def model_env(self):
        return {"CHORUS_TUNE_ALPHA_US": repr(self.node["alpha_us"]),
                "CHORUS_TUNE_BANDWIDTH_GBS": repr(self.node["gbytes_per_s"]),
                "CHORUS_TUNE_REDUCE_GBS": repr(self.reduce_gbs),
                "CHORUS_TUNE_NET_ALPHA_US": repr(self.net["alpha_us"]),
                "CHORUS_TUNE_NET_BANDWIDTH_GBS": repr(self.net["gbytes_per_s"])}


def load_cluster(path):
    try:
        with open(path) as f:
            return Cluster(json.load(f))
    except (OSError, ValueError) as e:
        die(f"cluster {path}: {e}")


# ---- chorus's own prices ------------------------------------------------------------------

class Pricer:
    """Seconds of a collective at a size on the cluster, from chorus-info --estimate."""

    def __init__(self, cluster, info):
        self.c = cluster
        self.info = info
        self.cache = {}

    def run(self, env_model, specs):
        env = {k: v for k, v in os.environ.items() if k not in MODEL_VARS}
        env.update(env_model)
        if len(self.c.ranks_per_node) == 1:
            layout = ["--nodes", "one", "-n", str(self.c.nranks)]
        else:
            layout = ["--nodes", ",".join(map(str, self.c.ranks_per_node))]
        argv = [self.info] + layout + ["--cores", str(self.c.cores)]
        for coll, sizes in specs:
            argv += ["--estimate", f"{coll}:{','.join(map(str, sizes))}"]
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            die(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
        rows = []
        for line in r.stdout.splitlines():
            coll, size, alg, secs = line.split()
            rows.append((coll, int(size), alg, float(secs)))
        return rows

    def prime(self, coll, sizes):
        """Price every size of coll not yet priced (64 per run of chorus-info)."""
        todo = sorted({s for s in sizes if (coll, s) not in self.cache})
        for i in range(0, len(todo), 64):
            chunk = todo[i:i + 64]
            select_env = self.c.model_env() if self.c.select == "cluster" else {}
            chosen = {}
            for _, size, alg, _ in self.run(select_env, [(coll, chunk)]):
                chosen.setdefault(alg, []).append(size)
            for alg, alg_sizes in chosen.items():
                if alg == "none":
                    die(f"chorus runs no algorithm for {coll} on this cluster")
                env = dict(self.c.model_env(), CHORUS_TUNE=f"{coll}={alg}")
                for _, size, got, secs in self.run(env, [(coll, alg_sizes)]):
                    if got != alg:
                        die(f"{coll} at {size} bytes: forced {alg}, priced {got}")
                    self.cache[(coll, size)] = (alg, secs)

    def price(self, coll, size):
        if (coll, size) not in self.cache:
            self.prime(coll, [size])
        return self.cache[(coll, size)]


# ---- the training step --------------------------------------------------------------------

def read_tensors(train_step, model):
    argv = [train_step, "--print-tensors"]
    if model != "resnet50":
        argv += ["--uniform", model]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        die(f"{' '.join(argv)} failed: {r.stderr.strip()}")
    return [int(line.split()[1]) * 4 for line in r.stdout.splitlines()]


def engine_step(pricer, ready, nbytes, compute_s, bucket_bytes, cycle_s):
    """The engine mode: when the last bucket of a step completes (seconds from its start).

    ready[k]: when the k-th tensor submitted (backward order) is ready on every rank;
    nbytes[k] its bytes. Ids are taken as backward order: the engine gives ids in the order
    of its name table among the names announced in one cycle, so where many tensors are
    first announced at once its buckets group them otherwise (the same bytes in all)."""
    nids = len(ready)
    cycle_cost = pricer.price("allreduce", ENGINE_HEADER_BYTES + nids)[1]
    taken = 0                  # tensors before this index are in buckets
    net_free = 0.0             # when the bucket communicator finishes what it has
    cum = [0]
    for b in nbytes:
        cum.append(cum[-1] + b)

    def full_at(lo):
        """When a bucket's worth of tensors from lo on is ready: a submission wakes the engine."""
        return next((ready[k] for k in range(lo, nids) if cum[k + 1] - cum[lo] >= bucket_bytes),
                    float("inf"))

    # From idle the period is stretched; the step begins, on average, half-way through one.
    start = min(ENGINE_IDLE_STRETCH * cycle_s / 2, full_at(0))
    while taken < nids:
        # Ranks snapshot at start; the bitmap's allreduce says what was ready everywhere then.
        upto = bisect.bisect_right(ready, start, lo=taken)
        posted, net_free = run_buckets(pricer, nbytes, taken, upto, bucket_bytes,
                                       start + cycle_cost, net_free)
        taken = upto
        if taken >= nids:
            break
        # The next cycle: a period after this one began, or as soon as a bucket's worth
        # waits, and never before this one has posted its buckets.
        start = max(posted, min(start + cycle_s, full_at(taken)))
    return max(net_free, compute_s)


def run_buckets(pricer, nbytes, lo, hi, bucket_bytes, posting, net_free):
    """Cut tensors lo..hi into buckets as engine_bucket.c does and post them from time posting:
    the engine's thread packs a bucket of several tensors before posting it; each runs after
    the one before it on the bucket communicator, and is unpacked when it is over.
    Returns when the thread has posted them all, and when the last is over."""
    buckets, open_bytes, open_n = [], 0, 0
    for k in range(lo, hi):
        b = nbytes[k]
        if b >= bucket_bytes // ENGINE_ALONE_FRACTION:
            buckets.append((b, 1))
            continue
        if open_n and open_bytes + b > bucket_bytes:
            buckets.append((open_bytes, open_n))
            open_bytes, open_n = 0, 0
        open_bytes += b
        open_n += 1
    if open_n:
        buckets.append((open_bytes, open_n))
    for b, n in buckets:
        copy = b / (pricer.c.copy_gbs * 1e9) if n > 1 else 0.0
        posting += copy
        net_free = max(net_free, posting) + pricer.price("allreduce", b)[1] + copy
    return posting, net_free


class _Sizes:
    """A pricer that notes the sizes it has no price for (costing them nothing): the engine's
    buckets do not depend on the network's prices, so one pass finds every size to price."""

    def __init__(self, pricer):
        self.p, self.c, self.missing = pricer, pricer.c, set()

    def price(self, coll, size):
        if (coll, size) in self.p.cache:
            return self.p.cache[(coll, size)]
        self.missing.add(size)
        return "?", 0.0


def train_step(pricer, nbytes_layer, compute_ms, bucket_bytes, cycle_ms):
    """Predicted seconds of each chorus-train-step mode."""
    nbytes = list(reversed(nbytes_layer))        # produced last layer first
    total = sum(nbytes)
    compute_s = compute_ms / 1e3
    ready, t = [], 0.0
    for b in nbytes:
        t += compute_s * b / total
        ready.append(t)
    sizes = set(nbytes) | {total, ENGINE_HEADER_BYTES + len(nbytes)}
    pricer.prime("allreduce", sizes)
    fused = pricer.price("allreduce", total)[1]
    # Blocking calls in the backward pass: each tensor's compute starts once the call before
    # it has returned, so nothing overlaps.
    per_tensor = compute_s + sum(pricer.price("allreduce", b)[1] for b in nbytes)
    sizes = _Sizes(pricer)
    engine_step(sizes, ready, nbytes, compute_s, bucket_bytes, cycle_ms / 1e3)
    pricer.prime("allreduce", sizes.missing)
    return {
        "engine": engine_step(pricer, ready, nbytes, compute_s, bucket_bytes,
                              cycle_ms / 1e3),
        "per-tensor": per_tensor,
        "fused-after": compute_s + fused,
        "compute-only": compute_s,
        "fused-only": fused,
    }


# ---- the test bed -------------------------------------------------------------------------

def testbed(a, nodes, rate, cmd, env_extra=None):
    """Run cmd on nodes of one rank each, links at rate; rank 0's output."""
    # Each rank on a CPU of its own (in turn where they outnumber the CPUs), as launchers bind
    # ranks: unbound, the kernel's placement of a rank's threads sets small calls' time.
    argv = [TESTBED, "--nodes", str(nodes), "--ranks-per-node", "1", "--bind",
            "--rate", rate, "--timeout", "900", "--quiet", "--build", a.build, "--"] + cmd
    env = dict(os.environ, **(env_extra or {}))
    r = subprocess.run(argv, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        die(f"{' '.join(argv)} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r.stdout


def measure_perf(a, nodes, rate, coll, size):
    """chorus-perf's out-of-place time (seconds: the mean per call over its timed calls, on the
    slowest rank) of coll at size; results checked.

    Warmup moves three times the tbf bucket (10 ms at the rate, at least 128 KiB), so that
    calls which could outpace the link find the bucket drained: the figure is the link's
    steady rate, as a real link (which has no bucket) and a job's continuous traffic see it."""
    burst = max(rate_bytes(rate) // 100, 131072)
    warm = min(20000, max(2, 3 * burst // max(size, 1)))
    iters = max(5, min(200, (64 << 20) * 2 // max(size * 8, 1)))
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "p.json")
        testbed(a, nodes, rate, ["chorus-perf", coll, "-b", str(size), "-e", str(size),
                                 "-n", str(iters), "-w", str(warm), "-c", "1", "--json", out],
                {"CHORUS_AUTOTUNE": "0"})
        data = json.load(open(out))
    if data["wrong_total"] != 0:
        die(f"{coll} at {size} bytes on {nodes} nodes: {data['wrong_total']} wrong elements")
    row = data["results"][0]
    return row["out_of_place"]["time_us"] * 1e-6, row.get("algorithm", "")


def measure_train_step(a, nodes, rate, compute_ms):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "t.json")
        testbed(a, nodes, rate, ["chorus-train-step", "--sleep", "--steps", str(a.steps),
                                 "--warmup", "1", "--compute-ms", str(compute_ms),
                                 "--json", out], {"CHORUS_AUTOTUNE": "0"})
        data = json.load(open(out))
    return {m["mode"]: m["median_ms"] / 1e3 for m in data["modes"]}


def calibrate(a):
    """The test bed's link at a.rate, measured on 2 nodes, as a cluster of 2 nodes x 1 rank."""
    out = testbed(a, 2, a.rate, [sys.executable, os.path.join(HERE, "link_rate.py"),
                                 str(64 << 20)])
    rate = next((float(l.split()[1]) for l in out.splitlines()
                 if l.startswith("link_rate_bytes_per_s ")), None)
    if rate is None:
        die("link_rate.py printed no rate")
    # One message each way between 2 ranks: an allreduce of 8 bytes (recursive doubling,
    # one round), which the model prices at alpha; the median of three runs, as a run's
    # small calls vary by a fifth or more from the next one's.
    alpha = statistics.median(measure_perf(a, 2, a.rate, "allreduce", 8)[0] for _ in range(3))
    return {"ranks_per_node": [1, 1], "cores_per_node": os.cpu_count(),
            "net": {"alpha_us": round(alpha * 1e6, 2), "gbytes_per_s": round(rate / 1e9, 5)},
            "select": "default"}


# ---- commands -----------------------------------------------------------------------------

def cmd_coll(a):
    c = load_cluster(a.cluster)
    p = Pricer(c, find_tool(a.build, "chorus-info", "src/tools"))
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    p.prime(a.coll, sizes)
    print(f"# {a.coll} on {c.nranks} ranks (per node {','.join(map(str, c.ranks_per_node))})")
    print(f"{'bytes':>12} {'algorithm':>14} {'predicted_us':>14}")
    for s in sizes:
        alg, secs = p.price(a.coll, s)
        print(f"{s:>12} {alg:>14} {secs * 1e6:>14.1f}")


def cmd_train_step(a):
    c = load_cluster(a.cluster)
    p = Pricer(c, find_tool(a.build, "chorus-info", "src/tools"))
    nbytes = read_tensors(find_tool(a.build, "chorus-train-step", "perf"), a.model)
    pred = train_step(p, nbytes, a.compute_ms, parse_size(a.bucket_bytes), a.cycle_ms)
    print(f"# {a.model}: {len(nbytes)} tensors, {sum(nbytes)} bytes, compute {a.compute_ms} ms, "
          f"on {c.nranks} ranks (per node {','.join(map(str, c.ranks_per_node))})")
    for m in MODES:
        print(f"{m:>14} {pred[m] * 1e3:10.2f} ms")


def need_root():
    if os.geteuid() != 0:
        die("the test bed needs root (network namespaces)")


def cmd_calibrate(a):
    need_root()
    d = calibrate(a)
    text = json.dumps(d, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


def err_pct(pred, meas):
    return 100.0 * (pred - meas) / meas


def cmd_validate(a):
    need_root()
    info = find_tool(a.build, "chorus-info", "src/tools")
    nbytes = read_tensors(find_tool(a.build, "chorus-train-step", "perf"), "resnet50")
    colls = a.colls.split(",")
    sizes = [parse_size(s) for s in a.sizes.split(",")]
    rows = []
    for rate in a.rates.split(","):
        a.rate = rate
        link = calibrate(a)
        print(f"# {rate}: link {link['net']['gbytes_per_s'] * 1e3:.1f} MB/s, "
              f"alpha {link['net']['alpha_us']} us (2-node 8-byte allreduces)", flush=True)
        for nodes in [int(n) for n in a.nodes.split(",")]:
            c = Cluster(dict(link, ranks_per_node=[1] * nodes))
            p = Pricer(c, info)
            for coll in colls:
                # A vector of every rank's blocks: a whole number of float32 elements per rank.
                unit = 4 * nodes if coll in ("allgather", "reduce_scatter", "alltoall") else 4
                csizes = [max(unit, (s + unit - 1) // unit * unit) for s in sizes]
                p.prime(coll, csizes)
                for s in csizes:
                    meas, alg_run = measure_perf(a, nodes, rate, coll, s)
                    alg, pred = p.price(coll, s)
                    rows.append({"kind": "coll", "rate": rate, "nodes": nodes, "coll": coll,
                                 "bytes": s, "algorithm": alg, "ran": alg_run,
                                 "predicted_s": pred, "measured_s": meas})
                    print(f"{rate:>8} {nodes} nodes {coll:>14} {s:>10} B {alg:>12}/{alg_run:<12} "
                          f"pred {pred * 1e6:11.1f} us meas {meas * 1e6:11.1f} us "
                          f"err {err_pct(pred, meas):+6.1f}%", flush=True)
                    save(a, rows)
            for compute_ms in a.train_steps:
                pred = train_step(p, nbytes, compute_ms, parse_size("16M"), 1.0)
                meas = measure_train_step(a, nodes, rate, compute_ms)
                for m in MODES:
                    if m == "compute-only" or (m == "fused-after" and compute_ms == 0):
                        continue    # the compute alone, or fused-only again
                    rows.append({"kind": "train_step", "rate": rate, "nodes": nodes,
                                 "mode": m, "compute_ms": compute_ms,
                                 "predicted_s": pred[m], "measured_s": meas[m]})
                    print(f"{rate:>8} {nodes} nodes train_step {m:>12} compute {compute_ms:g} ms "
                          f"pred {pred[m] * 1e3:9.1f} ms meas {meas[m] * 1e3:9.1f} ms "
                          f"err {err_pct(pred[m], meas[m]):+6.1f}%", flush=True)
                save(a, rows)
    summarize(rows)
    save(a, rows)


def summarize(rows):
    """How many predictions of each group are within 15%, with the median and largest error."""
    groups = (("collectives below 256 KiB", lambda r: r["kind"] == "coll" and r["bytes"] < LARGE),
              ("collectives of 256 KiB and more",
               lambda r: r["kind"] == "coll" and r["bytes"] >= LARGE),
              ("train steps", lambda r: r["kind"] == "train_step"))
    for name, keep in groups:
        errs = [abs(err_pct(r["predicted_s"], r["measured_s"])) for r in rows if keep(r)]
        if errs:
            print(f"validate: {name}: {sum(e <= 15.0 for e in errs)} of {len(errs)} within 15% "
                  f"of measured; median |error| {statistics.median(errs):.1f}%, "
                  f"largest {max(errs):.1f}%")


def save(a, rows):
    """The rows so far (--json), so that a run cut short keeps what it measured."""
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)


# The autotuner's ranges (CHORUS_AUTOTUNE, src/engine/engine_tune.c): bucket sizes and cycle
# times it chooses from.
TUNED_BUCKETS = ("1M", "2M", "4M", "8M", "16M", "32M", "64M")
TUNED_CYCLES_MS = (0.5, 1.0, 2.0, 4.0, 8.0)


def cmd_project(a):
    info = find_tool(a.build, "chorus-info", "src/tools")
    nbytes = read_tensors(find_tool(a.build, "chorus-train-step", "perf"), a.model)
    net = {"alpha_us": a.net_alpha_us, "gbytes_per_s": a.gbit / 8.0}
    node = {"alpha_us": a.node_alpha_us, "gbytes_per_s": a.node_gbytes_per_s}
    step1 = (a.forward_ms + a.compute_ms) / 1e3
    out = []
    print(f"# {a.model}: {len(nbytes)} tensors, {sum(nbytes) / 1e6:.1f} MB of gradients; "
          f"forward {a.forward_ms:g} ms, backward {a.compute_ms:g} ms per step; "
          f"{a.ranks_per_node} ranks per node, {a.gbit:g} Gbit/s per node, "
          f"selection told the links")
    print(f"# set: bucket {a.bucket_bytes}, cycle {a.cycle_ms:g} ms; tuned: the best of "
          f"buckets {'/'.join(TUNED_BUCKETS)} x cycles "
          f"{'/'.join(f'{c:g}' for c in TUNED_CYCLES_MS)} ms")
    print(f"{'ranks':>6} {'nodes':>6} {'fused_ms':>9} {'set_ms':>8} {'set_eff':>8} "
          f"{'tuned_ms':>9} {'tuned_eff':>9}  tuned at   algorithm (fused)")
    for n in a.rank_counts:
        rpn = min(a.ranks_per_node, n)
        if n % rpn:
            die(f"{n} ranks do not fill nodes of {rpn}")
        c = Cluster({"ranks_per_node": [rpn] * (n // rpn), "cores_per_node": a.cores_per_node,
                     "net": net, "node": node, "select": "cluster"})
        p = Pricer(c, info)
        pred = train_step(p, nbytes, a.compute_ms, parse_size(a.bucket_bytes), a.cycle_ms)
        step = a.forward_ms / 1e3 + pred["engine"]
        tuned = min((a.forward_ms / 1e3 + train_step(p, nbytes, a.compute_ms, parse_size(b),
                                                       cyc)["engine"], b, cyc)
                    for b in TUNED_BUCKETS for cyc in TUNED_CYCLES_MS)
        alg = p.price("allreduce", sum(nbytes))[0]
        out.append({"ranks": n, "nodes": n // rpn, "fused_ms": pred["fused-only"] * 1e3,
                    "step_ms": step * 1e3, "efficiency": step1 / step,
                    "tuned_step_ms": tuned[0] * 1e3, "tuned_efficiency": step1 / tuned[0],
                    "tuned_bucket": tuned[1], "tuned_cycle_ms": tuned[2]})
        print(f"{n:>6} {n // rpn:>6} {pred['fused-only'] * 1e3:>9.2f} {step * 1e3:>8.2f} "
              f"{100 * step1 / step:>7.1f}% {tuned[0] * 1e3:>9.2f} {100 * step1 / tuned[0]:>8.1f}%"
              f"  {tuned[1]:>3} {tuned[2]:>3g} ms  {alg}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(a).items() if k != "fn"}, "rows": out}, f,
                      indent=1)
    if a.plot:
        plot(a, out)


def plot(a, rows):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("simulate: no matplotlib (apt-get install python3-matplotlib): no plot",
              file=sys.stderr)
        sys.exit(4)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ranks = [r["ranks"] for r in rows]
    what = f"{a.model}, {a.ranks_per_node} ranks/node, {a.gbit:g} Gbit/s"
    ax.plot(ranks, [100 * r["tuned_efficiency"] for r in rows], "o-",
            label=f"chorus model, bucket and cycle tuned: {what}")
    ax.plot(ranks, [100 * r["efficiency"] for r in rows], "s--",
            label=f"chorus model, bucket {a.bucket_bytes}, cycle {a.cycle_ms:g} ms")
    ax.axhline(90, color="grey", ls=":", lw=1,
               label="Horovod, published: 90% at 512 GPUs (ResNet-101, 25 Gbit/s)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, 105)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(a.plot, dpi=110)
    print(f"simulate: wrote {a.plot}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(TOP, "build"),
                    help="chorus's build tree (default: build/ at the top of the source tree)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("coll", help="predicted time of a collective at sizes")
    s.add_argument("--cluster", required=True)
    s.add_argument("--coll", default="allreduce")
    s.add_argument("--sizes", default="8,1K,64K,1M,16M,64M")
    s.set_defaults(fn=cmd_coll)

    s = sub.add_parser("train-step", help="predicted step of each chorus-train-step mode")
    s.add_argument("--cluster", required=True)
    s.add_argument("--model", default="resnet50", help="resnet50, or N:BYTES (uniform)")
    s.add_argument("--compute-ms", type=float, default=100.0)
    s.add_argument("--bucket-bytes", default="16M")
    s.add_argument("--cycle-ms", type=float, default=1.0)
    s.set_defaults(fn=cmd_train_step)

    s = sub.add_parser("calibrate", help="(root) measure the test bed's link into a cluster file")
    s.add_argument("--rate", default="1gbit")
    s.add_argument("--out", default="")
    s.set_defaults(fn=cmd_calibrate)

    s = sub.add_parser("validate", help="(root) predictions beside measurements on the test bed")
    s.add_argument("--nodes", default="2,3,4")
    s.add_argument("--rates", default="1gbit,400mbit")
    s.add_argument("--colls", default="allreduce,allgather,broadcast")
    s.add_argument("--sizes", default="8,4K,256K,4M,64M")
    s.add_argument("--train-steps", default="",
                   help="also ResNet-50 train steps with each of these backward computes in ms, "
                        "e.g. 0,500 (default: none)")
    s.add_argument("--steps", type=int, default=5)
    s.add_argument("--json", default="")
    s.set_defaults(fn=cmd_validate)

    s = sub.add_parser("project", help="scaling efficiency of a training step at rank counts")
    s.add_argument("--model", default="resnet50")
    s.add_argument("--ranks", default="8,16,32,64,128,256,512")
    s.add_argument("--ranks-per-node", type=int, default=8)
    s.add_argument("--cores-per-node", type=int, default=32)
    s.add_argument("--gbit", type=float, default=100.0, help="each node's network link")
    s.add_argument("--net-alpha-us", type=float, default=10.0)
    s.add_argument("--node-alpha-us", type=float, default=2.0)
    s.add_argument("--node-gbytes-per-s", type=float, default=20.0)
    s.add_argument("--forward-ms", type=float, default=60.0)
    s.add_argument("--compute-ms", type=float, default=120.0, help="backward compute per step")
    s.add_argument("--bucket-bytes", default="16M")
    s.add_argument("--cycle-ms", type=float, default=1.0)
    s.add_argument("--json", default="")
    s.add_argument("--plot", default="")
    s.set_defaults(fn=cmd_project)

    a = ap.parse_args()
    if a.cmd in ("train-step", "project") and (a.cycle_ms <= 0 or a.compute_ms < 0):
        die("--cycle-ms must be above 0 and --compute-ms 0 or more")
    if a.cmd in ("train-step", "project") and parse_size(a.bucket_bytes) < 1:
        die("--bucket-bytes must be 1 or more")
    if a.cmd == "project":
        try:
            a.rank_counts = [int(x) for x in a.ranks.split(",")]
        except ValueError:
            die(f"--ranks '{a.ranks}' is not a list of rank counts")
        if a.ranks_per_node < 1 or a.cores_per_node < 1 or any(n < 1 for n in a.rank_counts):
            die("--ranks, --ranks-per-node and --cores-per-node must be 1 or more")
        if a.forward_ms < 0 or a.gbit <= 0 or a.node_gbytes_per_s <= 0 or \
                a.net_alpha_us < 0 or a.node_alpha_us < 0:
            die("project: rates must be above 0, times 0 or more")
    if a.cmd == "validate":
        try:
            a.train_steps = [float(x) for x in a.train_steps.split(",") if x]
        except ValueError:
            die(f"--train-steps '{a.train_steps}' is not a list of milliseconds")
        if any(x < 0 for x in a.train_steps):
            die("--train-steps: milliseconds must be 0 or more")
    if not os.path.isdir(a.build) and a.cmd in ("calibrate", "validate"):
        die(f"--build {a.build}: no such directory")
    a.fn(a)


if __name__ == "__main__":
    main()
