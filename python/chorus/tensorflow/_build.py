"""Building the TensorFlow op library (kernels.cc) against the TensorFlow imported here.

The shared object is cached under $CHORUS_TF_CACHE, else ~/.cache/chorus, keyed by a
digest of kernels.cc, chorus.h, the TensorFlow version and its flags, the compiler and
the libchorus path: a change of any of them builds afresh. Ranks that import at once
build once: the first takes a lock on the cache entry, builds into a temporary file and
renames it into place; the others wait for the lock and find the result.

It links libchorus from the directory of chorus._lib.library_path() (-l:libchorus.so.0,
with that directory as rpath), so that the op library resolves to the libchorus the
chorus package has already loaded. chorus.h is found at $CHORUS_INCLUDE, through
`pkg-config --cflags chorus`, in the library's ../include, or in this source tree.

    python -m chorus.tensorflow             # builds (or finds) it and prints its path

Environment: CXX (the compiler, g++ by default), CHORUS_TF_CACHE, CHORUS_INCLUDE.
"""

import fcntl
import hashlib
import os
import shlex
import subprocess
import sys
import tempfile

from .. import _lib

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "kernels.cc")


class BuildError(RuntimeError):
    """kernels.cc did not compile or link; the message holds the command and its output."""


def _cache_dir():
    d = os.environ.get("CHORUS_TF_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "chorus")
    os.makedirs(d, exist_ok=True)
    return d


def _has_header(d):
    return bool(d) and os.path.isfile(os.path.join(d, "chorus.h"))


def include_dir(libdir):
    """The directory holding chorus.h, in the order the module docstring gives."""
    tried = []
    env = os.environ.get("CHORUS_INCLUDE")
    if env:
        if _has_header(env):
            return env
        raise BuildError("chorus.tensorflow: CHORUS_INCLUDE=%s holds no chorus.h" % env)
    try:
        out = subprocess.run(["pkg-config", "--cflags-only-I", "chorus"], capture_output=True,
                             text=True, timeout=10)
        if out.returncode == 0:
            for flag in shlex.split(out.stdout):
                if flag.startswith("-I") and _has_header(flag[2:]):
                    return flag[2:]
        tried.append("pkg-config chorus")
    except (OSError, subprocess.SubprocessError):
        tried.append("pkg-config (not run)")
    # An installed prefix (PREFIX/lib beside PREFIX/include), then this source tree.
    for d in (os.path.join(libdir, os.pardir, "include"),
              os.path.join(_HERE, os.pardir, os.pardir, os.pardir, "include")):
        d = os.path.normpath(d)
        if _has_header(d):
            return d
        tried.append(d)
    raise BuildError("chorus.tensorflow: chorus.h not found (tried %s); set CHORUS_INCLUDE "
                     "to the directory that holds it" % ", ".join(tried))


def _command(tf, out, incdir, libdir):
    cxx = shlex.split(os.environ.get("CXX") or "g++")
    # TensorFlow's own headers use what they deprecate: those warnings are theirs.
    return (cxx + ["-O2", "-shared", "-fPIC", "-Wall", "-Wno-deprecated-declarations"] +
            tf.sysconfig.get_compile_flags() +
            ["-I" + incdir, _SOURCE, "-o", out] + tf.sysconfig.get_link_flags() +
            ["-L" + libdir, "-l:" + _lib._SONAME, "-Wl,-rpath," + libdir])


def _key(tf, incdir, libpath):
    h = hashlib.sha256()
    for part in (open(_SOURCE, "rb").read(), open(os.path.join(incdir, "chorus.h"), "rb").read(),
                 tf.__version__.encode(), " ".join(tf.sysconfig.get_compile_flags()).encode(),
                 " ".join(tf.sysconfig.get_link_flags()).encode(), libpath.encode(),
                 (os.environ.get("CXX") or "g++").encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:24]


def build(verbose=False):
    """The path of the op library for the imported TensorFlow; builds it when not cached.
    Raises BuildError with the compiler's output when it fails."""
    import tensorflow as tf

    libpath = os.path.realpath(_lib.library_path())
    libdir = os.path.dirname(libpath)
    incdir = include_dir(libdir)
    cache = _cache_dir()
    path = os.path.join(cache, "chorus_tf_ops-%s.so" % _key(tf, incdir, libpath))
    if os.path.exists(path):
        return path
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # another rank building it: wait, then reuse
        if os.path.exists(path):
            return path
        fd, tmp = tempfile.mkstemp(prefix=".chorus_tf_ops-", suffix=".so", dir=cache)
        os.close(fd)
        try:
            cmd = _command(tf, tmp, incdir, libdir)
            if verbose:
                print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise BuildError("chorus.tensorflow: building the op library failed (exit %d)"
                                 ":\n$ %s\n%s%s" % (done.returncode,
                                                     " ".join(shlex.quote(c) for c in cmd),
                                                     done.stdout, done.stderr))
            os.chmod(tmp, 0o755)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path

