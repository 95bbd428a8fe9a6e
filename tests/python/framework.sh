# Shared by the Python tests' scripts (POSIX sh), after tests/lib/checks.sh: the Python of
# one framework, or a skip (77) with the reason, and this build's library and this tree's
# package in front of whatever that Python has installed.
#
#   framework_python CHORUS_TORCH_PYTHON torch   # sets PY, here, top; exports CHORUS_LIB,
#                                                # PYTHONPATH, TMPDIR (= $TMP)
#   run_ranks N PROGRAM ARGS...                  # PY PROGRAM under chorus-run -n N
framework_python() {
    eval "PY=\${$1:-}"
    if [ -z "$PY" ] || ! "$PY" -c "import $2" 2>/dev/null; then
        echo "SKIP: no Python with $2 ($1; ./quickstart check sets one up)"
        exit 77
    fi
    if ldd "$CHORUS_LIB_BUILT" | grep -qE 'lib(a|t|ub)san'; then
        echo "SKIP: $CHORUS_LIB_BUILT is built with a sanitizer; Python cannot load it"
        exit 77
    fi
    here=$(cd "$(dirname "$0")" && pwd)
    top=$(cd "$here/../.." && pwd)
    CHORUS_LIB=$CHORUS_LIB_BUILT
    PYTHONPATH=$CHORUS_PYTHON_SRC${PYTHONPATH:+:$PYTHONPATH}
    # The frameworks' own temporary files (TensorFlow's autograph writes a module per
    # traced function) go to the test's scratch folder, which is removed on exit.
    TMPDIR=$TMP
    export CHORUS_LIB PYTHONPATH TMPDIR
}

# Runs $PY PROGRAM under chorus-run -n N into $TMP/out; prints its last line, or its tail
# on failure.
run_ranks() {
    n=$1
    shift
    timeout -k 5 300 "$CHORUS_RUN" -n "$n" "$PY" "$@" >"$TMP/out" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then tail -n 1 "$TMP/out"; else grep FAIL "$TMP/out" | head -n 20;
        tail -n 20 "$TMP/out"; fi
    return $rc
}
