#!/usr/bin/env bash
# The README's two commands: `./imgcas.sh serve` runs the service on its embedded default,
# `./imgcas.sh test` runs the tests. Before any compiling, it checks for the tools the build
# needs beyond Rust and a C compiler — nasm (libjpeg-turbo's SIMD: without it JPEG code builds
# silently twice as slow), cmake (libaom and libavif), libheif-dev with pkg-config (HEIC
# sources) and a font for SVG text (fonts-dejavu-core) — and installs them with apt when run
# as root; otherwise it names what is missing and exits 1.
set -euo pipefail
cd "$(dirname "$0")"

usage() {
  echo "usage: ./imgcas.sh serve [imgcas serve flags…] | ./imgcas.sh test [cargo test args…]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
command=$1
shift

# tool → Debian package
declare -A package=([nasm]=nasm [cmake]=cmake [make]=make [cc]=gcc [c++]=g++ [pkg-config]=pkg-config)
missing=()
for tool in nasm cmake make cc c++ pkg-config; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("${package[$tool]}")
done
# A library rather than a tool: pkg-config finds it. And the faces SVG text is drawn with.
pkg-config --exists libheif 2>/dev/null || missing+=(libheif-dev)
[ -d /usr/share/fonts/truetype/dejavu ] || missing+=(fonts-dejavu-core)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  else
    echo "missing: ${missing[*]} (apt-get install ${missing[*]})"
    exit 1
  fi
fi

# The tests also start a real PostgreSQL and PgBouncer (Debian's binaries, run by the harness
# itself).
pg_need=()
if [ "$command" = test ]; then
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 ||
    pg_need+=(postgresql)
  [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || pg_need+=(pgbouncer)
fi
if [ ${#pg_need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${pg_need[*]}" >&2
    apt-get update -qq
    # The packages' own services may fail to start in a container; the tests need only
    # their binaries.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pg_need[@]}" >&2 ||
      echo "apt-get reported a problem; the PostgreSQL tests check for the binaries themselves" >&2
  else
    echo "note: not installed: ${pg_need[*]} (apt-get install ${pg_need[*]}); their tests will skip" >&2
  fi
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "missing: cargo (install Rust: https://rustup.rs)"
  exit 1
fi

case "$command" in
  serve) exec cargo run --release -- serve "$@" ;;
  test) exec cargo test --workspace "$@" ;;
  *) usage ;;
esac
