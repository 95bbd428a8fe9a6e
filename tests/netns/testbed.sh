#!/bin/bash
# testbed.sh: a multi-node chorus test bed on one machine, made of network
# namespaces.
#
# usage (as root):
#   testbed.sh [--nodes N] [--ranks-per-node K|K0,K1,..] [--cyclic] [--bind]
#              [--rate RATE|--rates R1,R2] [--build DIR] [--timeout S] [--quiet]
#              -- COMMAND ARGS...
#   testbed.sh [--nodes N] [--ranks-per-node K|K0,K1,..] [--cyclic]
#              [--rate RATE|--rates R1,R2] [--timeout S] --harness -- COMMAND ARGS...
#   testbed.sh --cleanup
#
# Each node is a network namespace with one interface, eth0, at 10.99.0.<i+1>;
# every eth0 is one end of a veth pair whose other end is a port of a bridge in
# a further "switch" namespace. With --rates, each node has a second link as
# well: eth1 at 10.98.0.<i+1>, its veth peer a port of a second bridge in the
# same switch namespace (two rails, as on nodes with two NICs). All of it is
# created inside namespaces, so the root namespace's interfaces, addresses
# and routes are never touched, and removing the namespaces removes it all.
#
#   --nodes N           emulated nodes, 2 to 4 (default 2)
#   --ranks-per-node K  ranks on every node (default 1), or one count per node
#                       (3,2,1: three ranks on the first node, ...); ranks are
#                       numbered node by node, so rank 0 is on the first node
#   --cyclic            deal the ranks round robin over the nodes instead (rank 0
#                       on the first node, rank 1 on the second, ...), as
#                       launchers placing by slot do
#   --bind              run rank r on one CPU, the r-th of the CPUs the test bed
#                       may run on, in turn (taskset), as launchers that bind
#                       ranks to cores do; without it the kernel places them,
#                       and on a machine of few cores the handoffs between the
#                       threads of a rank then cost whatever the placement gives
#                       (small calls vary several times over between runs)
#   --rate RATE         shape both directions of every node's link with tbf,
#                       e.g. 1gbit, 200mbit, 500kbit (default: unshaped)
#   --rates R1,R2       give every node the second link, eth1, and shape eth0
#                       at R1 and eth1 at R2 as --rate does (not with --rate);
#                       every rank gets CHORUS_TCP_IFACES=eth0,eth1, so that
#                       chorus publishes both addresses
#   --change S:RATE     S seconds after the ranks start, shape every link at
#                       RATE instead (tc qdisc change on both of its ends), as
#                       a link that slows down or speeds up mid-run; with
#                       --rates, S:R1,R2 (with --rate or --rates only)
#   --build DIR         a chorus build directory: COMMAND is looked up in
#                       DIR/perf and DIR/src/tools before PATH
#   --timeout S         kill everything after S seconds (default 300)
#   --quiet             print only rank 0's output (and that of failed ranks)
#   --harness           run COMMAND once, in the root namespace, with
#                       CHORUS_TEST_NETNS listing the namespace of each rank as
#                       --ranks-per-node and --cyclic place them (by default one
#                       rank per node: the nodes in order); the test harness
#                       (tests/coll/harness.c) puts its rank r of N in entry
#                       r * S / N of the S listed, so a harness job of S ranks
#                       is placed exactly so, and one of other sizes keeps the
#                       proportions, e.g.
#                         testbed.sh --nodes 3 --harness -- tests/coll/test_coll
#                         testbed.sh --nodes 2 --ranks-per-node 2 --cyclic --harness -- ...
#                       with --rates, COMMAND also gets CHORUS_TCP_IFACES and
#                       CHORUS_TEST_NETNS_IFACES, both eth0,eth1
#   --cleanup           remove the namespaces left by test beds that were killed
#                       (SIGKILL leaves no chance to clean up)
#
# Without --harness, every rank runs as
#   ip netns exec NODE env CHORUS_RANK=r CHORUS_SIZE=n CHORUS_ADDR=10.99.0.1:29500
#       CHORUS_IFADDR=<its node's address> COMMAND ARGS...
# with CHORUS_SECRET, a fresh secret, in its environment (and with --rates,
# CHORUS_TCP_IFACES=eth0,eth1 after CHORUS_IFADDR). For example
#   testbed.sh --nodes 2 --ranks-per-node 2 --build build -- chorus-perf allreduce -b 8 -e 4M
#
# Output: each rank's, prefixed "[rank R node I] ", once all have ended.
# Exit status: 0 when every rank exited 0; 1 when one did not; 124 after the
# timeout; 2 for a usage error; 77 when not root or no namespace can be made.
# Everything created is removed on exit, on error, on SIGINT and on SIGTERM.
set -u

