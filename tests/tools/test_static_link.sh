#!/bin/sh
# chorus.pc links statically: a small program linked against libchorus.a with
# nothing but the flags of 'pkg-config --static --libs chorus' builds, does not
# load libchorus.so, and runs an allreduce at 2 ranks with the right result.
#
# usage: test_static_link.sh   (make check sets CHORUS_PC_DIR, the folder of
#        the built chorus.pc; LIBCHORUS_A; CHORUS_INCLUDE; CHORUS_RUN;
#        CHORUS_INFO; CC; and TEST_CFLAGS and TEST_LDFLAGS, the build's own,
#        which a sanitizer build needs at the link too)
set -u

. "$(dirname "$0")/../lib/checks.sh"
for var in CHORUS_PC_DIR LIBCHORUS_A CHORUS_INCLUDE CHORUS_RUN CHORUS_INFO CC; do
    eval "val=\${$var:-}"
    if [ -z "$val" ]; then
        echo "test_static_link: $var is not set" >&2
        exit 2
    fi
done
if ! command -v pkg-config > /dev/null 2>&1; then
    echo "test_static_link: SKIP: no pkg-config"
    exit 77
fi
if [ ! -f "$LIBCHORUS_A" ]; then
    echo "test_static_link: SKIP: no static library ($LIBCHORUS_A; configured --disable-static?)"
    exit 77
fi
checks_begin test_static_link

# Only the archive in the library folder, so -lchorus cannot pick the shared library.
mkdir -p "$TMP/lib"
cp "$LIBCHORUS_A" "$TMP/lib/"
pc() {
    PKG_CONFIG_PATH=$CHORUS_PC_DIR pkg-config --define-variable=libdir="$TMP/lib" \
        --define-variable=includedir="$CHORUS_INCLUDE" "$@" chorus
}
cat > "$TMP/app.c" <<'APP'
#include <stdio.h>
#include <chorus.h>

int main(void)
{
    chorus_comm_t comm;
    int x, rank, size;
    chorus_status_t st = chorus_comm_create_from_env(&comm);

    if (st != CHORUS_OK) {
        fprintf(stderr, "create: %s\n", chorus_status_string(st));
        return 1;
    }
    rank = chorus_comm_rank(comm);
    size = chorus_comm_size(comm);
    x = rank + 1;
    st = chorus_allreduce(&x, &x, 1, CHORUS_INT32, CHORUS_SUM, comm, NULL);
    if (st != CHORUS_OK || x != size * (size + 1) / 2) {
        fprintf(stderr, "rank %d: allreduce %s, got %d\n", rank, chorus_status_string(st), x);
        chorus_comm_destroy(comm);
        return 1;
    }
    printf("rank %d ok %d\n", rank, x);
    return chorus_comm_destroy(comm) == CHORUS_OK ? 0 : 1;
}
APP

libs=$(pc --static --libs)
check "pkg-config --static --libs chorus answers ($libs)" [ -n "$libs" ]
cflags=$(pc --cflags)
if "$CHORUS_INFO" | grep '^built with:' | grep -qw hwloc; then
    check "the static flags name hwloc" sh -c "echo '$libs' | grep -qw -- -lhwloc"
    # Without the private flags the same link must fail: that is what the test guards.
    # shellcheck disable=SC2086
    "$CC" ${TEST_CFLAGS:-} $cflags -o "$TMP/app_short" "$TMP/app.c" -L"$TMP/lib" -lchorus \
        -pthread ${TEST_LDFLAGS:-} > "$TMP/short.log" 2>&1
    check "linking libchorus.a without the private flags fails" [ $? -ne 0 ]
fi
if "$CHORUS_INFO" | grep '^built with:' | grep -qw ucx; then
    check "the static flags name UCX" sh -c "echo '$libs' | grep -qw -- -lucp"
fi
check "the static flags name the math library" sh -c "echo '$libs' | grep -qw -- -lm"

# shellcheck disable=SC2086
"$CC" ${TEST_CFLAGS:-} $cflags -o "$TMP/app" "$TMP/app.c" $libs ${TEST_LDFLAGS:-} \
    > "$TMP/link.log" 2>&1
rc=$?
check "a program links with 'pkg-config --static --libs chorus' (rc $rc)" [ "$rc" -eq 0 ]
[ "$rc" -eq 0 ] || cat "$TMP/link.log"
if [ "$rc" -eq 0 ]; then
    if command -v readelf > /dev/null 2>&1; then
        check "the program does not load libchorus.so" \
            sh -c "! readelf -d '$TMP/app' | grep NEEDED | grep -q libchorus"
    fi
    timeout -k 5 60 "$CHORUS_RUN" -n 2 "$TMP/app" > "$TMP/run.out" 2>&1
    rc=$?
    check "it runs at 2 ranks (rc $rc)" [ "$rc" -eq 0 ]
    check "both ranks got the sum 3" [ "$(grep -c ' ok 3$' "$TMP/run.out")" -eq 2 ]
    [ "$FAILED" -eq 0 ] || cat "$TMP/run.out"
fi
checks_end
