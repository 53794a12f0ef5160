#!/usr/bin/env bash
# Benchmark: 'probing flamegraph' on a recording of 1 M samples (20k distinct stacks, depth
# 22-46, counts spread over 60 seconds as a one-minute recording would store them).
# Prints the recording's size and the time to the SVG and to the folded stacks (best of 3).
#   bench/flamegraph_1m.sh            (builds what it needs; output in bench/out/)
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory -s all tools >/dev/null
out=bench/out
mkdir -p "$out"
db=$out/1m.db
if [ ! -f "$db" ]; then
	python3 bench/gen_folded.py --stacks 20000 --samples 1000000 >"$out/1m.folded"
	build/tests/tools/folded2db -o "$db" --seconds 60 "$out/1m.folded"
fi
stat=$(build/probing query -i "$db" --format csv --no-header \
	"SELECT (SELECT SUM(count) FROM sample_counts), (SELECT COUNT(*) FROM sample_counts),
		(SELECT COUNT(*) FROM stacks), (SELECT MAX(nframes) FROM stacks),
		(SELECT COUNT(*) FROM frame_defs)" | tr -d '\r')
IFS=, read -r samples rows stacks depth frames <<<"$stat"
echo "recording: $samples samples, $rows count rows, $stacks stacks (depth <= $depth)," \
	"$frames frames, $(du -h "$db" | cut -f1)"

best() { # best wall time of 3 runs of "$@", in seconds
	local b=0 t s
	for _ in 1 2 3; do
		s=$(date +%s%N)
		"$@" >/dev/null
		t=$(($(date +%s%N) - s))
		if ((b == 0 || t < b)); then b=$t; fi
	done
	printf '%d.%03d' $((b / 1000000000)) $((b / 1000000 % 1000))
}
svg_t=$(best build/probing flamegraph -i "$db" -o "$out/1m.svg")
fold_t=$(best build/probing flamegraph -i "$db" --folded -o "$out/1m.folded.out")
echo "flamegraph (SVG):    ${svg_t} s  ($(du -h "$out/1m.svg" | cut -f1)," \
	"$(grep -c '<g class=' "$out/1m.svg") frames drawn)"
echo "flamegraph --folded: ${fold_t} s  ($(wc -l <"$out/1m.folded.out") lines)"