PREFIX=chorus-tb
NET=10.99.0
NET2=10.98.0
PORT=29500
ID="$PREFIX-$$"
SWITCH="$ID-sw"

NODES=2
PER_NODE=1
RATE=
RATES=
RATE2=
CHANGE=
CHANGE_AT=
CHANGE_RATE=
CHANGE_RATE2=
LINKS=1
IFACES=
SHAPED=
BUILD=
TIMEOUT=300
QUIET=0
CYCLIC=0
BIND=0
HARNESS=0
NS_MADE=()
PIDS=()
TMP=

die() { echo "testbed: $*" >&2; exit 1; }
usage() {
    echo "testbed: $*" >&2
    echo "usage: testbed.sh [--nodes N] [--ranks-per-node K] [--cyclic] [--bind]" \
        "[--rate RATE|--rates R1,R2] [--change S:RATE[,R2]] [--build DIR] [--timeout S]" \
        "[--quiet] [--harness]" \
        "-- COMMAND ARGS... | --cleanup" >&2
    exit 2
}

# Kill every process still in namespace $1, then remove it (its veth ends and
# bridges go with it). The kill is what lets a namespace really disappear.
ns_remove() {
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null)
    # shellcheck disable=SC2086 # one argument per pid
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    ip netns del "$1" 2>/dev/null
}

# Stop the process groups of the ranks (or of the harness command) still running.
stop_ranks() {
    local p alive=0
    for p in "${PIDS[@]}"; do
        kill -0 "$p" 2>/dev/null || continue
        kill -TERM -- "-$p" 2>/dev/null
        alive=1
    done
    [ "$alive" -eq 1 ] || return 0
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        alive=0
        for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" -eq 0 ] && return 0
        sleep 0.2
    done
    for p in "${PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
}

# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
    local ns
    trap - EXIT INT TERM
    stop_ranks
    for ns in "${NS_MADE[@]}"; do ns_remove "$ns"; done
    [ -n "$TMP" ] && rm -rf "$TMP"
}

# Is the test bed that named something $PREFIX-<pid>... still running?
owner_runs() {
    local pid=${1#"$PREFIX-"}
    pid=${pid%%[.-]*}
    [ "$pid" != "$$" ] && grep -qs testbed "/proc/$pid/cmdline"
}

# Remove what killed test beds left behind: namespaces named $PREFIX-<pid>-*
# (with the ranks still in them) and temporary folders $PREFIX-<pid>.*.
cleanup_stale() {
    local ns d n=0
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-[0-9]*-"); do
        if owner_runs "$ns"; then
            echo "testbed: $ns belongs to a running test bed: kept" >&2
            continue
        fi
        ns_remove "$ns" && n=$((n + 1))
    done
    echo "testbed: removed $n namespace(s)"
    for d in "${TMPDIR:-/tmp}/$PREFIX-"[0-9]*.*; do
        [ -d "$d" ] && ! owner_runs "${d##*/}" && rm -rf "$d"
    done
}

# Bytes per second of a tc rate such as 200mbit, 1gbit, 10mbps or 500000.
rate_bytes() {
    local num unit
    num=$(printf '%s' "$1" | sed -n 's/^\([0-9][0-9]*\)[a-zA-Z]*$/\1/p')
    unit=$(printf '%s' "$1" | sed -n 's/^[0-9][0-9]*\([a-zA-Z]*\)$/\1/p' | tr '[:upper:]' '[:lower:]')
    [ -n "$num" ] || return 1
    case "$unit" in
        ""|bit) echo $((num / 8)) ;;
        kbit) echo $((num * 125)) ;;
        mbit) echo $((num * 125000)) ;;
        gbit) echo $((num * 125000000)) ;;
        bps) echo "$num" ;;
        kbps) echo $((num * 1000)) ;;
        mbps) echo $((num * 1000000)) ;;
        gbps) echo $((num * 1000000000)) ;;
        *) return 1 ;;
    esac
}

