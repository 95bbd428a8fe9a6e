"""Loading libchorus and declaring the C functions the package calls.

The library is found, in this order, at CHORUS_LIB; in the libdir that
`pkg-config chorus` names; beside the chorus-run on PATH (PREFIX/bin and
PREFIX/lib); and as libchorus.so.0 on the loader's own path.
"""

import ctypes
import os
import shutil
import subprocess
import threading

_SONAME = "libchorus.so.0"

# chorus_status_t, by value: the names chorus_status_string() also gives.
STATUS_NAMES = {
    0: "OK", -1: "INVALID_ARG", -2: "NO_MEMORY", -3: "TIMEOUT", -4: "PEER_FAILED",
    -5: "ABORTED", -6: "AUTH", -7: "PROTOCOL", -8: "SYSTEM", -9: "UNSUPPORTED",
    -10: "TRUNCATED", -11: "INTERNAL", -12: "IN_USE", -13: "DEVICE",
}

UNIQUE_ID_BYTES = 256


class ChorusError(RuntimeError):
    """A chorus call failed; status is the chorus_status_t value, name its name."""

    def __init__(self, status, what):
        self.status = status
        self.name = STATUS_NAMES.get(status, str(status))
        super().__init__("chorus: %s failed: %s (%s)" % (what, _status_text(status), self.name))


class LibraryNotFound(ImportError):
    pass


def _candidates():
    env = os.environ.get("CHORUS_LIB")
    if env:
        # An explicit choice is the only one tried: a wrong path must not fall back silently.
        return [("CHORUS_LIB", env)]
    found = []
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "chorus"],
                                capture_output=True, text=True, timeout=10)
        if libdir.returncode == 0 and libdir.stdout.strip():
            found.append(("pkg-config", os.path.join(libdir.stdout.strip(), _SONAME)))
    except (OSError, subprocess.SubprocessError):
        pass
    run = shutil.which("chorus-run")
    if run:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(run)))
        found.append(("chorus-run's prefix", os.path.join(prefix, "lib", _SONAME)))
    found.append(("the loader's path", _SONAME))
    return found


def _load():
    tried = []
    for how, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (%s: no such file)" % (path, how))
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s: %s)" % (path, how, e))
    raise LibraryNotFound("chorus: libchorus not found; tried " + "; ".join(tried) +
                          ". Install chorus (./quickstart build) and set CHORUS_LIB to "
                          "its lib/libchorus.so.0, or PKG_CONFIG_PATH to its lib/pkgconfig")


_lock = threading.Lock()
_lib = None
_path = None


def _status_text(status):
    lib = library()
    text = lib.chorus_status_string(status)
    return text.decode() if text else "status %d" % status


c_int, c_size_t, c_double, c_void_p, c_char_p, c_uint32 = (
    ctypes.c_int, ctypes.c_size_t, ctypes.c_double, ctypes.c_void_p, ctypes.c_char_p,
    ctypes.c_uint32)


class Opts(ctypes.Structure):
    """chorus_opts_t."""
    _fields_ = [("struct_size", c_size_t), ("flags", c_uint32), ("priority", c_int),
                ("mem_type", c_int), ("stream", c_void_p)]


class EngineOpts(ctypes.Structure):
    """chorus_engine_opts_t."""
    _fields_ = [("struct_size", c_size_t), ("bucket_bytes", c_size_t), ("cycle_ms", c_double)]


class UniqueId(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_char * UNIQUE_ID_BYTES)]


def make_opts(flags=0):
    return Opts(ctypes.sizeof(Opts), flags, 0, 0, None)


_P = ctypes.POINTER
_STATUS = c_int
_COMM, _REQ, _ENGINE = c_void_p, c_void_p, c_void_p
_OPTS = _P(Opts)

