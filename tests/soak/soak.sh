#!/bin/sh
# Soak: random collectives, checked exactly, for a chosen time.
#
# usage: soak.sh [DURATION_S [MAX_RANKS]]   (defaults: $SOAK_SECONDS or 60, 6)
#
# Two kinds of job run side by side through chorus-run ($CHORUS_RUN):
#  - one long job of a random 2..MAX_RANKS ranks lasting the whole duration:
#    the only one whose RSS drift is checked (limit $SOAK_DRIFT_PCT, 1 %), as
#    drift means something only over a long life after a warmup;
#  - short jobs one after another, each a random 1..MAX_RANKS ranks for a
#    random 5..15 s slice, so that many rank counts (and communicator
#    creations and destructions) are covered; their drift is reported only.
# Every job checks every element, every status and its descriptor count.
# The long job's drift is enforced only for runs of 10 minutes or more (or
# when SOAK_DRIFT_PCT is set): shorter runs report it.
# Each job is bounded by chorus-run --timeout and by timeout(1) around it.
# Every job prints its seed; `SOAK_SEED=S chorus-run -n N soak/soak T` replays it.
#
# Environment: CHORUS_RUN (default ../build/src/tools/chorus-run), SOAK_BIN
# (default ./soak/soak, then next to this script), SOAK_SEED (default random),
# SOAK_TRACE=1 (the long job prints every RSS sample), CHORUS_TIMEOUT (60).
# Exit code 0 when every job passed; the last line is a summary.
set -u

DURATION=${1:-${SOAK_SECONDS:-60}}
MAX_RANKS=${2:-6}
RUN=${CHORUS_RUN:-../build/src/tools/chorus-run}
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${SOAK_BIN:-./soak/soak}
[ -x "$BIN" ] || BIN=$HERE/soak
case $DURATION in ''|*[!0-9]*) echo "soak: duration '$DURATION' is not whole seconds" >&2; exit 2;; esac
case $MAX_RANKS in ''|*[!0-9]*) echo "soak: '$MAX_RANKS' is not a rank count" >&2; exit 2;; esac
if [ "$MAX_RANKS" -lt 1 ] || [ "$MAX_RANKS" -gt 64 ]; then
    echo "soak: MAX_RANKS must be 1..64 (expected values are exact up to 64)" >&2; exit 2
