#!/usr/bin/env bash
# Overload: imgcas driven far past what its CPU can process, with hits flowing beside it.
#
#  1. capacity: unique specs (never a hit) of a 12 MP JPEG by hash, with as many connections as
#     processing slots, for PHASE seconds: the cold path's throughput C.
#  2. overload: the same unique-spec traffic offered at RATE x C (default 10): 20 connections
#     per core, each pausing between requests so that together they offer that rate (wrk's
#     delay hook), and at the same time a second load generator on one cached variant.
#
# Prints the offered rate as a multiple of C, how many requests were admitted and shed (503
# `overloaded` with Retry-After), any 5xx other than 503, the admitted requests' p50/p99 (from
# the server's own histogram), the hit traffic's req/s and p99 with and without the overload,
# and the server's peak RSS.
#
# Needs: wrk and curl (Debian: apt-get install wrk curl). Everything runs on 127.0.0.1; every
# loop is bounded by count and every phase by time. Takes about 4 x PHASE seconds plus a build.
set -euo pipefail
cd "$(dirname "$0")/.."
PHASE=${PHASE:-15}
RATE=${RATE:-10}
for tool in wrk curl python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install wrk curl" >&2; exit 2; }
done

cargo build --release -q --bin imgcas
imgcas=$PWD/target/release/imgcas
work=$(mktemp -d)
[ -n "${KEEP:-}" ] && echo "work dir (kept): $work"
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT

# A 12 MP photo-like JPEG, made by imgcas itself from a test photo (no other tools needed).
"$imgcas" process testdata/exif-orientation/Landscape_1.jpg \
  --spec 'w=4000&h=3000&fit=fill&enlarge=1&format=jpeg&q=90' -o "$work/12mp.jpg"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
IMGCAS_LISTEN=127.0.0.1:$port IMGCAS_DATA_DIR=$work/data IMGCAS_LOG=warn "$imgcas" serve >/dev/null 2>"$work/server.log" &
server_pid=$!
base=http://127.0.0.1:$port
for _ in $(seq 1 100); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
slots=$(nproc)

hash=$(curl -sf --data-binary @"$work/12mp.jpg" -H 'content-type: image/jpeg' "$base/v1/originals" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["hash"])')
hot="/v1/image/$hash?w=400&format=webp"
curl -sf -o /dev/null "$base$hot"

# Unique specs per request: each wrk thread walks its own range of (width, quality).
cat >"$work/cold.lua" <<EOF
local counter, id = 0, 0
local threads = 0
function setup(thread) thread:set("id", threads); threads = threads + 1 end
function init(args) id = tonumber(wrk.thread:get("id")) or 0 end
function request()
  counter = counter + 1
  local n = id * 1000000 + counter + (RUN or 0)
  return wrk.format("GET", string.format("/v1/image/$hash?w=%d&q=%d&format=jpeg", 200 + n % 3000, 1 + math.floor(n / 3000) % 100))
end
function delay() return DELAY_MS end
EOF

metrics() { curl -sf "$base/metrics"; }
rss_watch() { # peak RSS (KiB) of the server while $1 runs
  local peak=0 r
  while kill -0 "$1" 2>/dev/null; do
    r=$(ps -o rss= -p "$server_pid" | tr -d ' ')
    [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r
    sleep 0.25
  done
  echo "$peak"
}

echo "== hits alone ($PHASE s, 4 connections)"
wrk -t2 -c4 -d"${PHASE}s" --latency "$base$hot" >"$work/hits-alone.txt"

echo "== capacity: unique specs, $slots connections, no pause ($PHASE s)"
metrics >"$work/m0.txt"
sed 's/DELAY_MS/0/' "$work/cold.lua" >"$work/capacity.lua"
wrk -t1 -c"$slots" -d"${PHASE}s" -s "$work/capacity.lua" "$base/" >"$work/capacity.txt"
metrics >"$work/m1.txt"

conns=$((slots * 20))
capacity=$(python3 -c "import re; t=open('$work/capacity.txt').read(); print(float(re.search(r'Requests/sec:\s+([\d.]+)', t).group(1)))")
delay_ms=$(python3 -c "print(max(1, round($conns * 1000 / ($RATE * $capacity))))")
echo "== overload: unique specs offered at ${RATE}x C ($conns connections, ${delay_ms} ms pauses), hits beside ($PHASE s)"
sed "s/(RUN or 0)/500000/; s/DELAY_MS/$delay_ms/" "$work/cold.lua" >"$work/overload.lua"
wrk -t2 -c"$conns" -d"${PHASE}s" -s "$work/overload.lua" "$base/" >"$work/overload.txt" &
cold_pid=$!
rss_watch "$cold_pid" >"$work/rss.txt" &
rss_pid=$!
wrk -t1 -c4 -d"${PHASE}s" --latency "$base$hot" >"$work/hits-under.txt"
wait "$cold_pid" || echo "wrk (cold) exited with $?"
wait "$rss_pid"
metrics >"$work/m2.txt"

python3 - "$work" "$PHASE" <<'EOF'
import re, sys
work, phase = sys.argv[1], float(sys.argv[2])

def scrape(name):
    out = {}
    for line in open(f"{work}/{name}"):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r'([a-zA-Z_:]+)(\{.*\})?\s+(\S+)$', line.strip())
        if m:
            out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out

