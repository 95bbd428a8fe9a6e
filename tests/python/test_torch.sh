#!/bin/sh
# The PyTorch side of chorus (python/chorus): the torch.distributed backend "chorus" under
# torchrun at 2 and 3 ranks (every collective, dtype and op against references and gloo;
# DDP against gloo, and DDP with chorus.torch.hooks' wire compression), FSDP against one
# process, a rank killed under a group, the Horovod-style API under chorus-run at 2 and 3
# ranks and torchrun, the examples, chorus-perf under torchrun itself, and the installed
# package finding the installed library by itself.
#
# Runs the Python in CHORUS_TORCH_PYTHON (./quickstart check makes one with torch); skips
# (77) without it, or when this build's library is built with a sanitizer (it cannot be
# loaded into a Python that was not started with the sanitizer's runtime).
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_torch

. "$(dirname "$0")/framework.sh"
framework_python CHORUS_TORCH_PYTHON torch
# Runs under torchrun --standalone, or at MASTER_PORT $RDZV_PORT when that is set.
torchrun() {
    n=$1
    shift
    set -- --nproc-per-node "$n" "$@"
    if [ -n "${RDZV_PORT:-}" ]; then
        set -- --master-addr 127.0.0.1 --master-port "$RDZV_PORT" "$@"
    else
        set -- --standalone "$@"
    fi
    timeout -k 5 300 "$PY" -m torch.distributed.run "$@" >"$TMP/out" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { grep -v '^W[0-9]' "$TMP/out" | grep -m 10 'chorus\['
        grep -v '^W[0-9]' "$TMP/out" | tail -n 30; return $rc; }
}
# A MASTER_PORT for programs that meet through chorus's own rendezvous, which is at
# MASTER_PORT + 1 under torchrun. torchrun --standalone takes its port among those Linux
# gives connections, so the next one may belong to a connection of a test running beside
# this one; this pair is below that range and free when chosen.
master_port() {
    "$PY" -c '
import random, socket
for _ in range(500):
    port, held = random.randrange(20000, 32000), []
    try:
        for p in (port, port + 1):
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", p))
        print(port)
        break
    except OSError:
        pass
    finally:
        for s in held:
            s.close()
'
}
# A reference run on gloo: torch's gloo backend sometimes aborts at exit, after the work
# ("terminate called without an active exception": 1 run in 6 of the DDP example here, half
# of FSDP's), so such aborts are retried, twice at most.
torchrun_gloo() {
    for try in 1 2 3; do
        torchrun "$@" && return 0
        grep -q 'terminate called without an active exception' "$TMP/out" || return 1
        echo "test_torch: gloo aborted at exit (try $try)"
    done
    return 1
}

for n in 2 3; do
    check "every collective, dtype and op at $n ranks" torchrun $n "$here/torch_collectives.py"
    check "DDP against gloo, and the engine's compression hooks, at $n ranks" \
        torchrun $n "$here/torch_ddp.py"
    grep -h 'hook:\|fp32:' "$TMP/out"
done
# FSDP against one process's training on the whole batch.
for n in 2 3; do
    check "FSDP on chorus at $n ranks equals one process on the whole batch" \
        torchrun $n "$here/torch_fsdp.py"
    grep -h '^FSDP' "$TMP/out"
done

# A C program under torchrun itself, whose agent holds MASTER_PORT for its store.
RDZV_PORT=$(master_port)
torchrun 3 --no-python "$CHORUS_PERF" allreduce -b 8 -e 64K -f 8 -n 2 -w 1 -c 1
rc=$?
RDZV_PORT=
check "chorus-perf under torchrun --nproc-per-node 3 (exit $rc)" test $rc -eq 0
check "chorus-perf under torchrun: no wrong element" \
    grep -q '^# out-of-place/in-place wrong elements total: 0' "$TMP/out"

# Launchers that set no torch variables: importing chorus.torch sets them.
timeout -k 5 120 env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "$CHORUS_RUN" -n 3 \
    "$PY" "$here/torch_collectives.py" groups errors >"$TMP/run" 2>&1
