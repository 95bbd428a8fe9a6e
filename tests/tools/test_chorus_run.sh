#!/bin/sh
# Tests of chorus-run, the local launcher, on /bin/sh scripts as ranks.
#
# usage: test_chorus_run.sh [PATH_TO_CHORUS_RUN]   (or set CHORUS_RUN)
# Exit code 0 when every check passes; prints one line per failed check.
set -u

RUN=${CHORUS_RUN:-${1:-./chorus-run}}
if [ ! -x "$RUN" ]; then
    echo "test_chorus_run: '$RUN' is not an executable chorus-run" >&2
    exit 2
fi
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_chorus_run
now_ms() { date +%s%3N; }
# Runs chorus-run under an outer bound so that a broken launcher cannot hang us.
crun() { timeout -k 5 30 "$RUN" "$@"; }

# No process whose pid is listed in the file may still be running.
none_alive() {
    for p in $(cat "$1"); do
        if kill -0 "$p" 2>/dev/null; then
            echo "  pid $p still alive: $(ps -o args= -p "$p")"
            kill -9 "$p" 2>/dev/null
            return 1
        fi
    done
    return 0
}

# ---- environment of the ranks --------------------------------------------
crun -n 4 sh -c 'echo "$CHORUS_RANK $CHORUS_SIZE $CHORUS_LOCAL_RANK $CHORUS_LOCAL_SIZE $CHORUS_ADDR $CHORUS_SECRET" > "$0/env.$CHORUS_RANK"' "$TMP"
rc=$?
check "4 ranks exit 0 (got $rc)" [ "$rc" -eq 0 ]
cat "$TMP"/env.* > "$TMP/env" 2>/dev/null
check "ranks are 0..3" [ "$(cut -d' ' -f1 "$TMP/env" | sort -n | tr '\n' ' ')" = "0 1 2 3 " ]
check "size is 4 everywhere" [ "$(cut -d' ' -f2 "$TMP/env" | sort -u)" = "4" ]
check "local rank = rank" [ -z "$(awk '$1 != $3' "$TMP/env")" ]
check "local size is 4" [ "$(cut -d' ' -f4 "$TMP/env" | sort -u)" = "4" ]
check "one address 127.0.0.1:port" \
    [ "$(cut -d' ' -f5 "$TMP/env" | sort -u | grep -cE '^127\.0\.0\.1:[1-9][0-9]*$')" = "1" ]
check "one secret of 64 hex characters" \
    [ "$(cut -d' ' -f6 "$TMP/env" | sort -u | grep -cE '^[0-9a-f]{64}$')" = "1" ]
check "4 lines" [ "$(wc -l < "$TMP/env")" -eq 4 ]

# Inherited values are replaced, and every job gets a new secret.
CHORUS_RANK=99 CHORUS_SIZE=99 CHORUS_SECRET=stale CHORUS_ADDR=10.0.0.1:1 \
    crun -n 2 sh -c 'echo "$CHORUS_RANK $CHORUS_SIZE $CHORUS_SECRET $CHORUS_ADDR"' > "$TMP/env2"
check "inherited CHORUS_* values replaced" \
    [ "$(cut -d' ' -f1,2 "$TMP/env2" | sort | tr '\n' ' ')" = "0 2 1 2 " ]
check "inherited secret replaced" [ -z "$(grep -e stale -e 10.0.0.1 "$TMP/env2")" ]
s1=$(cut -d' ' -f6 "$TMP/env" | sort -u)
s2=$(cut -d' ' -f3 "$TMP/env2" | sort -u)
check "fresh secret per job" [ -n "$s2" -a "$s1" != "$s2" ]
check "other variables are kept" [ "$(FOO_KEEP=bar crun -n 1 sh -c 'echo $FOO_KEEP')" = "bar" ]
check "stdin is /dev/null" [ "$(echo data | crun -n 1 sh -c 'cat; echo end')" = "end" ]

# ---- the rendezvous port ----------------------------------------------------
# chorus-run keeps CHORUS_ADDR's port bound while the job runs, so another
# process cannot take it before rank 0's store does: a plain bind fails,
# and a listener with SO_REUSEADDR (as the store makes) binds beside it.
if command -v python3 > /dev/null 2>&1; then
    # shellcheck disable=SC2016 # expanded by rank 0's shell
    crun -n 1 sh -c 'exec python3 -c "$0" "${CHORUS_ADDR##*:}"' '
import socket, sys
port = int(sys.argv[1])
plain = socket.socket()
try:
    plain.bind(("127.0.0.1", port))
    print("plain bind: bound")
except OSError as e:
    print("plain bind: refused", e.errno)
store = socket.socket()
store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
store.bind(("127.0.0.1", port))
store.listen(1)
client = socket.create_connection(("127.0.0.1", port), timeout=5)
conn, _ = store.accept()
print("store listens and accepts")
' > "$TMP/port" 2>&1
    check "the port is held: a plain bind is refused" grep -q '^plain bind: refused' "$TMP/port"
    check "a listener with SO_REUSEADDR binds beside it and accepts" \
        grep -qx 'store listens and accepts' "$TMP/port"
    # shellcheck disable=SC2016 # expanded by rank 0's shell
    port=$(crun -n 1 sh -c 'echo "${CHORUS_ADDR##*:}"')
    check "the port is free again once the job is over" \
        python3 -c "import socket; socket.socket().bind(('127.0.0.1', $port))"
