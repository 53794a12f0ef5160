#!/usr/bin/env bash
# Run every test: the unit-test binaries (build/tests/unit/*) and the integration tests
# (tests/integration/test_*.py, driven by runner.py). Each test prints one PASS or FAIL line;
# the last line is "N passed, N failed". Exit status 1 if anything failed.
#   tests/run.sh [--unit-only] [--filter SUBSTRING]
set -uo pipefail
cd "$(dirname "$0")/.."
args=("$@") # for the re-exec below: the loop consumes "$@"

# The suite runs as on a fresh machine, where nothing is mounted on /sys/kernel/tracing:
# in a private mount namespace with tracefs (and debugfs's view of it) unmounted, so that a
# dependence on tracefs fails here too, whatever was mounted on this machine by hand.
if [ "$(id -u)" -eq 0 ] && [ -z "${PROBING_TESTS_NO_TRACEFS:-}" ] && command -v unshare >/dev/null; then
	PROBING_TESTS_NO_TRACEFS=1 exec unshare --mount --propagation private "$0" ${args[@]+"${args[@]}"}
fi
if [ -n "${PROBING_TESTS_NO_TRACEFS:-}" ]; then
	umount -l /sys/kernel/debug/tracing 2>/dev/null
	umount -l /sys/kernel/tracing 2>/dev/null
	if [ -e /sys/kernel/tracing/trace ]; then
		echo "FAIL tests/run.sh: tracefs is still mounted in the tests' mount namespace"
		exit 1
	fi
fi


unit_only=0
filter=""
while [ $# -gt 0 ]; do
	case "$1" in
	--unit-only) unit_only=1 ;;
	--filter) filter="$2"; shift ;;
	*) echo "usage: tests/run.sh [--unit-only] [--filter SUBSTRING]" >&2; exit 2 ;;
	esac
	shift
done

log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in build/tests/unit/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	out=$(timeout 300 "$t" 2>&1)
	rc=$?
	if [ -n "$filter" ]; then
		out=$(printf '%s\n' "$out" | grep -F -- "$filter")
	fi
	printf '%s\n' "$out" | grep -E '^(PASS|FAIL) ' | tee -a "$log"
	# A binary that failed without saying which test (a crash) counts as one failure.
	if [ $rc -ne 0 ] && ! printf '%s\n' "$out" | grep -q '^FAIL '; then
		echo "FAIL $name: exited with status $rc" | tee -a "$log"
		printf '%s\n' "$out" | tail -20 | sed 's/^/    /'
	fi
done

if [ $unit_only -eq 0 ]; then
	# Integration tests run as root: they load BPF programs and ptrace targets.
	if [ "$(id -u)" -ne 0 ]; then
		echo "FAIL integration: the integration tests need root (run 'sudo make test')" | tee -a "$log"
	else
		/usr/bin/python3 -u tests/integration/runner.py ${filter:+--filter "$filter"} 2>&1 |
			tee -a "$log"
	fi
fi

passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