rc=$?
check "init_process_group(\"chorus\") under chorus-run -n 3 (exit $rc)" test $rc -eq 0
[ $rc -eq 0 ] || tail -n 20 "$TMP/run"
if command -v mpirun.openmpi >/dev/null &&
    grep -q '^#define HAVE_PMIX 1' "$CHORUS_PC_DIR/config.h" 2>/dev/null; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 120 env -u RANK \
        -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u CHORUS_RANK -u CHORUS_SIZE \
        -u CHORUS_ADDR mpirun.openmpi --oversubscribe -np 2 -x CHORUS_LIB -x PYTHONPATH \
        "$PY" "$here/torch_collectives.py" groups errors >"$TMP/mpirun" 2>&1
    rc=$?
    check "init_process_group(\"chorus\") under mpirun -np 2 (PMIx; exit $rc)" test $rc -eq 0
    [ $rc -eq 0 ] || tail -n 20 "$TMP/mpirun"
fi

# The Horovod-style API (import chorus.torch as hvd), under chorus-run and torchrun.
for n in 2 3; do
    timeout -k 5 300 "$CHORUS_RUN" -n $n "$PY" "$here/torch_horovod.py" >"$TMP/hvd" 2>&1
    rc=$?
    check "the Horovod-style API under chorus-run -n $n (exit $rc)" test $rc -eq 0
    tail -n 1 "$TMP/hvd"
    [ $rc -eq 0 ] || tail -n 30 "$TMP/hvd"
done
RDZV_PORT=$(master_port)
check "the Horovod-style API under torchrun at 2 ranks" torchrun 2 "$here/torch_horovod.py"
RDZV_PORT=
timeout -k 5 120 "$CHORUS_RUN" -n 2 "$PY" "$top/examples/torch/horovod_style.py" --steps 5 \
    >"$TMP/hvd_example" 2>&1
rc=$?
check "the Horovod-style example trains under chorus-run -n 2 (exit $rc)" test $rc -eq 0
check "the Horovod-style example ends with the same weights on every rank" \
    grep -q 'weights identical on every rank: True' "$TMP/hvd_example"

timeout -k 5 120 "$PY" "$here/torch_kill.py" 3 >"$TMP/kill" 2>&1
rc=$?
cat "$TMP/kill"
check "a killed rank makes the others' next collective raise (3 ranks)" test $rc -eq 0

check "the DDP example trains under torchrun with --backend chorus" \
    torchrun 2 "$top/examples/torch/ddp_mnist_like.py" --backend chorus --steps 5
grep -E '^step' "$TMP/out" >"$TMP/losses.chorus"
check "the DDP example trains under torchrun with --backend gloo" \
    torchrun_gloo 2 "$top/examples/torch/ddp_mnist_like.py" --backend gloo --steps 5
grep -E '^step' "$TMP/out" >"$TMP/losses.gloo"
check "the DDP example prints the same losses with chorus and gloo" \
    cmp "$TMP/losses.chorus" "$TMP/losses.gloo"
check "the DDP example printed 5 steps" test "$(wc -l <"$TMP/losses.chorus")" -eq 5

# The installed package on its own: no CHORUS_LIB, no PYTHONPATH; pkg-config finds the
# library that ./quickstart installed (where this build installs, when it has).
prefix=$(sed -n 's/^prefix = //p' "$CHORUS_PC_DIR/Makefile")
if [ -f "$prefix/lib/pkgconfig/chorus.pc" ] && "$PY" -c "import chorus" 2>/dev/null; then
    found=$(cd "$TMP" && env -u CHORUS_LIB -u PYTHONPATH \
        PKG_CONFIG_PATH="$prefix/lib/pkgconfig" "$PY" -c \
        "import chorus; print(chorus.library_path()); print(chorus.version())" 2>&1)
    echo "$found"
    check "the installed package loads the installed library through pkg-config" \
        test "$(echo "$found" | head -n 1)" = "$prefix/lib/libchorus.so.0"
    (cd "$TMP" && env -u PYTHONPATH CHORUS_LIB=/nonexistent/libchorus.so.0 "$PY" -c \
        "import chorus; chorus.library()") >"$TMP/bad" 2>&1
    check "a wrong CHORUS_LIB is an error naming it, not a silent fallback" \
        grep -q 'LibraryNotFound: .*/nonexistent/libchorus.so.0' "$TMP/bad"
fi
checks_end
