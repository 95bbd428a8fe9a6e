#!/bin/sh
# A black-holed link: two ranks in two network namespaces created here,
# joined by a veth pair (10.77.0.1/30 and 10.77.0.2/30, addresses that exist
# only inside those namespaces), each started with "ip netns exec". While
# they loop an allreduce, one end of the link is set down: packets vanish,
# no reset arrives, so each rank must fail its call with CHORUS_ERR_TIMEOUT
# within CHORUS_TIMEOUT + slack, never hang. The namespaces are deleted on
# every exit path. Needs root; exits 77 (skip) when namespaces or veth are
# not available.
#
# Environment: FAULTS_BUILDDIR (where fault_rank is; default: this script's
# folder), BH_TIMEOUT (CHORUS_TIMEOUT of the ranks, default 3).

timeout_s=${BH_TIMEOUT:-3}
slack_s=2
bindir=${FAULTS_BUILDDIR:-$(cd "$(dirname "$0")" && pwd)}
rank_bin=$bindir/fault_rank
tag=$$
nsa=chorus-bh-$tag-a
nsb=chorus-bh-$tag-b
veth_a=cbh${tag}a
veth_b=cbh${tag}b
port=29500
tmp=$(mktemp -d "${TMPDIR:-/tmp}/chorus-bh.XXXXXX") || exit 1
pids=

now() { date +%s.%N; }
skip() { echo "SKIP: $*"; exit 77; }

cleanup() {
    for p in $pids; do kill -KILL "$p" 2>/dev/null; done
    for ns in "$nsa" "$nsb"; do
        if ip netns list 2>/dev/null | grep -q "^$ns\b"; then
            for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
            ip netns del "$ns" 2>/dev/null
        fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null 2>&1 || skip "no ip command (iproute2)"
[ -x "$rank_bin" ] || { echo "FAIL: $rank_bin is not built"; exit 1; }

ip netns add "$nsa" 2>/dev/null || skip "cannot create a network namespace"
ip netns add "$nsb" 2>/dev/null || skip "cannot create a second network namespace"
ip link add "$veth_a" netns "$nsa" type veth peer name "$veth_b" netns "$nsb" 2>/dev/null ||
    skip "cannot create a veth pair"
ip -n "$nsa" addr add 10.77.0.1/30 dev "$veth_a" &&
ip -n "$nsb" addr add 10.77.0.2/30 dev "$veth_b" &&
ip -n "$nsa" link set lo up && ip -n "$nsb" link set lo up &&
ip -n "$nsa" link set "$veth_a" up && ip -n "$nsb" link set "$veth_b" up ||
    { echo "FAIL: cannot configure the veth pair"; exit 1; }

start_rank() { # rank namespace address
    # Namespaces share the host and boot id: keep the ranks on TCP, off shared memory.
    ip netns exec "$2" env CHORUS_SHM=0 CHORUS_RANK="$1" CHORUS_SIZE=2 CHORUS_ADDR=10.77.0.1:$port \
        CHORUS_IFADDR="$3" CHORUS_SECRET="bh-$tag" CHORUS_TIMEOUT="$timeout_s" \
        "$rank_bin" 65536 60 >"$tmp/rank$1.log" 2>&1 &
    pids="$pids $!"
    eval "pid$1=\$!"
}
start_rank 0 "$nsa" 10.77.0.1
start_rank 1 "$nsb" 10.77.0.2

# Both ranks exact at least once, within 30 s.
for _ in $(seq 300); do
    grep -q looping "$tmp/rank0.log" && grep -q looping "$tmp/rank1.log" && break
    sleep 0.1
done
if ! grep -q looping "$tmp/rank0.log" || ! grep -q looping "$tmp/rank1.log"; then
    echo "FAIL: the ranks did not start looping"; cat "$tmp"/rank*.log; exit 1
fi

sleep 0.$(( $(od -An -N1 -tu1 /dev/urandom) % 5 ))
echo "setting $veth_b down in $nsb (CHORUS_TIMEOUT $timeout_s s, slack $slack_s s)"
ip -n "$nsb" link set "$veth_b" down
down=$(now)

# Watch both until they exit, for at most CHORUS_TIMEOUT + slack + 5 s.
limit=$(echo "$timeout_s + $slack_s + 5" | bc)
fail=0
end0=
end1=
while [ -z "$end0" ] || [ -z "$end1" ]; do
    t=$(now)
    for r in 0 1; do
        eval "p=\$pid$r e=\$end$r"
        [ -z "$e" ] && ! kill -0 "$p" 2>/dev/null && eval "end$r=$t"
    done
    if [ "$(echo "$t - $down > $limit" | bc)" = 1 ]; then
        echo "FAIL: a rank is still running $limit s after the link went down: HANG"
        for p in $pids; do kill -KILL "$p" 2>/dev/null; done
        fail=1
        break
    fi
    sleep 0.05
done
for r in 0 1; do
    eval "p=\$pid$r e=\$end$r"
    wait "$p"
    rc=$?
    grep -v '^chorus\[' "$tmp/rank$r.log" | sed 's/^/  /'
    echo "  rank $r exited with $rc, $(echo "${e:-$(now)} - $down" | bc) s after the link went down"
    if [ "$rc" != 0 ] || ! grep -q "timed out after" "$tmp/rank$r.log"; then
        echo "FAIL: rank $r did not end with 'timed out'"
        fail=1
    fi
done
# Each rank's own report of its failing call is the exact measure: it started
# before or after the link went down and must end within the timeout + slack.
for r in 0 1; do
    call=$(sed -n 's/.*the failing call took \([0-9.]*\) s/\1/p' "$tmp/rank$r.log")
    if [ -z "$call" ] || [ "$(echo "$call > $timeout_s + $slack_s" | bc)" = 1 ]; then
        echo "FAIL: rank $r's failing call took '${call}' s, bound $timeout_s + $slack_s s"
        fail=1
    fi
done
[ $fail = 0 ] && echo PASS || echo FAIL
exit $fail