def total(s, metric, **labels):
    return sum(v for (n, l), v in s.items() if n == metric and all(f'{k}="{x}"' in l for k, x in labels.items()))

def diff(a, b, metric, **labels):
    return total(b, metric, **labels) - total(a, metric, **labels)

def quantile(a, b, q, metric, **labels):
    buckets = {}
    for (n, l), v in b.items():
        if n == metric + "_bucket" and all(f'{k}="{x}"' in l for k, x in labels.items()):
            le = re.search(r'le="([^"]+)"', l).group(1)
            buckets[le] = buckets.get(le, 0) + v - a.get((n, l), 0)
    edges = sorted(buckets, key=lambda e: float("inf") if e == "+Inf" else float(e))
    count = buckets.get("+Inf", 0)
    if not count:
        return float("nan")
    for e in edges:
        if buckets[e] >= q * count:
            return float(e) * 1000
    return float("inf")

def wrk(name):
    text = open(f"{work}/{name}").read()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", text)
    scale = {"us": 0.001, "ms": 1, "s": 1000}
    return rps, (float(p99.group(1)) * scale[p99.group(2)] if p99 else float("nan"))

m0, m1, m2 = scrape("m0.txt"), scrape("m1.txt"), scrape("m2.txt")
route = "/v1/image/{hash}"
cap_ok = diff(m0, m1, "imgcas_http_requests_total", route=route, status="200")
capacity = cap_ok / phase
shed = diff(m1, m2, "imgcas_http_requests_total", route=route, status="503")
all_image = diff(m1, m2, "imgcas_http_requests_total", route=route)
errors = sum(v for (n, l), v in m2.items() if n == "imgcas_http_requests_total" and re.search(r'status="5\d\d"', l) and 'status="503"' not in l)
hit_rps, hit_p99 = wrk("hits-alone.txt")
hit_rps_under, hit_p99_under = wrk("hits-under.txt")
rss = int(open(f"{work}/rss.txt").read().strip() or 0)
runs = diff(m1, m2, "imgcas_processing_runs_total")
cold_offered = (all_image - (hit_rps_under * phase)) / phase
print()
print(f"cold capacity C:              {capacity:8.1f} req/s (unique specs of a 12 MP JPEG, {cap_ok:.0f} in {phase:.0f} s)")
print(f"  p50 / p99 at capacity:      {quantile(m0, m1, .5, 'imgcas_http_request_duration_seconds', route=route, status='200'):8.0f} / {quantile(m0, m1, .99, 'imgcas_http_request_duration_seconds', route=route, status='200'):.0f} ms")
print(f"overload offered (cold):      {cold_offered:8.1f} req/s = {cold_offered / capacity if capacity else float('nan'):.1f} x C")
print(f"  admitted (processed):       {runs:8.0f}  ({runs / phase:.1f}/s)")
print(f"  shed, 503 overloaded:       {shed:8.0f}")
print(f"  admitted p50 / p99:         {quantile(m1, m2, .5, 'imgcas_http_request_duration_seconds', route=route, status='200', cache='miss'):8.0f} / {quantile(m1, m2, .99, 'imgcas_http_request_duration_seconds', route=route, status='200', cache='miss'):.0f} ms")
print(f"  queue wait p99:             {quantile(m1, m2, .99, 'imgcas_queue_wait_seconds'):8.0f} ms")
print(f"  refusal p99:                {quantile(m1, m2, .99, 'imgcas_http_request_duration_seconds', route=route, status='503'):8.1f} ms")
print(f"  5xx other than 503 (total): {errors:8.0f}")
print(f"hits alone:                   {hit_rps:8.0f} req/s, p99 {hit_p99:.2f} ms")
print(f"hits during overload:         {hit_rps_under:8.0f} req/s, p99 {hit_p99_under:.2f} ms ({hit_rps_under / hit_rps:.2f} x alone)")
print(f"server peak RSS in overload:  {rss / 1024:8.0f} MiB")
EOF
