#!/usr/bin/env bash
# fuzz/run.sh TARGET [MINUTES]: one coverage-guided run of a fuzz target (fuzz/fuzz_targets),
# seeded from ../shared/corpus, testdata/ and the target's earlier finds.
#
# What a run finds (crash-, timeout-, oom- and slow-unit files) is copied to
# testdata/fuzz/TARGET/, where plain `cargo test` replays it (processors/tests/it/fuzz_replay.rs,
# tests/it/fuzz_replay.rs) and fails until the input gets its expectation: fix the cause, then
# write what the input must give (`ok` or the error code) in NAME.expect beside it.
# The run's figures (time, executions, coverage, finds) are appended to fuzz/runs.tsv.
#
# FUZZ_TIMEOUT (seconds, default 10): how long one input may run before it counts as a find;
# raise it when targets share the cores with each other or a build (the timeout is wall time).
#
# Needs cargo-fuzz (installed here if missing) and a C++ compiler for libFuzzer. The machines
# have the stable toolchain only: RUSTC_BOOTSTRAP lets it take the flags cargo-fuzz passes.
set -euo pipefail
target=${1:?usage: fuzz/run.sh TARGET [MINUTES]}
minutes=${2:-60}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
cd "$here"
[ -f "fuzz_targets/$target.rs" ] || { echo "no target fuzz_targets/$target.rs"; exit 1; }
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1

# Seeds: image files (up to 2 MB: libFuzzer mutates small inputs best) for the image targets;
# URLs and signed paths are text, seeded from the tests' own.
seeds="$here/seeds/$target"
rm -rf "$seeds" && mkdir -p "$seeds"
case "$target" in
  url|signature)
    grep -rhoE "https?://[^\"' )]+" "$repo/tests" "$repo/docs" | sort -u | head -500 |
      while read -r line; do printf '%s' "$line" >"$seeds/$(printf '%s' "$line" | sha1sum | cut -c1-16)"; done
    ;;
  spec_parse)
    grep -rhoE "[a-z_]+=[^&\"' ]+(&[a-z_]+=[^&\"' ]+)*" "$repo/tests" "$repo/docs" | sort -u | head -2000 |
      while read -r line; do printf '%s' "$line" >"$seeds/$(printf '%s' "$line" | sha1sum | cut -c1-16)"; done
    ;;
  jxl)
    # JPEG XL files only: the target passes other bytes over.
    for dir in "$repo/../shared/corpus" "$repo/testdata"; do
      [ -d "$dir" ] && find "$dir" -type f -size -2M -name '*.jxl' \
        -exec sh -c 'for f; do cp "$f" "$0/$(sha1sum "$f" | cut -c1-16).jxl"; done' "$seeds" {} + || true
    done
    ;;
  svg)
    # Drawings only (the hostile corpus among them), and any more a run is given in
    # FUZZ_EXTRA_SEEDS (a folder, e.g. a renderer's own test suite: seeds, never committed).
    for dir in "$repo/../shared/corpus" "$repo/testdata" ${FUZZ_EXTRA_SEEDS:-}; do
      [ -d "$dir" ] && find "$dir" -type f -size -2M \( -name '*.svg' -o -name '*.svgz' \) \
        -exec sh -c 'for f; do cp "$f" "$0/$(sha1sum "$f" | cut -c1-16).svg"; done' "$seeds" {} + || true
    done
    ;;
  *)
    for dir in "$repo/../shared/corpus" "$repo/testdata"; do
      [ -d "$dir" ] && find "$dir" -type f -size -2M -exec cp -t "$seeds" {} + 2>/dev/null || true
    done
    ;;
esac
[ -d "$repo/testdata/fuzz/$target" ] && find "$repo/testdata/fuzz/$target" -type f ! -name '*.expect' -exec cp -t "$seeds" {} +

artifacts="$here/artifacts/$target"
mkdir -p "$artifacts"
log="$here/artifacts/$target.log"
# Built first, so that the run's minutes are fuzzing, not compiling.
cargo fuzz build --sanitizer none --release "$target" >/dev/null 2>&1 || true
dict=()
[ -f "$here/$target.dict" ] && dict=(-dict="$here/$target.dict")
started=$(date -u +%Y-%m-%dT%H:%MZ)
t0=$(date +%s)
cargo fuzz run --sanitizer none --release "$target" "$seeds" -- \
  -max_total_time=$((minutes * 60)) -timeout="${FUZZ_TIMEOUT:-10}" -rss_limit_mb=2048 -max_len=1048576 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" 2>&1 | tee "$log" | grep -E "^#[0-9]+ +(INITED|DONE|NEW)|ERROR|SUMMARY" | tail -20 || true

finds=0
mkdir -p "$repo/testdata/fuzz/$target"
for f in "$artifacts"/*; do
  [ -f "$f" ] || continue
  name="$(basename "$f" | cut -d- -f1)-$(sha256sum "$f" | cut -c1-16)"
  cp "$f" "$repo/testdata/fuzz/$target/$name"
  finds=$((finds + 1))
done
rm -f "$artifacts"/*
# The minutes it really ran (a crash ends a run early), not the ones asked for.
ran=$(awk -v s="$(( $(date +%s) - t0 ))" 'BEGIN { printf "%.1f", s / 60 }')
execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$" | tail -1)
cov=$(grep -oE "cov: [0-9]+" "$log" | tail -1 | grep -oE "[0-9]+")
[ -f runs.tsv ] || printf 'started\ttarget\tminutes\texecutions\tcoverage (edges)\tfinds\n' >runs.tsv
printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$started" "$target" "$ran" "${execs:-?}" "${cov:-?}" "$finds" >>runs.tsv
echo "$target: ${ran} min (of ${minutes} asked), ${execs:-?} executions, coverage ${cov:-?}, $finds finds (testdata/fuzz/$target)"
