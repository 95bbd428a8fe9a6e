"""Shared by the tests in which a rank dies (torch_kill.py, tf_kill.py, mx_kill.py): starts
n copies of a script as the ranks of one job, whose last rank kills itself (SIGKILL)
after a few good steps, and checks that every other rank printed a line with the
expected words (the error it raised) and exited 0, within a deadline, and that the last
one died by SIGKILL. A launcher would stop the other ranks itself when one dies, so the
ranks are started here.
"""

import signal
import socket
import subprocess
import sys
import time


# The ports free_port() handed out, kept bound until the test exits.
_held = []


def free_port():
    """A TCP port of 127.0.0.1, kept bound (SO_REUSEADDR, not listening) until this process
    exits: released at once, another test's connection could be given it before the job's
    store binds it beside this socket (chorus's and torch's stores both do)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _held.append(s)
    return s.getsockname()[1]


def run_job(script, n, env, rank_env, expect, deadline_s, label=""):
    """Runs script as ranks 0..n-1 with env plus rank_env(r); prints one "ok"/"FAIL" line
    per rank (label first); returns how many ranks did not behave."""
    procs = [subprocess.Popen([sys.executable, script], env=dict(env, **rank_env(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(n)]
    deadline = time.monotonic() + deadline_s
    prefix = label + ": " if label else ""
    failed = 0
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            print("FAIL: %srank %d still running after %d s (a hang)" % (prefix, r,
                                                                          deadline_s))
            failed += 1
            continue
        if r == n - 1:
            ok = p.returncode == -signal.SIGKILL
            what = "was killed" if ok else "exited %d, not by SIGKILL" % p.returncode
        else:
            ok = p.returncode == 0 and expect in out
            what = next((line for line in out.splitlines() if "RAISED" in line),
                        "exit %d" % p.returncode)
        print("%s: %srank %d %s" % ("ok" if ok else "FAIL", prefix, r, what), flush=True)
        if not ok:
            failed += 1
            print(out[-3000:])
    return failed