# name: (return type, argument types)
_PROTOTYPES = {
    "chorus_status_string": (c_char_p, [c_int]),
    "chorus_version_string": (c_char_p, []),
    "chorus_comm_create_from_env": (_STATUS, [_P(_COMM)]),
    "chorus_unique_id_create": (_STATUS, [_P(UniqueId)]),
    "chorus_comm_create_from_id": (_STATUS, [c_int, c_int, _P(UniqueId), c_double, _P(_COMM)]),
    "chorus_comm_destroy": (_STATUS, [_COMM]),
    "chorus_comm_abort": (_STATUS, [_COMM]),
    "chorus_comm_get_error": (_STATUS, [_COMM]),
    "chorus_comm_rank": (c_int, [_COMM]),
    "chorus_comm_size": (c_int, [_COMM]),
    "chorus_comm_local_rank": (c_int, [_COMM]),
    "chorus_comm_local_size": (c_int, [_COMM]),
    "chorus_comm_node_count": (c_int, [_COMM]),
    "chorus_comm_node": (c_int, [_COMM, c_int]),
    "chorus_comm_split": (_STATUS, [_COMM, c_int, c_int, _P(_COMM)]),
    "chorus_comm_dup": (_STATUS, [_COMM, _P(_COMM)]),
    "chorus_iallreduce": (_STATUS, [c_void_p, c_void_p, c_size_t, c_int, c_int, _COMM, _OPTS,
                                    _P(_REQ)]),
    "chorus_iallgather": (_STATUS, [c_void_p, c_void_p, c_size_t, c_int, _COMM, _OPTS,
                                    _P(_REQ)]),
    "chorus_ibroadcast": (_STATUS, [c_void_p, c_void_p, c_size_t, c_int, c_int, _COMM, _OPTS,
                                    _P(_REQ)]),
    "chorus_ireduce_scatter": (_STATUS, [c_void_p, c_void_p, c_size_t, c_int, c_int, _COMM,
                                         _OPTS, _P(_REQ)]),
    "chorus_ireduce": (_STATUS, [c_void_p, c_void_p, c_size_t, c_int, c_int, c_int, _COMM,
                                 _OPTS, _P(_REQ)]),
    "chorus_ialltoall": (_STATUS, [c_void_p, c_void_p, c_size_t, c_int, _COMM, _OPTS,
                                   _P(_REQ)]),
    "chorus_ibarrier": (_STATUS, [_COMM, _OPTS, _P(_REQ)]),
    "chorus_engine_create": (_STATUS, [_COMM, _P(EngineOpts), _P(_ENGINE)]),
    "chorus_engine_allreduce": (_STATUS, [_ENGINE, c_char_p, c_void_p, c_void_p, c_size_t,
                                          c_int, c_int, _OPTS, _P(_REQ)]),
    "chorus_engine_broadcast": (_STATUS, [_ENGINE, c_char_p, c_void_p, c_void_p, c_size_t,
                                          c_int, c_int, _OPTS, _P(_REQ)]),
    "chorus_engine_allgather": (_STATUS, [_ENGINE, c_char_p, c_void_p, c_void_p, c_size_t,
                                          c_int, _OPTS, _P(_REQ)]),
    "chorus_engine_destroy": (_STATUS, [_ENGINE]),
    "chorus_request_wait": (_STATUS, [_REQ]),
    "chorus_request_test": (_STATUS, [_REQ, _P(c_int)]),
    "chorus_request_free": (_STATUS, [_REQ]),
    "chorus_request_algorithm": (c_char_p, [_REQ]),
}


def library():
    """The loaded libchorus (a ctypes.CDLL); loads it on first use."""
    global _lib, _path
    if _lib is not None:  # every C call comes here: no lock once loaded
        return _lib
    with _lock:
        if _lib is None:
            lib, path = _load()
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib, _path = lib, path
        return _lib


def library_path():
    library()
    return _path


def check(status, what):
    """Raise ChorusError unless status is CHORUS_OK."""
    if status != 0:
        raise ChorusError(status, what)