# tbf at rate $3 on the egress of $2 in namespace $1 (with $4 = change: the
# tbf there now takes that rate). The bucket holds 10 ms at the rate, and at
# least 128 KiB so that one segmentation-offload packet always fits.
shape() {
    local bps burst verb=${4:-add}
    bps=$(rate_bytes "$3")
    burst=$((bps / 100))
    [ "$burst" -ge 131072 ] || burst=131072
    ip netns exec "$1" tc qdisc "$verb" dev "$2" root tbf rate "$3" burst "$burst" \
        latency 100ms || die "cannot $verb tbf rate $3 on $2 in $1"
}

# --change: every link, both ends, at the new rates.
reshape() {
    local n
    for ((n = 0; n < NODES; n++)); do
        shape "$SWITCH" "p$n" "$CHANGE_RATE" change
        shape "$ID-n$n" eth0 "$CHANGE_RATE" change
        [ "$LINKS" -eq 1 ] && continue
        shape "$SWITCH" "q$n" "$CHANGE_RATE2" change
        shape "$ID-n$n" eth1 "$CHANGE_RATE2" change
    done
    echo "testbed: after $CHANGE_AT s: eth0 at $CHANGE_RATE${CHANGE_RATE2:+, eth1 at $CHANGE_RATE2}" >&2
}

setup_switch() {
    local b
    ip netns add "$SWITCH" 2>/dev/null || { echo "testbed: cannot create a network" \
        "namespace (ip netns add $SWITCH failed): skipped" >&2; exit 77; }
    NS_MADE+=("$SWITCH")
    # br0 joins the nodes' eth0, br1 (with --rates) their eth1.
    for ((b = 0; b < LINKS; b++)); do
        ip -n "$SWITCH" link add "br$b" type bridge || die "cannot create br$b in $SWITCH"
        ip -n "$SWITCH" link set "br$b" up || die "cannot bring br$b up in $SWITCH"
    done
}

# add_link NODE DEV PORT BRIDGE ADDR RATE: a veth pair created inside the switch
# namespace, PORT on BRIDGE there and DEV moved straight into the node, so that
# no end ever appears in the root namespace; DEV at ADDR/24, shaped both ways
# at RATE unless it is empty.
add_link() {
    local ns="$ID-n$1"
    ip -n "$SWITCH" link add "$3" type veth peer name "$2" netns "$ns" ||
        die "cannot create link $2 of node $1"
    ip -n "$SWITCH" link set "$3" master "$4" up || die "cannot attach $2 of node $1 to $4"
    ip -n "$ns" addr add "$5/24" dev "$2" || die "cannot address $2 of node $1"
    ip -n "$ns" link set "$2" up || die "cannot bring $2 up in $ns"
    if [ -n "$6" ]; then
        shape "$SWITCH" "$3" "$6"
        shape "$ns" "$2" "$6"
    fi
}

# Node $1: namespace, loopback, eth0 on br0 through port p<i>, and with --rates
# eth1 on br1 through port q<i>.
setup_node() {
    local ns="$ID-n$1"
    ip netns add "$ns" || die "cannot create namespace $ns"
    NS_MADE+=("$ns")
    ip -n "$ns" link set lo up || die "cannot bring lo up in $ns"
    add_link "$1" eth0 "p$1" br0 "$NET.$(($1 + 1))" "$RATE"
    [ "$LINKS" -eq 1 ] || add_link "$1" eth1 "q$1" br1 "$NET2.$(($1 + 1))" "$RATE2"
}

