# script_lib.sh - sourced (not run) by every tests/test_*.sh: checks that the
# ptdp binary exists, makes a temporary directory removed at exit ($tmp, also
# $TMP), counts checks with ok / bad (fail is the same), and `finish` prints
# "NAME: N passed, M failed" and returns the script's status (a script that
# checked nothing fails). Needs PTDP (and PTDP_SRC) from CTest's environment.
set -u
: "${PTDP:?PTDP must point at the ptdp binary}"
: "${PTDP_SRC:?PTDP_SRC must point at the source tree}"
if [ ! -x "$PTDP" ]; then
    echo "FAIL: ptdp binary $PTDP is missing (did the build link it?)" >&2
    exit 1
fi
pass=0
fails=0
tmp=$(mktemp -d)
TMP=$tmp
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
fail() { bad "$@"; }
finish() {
    echo "$(basename "$0"): $pass passed, $fails failed"
    [ "$fails" -eq 0 ] && [ "$pass" -gt 0 ]
}
