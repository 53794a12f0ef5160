#!/bin/sh
# Write to stdout the assembly (GNU as, x86-64 ELF) that embeds files verbatim in a program,
# for the build's one embedding rule ($(call embed,...) in the Makefile):
#
#   scripts/embed.sh [-t TABLE] PREFIX FILE...
#
# Every FILE becomes the hidden symbol PREFIX<its base name, characters other than letters,
# digits and '_' as '_'>: its bytes and a NUL, i.e. a C string (`scripts/embed.sh probing_
# user/report/flamegraph.js` gives `extern const char probing_flamegraph_js[];`). With -t, also
#
#   const struct { const char *name, *data; } TABLE[] = { {"NAME", data}, ..., {NULL, NULL} };
#
# in the order of the FILEs, NAME being the base name up to its first '.' (agent.py: "agent").
# A file holding a NUL byte (it would end its string early) or two files of the same base name
# are refused.
set -eu

table=
if [ "${1-}" = -t ]; then
	table=$2
	shift 2
fi
if [ $# -lt 2 ]; then
	echo "usage: $0 [-t TABLE] PREFIX FILE..." >&2
	exit 2
fi
prefix=$1
shift

symbol() {
	printf '%s%s' "$prefix" "$(basename "$1" | tr -c 'A-Za-z0-9_\n' '_')"
}

seen=' '
for f in "$@"; do
	b=$(basename "$f")
	case $seen in *" $b "*)
		echo "$0: two files named $b" >&2
		exit 1
		;;
	esac
	seen="$seen$b "
	if [ "$(tr -d '\000' <"$f" | wc -c)" -ne "$(wc -c <"$f")" ]; then
		echo "$0: $f holds a NUL byte: it cannot be embedded as a string" >&2
		exit 1
	fi
	case $f in *'"'* | *'\'*)
		echo "$0: $f: a file name with '\"' or '\\' cannot be embedded" >&2
		exit 1
		;;
	esac
done

echo '.section .rodata'
for f in "$@"; do
	s=$(symbol "$f")
	echo ".global $s"
	echo ".hidden $s"
	echo "$s:"
	echo ".incbin \"$f\""
	echo '.byte 0'
done
if [ -n "$table" ]; then
	i=0
	for f in "$@"; do
		echo ".Lname_$i: .asciz \"$(basename "$f" | cut -d. -f1)\""
		i=$((i + 1))
	done
	echo '.section .data.rel.ro,"aw"'
	echo '.balign 8'
	echo ".global $table"
	echo ".hidden $table"
	echo "$table:"
	i=0
	for f in "$@"; do
		echo ".quad .Lname_$i, $(symbol "$f")"
		i=$((i + 1))
	done
	echo '.quad 0, 0'
fi
echo '.section .note.GNU-stack,"",@progbits'
