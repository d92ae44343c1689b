#!/usr/bin/env bash
# Runs the three comparison benchmarks in a row (about 3.5 minutes on 2 cores, after the
# release build and the one-time Python install): hit path, cold path, realistic workload.
# Tables go to stdout; JSON and PNG charts to bench/results/.
#
# Needs wrk and nginx (Debian: apt-get install wrk nginx) and Python 3.10+ with venv.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in wrk python3 cargo; do
  command -v "$tool" >/dev/null || { echo "missing $tool: see bench/README.md" >&2; exit 2; }
done
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || { echo "missing nginx: apt-get install nginx" >&2; exit 2; }
venv=${BENCH_VENV:-bench/.venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r bench/requirements.txt
fi
export PATH="$(cd "$venv" && pwd)/bin:$PATH"
cargo build --release -q --bin imgcas
start=$(date +%s)
for script in hit_path cold_path realistic; do
  echo "######## $script"
  "$venv/bin/python" "bench/$script.py"
done
echo "all three in $(( $(date +%s) - start )) s"
