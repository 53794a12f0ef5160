#!/usr/bin/env bash
# Make the Debian unstable root file system the tests run today's Python and PyTorch in:
# python3.14, python3.15, their -dev packages (CPython's internal headers, which
# docs/python-internals.md cites) and python3-torch 2.14 (gloo in its own libgloo). Workloads
# run inside it (scripts/sidroot-run) while probing runs outside, as with a container.
#   scripts/install-sidroot.sh              make it unless it is there and complete
#   scripts/install-sidroot.sh --if-missing the same, quiet when it is there
#   scripts/install-sidroot.sh --rebuild    make it again
# The root is kept between runs at $PROBING_SIDROOT (default /var/cache/probing/sid-root):
# about 2.5 GB, some minutes to download once. It is complete when its stamp file names the
# same package list; it is built beside it and renamed, so an interrupted build leaves nothing
# half-made in its place. Debian's archive of unstable may be past its Release files'
# Valid-Until date: apt there is told not to check it. Needs root.
set -euo pipefail

ROOT=${PROBING_SIDROOT:-/var/cache/probing/sid-root}
MIRROR=${PROBING_SID_MIRROR:-http://deb.debian.org/debian}
# The interpreters and their headers; torch; debugpy (probing debug); libc's debug symbols
# (thread roots named clone3, as on the host); and the libraries probing's binary links, so
# that probing runs inside the root too, as when it is installed in a container (a crash
# captured by the agent runs 'probing crashdump' where the target is).
PKGS=python3.14,python3.15,libpython3.14-dev,libpython3.15-dev,python3-torch,procps
PKGS=$PKGS,python3-debugpy,libc6-dbg
PKGS=$PKGS,libbpf1,libelf1t64,libdw1t64,libsqlite3-0,libedit2,libmicrohttpd12t64,zlib1g
STAMP="$ROOT/.probing-sidroot"
WANT="packages=$PKGS"

quiet=0 rebuild=0
case "${1:-}" in
--if-missing) quiet=1 ;;
--rebuild) rebuild=1 ;;
"") ;;
*) echo "usage: scripts/install-sidroot.sh [--if-missing|--rebuild]" >&2; exit 2 ;;
esac

if [ $rebuild -eq 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
	[ $quiet -eq 1 ] || echo "install-sidroot: $ROOT is complete"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-sidroot: making $ROOT needs root (mmdebstrap, then chroot in the tests)" >&2
	exit 1
fi

# A complete root made with fewer packages: add what is missing with apt inside it (minutes
# less than making it again); if that fails, it is made again below.
if [ $rebuild -eq 0 ] && [ -f "$STAMP" ] && [ -x "$ROOT/usr/bin/python3.14" ]; then
	echo "install-sidroot: adding packages to $ROOT" >&2
	if PROBING_SIDROOT="$ROOT" "$(dirname "$0")/sidroot-run" sh -c \
		'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"' \
		sh $(echo "$PKGS" | tr , ' ') >"$ROOT.log" 2>&1; then
		echo "$WANT" >"$STAMP"
		rm -f "$ROOT.log"
		echo "install-sidroot: done" >&2
		exit 0
	fi
	tail -5 "$ROOT.log" >&2
	echo "install-sidroot: could not add them; making the root again" >&2
fi
if ! command -v mmdebstrap >/dev/null; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

echo "install-sidroot: making the Debian unstable root $ROOT (python3.14, python3.15, torch 2.14; once per machine)" >&2
tmp="$ROOT.tmp"
rm -rf "$tmp"
mkdir -p "$(dirname "$ROOT")"
start=$(date +%s)
if ! mmdebstrap --quiet --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' \
	--include="$PKGS" sid "$tmp" "$MIRROR" >"$tmp.log" 2>&1; then
	tail -20 "$tmp.log" >&2
	echo "install-sidroot: mmdebstrap failed (log: $tmp.log); the tests of Python 3.14/3.15 and torch 2.14 need this root" >&2
	exit 1
fi
# apt inside the root, for whoever adds a package there by hand.
echo 'Acquire::Check-Valid-Until "false";' > "$tmp/etc/apt/apt.conf.d/99probing-no-valid-until"
echo "$WANT" > "$tmp/.probing-sidroot"
rm -rf "$ROOT"
mv "$tmp" "$ROOT"
rm -f "$tmp.log"
echo "install-sidroot: done in $(($(date +%s) - start)) s ($(du -sh "$ROOT" | cut -f1))" >&2