fi

# ---- binding ------------------------------------------------------------------
# Each rank writes the CPUs it may run on, as Cpus_allowed_list prints them.
ncpu=$(nproc)
unbound=$(sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2')
allowed='grep Cpus_allowed_list /proc/self/status | cut -f2 > "$0/cpu.$CHORUS_RANK"'
rm -f "$TMP"/cpu.*
crun -n 2 --bind core sh -c "$allowed" "$TMP"
check "--bind core: rank 0 on one CPU" grep -qx '[0-9]*' "$TMP/cpu.0"
if [ "$ncpu" -ge 2 ]; then
    check "--bind core: two ranks on two CPUs" [ "$(cat "$TMP/cpu.0")" != "$(cat "$TMP/cpu.1")" ]
    rm -f "$TMP"/cpu.*
    crun -n 2 sh -c "$allowed" "$TMP"
    check "default: 2 ranks fit, bound one to a CPU" \
        [ "$(cat "$TMP"/cpu.* | grep -c '^[0-9]*$')" -eq 2 ]
fi
rm -f "$TMP"/cpu.*
crun -n $((ncpu + 1)) sh -c "$allowed" "$TMP"
check "default: more ranks than CPUs run unbound" \
    [ "$(cat "$TMP"/cpu.* | sort -u)" = "$unbound" ]
rm -f "$TMP"/cpu.*
crun -n 2 --bind none sh -c "$allowed" "$TMP"
check "--bind none: unbound" \
    [ "$(cat "$TMP"/cpu.* | sort -u)" = "$unbound" ]
crun -n 2 --bind sometimes true 2> "$TMP/bind.err"
rc=$?
check "--bind with a bad value: exit 2 (got $rc)" [ "$rc" -eq 2 ]
check "--bind with a bad value: says why" grep -q "invalid binding 'sometimes'" "$TMP/bind.err"

# ---- output prefix ----------------------------------------------------------
crun -n 3 --prefix sh -c 'echo "out $CHORUS_RANK"; echo "err $CHORUS_RANK" >&2;
    printf "ab"; sleep 0.2; printf "cd\nno-newline"' > "$TMP/out" 2> "$TMP/err"
rc=$?
check "prefix run exits 0 (got $rc)" [ "$rc" -eq 0 ]
for r in 0 1 2; do
    check "stdout has '[$r] out $r'" grep -qx "\[$r\] out $r" "$TMP/out"
    check "stderr has '[$r] err $r'" grep -qx "\[$r\] err $r" "$TMP/err"
    check "split write joined in '[$r] abcd'" grep -qx "\[$r\] abcd" "$TMP/out"
    check "last partial line '[$r] no-newline'" grep -qx "\[$r\] no-newline" "$TMP/out"
done
check "stdout has exactly 9 lines" [ "$(wc -l < "$TMP/out")" -eq 9 ]
check "stderr has no stdout lines" [ -z "$(grep out "$TMP/err")" ]
check "no prefix without -p" [ "$(crun -n 2 sh -c 'echo x' | sort | tr '\n' ' ')" = "x x " ]

# Many long lines written at once by several ranks: no line may mix ranks.
crun -n 4 -p sh -c 'line=""; i=0; while [ $i -lt 50 ]; do line="$line$CHORUS_RANK$CHORUS_RANK"; i=$((i+1)); done
    i=0; while [ $i -lt 300 ]; do echo "$line"; i=$((i+1)); done' > "$TMP/many"
check "1200 lines relayed" [ "$(wc -l < "$TMP/many")" -eq 1200 ]
check "no line mixes ranks" \
    [ "$(grep -cxE '\[0\] 0{100}|\[1\] 1{100}|\[2\] 2{100}|\[3\] 3{100}' "$TMP/many")" -eq 1200 ]

# ---- failures ---------------------------------------------------------------
: > "$TMP/pids"
t0=$(now_ms)
crun -n 3 sh -c 'echo $$ >> "$0/pids"; sleep 30 & echo $! >> "$0/pids"
    if [ "$CHORUS_RANK" = 1 ]; then sleep 0.5; exit 7; fi; wait' "$TMP" 2> "$TMP/err"
rc=$?
t1=$(now_ms)
check "first failing rank's code propagates (got $rc)" [ "$rc" -eq 7 ]
check "sleeping siblings killed within 5 s ($((t1 - t0)) ms)" [ $((t1 - t0)) -lt 5000 ]
check "failure reported on stderr" grep -q "rank 1 exited with code 7" "$TMP/err"
check "6 pids recorded" [ "$(wc -l < "$TMP/pids")" -eq 6 ]
check "no rank or child of a rank left after a failure" none_alive "$TMP/pids"

# A rank that ignores SIGTERM gets SIGKILL after the grace period.
: > "$TMP/pids"
t0=$(now_ms)
crun -n 2 sh -c 'trap "" TERM; echo $$ >> "$0/pids"
    if [ "$CHORUS_RANK" = 0 ]; then sleep 0.3; exit 3; fi
    while :; do sleep 0.1; done' "$TMP" 2>/dev/null
rc=$?
t1=$(now_ms)
check "exit code 3 with a stubborn sibling (got $rc)" [ "$rc" -eq 3 ]
check "stubborn sibling killed within 8 s ($((t1 - t0)) ms)" [ $((t1 - t0)) -lt 8000 ]
check "no stubborn rank left" none_alive "$TMP/pids"

crun -n 2 sh -c 'if [ "$CHORUS_RANK" = 1 ]; then kill -9 $$; fi; sleep 30' 2>/dev/null
rc=$?
check "rank killed by SIGKILL gives 137 (got $rc)" [ "$rc" -eq 137 ]

crun -n 2 /nonexistent/program 2> "$TMP/err"
rc=$?
check "missing program gives 127 (got $rc)" [ "$rc" -eq 127 ]
check "missing program is named" grep -q "/nonexistent/program" "$TMP/err"

crun -n 3 sh -c 'exit 0'
rc=$?
check "all ranks exit 0 gives 0 (got $rc)" [ "$rc" -eq 0 ]

# Background processes left by ranks that succeeded are terminated too.
: > "$TMP/pids"
crun -n 2 sh -c 'sleep 30 & echo $! >> "$0/pids"; exit 0' "$TMP"
rc=$?
check "leftover background job does not change the code (got $rc)" [ "$rc" -eq 0 ]
check "leftover background job terminated" none_alive "$TMP/pids"

# ---- timeout and signals ----------------------------------------------------
t0=$(now_ms)
crun -n 2 --timeout 1 sleep 30 2> "$TMP/err"
rc=$?
t1=$(now_ms)
check "timeout gives 124 (got $rc)" [ "$rc" -eq 124 ]
check "timeout after about 1 s ($((t1 - t0)) ms)" [ $((t1 - t0)) -ge 900 -a $((t1 - t0)) -lt 5000 ]
check "timeout reported" grep -q "timeout" "$TMP/err"

: > "$TMP/pids"
"$RUN" -n 3 sh -c 'echo $$ >> "$0/pids"; exec sleep 30' "$TMP" 2>/dev/null &
lpid=$!
i=0
while [ "$(wc -l < "$TMP/pids")" -lt 3 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM "$lpid"
t0=$(now_ms)
wait "$lpid"
rc=$?
t1=$(now_ms)
check "SIGTERM forwarded: ranks die of it, code 143 (got $rc)" [ "$rc" -eq 143 ]
check "SIGTERM handled quickly ($((t1 - t0)) ms)" [ $((t1 - t0)) -lt 3000 ]
check "no rank left after SIGTERM" none_alive "$TMP/pids"

# SIGINT: ranks started from a non-interactive shell in the background may
# ignore it, in which case SIGKILL follows after the grace period.
: > "$TMP/pids"
"$RUN" -n 2 sh -c 'echo $$ >> "$0/pids"; exec sleep 30' "$TMP" 2>/dev/null &
lpid=$!
i=0
while [ "$(wc -l < "$TMP/pids")" -lt 2 ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
kill -INT "$lpid"
t0=$(now_ms)
wait "$lpid"
rc=$?
t1=$(now_ms)
check "SIGINT ends the job with 130 or 137 (got $rc)" [ "$rc" -eq 130 -o "$rc" -eq 137 ]
check "SIGINT handled within the grace period ($((t1 - t0)) ms)" [ $((t1 - t0)) -lt 6000 ]
check "no rank left after SIGINT" none_alive "$TMP/pids"

# ---- command line -------------------------------------------------------------
for bad in 0 -3 abc 1025 4x ""; do
    "$RUN" -n "$bad" true 2> "$TMP/err"
    rc=$?
    check "-n '$bad' rejected with code 2 (got $rc)" [ "$rc" -eq 2 ]
    check "-n '$bad' message" grep -q "invalid rank count" "$TMP/err"
done
"$RUN" -np 2 sh -c 'exit 0'
check "-np accepted" [ $? -eq 0 ]
"$RUN" -n 2>/dev/null
check "-n without value rejected" [ $? -eq 2 ]
"$RUN" --bogus true 2>/dev/null
check "unknown option rejected" [ $? -eq 2 ]
"$RUN" 2>/dev/null
check "missing program rejected" [ $? -eq 2 ]
"$RUN" --timeout -1 true 2>/dev/null
check "negative timeout rejected" [ $? -eq 2 ]
check "--help prints usage" sh -c '"$0" --help | grep -q "usage: chorus-run"' "$RUN"
check "program options are not parsed" [ "$("$RUN" -n 1 sh -c 'printf "%s\n" "$1"' sh -n)" = "-n" ]

checks_end
