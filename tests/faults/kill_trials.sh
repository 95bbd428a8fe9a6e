#!/bin/sh
# Randomized SIGKILL trials (see kill_trials.c): kill_trials.sh [N [SEED]].
# N defaults to FAULT_TRIALS, else 10 (what make check runs); SEED defaults
# to a random one, printed so that a failure can be replayed with
# "kill_trials.sh N SEED", or one trial i with "kill_trials 1 SEED i".
# The last line is the summary. Exit: 0 all passed, 1 a trial failed.
#
# Environment: FAULTS_BUILDDIR (where kill_trials is; default: this
# script's folder), KILL_TRIALS_LOG (file for the ranks' chorus messages,
# default: they go to stderr).

n=${1:-${FAULT_TRIALS:-10}}
seed=${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
bindir=${FAULTS_BUILDDIR:-$(cd "$(dirname "$0")" && pwd)}

[ -x "$bindir/kill_trials" ] || { echo "FAIL: $bindir/kill_trials is not built"; exit 1; }
echo "kill_trials.sh: $n trials, seed $seed (replay: $0 $n $seed)"
if [ -n "$KILL_TRIALS_LOG" ]; then
    exec "$bindir/kill_trials" "$n" "$seed" 2>>"$KILL_TRIALS_LOG"
fi
exec "$bindir/kill_trials" "$n" "$seed"
