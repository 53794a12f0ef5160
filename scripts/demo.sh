#!/usr/bin/env bash
# make demo: record the bundled demo workload (demo/app.py, a toy training loop with a
# data-loader thread) and render demo.svg; then say where the binary is, how to install it,
# what to run next, and what frames without symbols ([libcrypto.so.3]) mean and how to get
# their names. Needs root for recording (BPF).
#   DEMO_SECONDS=N  how long the workload runs (default 5)
#   DEMO_DIR=DIR    where demo.db and demo.svg go (default: the repository)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
P=build/probing
SECONDS_TO_RUN=${DEMO_SECONDS:-5}
OUT=${DEMO_DIR:-$ROOT}
if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null; then
		exec sudo --preserve-env=DEMO_SECONDS,DEMO_DIR "$0" "$@"
	fi
	echo "make demo: recording needs root (BPF); run it as root or with sudo" >&2
	exit 1
fi
DB=$OUT/demo.db
SVG=$OUT/demo.svg
PY=/usr/bin/python3
echo "demo: recording '$PY demo/app.py $SECONDS_TO_RUN' at 499 Hz -> $DB"
$P record -F 499 -o "$DB" -- $PY demo/app.py "$SECONDS_TO_RUN"
$P flamegraph -i "$DB" -o "$SVG" --title "probing demo: demo/app.py"
echo
echo "demo: the five functions with the most samples of their own (SQL on the recording):"
$P query -i "$DB" "SELECT func, kind, SUM(count) AS samples FROM samples JOIN frames \
USING(stack_id) WHERE depth = 0 GROUP BY func, kind ORDER BY samples DESC LIMIT 5"
echo
echo "demo: flame graph written to $SVG (open it in a browser: hover, click to zoom,"
echo "      Ctrl-F to search); the recording is $DB"

# Native code without symbols: frames named after their library, "[libcrypto.so.3]".
nosym=$($P query -i "$DB" --format csv "SELECT f.module, f.func,
       ROUND(100.0 * SUM(s.count) / (SELECT SUM(count) FROM samples), 1) AS share
  FROM samples s JOIN frames f USING (stack_id)
 WHERE f.kind = 'native' AND f.func LIKE '[%]' AND f.func <> '[unknown]' AND f.depth = 0
 GROUP BY f.module ORDER BY share DESC" | tail -n +2 | tr -d '\r')
if [ -n "$nosym" ]; then
	echo
	echo "demo: frames such as $(echo "$nosym" | head -1 | cut -d, -f2) are native code without symbols:"
	pkgs=""
	while IFS=, read -r module func share; do
		# The package that owns it (Debian lists /lib/... for what usrmerge put in /usr/lib).
		pkg=$( (dpkg -S "$module" || dpkg -S "${module#/usr}") 2>/dev/null | head -1 |
			cut -d: -f1 || true)
		echo "      $func: $share% of the samples end there (${module}${pkg:+, package $pkg})"
		[ -n "$pkg" ] && pkgs="$pkgs $pkg-dbgsym"
	done <<<"$nosym"
	echo "      Those libraries are stripped: only their exported functions have names, and"
	echo "      these addresses are inside internal ones. Their debug symbols give the names"
	echo "      (and file:line), found by build-id under /usr/lib/debug when recording; on"
	echo "      Debian, each package's -dbgsym from the debug archive (where it has one):"
	echo "        echo 'deb http://deb.debian.org/debian-debug bookworm-debug main' \\"
	echo "          > /etc/apt/sources.list.d/debug.list && apt-get update"
	echo "        apt-get install${pkgs:- PACKAGE-dbgsym}    # PACKAGE: dpkg -S LIBRARY"
	echo "      or let elfutils fetch them on demand (needs libdebuginfod1 and the network):"
	echo "        sudo DEBUGINFOD_URLS=https://debuginfod.debian.net $P record ..."
	echo "      then record again (names are resolved while recording)."
fi

cat <<EOF

demo: the binary is $ROOT/$P (with its agent, $ROOT/build/libprobing-agent.so).
      Install both: 'sudo make install' (/usr/local/bin/probing; PREFIX=/opt/probing for
      another place), or run $P from here.
Next:
  $P serve -i $DB                 # the same recording in a web UI: open the URL it prints
  $P flamegraph -i $DB --folded | sort -k2 -n | tail   # the hottest stacks, as text
  $P backtrace -p PID                       # every thread's stack of a running Python process, now
EOF