# COMMAND as a path: BUILD/perf and BUILD/src/tools first, then PATH.
resolve() {
    local d
    case "$1" in */*) echo "$1"; return 0 ;; esac
    if [ -n "$BUILD" ]; then
        for d in "$BUILD/perf" "$BUILD/src/tools"; do
            [ -x "$d/$1" ] && { echo "$d/$1"; return 0; }
        done
    fi
    command -v "$1" || { echo "testbed: command '$1' not found (--build DIR?)" >&2; return 1; }
}

# Wait for PIDS until all ended or the deadline; set RCS. After the first
# failure the others get 30 s more to report it (chorus fails them at once).
wait_all() {
    local deadline=$((SECONDS + TIMEOUT)) left=${#PIDS[@]} i change_at=
    [ -z "$CHANGE" ] || change_at=$((SECONDS + CHANGE_AT))
    RCS=()
    while [ "$left" -gt 0 ]; do
        if [ -n "$change_at" ] && [ "$SECONDS" -ge "$change_at" ]; then
            reshape
            change_at=
        fi
        for i in "${!PIDS[@]}"; do
            [ -z "${RCS[$i]:-}" ] || continue
            kill -0 "${PIDS[$i]}" 2>/dev/null && continue
            wait "${PIDS[$i]}"
            RCS[i]=$?
            left=$((left - 1))
            [ "${RCS[$i]}" -eq 0 ] || [ "$deadline" -le $((SECONDS + 30)) ] ||
                deadline=$((SECONDS + 30))
        done
        [ "$left" -gt 0 ] || break
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "testbed: still running after the time limit: killed" >&2
            stop_ranks
            for i in "${!PIDS[@]}"; do [ -n "${RCS[$i]:-}" ] || RCS[i]=124; done
            return 124
        fi
        sleep 0.1
    done
    return 0
}

# The namespace of every rank as placed: a namespace is named once per rank on it.
run_harness() {
    local list="" size=0 i
    for i in "${COUNTS[@]}"; do size=$((size + i)); done
    place_ranks "$size"
    for i in "${NODE_OF[@]}"; do list="$list${list:+,}$ID-n$i"; done
    # The harness's ranks inherit both; it runs none of chorus in this namespace.
    [ -z "$IFACES" ] || export CHORUS_TCP_IFACES=$IFACES CHORUS_TEST_NETNS_IFACES=$IFACES
    echo "testbed: $NODES nodes ${SHAPED:+($SHAPED) }CHORUS_TEST_NETNS=$list" >&2
    CHORUS_TEST_NETNS=$list setsid "$@" &
    PIDS=($!)
    wait_all
    local rc=$?
    [ "$rc" -eq 124 ] && return 124
    return "${RCS[0]}"
}

# NODE_OF[r], the node of each of the $1 ranks: node by node, or dealt round
# robin over the nodes with room left (--cyclic). Rank 0 is on node 0 either way.
place_ranks() {
    local r i=0 left=("${COUNTS[@]}")
    NODE_OF=()
    for ((r = 0; r < $1; r++)); do
        if [ "$CYCLIC" -eq 1 ]; then
            [ "$r" -eq 0 ] || i=$(((i + 1) % NODES))
            while [ "${left[$i]}" -eq 0 ]; do i=$(((i + 1) % NODES)); done
        else
            while [ "${left[$i]}" -eq 0 ]; do i=$((i + 1)); done
        fi
        left[i]=$((left[i] - 1))
        NODE_OF+=("$i")
    done
}

# The CPUs this script may run on, one per line, from its affinity list ("0-3,8").
allowed_cpus() {
    local part
    for part in $(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status | tr , ' '); do
        case "$part" in
            *-*) seq "${part%-*}" "${part#*-}" ;;
            *) echo "$part" ;;
        esac
    done
}

run_ranks() {
    local size=0 r i addr="$NET.1:$PORT" cpus=() bind=()
    for i in "${COUNTS[@]}"; do size=$((size + i)); done
    [ "$BIND" -eq 0 ] || mapfile -t cpus < <(allowed_cpus)
    [ "$BIND" -eq 0 ] || [ "${#cpus[@]}" -gt 0 ] || die "--bind: no CPU in the affinity list"
    CHORUS_SECRET=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    export CHORUS_SECRET
    echo "testbed: $NODES nodes, ranks ${COUNTS[*]}, ${SHAPED:+$SHAPED, }$*" >&2
    place_ranks "$size"
    for ((r = 0; r < size; r++)); do
        i=${NODE_OF[$r]}
        [ "$BIND" -eq 0 ] || bind=(taskset -c "${cpus[$((r % ${#cpus[@]}))]}")
        setsid ip netns exec "$ID-n$i" env CHORUS_RANK=$r CHORUS_SIZE=$size \
            CHORUS_ADDR="$addr" CHORUS_IFADDR="$NET.$((i + 1))" \
            ${IFACES:+"CHORUS_TCP_IFACES=$IFACES"} "${bind[@]}" "$@" \
            > "$TMP/rank$r" 2>&1 < /dev/null &
        PIDS+=($!)
    done
    wait_all
    local rc=$?
    for ((r = 0; r < size; r++)); do
        if [ "$QUIET" -eq 1 ] && [ "$r" -eq 0 ]; then
            cat "$TMP/rank0"
        elif [ "$QUIET" -eq 0 ] || [ "${RCS[$r]}" -ne 0 ]; then
            sed "s/^/[rank $r node ${NODE_OF[$r]}] /" "$TMP/rank$r"
        fi
        [ "${RCS[$r]}" -eq 0 ] || { echo "testbed: rank $r (node ${NODE_OF[$r]})" \
            "exited with ${RCS[$r]}" >&2; [ "$rc" -ne 0 ] || rc=1; }
    done
    return "$rc"
}

parse_args() {
    while [ $# -gt 0 ]; do
        case "$1" in
            --nodes) NODES=${2:-}; shift ;;
            --ranks-per-node) PER_NODE=${2:-}; shift ;;
            --rate) RATE=${2:-}; RATE_OPT=1; shift ;;
            --rates) RATES=${2:-}; RATES_OPT=1; shift ;;
            --change) CHANGE=${2:-}; shift ;;
            --build) BUILD=${2:-}; shift ;;
            --timeout) TIMEOUT=${2:-}; shift ;;
            --quiet) QUIET=1 ;;
            --cyclic) CYCLIC=1 ;;
            --bind) BIND=1 ;;
            --harness) HARNESS=1 ;;
            --cleanup) CLEANUP=1 ;;
            -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d'; exit 0 ;;
            --) shift; break ;;
            *) usage "unknown argument '$1'" ;;
        esac
        [ $# -gt 0 ] && shift
    done
    CMD=("$@")
    [[ "$NODES" =~ ^[2-4]$ ]] || usage "--nodes must be 2, 3 or 4 (got '$NODES')"
    [[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || usage "invalid --timeout '$TIMEOUT'"
    [ -z "$RATE" ] || rate_bytes "$RATE" > /dev/null || usage "invalid --rate '$RATE'"
    [ "$RATE_OPT" -eq 0 ] || [ "$RATES_OPT" -eq 0 ] ||
        usage "--rate and --rates exclude each other"
    [ "$RATES_OPT" -eq 0 ] || parse_rates
    [ -z "$RATE" ] || [ -n "$SHAPED" ] || SHAPED="links at $RATE"
    [ -z "$CHANGE" ] || parse_change
    [ "$BIND" -eq 0 ] || [ "$HARNESS" -eq 0 ] ||
        usage "--bind places the ranks the test bed starts, not a --harness job's"
    [ "$BIND" -eq 0 ] || command -v taskset > /dev/null || die "--bind needs taskset (util-linux)"
    parse_counts
}

# --change S:RATE or S:R1,R2 into CHANGE_AT, CHANGE_RATE and CHANGE_RATE2, a
# rate for each link there is.
parse_change() {
    local r
    [ -n "$RATE" ] || usage "--change needs shaped links (--rate or --rates)"
    [[ "$CHANGE" =~ ^([0-9]+):([^,]+)(,([^,]+))?$ ]] ||
        usage "--change '$CHANGE' is not S:RATE or S:R1,R2"
    CHANGE_AT=${BASH_REMATCH[1]}
    CHANGE_RATE=${BASH_REMATCH[2]}
    CHANGE_RATE2=${BASH_REMATCH[4]}
    if [ "$LINKS" -eq 2 ] && [ -z "$CHANGE_RATE2" ]; then
        usage "--change '$CHANGE': two links (--rates) need two rates, S:R1,R2"
    fi
    if [ "$LINKS" -eq 1 ] && [ -n "$CHANGE_RATE2" ]; then
        usage "--change '$CHANGE': one link (--rate) takes one rate, S:RATE"
    fi
    for r in "$CHANGE_RATE" ${CHANGE_RATE2:+"$CHANGE_RATE2"}; do
        rate_bytes "$r" > /dev/null || usage "invalid rate '$r' in --change '$CHANGE'"
    done
}

# --rates R1,R2 as the rates of eth0 (RATE) and eth1 (RATE2), each checked as
# --rate is, and the second link with them.
parse_rates() {
    local r
    [[ "$RATES" =~ ^([^,]+),([^,]+)$ ]] || usage "--rates '$RATES' does not give two rates R1,R2"
    RATE=${BASH_REMATCH[1]}
    RATE2=${BASH_REMATCH[2]}
    for r in "$RATE" "$RATE2"; do
        rate_bytes "$r" > /dev/null || usage "invalid rate '$r' in --rates '$RATES'"
    done
    LINKS=2
    IFACES=eth0,eth1
    SHAPED="eth0 at $RATE, eth1 at $RATE2"
}

# --ranks-per-node as one count per node in COUNTS.
parse_counts() {
    local i
    IFS=, read -r -a COUNTS <<< "$PER_NODE"
    [ "${#COUNTS[@]}" -eq 1 ] && for ((i = 1; i < NODES; i++)); do COUNTS+=("$PER_NODE"); done
    [ "${#COUNTS[@]}" -eq "$NODES" ] || usage "--ranks-per-node '$PER_NODE' does not give" \
        "one count for each of $NODES nodes"
    for i in "${COUNTS[@]}"; do
        if ! [[ "$i" =~ ^[1-9][0-9]*$ ]] || [ "$i" -gt 64 ]; then
            usage "invalid count of ranks per node '$i' (1 to 64)"
        fi
    done
}

CLEANUP=0
RATE_OPT=0
RATES_OPT=0
NODE_OF=()
COUNTS=()
parse_args "$@"
if [ "$(id -u)" -ne 0 ]; then
    echo "testbed: network namespaces need root: skipped" >&2
    exit 77
fi
if [ "$CLEANUP" -eq 1 ]; then
    cleanup_stale
    exit 0
fi
[ "${#CMD[@]}" -gt 0 ] || usage "no COMMAND after --"
CMD[0]=$(resolve "${CMD[0]}") || exit 2
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
TMP=$(mktemp -d "${TMPDIR:-/tmp}/$ID.XXXXXX") || die "cannot create a temporary directory"
setup_switch
for ((n = 0; n < NODES; n++)); do setup_node "$n"; done
if [ "$HARNESS" -eq 1 ]; then
    run_harness "${CMD[@]}"
else
    run_ranks "${CMD[@]}"
fi
exit $?
