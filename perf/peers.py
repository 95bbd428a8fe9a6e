"""The libraries perf/compare.py runs side by side: chorus itself and its peers.

Each one is a class with the same small interface, so compare.py treats them alike:

  probe(tmpdir)  -> None when usable, else the reason it is not ("not available (...)");
                    builds what it needs (the MPI benchmark) into tmpdir and fills config
  supports(coll) -> None, or why this library has no such collective
  run(plan, coll, rep, logdir) -> {effective size: {"time_us": ..., ...}}

A run that fails or times out raises RunError (the comparison goes on without it); a run
whose results were checked wrong raises WrongResults (the comparison stops). Everything
is started in its own session and killed with all it started when it ends or times out.
"""

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's python3-torch and python3-matplotlib live here
GLOO_WORKER = os.path.join(HERE, "gloo_worker.py")
GLOO_EXIT_WRONG, GLOO_EXIT_NO_TORCH, GLOO_EXIT_UNSUPPORTED = 3, 4, 5
MPI_EXIT_WRONG = 3
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
# what compare.py's "-d all" runs: the four collectives of the P1 figure (alltoall, P13's,
# is run when named)
ALL_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast")
# sizes are whole buffers of one block per rank: size / n bytes per rank (allgather,
# reduce_scatter) or to every peer (alltoall: each rank's whole send buffer)
BLOCKED = ("allgather", "reduce_scatter", "alltoall")
BUSBW_FACTOR = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "alltoall": lambda n: (n - 1) / n,
}


class RunError(Exception):
    """A run that failed or timed out; the comparison goes on without it."""


class WrongResults(Exception):
    """A run whose results were checked wrong; the comparison stops."""


