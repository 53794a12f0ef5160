#!/usr/bin/env bash
# make demo: record the bundled demo workload (demo/app.py, a toy training loop with a
# data-loader thread) and render demo.svg. Needs root for recording (BPF).
set -euo pipefail
cd "$(dirname "$0")/.."
P=build/probing
SECONDS_TO_RUN=${DEMO_SECONDS:-5}
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null; then
		exec sudo --preserve-env=DEMO_SECONDS "$0" "$@"
	fi
	echo "make demo: recording needs root (BPF); run it as root or with sudo" >&2
	exit 1
fi
PY=/usr/bin/python3
echo "demo: recording '$PY demo/app.py $SECONDS_TO_RUN' at 499 Hz -> demo.db"
$P record -F 499 -o demo.db -- $PY demo/app.py "$SECONDS_TO_RUN"
$P flamegraph -i demo.db -o demo.svg --title "probing demo: demo/app.py"
echo
echo "demo: the five functions with the most samples of their own (SQL on the recording):"
$P query -i demo.db "SELECT func, kind, SUM(count) AS samples FROM samples JOIN frames \
USING(stack_id) WHERE depth = 0 GROUP BY func, kind ORDER BY samples DESC LIMIT 5"
echo
echo "demo: flame graph written to $(pwd)/demo.svg (open it in a browser: hover, click to zoom,"
echo "      Ctrl-F to search); the recording is $(pwd)/demo.db"
