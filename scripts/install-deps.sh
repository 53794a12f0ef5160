#!/usr/bin/env bash
# Install the Debian 12 packages probing needs to build, test and run its demo.
#   scripts/install-deps.sh              install (apt-get update first) whatever is missing
#   scripts/install-deps.sh --if-missing the same, but quiet when nothing is missing
# Needs root (or sudo) only when something has to be installed.
set -euo pipefail

PKGS=(
	# build
	make gcc g++ clang llvm libbpf-dev bpftool libelf-dev libdw-dev zlib1g-dev
	libsqlite3-dev libedit-dev libmicrohttpd-dev pkg-config
	# tests and demo: interpreters, workloads, browser check, tools the tests drive
	python3 python3-torch chromium procps util-linux iproute2 sqlite3 file binutils gdb
	# test_top drives probing top in a terminal
	tmux
	# probing debug: debugpy for Debian's python3 (tests: test_debug)
	python3-debugpy
	# tests: the Debian unstable root of python3.14/3.15 and torch 2.14 (install-sidroot.sh)
	mmdebstrap
	# benchmarks
	linux-perf
	# bench/bench_offcpu.py compares with its offcputime
	libbpf-tools
)

quiet=0
[ "${1:-}" = "--if-missing" ] && quiet=1

missing=()
for p in "${PKGS[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
	[ $quiet -eq 1 ] || echo "install-deps: all ${#PKGS[@]} packages present"
	exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done" >&2