def effective_size(coll, size, n):
    """The bytes every library really moves for a requested size (float32 elements;
    allgather, reduce_scatter and alltoall whole blocks of size / n per rank), as
    chorus-perf."""
    count = size // 4
    return (count // n) * n * 4 if coll in BLOCKED else count * 4


def busbw(coll, n, size, time_us):
    return size / (time_us * 1e-6) / 1e9 * BUSBW_FACTOR[coll](n) if time_us > 0 else 0.0


# ---- processes -----------------------------------------------------------------------


def _children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def _descendants(pid):
    kids, out, todo = _children_map(), [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_tree(proc, grace=5.0):
    """End a process we started, its session, and any descendant that left the session
    (an MPI launcher may put its ranks in their own groups). The process gets SIGTERM
    first and grace seconds: mpirun then ends its ranks and removes their shared-memory
    files, which SIGKILL would leave behind in /dev/shm."""
    if proc.poll() is not None:
        return
    doomed = _descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        doomed += _descendants(proc.pid)
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the rest of its session, if any
    except (ProcessLookupError, PermissionError):
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
    Returns (exit codes, log paths); kills every one of them on timeout or interrupt."""
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
        for k, p in enumerate(procs):
            try:
                p.wait(timeout=max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                raise RunError("%s: timed out after %.0f s: %s\n%s"
                               % (tag, timeout, shlex.join(cmds[k]), tail(logs[k])))
            # one rank that died leaves the others waiting: do not wait for them long
            if p.returncode != 0:
                deadline = min(deadline, time.monotonic() + 30)
        return [p.returncode for p in procs], logs
    finally:
        for p in procs:
            kill_tree(p)


def capture(cmd, timeout=60, env=None):
    """stdout of a short command, or None."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def build(cmd):
    """Run a compiler command (2 minutes at most): None on success, else why it failed."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "%s failed: %s" % (shlex.join(cmd), e)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
        return "%s failed: %s" % (shlex.join(cmd), last)
    return None


@contextlib.contextmanager
def held_port():
    """A free port of 127.0.0.1, kept bound (SO_REUSEADDR, not listening) while the block
    runs: released at once, it could be given to another process's connection before the
    worker that listens on it binds it (torch's store binds beside it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def env_with(extra):
    env = os.environ.copy()
    env.update(extra)
    return env


# ---- chorus ----------------------------------------------------------------------------


def install_lib_dir(perf):
    """LIB of an installed tree PREFIX/bin/chorus-perf, PREFIX/lib/libchorus.so*, or None
    (a build tree's chorus-perf is a libtool wrapper that finds its own library)."""
    d = os.path.dirname(os.path.abspath(perf))
    lib = os.path.join(os.path.dirname(d), "lib")
    if os.path.basename(d) != "bin" or not os.path.isdir(lib):
        return None
    return lib if any(f.startswith("libchorus.so") for f in os.listdir(lib)) else None


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


class Chorus:
    """chorus-perf -np N, one launch per geometric run of sizes that share iteration counts.

    One chorus build: "chorus" is the one under test, "chorus-base" (compare.py
    --baseline-perf) an older one run beside it. The chorus-perf of an installed tree runs
    with that tree's lib first on LD_LIBRARY_PATH: its RUNPATH may name another tree's
    library, and LD_LIBRARY_PATH set outside would otherwise win over it."""

    def __init__(self, args, name="chorus", perf=None, env=None, mem=None):
        self.args, self.name, self.mem = args, name, mem
        self.perf = perf or args.chorus_perf
        self.env_given = dict(args.chorus_env if env is None else env)
        self.env = dict(self.env_given)
        self.lib_dir = install_lib_dir(self.perf)
        if self.lib_dir is not None and "LD_LIBRARY_PATH" not in self.env_given:
            outer = os.environ.get("LD_LIBRARY_PATH")
            self.env["LD_LIBRARY_PATH"] = self.lib_dir + (":" + outer if outer else "")
        self.colls = None  # the collectives this chorus-perf names in --help, if it says
        self.config = {}

    def probe(self, tmpdir):
        if not os.access(self.perf, os.X_OK):
            return "chorus-perf not found or not executable: %s (build chorus, or give " \
                   "--build-dir / --chorus-perf / --baseline-perf)" % self.perf
        env = env_with(self.env)
        shown = {k: ("(set)" if k == "CHORUS_SECRET" else v)
                 for k, v in env.items() if k.startswith("CHORUS_")}
        self.colls = self._help_collectives(env)
        self.config = {"perf": os.path.abspath(self.perf), "env": shown,
                       "env_given": self.env_given, "check": 1,
                       "ld_library_path": self.env.get("LD_LIBRARY_PATH")
                       if self.lib_dir is not None else None,
                       "libchorus": self._libchorus(env),
                       "collectives": self.colls,
                       "buffers": "chorus-perf's own: up to 4 rotating send/receive pairs "
                       "per rank within 1 GiB%s" % (", --mem " + self.mem if self.mem else ""),
                       "config_in_effect": self._info_config()}
        return None

    def _libchorus(self, env):
        """The libchorus this chorus-perf loads, as ldd resolves it with its environment
        (None for a libtool wrapper script)."""
        if not is_elf(self.perf) or shutil.which("ldd") is None:
            return None
        for line in (capture(["ldd", self.perf], timeout=20, env=env) or "").splitlines():
            if "libchorus" in line and "=>" in line:
                return line.split("=>", 1)[1].split("(")[0].strip()
        return None

    def _help_collectives(self, env):
        """The collectives chorus-perf --help names (None when it does not say)."""
        out = capture([self.perf, "--help"], timeout=20, env=env) or ""
        text = out.split("COLLECTIVE:", 1)[1] if "COLLECTIVE:" in out else ""
        words = text.split("or all", 1)[0].replace(",", " ").split()
        return words if words and all(w.replace("_", "").isalpha() for w in words) \
            else None

    def _info_config(self):
        d = os.path.dirname(os.path.abspath(self.perf))
        for cand in (os.path.join(d, "chorus-info"),
                     os.path.join(d, "..", "src", "tools", "chorus-info")):
            if os.path.exists(cand):
                # the values chorus-perf's ranks will see, --env included
                out = capture([cand, "-c"], timeout=20, env=env_with(self.env))
                if out is None:
                    return None
                conf = {}
                for line in out.splitlines():
                    if line.startswith("CHORUS_") and "=" in line:
                        k, v = line.split("=", 1)
                        conf[k] = "(set)" if k == "CHORUS_SECRET" and v else v
                return conf
        return None

    def supports(self, coll):
        if self.colls is not None and coll not in self.colls:
            return "%s --help names no %s" % (self.perf, coll)
        return None

    @staticmethod
    def segments(plan):
        """Split [(size, iters, warmup)] into chorus-perf runs (lo, hi, factor, iters,
        warmup): geometric runs of sizes that share iters and warmup."""
        segs = []
        for s, it, wu in plan:
            if segs:
                lo, hi, f, it0, wu0 = segs[-1]
                nf = f if f else (s // hi if s % hi == 0 and s // hi >= 2 else 0)
                if (it, wu) == (it0, wu0) and nf >= 2 and s == hi * nf:
                    segs[-1] = (lo, s, nf, it, wu)
                    continue
            segs.append((s, s, 0, it, wu))
        return [(lo, hi, f or 2, it, wu) for lo, hi, f, it, wu in segs]

    def run(self, plan, coll, rep, logdir):
        rows = {}
        for k, (lo, hi, f, it, wu) in enumerate(self.segments(plan)):
            tag = "%s.%s.%d.%d" % (self.name, coll, rep, k)
            out = os.path.join(logdir, tag + ".json")
            cmd = [self.perf, coll, "-np", str(self.args.nranks), "-b", str(lo), "-e", str(hi),
                   "-f", str(f), "-n", str(it), "-w", str(wu), "-c", "1", "--json", out] + \
                (["--mem", self.mem] if self.mem else [])
            codes, logs = run_procs([cmd], env_with(self.env), self.args.timeout, logdir, tag)
            data = None
            if os.path.exists(out):
                try:
                    with open(out) as fj:
                        data = json.load(fj)
                except ValueError:
                    data = None
            if data is not None and data.get("wrong_total", 0) != 0:
                raise WrongResults("%s: chorus-perf %s: wrong_total %s: %s\n%s"
                                   % (self.name, coll, data["wrong_total"], shlex.join(cmd),
                                      tail(logs[0])))
            if codes[0] != 0 or data is None:
                raise RunError("%s: chorus-perf %s exited %d: %s\n%s"
                               % (self.name, coll, codes[0], shlex.join(cmd), tail(logs[0])))
            for r in data["results"]:
                if r["size"] > 0:
                    rows[r["size"]] = r
        return rows


# ---- MPI -------------------------------------------------------------------------------


def _mpi_plan_args(plan):
    """mpi_bench's size and iteration options for [(size, iters, warmup)]: at most two
    iteration classes (below and from the first size that uses the second)."""
    classes = []
    for _, it, wu in plan:
        if (it, wu) not in classes:
            classes.append((it, wu))
    if len(classes) > 2:
        raise ValueError("mpi_bench takes two iteration classes, the plan has %d" % len(classes))
    args = ["-s", ",".join(str(s) for s, _, _ in plan),
            "-n", str(classes[0][0]), "-w", str(classes[0][1])]
    if len(classes) == 2:
        first = min(s for s, it, wu in plan if (it, wu) == classes[1])
        if any(s >= first and (it, wu) != classes[1] for s, it, wu in plan):
            raise ValueError("the second iteration class must hold the largest sizes")
        args += ["-L", str(first), "-N", str(classes[1][0]), "-W", str(classes[1][1])]
    return args


class Mpi:
    """perf/mpi_bench.c built with this MPI's own mpicc and started with its own mpirun."""
    SOURCE = os.path.join(HERE, "mpi_bench.c")

    def __init__(self, args, name, mpicc, mpirun, launch_args, env):
        self.args, self.name = args, name
        self.mpicc, self.mpirun = mpicc, mpirun
        self.launch_args = launch_args
        self.env = dict(env)
        self.exe = None
        self.config = {}

    def supports(self, coll):
        return None

    def _version(self):
        return None

    def probe(self, tmpdir):
        for tool in (self.mpicc, self.mpirun):
            if shutil.which(tool) is None:
                return "%s is not installed" % tool
        if not os.path.exists(self.SOURCE):
            return "%s is missing" % self.SOURCE
        self.exe = os.path.join(tmpdir, "mpi_bench." + self.name)
        cmd = [self.mpicc, "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-o", self.exe,
               self.SOURCE]
        why = build(cmd)
        if why is not None:
            return why
        self.config = {
            "mpicc": shutil.which(self.mpicc), "build": shlex.join(cmd),
            "mpirun": shutil.which(self.mpirun),
            "command": shlex.join(self.command(["-c", "COLL", "..."])),
            "env_given": self.env,
            "env_in_effect": {k: v for k, v in env_with(self.env).items()
                              if k.startswith(("OMPI_", "PMIX_MCA_", "MPIR_CVAR_", "UCX_",
                                               "HYDRA_", "MPIEXEC_", "CHORUS_",
                                               "LD_PRELOAD"))},
            "version": self._version(),
            "check": "one call on known values per size before timing (mpi_bench)",
            "buffers": "up to %d rotating buffers per size within 1 GiB per rank"
                       % self.args.buffers,
            "calls": "in place: MPI_Allreduce, MPI_Allgather, MPI_Reduce_scatter_block, "
                     "MPI_Alltoall with MPI_IN_PLACE; MPI_Bcast from root 0",
        }
        return None

    def command(self, bench_args):
        return [self.mpirun] + self.launch_args + ["-n", str(self.args.nranks),
                                                   self.exe or "mpi_bench"] + bench_args

    def run(self, plan, coll, rep, logdir):
        tag = "%s.%s.%d" % (self.name, coll, rep)
        cmd = self.command(["-c", coll, "-b", str(self.args.buffers)] + _mpi_plan_args(plan))
        codes, logs = run_procs([cmd], env_with(self.env), self.args.timeout, logdir, tag)
        rows, wrong_total, header = {}, None, None
        with open(logs[0], errors="replace") as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if "tool" in obj:
                    header = obj
                elif "wrong_total" in obj:
                    wrong_total = obj["wrong_total"]
                elif "size" in obj:
                    rows[obj["size"]] = obj
        bad = sum(r.get("wrong", 0) for r in rows.values())
        if codes[0] == MPI_EXIT_WRONG or bad or wrong_total:
            raise WrongResults("%s %s: %s wrong elements: %s\n%s"
                               % (self.name, coll, wrong_total or bad, shlex.join(cmd),
                                  tail(logs[0])))
        if codes[0] != 0 or wrong_total is None:
            raise RunError("%s %s exited %d: %s\n%s"
                           % (self.name, coll, codes[0], shlex.join(cmd), tail(logs[0])))
        if header is not None:
            self.config["library"] = header.get("library")
        return rows


class OpenMpi(Mpi):
    def __init__(self, args):
        launch = ["--oversubscribe"]
        if os.geteuid() == 0:
            launch.append("--allow-run-as-root")
        # ob1 with shared memory (vader) is Open MPI 4.1's fast node-local path; left to
        # itself, it picked a path about 60x slower at 1 KiB on the development machine.
        launch += args.ompi_args if args.ompi_args is not None else \
            ["--mca", "pml", "ob1", "--mca", "btl", "self,vader"]
        super().__init__(args, "ompi", "mpicc.openmpi", "mpirun.openmpi", launch,
                         args.ompi_env)

    def _version(self):
        v = capture(["ompi_info", "--version"])
        return v.strip().splitlines()[0] if v else None

    def probe(self, tmpdir):
        why = super().probe(tmpdir)
        if why is None:
            p = capture(["ompi_info", "--param", "btl", "vader", "--level", "9",
                         "--parsable"]) or ""
            mech = [ln.rsplit(":", 1)[1] for ln in p.splitlines()
                    if ln.startswith("mca:btl:vader:param:btl_vader_single_copy_mechanism:"
                                     "value:")]
            self.config["transport"] = "pml and btl as in the mpirun command line; " \
                "btl_vader_single_copy_mechanism default: %s" % (mech[0] if mech else "?")
        return why


class Mpich(Mpi):
    def __init__(self, args):
        super().__init__(args, "mpich", "mpicc.mpich", "mpirun.mpich",
                         args.mpich_args or [], args.mpich_env)

    def _version(self):
        v = capture(["mpichversion"])
        if not v:
            return None
        keep = [ln.strip() for ln in v.splitlines()
                if ln.startswith(("MPICH Version", "MPICH Device"))]
        return "; ".join(" ".join(ln.split()) for ln in keep)

    def probe(self, tmpdir):
        why = super().probe(tmpdir)
        if why is None:
            dev = [p for p in (self.config["version"] or "").split("; ") if "Device" in p]
            self.config["transport"] = "%s, mpirun.mpich defaults" \
                % (dev[0].split(":", 1)[1].strip() if dev else "device unknown")
        return why


class Interposed:
    """The same MPI benchmark and launcher as the MPI it extends, with that MPI's chorus
    interposer (BUILD_DIR/src/pmpi) in LD_PRELOAD: "ompi-pmpi" beside "ompi", "mpich-pmpi"
    beside "mpich". CHORUS_PMPI and the other chorus variables come from that MPI's
    --ompi-env / --mpich-env."""

    def _interpose(self, name, library):
        self.name = name
        self.interposer = os.path.join(self.args.build_dir, "src", "pmpi", ".libs", library)
        self.env["LD_PRELOAD"] = self.interposer

    def probe(self, tmpdir):
        if not os.path.exists(self.interposer):
            return "%s is not built (./quickstart build with %s installed)" \
                % (self.interposer, self.mpicc)
        why = super().probe(tmpdir)
        if why is None:
            self.config["interposer"] = self.interposer
        return why


class OpenMpiInterposed(Interposed, OpenMpi):
    def __init__(self, args):
        OpenMpi.__init__(self, args)
        self._interpose("ompi-pmpi", "libchorus_pmpi_openmpi.so")


class MpichInterposed(Interposed, Mpich):
    def __init__(self, args):
        Mpich.__init__(self, args)
        self._interpose("mpich-pmpi", "libchorus_pmpi_mpich.so")


# ---- torch.distributed gloo ------------------------------------------------------------


# chorus-perf's figure that matches the form torch calls: torch's allreduce and broadcast
# are in place, its allgather, reduce_scatter and all_to_all_single out of place
GLOO_MATCHED_VARIANT = {"allreduce": "in_place", "broadcast": "in_place",
                        "allgather": "out_of_place", "reduce_scatter": "out_of_place",
                        "alltoall": "out_of_place"}


class Gloo:
    """perf/gloo_worker.py, one process per rank, run by Debian's /usr/bin/python3."""
    name = "gloo"

    def __init__(self, args):
        self.args = args
        self.config = {}
        self.unsupported = {}

    def probe(self, tmpdir):
        if not os.path.exists(SYSTEM_PYTHON):
            return "%s is missing" % SYSTEM_PYTHON
        try:
            r = subprocess.run([SYSTEM_PYTHON, "-c", "import torch, torch.distributed as d; "
                                "print(torch.__version__, d.is_gloo_available())"],
                               capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return "torch check failed: %s" % e
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
            return "%s cannot import torch (install Debian's python3-torch): %s" \
                % (SYSTEM_PYTHON, last)
        version, gloo_ok = r.stdout.split()
        if gloo_ok != "True":
            return "torch %s was built without gloo" % version
        self.config = {"python": SYSTEM_PYTHON, "worker": GLOO_WORKER, "version": version,
                       "torch_version": version,
                       "init_method": "tcp://127.0.0.1:<free port per run>",
                       "transport": "gloo over TCP loopback (GLOO_SOCKET_IFNAME=lo)",
                       "env_given": {"GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
                                     "MKL_NUM_THREADS": "1"},
                       "torch_num_threads": 1, "torch_num_interop_threads": 1,
                       "buffers_per_size": self.args.buffers,
                       "check": "one call on known values per size, before timing",
                       "chorus_variant_compared": GLOO_MATCHED_VARIANT}
        return None

    def supports(self, coll):
        return self.unsupported.get(coll)

    def run(self, plan, coll, rep, logdir):
        rows = {}
        for k, group in enumerate(_iteration_groups(plan)):
            rows.update(self._run_group(group, coll, "gloo.%s.%d.%d" % (coll, rep, k), logdir))
        return rows

    def _run_group(self, plan, coll, tag, logdir):
        out = os.path.join(logdir, tag + ".json")
        sizes = ",".join(str(s) for s, _, _ in plan)
        env = env_with(self.config["env_given"])
        with held_port() as port:
            cmds = []
            for rank in range(self.args.nranks):
                cmd = [SYSTEM_PYTHON, GLOO_WORKER, "--rank", str(rank),
                       "--world", str(self.args.nranks), "--port", str(port), "--coll", coll,
                       "--sizes", sizes, "--iters", str(plan[0][1]),
                       "--warmup", str(plan[0][2]), "--buffers", str(self.args.buffers),
                       "--timeout", str(self.args.timeout)]
                cmds.append(cmd + (["--out", out] if rank == 0 else []))
            codes, logs = run_procs(cmds, env, self.args.timeout, logdir, tag)
        if GLOO_EXIT_UNSUPPORTED in codes:
            msg = [ln for ln in tail(logs[0], 5).splitlines() if "unsupported" in ln]
            self.unsupported[coll] = msg[-1] if msg else "gloo has no %s here" % coll
            raise RunError(self.unsupported[coll])
        data = None
        if os.path.exists(out):
            with open(out) as f:
                data = json.load(f)
        if GLOO_EXIT_WRONG in codes or (data is not None and data["wrong_total"] != 0):
            raise WrongResults("gloo %s: %s wrong elements: %s\n%s"
                               % (coll, data and data["wrong_total"], shlex.join(cmds[0]),
                                  tail(logs[0])))
        bad = [(k, c) for k, c in enumerate(codes) if c != 0]
        if bad or data is None:
            k = bad[0][0] if bad else 0
            raise RunError("gloo %s: rank exit codes %s: %s\n%s"
                           % (coll, codes, shlex.join(cmds[k]), tail(logs[k])))
        self.config["method_%s" % coll] = data["results"][0]["method"] if data["results"] \
            else None
        return {r["size"]: r for r in data["results"]}


def _iteration_groups(plan):
    """[(size, iters, warmup)] cut where iters or warmup change."""
    groups = []
    for item in plan:
        if groups and groups[-1][-1][1:] == item[1:]:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups
