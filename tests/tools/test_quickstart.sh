#!/bin/sh
# ./quickstart configures again when PREFIX or CONFIGURE_FLAGS differ from the
# last build of its build folder, installs where it says, and never reports a
# prefix it did not use. Runs on a scratch copy of the source tree, built
# without shared libraries and optimization to stay within a few minutes.
#
# usage: test_quickstart.sh   (QUICKSTART names the tree's quickstart; make
#        check sets it)
set -u

QS=${QUICKSTART:-}
if [ -z "$QS" ] || [ ! -x "$QS" ]; then
    echo "test_quickstart: QUICKSTART ('$QS') is not an executable" >&2
    exit 2
fi
. "$(dirname "$0")/../lib/checks.sh"
checks_begin test_quickstart
src=$(cd "$(dirname "$QS")" && pwd)

# The tree as it is (generated configure included, with its times, so no autoreconf),
# without history and without the folders that builds made: configured build folders
# and install prefixes, wherever BUILD_DIR and PREFIX put them in the tree.
mkdir "$TMP/src"
entries=$(cd "$src" && for e in * .[!.]*; do
    [ -e "$e" ] || continue
    case "$e" in
        .git|autom4te.cache|build|install|install-*) continue ;;
        build-aux) ;;
        build-*) continue ;; # CI's build-asan, build-tsan, build-fuzz
    esac
    [ -f "$e/config.status" ] || [ -e "$e/bin/chorus-info" ] || echo "$e"
done)
# shellcheck disable=SC2086
(cd "$src" && tar -cf - $entries) | tar -C "$TMP/src" -xf -
chmod -R u+w "$TMP/src" # a distcheck's source tree is read-only
check "the scratch copy has the quickstart" [ -x "$TMP/src/quickstart" ]

# The outer make's job server must not reach the scratch builds; flags are fixed here. The
# settings of the quickstart that runs this test (CI's BUILD_DIR=build-asan) must not either:
# they would send the scratch build into that build folder while its tests run.
unset MAKEFLAGS MFLAGS MAKELEVEL CPPFLAGS LDFLAGS BUILD_DIR PREFIX CONFIGURE_FLAGS
flags="--disable-shared --without-mpi --without-criterion"
qs() {
    env QUICKSTART_DEPS=no CFLAGS="-O0" "$@" timeout -k 10 900 "$TMP/src/quickstart" build \
        > "$TMP/out" 2>&1
}

qs PREFIX="$TMP/p1" CONFIGURE_FLAGS="$flags"
rc=$?
check "first build exits 0 (got $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || tail -n 30 "$TMP/out"
check "first build says where it installed" grep -qx "quickstart: installed in $TMP/p1" "$TMP/out"
check "first build installed chorus-info there" [ -x "$TMP/p1/bin/chorus-info" ]
check "the build folder records its settings" \
    grep -qx "prefix=$TMP/p1" "$TMP/src/build/quickstart.state"

qs PREFIX="$TMP/p1" CONFIGURE_FLAGS="$flags"
check "the same settings build again (got $?)" [ $? -eq 0 ]
check "the same settings do not configure again" sh -c "! grep -q 'configure --prefix' '$TMP/out'"

# The bug: a new PREFIX was ignored once build/ existed, yet printed as the install place.
qs PREFIX="$TMP/p2" CONFIGURE_FLAGS="$flags"
rc=$?
check "a new PREFIX builds (got $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || tail -n 30 "$TMP/out"
check "a new PREFIX is noticed" grep -q "PREFIX changed from $TMP/p1" "$TMP/out"
check "a new PREFIX configures again" grep -q "configure --prefix=$TMP/p2 " "$TMP/out"
check "a new PREFIX keeps the objects" sh -c "! grep -q 'rebuilding from clean' '$TMP/out'"
check "the printed prefix is the new one" grep -qx "quickstart: installed in $TMP/p2" "$TMP/out"
check "the build folder's Makefile installs into it" \
    grep -qx "prefix = $TMP/p2" "$TMP/src/build/Makefile"
check "chorus-info is installed in the new prefix" [ -x "$TMP/p2/bin/chorus-info" ]
check "the installed chorus-info runs" sh -c "'$TMP/p2/bin/chorus-info' --version >/dev/null"
check "the installed chorus.pc names the new prefix" \
    grep -qx "prefix=$TMP/p2" "$TMP/p2/lib/pkgconfig/chorus.pc"
check "no path printed is the old prefix" sh -c "! grep -q 'installed in $TMP/p1' '$TMP/out'"

# Other configure flags: configured again with them, and rebuilt from clean.
qs PREFIX="$TMP/p2" CONFIGURE_FLAGS="$flags --without-hwloc"
rc=$?
check "new CONFIGURE_FLAGS build (got $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || tail -n 30 "$TMP/out"
check "new CONFIGURE_FLAGS rebuild from clean" grep -q "rebuilding from clean" "$TMP/out"
check "configure got the new flag" \
    sh -c "'$TMP/src/build/config.status' --config | grep -q -- --without-hwloc"
check "the installed chorus-info was built without hwloc" \
    sh -c "'$TMP/p2/bin/chorus-info' | grep '^built with:' | grep -qvw hwloc"

checks_end
