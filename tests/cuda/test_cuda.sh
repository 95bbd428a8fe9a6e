#!/bin/sh
# CUDA device buffers: the device kernels against the CPU kernels, then every collective on
# device memory at 1 to 4 ranks (several ranks share a GPU), staged and declared (the node
# team's kernels, which the info log must name). Skips (77) in a build without
# CUDA or on a machine without a device. CHORUS_CUDA_SANITIZER=1 runs both under
# compute-sanitizer's memcheck (the collectives at 2 ranks, the short matrix).
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_cuda

if [ ! -x "$CUDA_KERNELS" ] || [ ! -x "$CUDA_COLLS" ]; then
    echo "SKIP: this build has no CUDA (configure found no toolkit)"
    exit 77
fi
"$CUDA_KERNELS" >"$TMP/kernels" 2>&1
rc=$?
cat "$TMP/kernels"
if [ $rc -eq 77 ]; then
    echo "SKIP: no CUDA device on this machine"
    exit 77
fi
check "device kernels match the CPU kernels bit for bit" test $rc -eq 0

for n in 1 2 3 4; do
    check "every collective on device buffers at $n ranks" \
        timeout -k 5 600 "$CHORUS_RUN" -n $n "$CUDA_COLLS"
done
CHORUS_LOG_LEVEL=info timeout -k 5 600 "$CHORUS_RUN" -n 2 "$CUDA_COLLS" --quick \
    >"$TMP/declared" 2>&1
check "declared device calls run on the node team's kernels (shm_cuda)" \
    grep -q "in cuda memory runs shm_cuda" "$TMP/declared"

if [ "${CHORUS_CUDA_SANITIZER:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    check "compute-sanitizer memcheck: device kernels" \
        compute-sanitizer --tool memcheck --error-exitcode 9 "$CUDA_KERNELS" --quick
    check "compute-sanitizer racecheck: device kernels" \
        compute-sanitizer --tool racecheck --error-exitcode 9 "$CUDA_KERNELS" --tiny
    check "compute-sanitizer memcheck: collectives at 2 ranks" \
        timeout -k 5 600 "$CHORUS_RUN" -n 2 compute-sanitizer --tool memcheck \
        --error-exitcode 9 "$CUDA_COLLS" --quick
fi
checks_end
