#!/bin/bash
# The multi-node test bed (testbed.sh) end to end: chorus-perf across 2, 3 and
# 4 emulated nodes with even and uneven ranks per node (exact results, the
# right count of ranks on rank 0's node), ranks dealt round robin (--cyclic),
# the hierarchical algorithms chosen on 2 x 2 without any variable; the
# node-local stages on shared-memory teams (rank 0's debug line, none with
# CHORUS_SHM=0) and the hierarchical algorithms forced on 2 x 2, 3,2,1 and
# round robin, through chorus-perf over many segments and through the
# collective matrix, exact, with the loopback bytes of each node's namespace
# (where TCP between its ranks goes) as the proof that the stages ran on the
# teams; the harness's placement (also uneven and round robin); the
# collective test matrix across 2 and 3 nodes; a rank SIGKILLed in a
# hierarchical allreduce (netns_kill: every survivor fails within its timeout,
# never with wrong data, and leaks no schedule); shaped links, two shaped
# links per node (--rates) and chorus's streams over both (each link carries
# payload; with one stream the second stays idle), a failing rank, the time
# limit, SIGTERM, and --cleanup after SIGKILL. After every run, no namespace
# of the test bed is left and the root namespace's links are as they were.
# Skips (77) where network namespaces cannot be created (not root).
#
# usage: test_netns.sh   (run in the build's tests/ folder, or set CHORUS_PERF,
#                         TEST_COLL, TEST_COMPRESS, NETNS_PLACE and NETNS_KILL to
#                         chorus-perf, coll/test_coll, coll/test_compress,
#                         netns/netns_place and netns/netns_kill;
#                         CHORUS_NETNS_LONG=1 adds coll/million_elements across
#                         3 nodes)
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TB="$HERE/testbed.sh"
PERF=${CHORUS_PERF:-./perf/chorus-perf}
TEST_COLL=${TEST_COLL:-./coll/test_coll}
TEST_COMPRESS=${TEST_COMPRESS:-./coll/test_compress}
NETNS_PLACE=${NETNS_PLACE:-./netns/netns_place}
NETNS_KILL=${NETNS_KILL:-./netns/netns_kill}

if [ "$(id -u)" -ne 0 ]; then
    echo "test_netns: network namespaces need root: skipped"
    exit 77
fi
if [ ! -x "$PERF" ]; then
    echo "test_netns: '$PERF' is not an executable chorus-perf" >&2
    exit 2
fi
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_netns

# What a test bed may leave behind: its namespaces, and (if it ever touched the
# root namespace, which it must not) links there. Namespaces of a test bed
# still running belong to a run beside this one (another build on the same
# machine; ours have all ended when a snapshot is taken): not counted.
snapshot() {
    local ns pid
    { for ns in $(ip netns list | awk '{print $1}' | grep '^chorus-tb-'); do
          pid=${ns#chorus-tb-}
          grep -qs testbed "/proc/${pid%%-*}/cmdline" || echo "$ns"
      done | sort
      ip -o link | awk -F': ' '{print $2}' | sort; } > "$1"
}
# Leftovers of earlier killed runs would be counted by --cleanup below.
"$TB" --cleanup > /dev/null 2>&1
snapshot "$TMP/before"
# No run of this test may leave anything: compared after every run.
clean() {
    snapshot "$TMP/after"
    check "nothing left after $1" cmp -s "$TMP/before" "$TMP/after"
    cmp -s "$TMP/before" "$TMP/after" || diff "$TMP/before" "$TMP/after"
}

# Does this machine let us make namespaces at all?
"$TB" --nodes 2 -- true > "$TMP/probe" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
    echo "test_netns: $(tail -n 1 "$TMP/probe")"
    exit 77
fi
check "a trivial run exits 0 (got $rc)" [ "$rc" -eq 0 ]
clean "a trivial run"

# perf NODES RANKS COLLECTIVE EXPECTED_HEADER
perf() {
    "$TB" --nodes "$1" --ranks-per-node "$2" --timeout 120 --quiet -- \
        "$PERF" "$3" -b 8 -e 1M -n 2 -w 1 -c 1 > "$TMP/out" 2> "$TMP/err"
    local rc=$?
    check "$1 nodes, ranks $2, $3 exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "$1 nodes, ranks $2, $3: header '$4'" grep -q "^# chorus-perf: $3, $4\$" "$TMP/out"
    check "$1 nodes, ranks $2, $3: no wrong element" \
        grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/err" "$TMP/out"
    clean "$1 nodes, ranks $2, $3"
}
for c in allreduce allgather broadcast reduce_scatter; do
    perf 2 2 "$c" "nranks 4 (2 on this node)"
    perf 3 3,2,1 "$c" "nranks 6 (3 on this node)"
done
perf 3 1,3,2 allreduce "nranks 6 (1 on this node)"
perf 4 2,1,1,2 allreduce "nranks 6 (2 on this node)"

# Ranks dealt round robin over the nodes (--cyclic): a node's ranks are not
# consecutive, and the hierarchical algorithms must still be exact.
for run in "2 2 allreduce 2,2" "3 3,2,1 allgather 3,2,1" "3 2,2,1 broadcast 2,2,1"; do
    set -- $run
    "$TB" --nodes "$1" --ranks-per-node "$2" --cyclic --timeout 120 --quiet -- \
        "$PERF" "$3" -b 8 -e 1M -n 2 -w 1 -c 1 > "$TMP/out" 2> "$TMP/err"
    rc=$?
    check "cyclic $1 nodes, ranks $2, $3 exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "cyclic $1 nodes, ranks $2, $3: header" \
        grep -q "^# nodes: $1 (ranks per node $4)\$" "$TMP/out"
    check "cyclic $1 nodes, ranks $2, $3: no wrong element" \
        grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/err" "$TMP/out"
    clean "cyclic $1 nodes, ranks $2, $3"
done

# With no variable set, 2 nodes of 2 ranks choose the hierarchical algorithms
# for large vectors (rank 0 logs its selection table at debug level).
CHORUS_LOG_LEVEL=warn,core=debug "$TB" --nodes 2 --ranks-per-node 2 --timeout 120 --quiet -- \
    "$PERF" allreduce -b 64 -e 64 -n 1 -w 0 > "$TMP/out" 2>&1
check "2x2: the table logged by rank 0 gives allreduce of 64M to hier" \
    grep -qE 'core: allreduce +\[[0-9]+K?, inf\) +hier ' "$TMP/out"
check "2x2: allgather of large vectors to hier" \
    grep -qE 'core: allgather +\[[0-9]+K?, inf\) +hier ' "$TMP/out"
check "2x2: the layout logged" grep -q 'core: node 1: 2 ranks (2-3), leader 2' "$TMP/out"
check "2x2: every rank's place logged (node, CPUs, NUMA, NIC)" \
    grep -qE 'core: rank 3: node 1 \([^)]*\), local rank 1, cpus [0-9].*, numa .*, nic ' "$TMP/out"
clean "the selection on 2 nodes"

# Whether the hierarchical algorithms' node-local stages ran on the node's
# shared-memory team, seen from outside the library: TCP between two ranks of
# a node goes over the loopback of its namespace, so a run whose stages ran
# on the team leaves loopback almost idle (setup and control, some KB), where
# the same stages over TCP carry hundreds of MB. The wrappers print the bytes
# their namespace's loopback received once the command is over.
cat > "$TMP/lo_after" <<'END'
#!/bin/sh
"$@"
rc=$?
echo "loopback bytes: $(awk '$1 == "lo:" {print $2}' /proc/net/dev)"
exit $rc
END
cat > "$TMP/lo_after_harness" <<'END'
#!/bin/bash
"$@"
rc=$?
for ns in $(tr , '\n' <<< "$CHORUS_TEST_NETNS" | sort -u); do
    echo "loopback bytes of $ns: $(ip netns exec "$ns" awk '$1 == "lo:" {print $2}' /proc/net/dev)"
done
exit $rc
END
chmod +x "$TMP/lo_after" "$TMP/lo_after_harness"
LO_MAX=$((1 << 20))
# lo_bytes FILE: every loopback count the wrappers printed, one a line, least
# first. Without any, the most is huge and the least 0, so that checks fail.
lo_bytes() { sed -n 's/.*loopback bytes[^:]*: \([0-9][0-9]*\)$/\1/p' "$1" | sort -n; }
lo_most() { lo_bytes "$1" | awk '{m = $1} END {print NR ? m : "999999999999999"}'; }
lo_least() { lo_bytes "$1" | awk 'NR == 1 {m = $1} END {print NR ? m : 0}'; }
lo_total() { lo_bytes "$1" | awk '{t += $1} END {printf "%.0f\n", t}'; }
# lo_third WITH WITHOUT: the run WITH teams carried a third of the bytes WITHOUT at most,
# both counted, and the run without them carried the stages.
lo_third() {
    [ -n "$(lo_bytes "$1")" ] && [ "$(lo_total "$2")" -ge "$LO_MAX" ] &&
        [ $((3 * $(lo_total "$1"))) -le "$(lo_total "$2")" ]
}
absent() { ! grep -q "$@"; }
HIER=allreduce=hier,allgather=hier,broadcast=hier,reduce_scatter=hier

# 2 nodes of 2 ranks: rank 0 logs at debug level that the node-local stages
# run on shm teams, and the hierarchical allreduce over vectors of many
# segments leaves loopback idle; with CHORUS_SHM=0 there is no such line, the
# stages go over TCP (which is what makes the loopback bytes a proof) and the
# results are exact too.
for shm in 1 0; do
    CHORUS_SHM=$shm CHORUS_TUNE=$HIER CHORUS_LOG_LEVEL=warn,core=debug "$TB" --nodes 2 \
        --ranks-per-node 2 --timeout 120 -- "$TMP/lo_after" "$PERF" allreduce -b 1M -e 16M \
        -n 1 -w 1 -c 1 > "$TMP/out" 2>&1
    rc=$?
    check "CHORUS_SHM=$shm: hier allreduce on 2x2 exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "CHORUS_SHM=$shm: hier allreduce on 2x2: no wrong element" grep -qx \
        '\[rank 0 node 0\] # out-of-place/in-place wrong elements total: 0' "$TMP/out"
    if [ "$shm" -eq 1 ]; then
        check "rank 0 logs the node-local stages on shm teams" grep -qE "^\[rank 0 node 0\] \
chorus\[[0-9]+\]: debug: core: rank 0: node-local stages on shm teams \(2 nodes, up to 2 ranks each, " \
            "$TMP/out"
        check "2x2 on shm teams: loopback carried $(lo_most "$TMP/out") bytes at most" \
            [ "$(lo_most "$TMP/out")" -le "$LO_MAX" ]
    else
        check "CHORUS_SHM=0: rank 0 logs no node-local stages on teams" \
            absent 'node-local stages on' "$TMP/out"
        check "CHORUS_SHM=0: every node's loopback carried the stages ($(lo_least "$TMP/out") B)" \
            [ "$(lo_least "$TMP/out")" -ge $((64 << 20)) ]
    fi
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
    clean "the node-local stages with CHORUS_SHM=$shm"
done

# The hierarchical algorithms forced, over vectors of many segments: exact on
# 2 x 2, on 3,2,1 (uneven blocks: the v-forms on the teams) and with the ranks
# dealt round robin (a node's ranks are not consecutive), each with its
# node-local stages on the teams.
for layout in "2 2" "3 3,2,1" "2 2 --cyclic"; do
    # shellcheck disable=SC2086 # nodes, ranks per node and an optional --cyclic
    set -- $layout
    for c in allreduce allgather broadcast reduce_scatter; do
        what="hier $c on $1 nodes, ranks $2${3:+ $3}"
        # shellcheck disable=SC2086
        CHORUS_TUNE=$HIER "$TB" --nodes "$1" --ranks-per-node "$2" ${3:-} --timeout 120 -- \
            "$TMP/lo_after" "$PERF" "$c" -b 1M -e 16M -n 1 -w 1 -c 1 > "$TMP/out" 2>&1
        rc=$?
        check "$what exits 0 (got $rc)" [ "$rc" -eq 0 ]
        check "$what: no wrong element" grep -qx \
            '\[rank 0 node 0\] # out-of-place/in-place wrong elements total: 0' "$TMP/out"
        check "$what: on the teams (loopback carried $(lo_most "$TMP/out") bytes at most)" \
            [ "$(lo_most "$TMP/out")" -le "$LO_MAX" ]
        [ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
        clean "$what"
    done
done

# shellcheck disable=SC2016 # expanded by each rank's shell
# Without --quiet every rank's output comes back, prefixed with rank and node.
"$TB" --nodes 3 --ranks-per-node 2,1,1 -- sh -c 'echo "$CHORUS_RANK/$CHORUS_SIZE $CHORUS_IFADDR"' \
    > "$TMP/out" 2>&1
printf '%s\n' "[rank 0 node 0] 0/4 10.99.0.1" "[rank 1 node 0] 1/4 10.99.0.1" \
    "[rank 2 node 1] 2/4 10.99.0.2" "[rank 3 node 2] 3/4 10.99.0.3" > "$TMP/expect"
check "every rank's variables, prefixed" diff "$TMP/expect" <(grep '^\[rank' "$TMP/out")
clean "printing variables"

# The UCX transport across nodes, over UCX's TCP (UCX_TLS=tcp): every collective
# exact at 2 x 2 ranks (node-local stages on the shared-memory team), and at
# 3 nodes of 2,1,1 ranks with the team off, so that ranks of one node talk over
# UCX too. Only where chorus was built with UCX (its build's config.h says so).
if grep -qs '^#define HAVE_UCX 1' ../config.h; then
    for run in "2 2 1 allreduce" "2 2 1 allgather" "2 2 1 broadcast" "2 2 1 reduce_scatter" \
               "2 2 1 alltoall" "3 2,1,1 0 allreduce" "3 2,1,1 0 allgather"; do
        set -- $run
        CHORUS_TRANSPORT=ucx UCX_TLS=tcp CHORUS_SHM=$3 "$TB" --nodes "$1" \
            --ranks-per-node "$2" --timeout 120 --quiet -- \
            "$PERF" "$4" -b 8 -e 4M -n 2 -w 1 -c 1 > "$TMP/out" 2> "$TMP/err"
        rc=$?
        check "ucx: $1 nodes, ranks $2, shm $3, $4 exits 0 (got $rc)" [ "$rc" -eq 0 ]
        check "ucx: $1 nodes, ranks $2, shm $3, $4: no wrong element" \
            grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/out"
        [ "$rc" -eq 0 ] || tail -n 20 "$TMP/err" "$TMP/out"
        clean "ucx: $1 nodes, ranks $2, shm $3, $4"
    done
else
    echo "test_netns: chorus was built without UCX: the UCX cases are skipped"
fi

# Shaped links: tbf at the rate on the node side of each link, and a run completes.
"$TB" --nodes 2 --rate 200mbit -- tc qdisc show dev eth0 > "$TMP/out" 2>&1
check "tbf at 200Mbit on both nodes' eth0" \
    [ "$(grep -c 'qdisc tbf .* rate 200Mbit' "$TMP/out")" -eq 2 ]
"$TB" --nodes 2 --ranks-per-node 2 --rate 200mbit --timeout 120 --quiet -- \
    "$PERF" allreduce -b 8 -e 4M -n 2 -w 1 > "$TMP/out" 2>&1
rc=$?
check "allreduce over 200mbit links exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "200mbit: no wrong element" \
    grep -qx '# out-of-place/in-place wrong elements total: 0' "$TMP/out"
clean "a shaped run"

# Two links per node (--rates): from inside each node, eth0 and eth1 on their
# subnets with tbf at their own rates, and both in CHORUS_TCP_IFACES; node 0
# reaches node 1's eth1, whose subnet no other link is on, so eth1 carries it.
cat > "$TMP/two_links" <<'END'
#!/bin/sh
for d in eth0 eth1; do
    echo "$d addr $(ip -o -4 addr show dev "$d" | awk '{print $4}')"
    tc qdisc show dev "$d" | sed "s/^/$d /"
done
echo "CHORUS_TCP_IFACES=${CHORUS_TCP_IFACES:-}"
if [ "$CHORUS_RANK" = 0 ] && command -v ping > /dev/null; then
    ping -c1 -W2 10.98.0.2 > /dev/null && echo "ping 10.98.0.2: ok"
fi
END
chmod +x "$TMP/two_links"
"$TB" --nodes 2 --rates 200mbit,100mbit --timeout 30 -- "$TMP/two_links" > "$TMP/out" 2>&1
rc=$?
check "two links per node: exits 0 (got $rc)" [ "$rc" -eq 0 ]
printf '%s\n' "[rank 0 node 0] eth0 addr 10.99.0.1/24" "[rank 0 node 0] eth1 addr 10.98.0.1/24" \
    "[rank 1 node 1] eth0 addr 10.99.0.2/24" "[rank 1 node 1] eth1 addr 10.98.0.2/24" \
    > "$TMP/expect"
check "two links per node: eth0 and eth1 addressed" diff "$TMP/expect" <(grep ' addr ' "$TMP/out")
check "two links per node: tbf at 200Mbit on both nodes' eth0" \
    [ "$(grep -c '^\[rank [01] node [01]\] eth0 qdisc tbf .* rate 200Mbit' "$TMP/out")" -eq 2 ]
check "two links per node: tbf at 100Mbit on both nodes' eth1" \
    [ "$(grep -c '^\[rank [01] node [01]\] eth1 qdisc tbf .* rate 100Mbit' "$TMP/out")" -eq 2 ]
check "two links per node: every rank has CHORUS_TCP_IFACES=eth0,eth1" \
    [ "$(grep -c '\] CHORUS_TCP_IFACES=eth0,eth1$' "$TMP/out")" -eq 2 ]
if command -v ping > /dev/null; then
    check "two links per node: node 0 pings node 1's eth1" \
        grep -qx '\[rank 0 node 0\] ping 10.98.0.2: ok' "$TMP/out"
else
    echo "test_netns: no ping: traffic over the second link is not checked"
fi
[ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
clean "two links per node"
# With --harness: both variables exported, and the switch's ports shaped too.
# shellcheck disable=SC2016 # expanded by the harness command's shell
"$TB" --nodes 2 --rates 200mbit,100mbit --timeout 30 --harness -- sh -c \
    'echo "$CHORUS_TCP_IFACES $CHORUS_TEST_NETNS_IFACES"
     tc -n "${CHORUS_TEST_NETNS%%-n0,*}-sw" qdisc show' > "$TMP/out" 2>&1
rc=$?
check "two links per node, --harness: exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "two links per node, --harness: both variables eth0,eth1" \
    grep -qx 'eth0,eth1 eth0,eth1' "$TMP/out"
check "two links per node, --harness: switch ports p0, p1 at 200Mbit, q0, q1 at 100Mbit" \
    [ "$(grep -cE 'qdisc tbf .* dev (p[01] .* rate 200|q[01] .* rate 100)Mbit ' "$TMP/out")" -eq 4 ]
[ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
clean "two links per node with --harness"
# --change: a second after the start, both ends of both links take the new rates.
# shellcheck disable=SC2016 # expanded by the harness command's shell
"$TB" --nodes 2 --rates 200mbit,100mbit --change 1:50mbit,20mbit --timeout 30 --harness -- \
    sh -c 'sleep 2.5; for ns in "${CHORUS_TEST_NETNS%%-n0,*}-sw" ${CHORUS_TEST_NETNS%%,*}; do
               tc -n "$ns" qdisc show; done' > "$TMP/out" 2>&1
rc=$?
check "--change: exits 0 (got $rc)" [ "$rc" -eq 0 ]
check "--change: says when and what" \
    grep -qx 'testbed: after 1 s: eth0 at 50mbit, eth1 at 20mbit' "$TMP/out"
check "--change: p0, p1 and node 0's eth0 at 50Mbit, q0, q1 and its eth1 at 20Mbit" \
    [ "$(grep -cE 'qdisc tbf .* dev ((p[01]|eth0) .* rate 50|(q[01]|eth1) .* rate 20)Mbit ' \
         "$TMP/out")" -eq 6 ]
[ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
clean "--change"

# chorus over two links: with CHORUS_TCP_IFACES=eth0,eth1 (the test bed's) each
# peer gets a stream per link, and payload goes over both, the faster carrying
# more; exact either way. With one stream the second link carries next to
# nothing (only the first connection's address is used), so the count means
# what it says. CHORUS_TCP_IFACES=auto (the default) finds both links itself: a stream per
# link too; bootstrap keeps to the first link.
cat > "$TMP/two_links_perf" <<END
#!/bin/sh
tx() { cat /sys/class/net/\$1/statistics/tx_bytes; }
b0=\$(tx eth0) b1=\$(tx eth1)
"$PERF" allreduce -b 16M -e 16M -n 2 -w 1 -c 1 || exit 1
echo "tx eth0 \$((\$(tx eth0) - b0)) eth1 \$((\$(tx eth1) - b1))"
END
chmod +x "$TMP/two_links_perf"
for setting in "0 eth0,eth1 both" "1 eth0,eth1 one" "0 auto both" "0 - both" \
               "0 bootstrap one"; do
    # shellcheck disable=SC2086 # three words
    set -- $setting
    streams=$1 ifaces=$2 links=$3
    label="CHORUS_TCP_STREAMS=$streams CHORUS_TCP_IFACES=$ifaces"
    [ "$ifaces" = - ] && label="CHORUS_TCP_STREAMS=$streams, CHORUS_TCP_IFACES unset"
    if [ "$ifaces" = - ]; then
        "$TB" --nodes 2 --rates 200mbit,100mbit --timeout 120 -- \
            env -u CHORUS_TCP_IFACES CHORUS_TCP_STREAMS="$streams" "$TMP/two_links_perf"
    else
        "$TB" --nodes 2 --rates 200mbit,100mbit --timeout 120 -- \
            env CHORUS_TCP_STREAMS="$streams" CHORUS_TCP_IFACES="$ifaces" \
            "$TMP/two_links_perf"
    fi > "$TMP/out" 2>&1
    rc=$?
    check "two links, $label: allreduce exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "two links, $label: no wrong element" \
        grep -qx '\[rank 0 node 0\] # out-of-place/in-place wrong elements total: 0' "$TMP/out"
    # Each node sends over 100 MB: both links carry some with a stream each, eth1 half
    # of eth0's at these rates (a fifth at least); one stream leaves eth1 all but idle.
    if [ "$links" = both ]; then
        want='$4 >= 4194304 && $4 * 5 >= $2'
    else
        want='$4 < 1048576 && $2 >= 33554432'
    fi
    check "two links, $label: bytes per link as expected on both nodes" \
        [ "$(sed -n 's/^\[rank [01] node [01]\] tx //p' "$TMP/out" | awk "$want" | wc -l)" -eq 2 ]
    sed -n "s/^\(\[rank [01] node [01]\]\) tx /test_netns: $label: \1 sent /p" "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
    clean "chorus over two links, $label"
done

# The harness's placement: rank r of N in namespace r * m / N, one node per namespace.
for run in 2:3 3:7 4:5; do
    nodes=${run%%:*} n=${run#*:}
    "$TB" --nodes "$nodes" --timeout 120 --harness -- "$NETNS_PLACE" "$n" > "$TMP/out" 2>&1
    rc=$?
    check "harness placement of $n ranks on $nodes nodes exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "harness placement of $n ranks on $nodes nodes: reported" \
        grep -qx "netns_place: $n ranks on $nodes namespaces as expected" "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
    clean "the placement of $n ranks on $nodes nodes"
done
# Placed by testbed.sh (a namespace listed once per rank on it): uneven and round robin.
for run in "3 3,2,1:6" "3 3,2,1:4" "2 2 --cyclic:4" "3 3,2,1 --cyclic:6"; do
    layout=${run%%:*} n=${run#*:}
    # shellcheck disable=SC2086 # nodes, ranks per node and an optional --cyclic
    set -- $layout
    # shellcheck disable=SC2086
    "$TB" --nodes "$1" --ranks-per-node "$2" ${3:-} --timeout 120 --harness -- \
        "$NETNS_PLACE" "$n" > "$TMP/out" 2>&1
    rc=$?
    check "harness placement of $n ranks on $layout exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "harness placement of $n ranks on $layout: reported" \
        grep -qx "netns_place: $n ranks on $1 namespaces as expected" "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
    clean "the placement of $n ranks on $layout"
done

# The matrix (1 to 8 ranks) with the hierarchical algorithms forced at every
# size, its ranks placed as testbed.sh places them (at 4 ranks 2 x 2 and round
# robin, at 6 ranks 3,2,1; other counts in proportion), once with the nodes'
# teams and once with CHORUS_SHM=0; both exact. The matrix's other collectives
# use TCP inside a node either way, but the hierarchical stages over TCP carry
# most of its loopback bytes: with them on the teams the nodes' loopback
# carries at most a third of what it does over TCP (about a seventh measured,
# about a half when only the stages of even blocks reach the teams).
hier_matrix() {
    local layout shm rc what
    for layout in "2 2" "3 3,2,1" "2 2 --cyclic"; do
        # shellcheck disable=SC2086 # nodes, ranks per node and an optional --cyclic
        set -- $layout
        for shm in 1 0; do
            what="hier matrix on $1 nodes, ranks $2${3:+ $3}, CHORUS_SHM=$shm"
            # shellcheck disable=SC2086
            CHORUS_SHM=$shm CHORUS_TUNE=$HIER timeout -k 10 400 "$TB" --nodes "$1" \
                --ranks-per-node "$2" ${3:-} --timeout 360 --harness -- "$TMP/lo_after_harness" \
                "$TEST_COLL" --filter=coll/small_counts_all_ranks > "$TMP/matrix$shm" 2>&1
            rc=$?
            check "$what exits 0 (got $rc)" [ "$rc" -eq 0 ]
            check "$what: every test passed" grep -qE \
                'Synthesis: Tested: 8 \| Passing: 8 \| Failing: 0 \| Crashing: 0' "$TMP/matrix$shm"
            [ "$rc" -eq 0 ] || tail -n 30 "$TMP/matrix$shm"
            clean "$what"
        done
        check "hier matrix on $1 nodes, ranks $2${3:+ $3}: loopback with teams \
$(lo_total "$TMP/matrix1") B, a third of $(lo_total "$TMP/matrix0") B at most" \
            lo_third "$TMP/matrix1" "$TMP/matrix0"
    done
}

# The collective test matrix with its ranks spread over the nodes (the harness
# places consecutive ranks on a node).
if [ -x "$TEST_COLL" ]; then
    # million_elements adds about two minutes a run: only with CHORUS_NETNS_LONG=1.
    long=${CHORUS_NETNS_LONG:+|million_elements}
    for run in "2:coll/@(tcp|small_counts_all_ranks)" \
               "3:coll/@(tcp|small_counts_all_ranks$long)"; do
        nodes=${run%%:*} filter=${run#*:}
        timeout -k 10 400 "$TB" --nodes "$nodes" --timeout 360 --harness -- \
            "$TEST_COLL" --filter="$filter" > "$TMP/out" 2>&1
        rc=$?
        check "test_coll --filter='$filter' across $nodes nodes exits 0 (got $rc)" \
            [ "$rc" -eq 0 ]
        check "test_coll across $nodes nodes: every test passed" \
            grep -qE 'Synthesis: Tested: [1-9][0-9]* \| Passing: [1-9][0-9]* \| Failing: 0 \| Crashing: 0' \
            "$TMP/out"
        [ "$rc" -eq 0 ] || tail -n 30 "$TMP/out"
        clean "the matrix across $nodes nodes"
    done
    hier_matrix
else
    echo "test_netns: no $TEST_COLL (built with Criterion): the matrix is not run"
fi

# Wire compression across 2 nodes of 2 ranks, where it runs on the hierarchical algorithms
# (their node stages on the teams, in float32): within the bound, the same bits on every
# rank, as on one node.
if [ -x "$TEST_COMPRESS" ]; then
    timeout -k 10 400 "$TB" --nodes 2 --ranks-per-node 2 --timeout 360 --harness -- \
        "$TEST_COMPRESS" > "$TMP/out" 2>&1
    rc=$?
    check "test_compress across 2 nodes of 2 ranks exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "test_compress across 2 nodes: every test passed" \
        grep -qE 'Synthesis: Tested: [1-9][0-9]* \| Passing: [1-9][0-9]* \| Failing: 0 \| Crashing: 0' \
        "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 30 "$TMP/out"
    clean "test_compress across 2 nodes"
fi
for c in allreduce reduce_scatter; do
    "$TB" --nodes 2 --ranks-per-node 2 --timeout 120 -- "$PERF" "$c" -b 1M -e 16M -n 1 -w 1 \
        -c 1 --compress fp16 > "$TMP/out" 2>&1
    rc=$?
    check "$c compressed to fp16 on 2x2 exits 0 (got $rc)" [ "$rc" -eq 0 ]
    check "$c compressed to fp16 on 2x2: every element within the bound" grep -qx \
        '\[rank 0 node 0\] # out-of-place/in-place wrong elements total: 0' "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 20 "$TMP/out"
    clean "$c compressed on 2x2"
done

# A rank SIGKILLed in a hierarchical allreduce of 64 MB (2 warm-up calls
# first, each exact and with its node-local stages off loopback), at several
# points of a call (a percentage of its previous call's length), on several
# nodes and layouts: every survivor's call fails with PEER_FAILED, TIMEOUT or
# ABORTED, and the survivor exits, within the communicators' timeout (5 s)
# plus 5 s of the kill; no call succeeds with wrong data. A survivor whose
# schedule fails while a team stage of it is posted must not leak the schedule.
KILL_TIMEOUT=5
# kill_case "NODES RANKS [--cyclic]:NRANKS VICTIM PERCENT" [LABEL]: one such run, under the
# environment the caller sets.
kill_case() {
    local layout=${1%%:*} nranks victim percent what rc
    # shellcheck disable=SC2086 # NRANKS VICTIM PERCENT
    set -- ${1#*:} "${2:-}"
    nranks=$1 victim=$2 percent=$3
    what="${4:+$4: }rank $victim of $nranks"
    # shellcheck disable=SC2086 # nodes, ranks per node and an optional --cyclic
    set -- $layout
    what="$what on $1 nodes (ranks $2${3:+ $3}) killed $percent% into a call"
    # shellcheck disable=SC2086
    timeout -k 10 120 "$TB" --nodes "$1" --ranks-per-node "$2" ${3:-} --timeout 100 --harness -- \
        "$NETNS_KILL" "$nranks" "$victim" "$percent" "$KILL_TIMEOUT" 5 > "$TMP/out" 2>&1
    rc=$?
    check "$what: every survivor failed in time (got $rc)" [ "$rc" -eq 0 ]
    check "$what: $((nranks - 1)) survivors reported" [ "$(grep -c \
        '^netns_kill: survivor [0-9]*: exit status 0, its call failed' "$TMP/out")" -eq $((nranks - 1)) ]
    check "$what: no survivor leaked its schedule" \
        absent 'schedule finalized with transfers in flight' "$TMP/out"
    [ "$rc" -eq 0 ] || tail -n 30 "$TMP/out"
    grep '^netns_kill: \(rank [0-9]* killed\|survivor\)' "$TMP/out"
    clean "$what"
}
for run in "2 2:4 1 10" "2 2:4 2 50" "2 2 --cyclic:4 3 90" "3 3,2,1:6 4 40" "2 2:4 0 70"; do
    kill_case "$run"
done
# The same over the UCX transport (UCX_TLS=tcp), where chorus is built with it: the
# survivors learn of the loss from UCX (a reset connection, or its keepalive).
if grep -qs '^#define HAVE_UCX 1' ../config.h; then
    for run in "2 2:4 1 50" "3 3,2,1:6 4 40"; do
        CHORUS_TRANSPORT=ucx UCX_TLS=tcp kill_case "$run" ucx
    done
fi

# A failing rank fails the run, named with its node.
# shellcheck disable=SC2016
"$TB" --nodes 2 --ranks-per-node 2 -- sh -c '[ "$CHORUS_RANK" != 1 ] || exit 3' \
    > "$TMP/out" 2>&1
rc=$?
check "a failing rank gives 1 (got $rc)" [ "$rc" -eq 1 ]
check "the failing rank is named" grep -qx 'testbed: rank 1 (node 0) exited with 3' "$TMP/out"
clean "a failing rank"

# The time limit kills the ranks and still removes everything.
start=$SECONDS
"$TB" --nodes 2 --timeout 2 -- sleep 60.5 > "$TMP/out" 2>&1
rc=$?
check "the time limit gives 124 (got $rc)" [ "$rc" -eq 124 ]
check "the time limit is kept ($((SECONDS - start)) s)" [ $((SECONDS - start)) -lt 15 ]
check "no rank outlives the time limit" [ -z "$(pgrep -f '(^|/)sleep 60\.5$')" ]
clean "the time limit"

# wait_ns PID: until the test bed of PID has made its nodes (at most 10 s).
# Until test bed $1 is fully up: its ranks (command lines matching the regex
# $2; the test bed runs commands by their full path) start only after every
# namespace and link exists, so a kill then finds all of them.
wait_ns() {
    for _ in $(seq 200); do
        ip netns list | grep -q "^chorus-tb-$1-n1" && pgrep -f "$2" > /dev/null && return 0
        sleep 0.1
    done
    return 1
}
"$TB" --nodes 2 -- sleep 61 > /dev/null 2>&1 &
pid=$!
check "namespaces appear" wait_ns "$pid" '(^|/)sleep 61$'
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM gives 143 (got $rc)" [ "$rc" -eq 143 ]
clean "SIGTERM"

# SIGKILL leaves the namespaces (and the ranks in them); --cleanup removes both.
"$TB" --nodes 3 -- sleep 62.5 > /dev/null 2>&1 &
pid=$!
check "namespaces appear" wait_ns "$pid" '(^|/)sleep 62\.5$'
{ kill -KILL "$pid"; wait "$pid"; } 2> /dev/null
check "SIGKILL leaves the nodes" ip netns pids "chorus-tb-$pid-n0" > /dev/null
"$TB" --cleanup > "$TMP/out" 2>&1
check "--cleanup exits 0" [ $? -eq 0 ]
check "--cleanup removed the 4 namespaces ($(tail -n 1 "$TMP/out"))" \
    grep -qx 'testbed: removed 4 namespace(s)' "$TMP/out"
check "--cleanup killed the ranks left in them" [ -z "$(pgrep -f '(^|/)sleep 62\.5$')" ]
check "--cleanup removed the temporary folder" \
    [ -z "$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name "chorus-tb-$pid.*")" ]
clean "--cleanup"

# Usage errors are refused before anything is created.
for bad in "--nodes 5" "--nodes 1" "--rate fast" "--ranks-per-node 2,2,2" "--timeout 0" \
    "--rate 1gbit --rates 200mbit,100mbit" "--rates 200mbit" "--rates 200mbit,fast" \
    "--change 1:50mbit" "--rate 1gbit --change 1:x" "--rate 1gbit --change 1:5mbit,2mbit" \
    "--rates 200mbit,100mbit --change 1:50mbit" "--rate 1gbit --change soon:5mbit"; do
    # shellcheck disable=SC2086
    "$TB" $bad -- true > /dev/null 2>&1
    rc=$?
    check "'testbed.sh $bad' gives 2 (got $rc)" [ "$rc" -eq 2 ]
done
"$TB" --nodes 2 -- > /dev/null 2>&1
check "no command gives 2" [ $? -eq 2 ]
clean "usage errors"

checks_end
