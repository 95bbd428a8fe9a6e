# Shared by the shell tests (POSIX sh): counted checks, a scratch folder that
# is removed on exit, and the closing summary. Source it, then call
# checks_begin NAME once; every check prints one line when it fails.
#
#   . "$(dirname "$0")/../lib/checks.sh"
#   checks_begin test_thing                 # sets TMP, FAILED, CHECKS
#   check "what must hold" COMMAND ARGS...  # counted; "FAIL: what must hold" if not
#   checks_end                              # "test_thing: N/M checks passed"; status

checks_begin() {
    CHECKS_NAME=$1
    FAILED=0
    CHECKS=0
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/chorus-$CHECKS_NAME.XXXXXX") || exit 2
    trap 'rm -rf "$TMP"' EXIT
}

check() {
    desc=$1
    shift
    CHECKS=$((CHECKS + 1))
    if ! "$@"; then
        FAILED=$((FAILED + 1))
        echo "FAIL: $desc"
    fi
}

checks_end() {
    echo "$CHECKS_NAME: $((CHECKS - FAILED))/$CHECKS checks passed"
    [ "$FAILED" -eq 0 ]
}