fi
if [ ! -x "$RUN" ] || [ ! -x "$BIN" ]; then
    echo "soak: need chorus-run ('$RUN') and the soak program ('$BIN'); set CHORUS_RUN, SOAK_BIN" >&2
    exit 2
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-soak.XXXXXX") || exit 2
LONG_PID=
cleanup() {
    [ -n "$LONG_PID" ] && kill "$LONG_PID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
export CHORUS_TIMEOUT=${CHORUS_TIMEOUT:-60}

# A small LCG in shell arithmetic: reproducible from SOAK_SEED, no bash needed.
SEED=${SOAK_SEED:-$(od -An -tu4 -N4 /dev/urandom | tr -d ' ')}
STATE=$((SEED % 2147483648))
rand() { # rand N: sets R to 0..N-1
    STATE=$(( (STATE * 1103515245 + 12345) % 2147483648 ))
    R=$(( (STATE / 65536) % $1 ))
}
now() { date +%s; }

# run_job NAME NRANKS SECONDS JOB_SEED [VAR=VALUE...]: runs one bounded job.
run_job() {
    name=$1 n=$2 secs=$3 jseed=$4
    shift 4
    env SOAK_SEED="$jseed" "$@" timeout -k 10 $((secs + 120)) \
        "$RUN" -n "$n" --timeout $((secs + 90)) "$BIN" "$secs" > "$TMP/$name.out" 2>&1
    echo $? > "$TMP/$name.rc"
}

# job_line NAME NRANKS SECONDS SEED: one line per job from its ranks' soak-result lines.
job_line() {
    awk -v name="$1" -v n="$2" -v secs="$3" -v seed="$4" -v rc="$(cat "$TMP/$1.rc")" '
        /^soak-result / {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            ranks++; wrong += v["wrong"]; errors += v["errors"]
            if (v["rank"] == 0) calls = v["calls"]
            if (v["fds_first"] != v["fds_last"]) fds++
            if (v["drift_measured"] && (ranks == 1 || v["drift_pct"] > drift)) drift = v["drift_pct"]
            if (v["drift_measured"]) measured++
            if (v["verdict"] != "PASS") failed++
        }
        END {
            ok = (rc == 0 && ranks == n && failed == 0)
            printf "soak: %s: %d ranks, %d s, seed %s: %d calls, %d wrong, %d errors, " \
                   "%d fd changes, %s, %s (exit %d, %d of %d results)\n", name, n, secs, seed,
                   calls, wrong, errors, fds,
                   measured ? sprintf("rss drift up to %+.2f %%", drift) : "drift not measured",
                   ok ? "PASS" : "FAIL", rc, ranks, n
        }' "$TMP/$1.out"
}

START=$(now)
END=$((START + DURATION))
echo "soak: $DURATION s, 1..$MAX_RANKS ranks, seed $SEED, chorus-run $RUN"

# The long job: the whole duration; its drift check needs time after the warmup.
LONG_N=1
if [ "$MAX_RANKS" -ge 2 ]; then rand $((MAX_RANKS - 1)); LONG_N=$((R + 2)); fi
LONG_SEED=$STATE
# The drift check is enforced from 10 minutes on (or when SOAK_DRIFT_PCT is
# set): in a shorter run the scratch pools and malloc's heaps are still
# settling, and the high-water level moves by several per cent either way.
LONG_DRIFT=${SOAK_DRIFT_PCT:-1}
[ -z "${SOAK_DRIFT_PCT:-}" ] && [ "$DURATION" -lt 600 ] && LONG_DRIFT=off
[ "$DURATION" -lt 30 ] && LONG_DRIFT=off
run_job long "$LONG_N" "$DURATION" "$LONG_SEED" SOAK_DRIFT_PCT="$LONG_DRIFT" &
LONG_PID=$!

# Short jobs until a few seconds before the end.
JOBS=0
while [ $(( END - $(now) )) -ge 5 ]; do
    left=$((END - $(now)))
    rand 11; secs=$((R + 5)); [ "$secs" -gt "$left" ] && secs=$left
    rand "$MAX_RANKS"; n=$((R + 1))
    JOBS=$((JOBS + 1))
    run_job "job$JOBS" "$n" "$secs" "$STATE" SOAK_DRIFT_PCT=off
    job_line "job$JOBS" "$n" "$secs" "$STATE" | tee "$TMP/job$JOBS.line"
    grep -q ' PASS (' "$TMP/job$JOBS.line" || grep -v '^soak-' "$TMP/job$JOBS.out" | head -40
done
wait "$LONG_PID"
LONG_PID=
job_line long "$LONG_N" "$DURATION" "$LONG_SEED" | tee "$TMP/long.line"
# The long job's own lines: its figures, and why it failed if it did.
grep -v '^soak-result' "$TMP/long.out" | head -400

# Summary over every job.
cat "$TMP"/*.line | awk -v jobs=$((JOBS + 1)) -v secs=$(( $(now) - START )) '
    { total++ }
    / PASS \(/ { passed++ }
    { split($0, a, ": "); }
    { for (i = 1; i <= NF; i++) {
          if ($(i+1) == "calls,") calls += $i
          if ($(i+1) == "wrong,") wrong += $i
          if ($(i+1) == "errors,") errors += $i
      } }
    /^soak: long:/ { long = $0; sub(/^soak: long: /, "", long) }
    END {
        printf "soak: %s: %d of %d jobs passed in %d s, %d calls, %d wrong, %d errors; " \
               "long job: %s\n", passed == jobs ? "PASS" : "FAIL", passed, jobs, secs,
               calls, wrong, errors, long
        exit passed == jobs ? 0 : 1
    }'
