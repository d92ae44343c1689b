#!/usr/bin/env python3
"""Memory under a cold burst: 64 concurrent requests for 64 different 24 MP originals that
are already stored, on default settings (hot cache included). Reports the server's peak
resident set (the kernel's VmHWM, so no sample can miss the peak) and the statuses: only
200s and 503s (`overloaded`) are allowed, and the peak must stay under 512 MiB.

The peer is the same service built from another commit (`--old BINARY`, e.g. one built
before queued runs stopped holding their originals), measured in the same run on the same
originals; without it only the current build is measured.

The originals are 64 distinct real photographs (../shared/corpus/photos) scaled to 24 MP
(5656 x 4242) by `imgcas process`. Each server is started on a data dir of its own, the
originals uploaded, then the server restarted so the peak covers the burst alone.
Writes bench/results/memory-cold.json.
"""

import argparse
import concurrent.futures
import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import lib

PHOTOS = lib.ROOT.parent / "shared" / "corpus" / "photos"
COUNT = 64
LIMIT_MIB = 512


def make_originals(binary, work):
    sources = sorted(PHOTOS.glob("*.jpg"))[:COUNT]
    if len(sources) < COUNT:
        raise SystemExit(f"need {COUNT} photos in {PHOTOS}, found {len(sources)}")

    def scale(item):
        i, src = item
        out = work / f"big-{i:02}.jpg"
        if not out.exists():
            subprocess.run(
                [str(binary), "process", str(src), "--spec",
                 "w=5656&h=4242&fit=fill&enlarge=1&format=jpeg&q=90", "-o", str(out)],
                check=True, stderr=subprocess.DEVNULL)
        return out

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(scale, enumerate(sources)))


def upload(base, path):
    req = urllib.request.Request(base + "/v1/originals", data=path.read_bytes(),
                                 headers={"content-type": "application/octet-stream"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())["hash"]


def peak_rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:  # a dropped connection is a failure too
        return f"error: {e.__class__.__name__}"


def measure(name, binary, originals, env):
    data = lib.tempdir("memory")
    with lib.Procs() as procs:
        base, server = lib.start_imgcas(procs, binary, data)
        hashes = [upload(base, p) for p in originals]
        server.terminate()
        server.wait(timeout=30)
    with lib.Procs() as procs:
        base, server = lib.start_imgcas(procs, binary, data, **env)
        idle = peak_rss_mib(server.pid)
        urls = [f"{base}/v1/image/{h}?w=400&format=webp" for h in hashes]
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(COUNT) as pool:
            statuses = list(pool.map(get, urls))
        wall = time.monotonic() - started
        peak = peak_rss_mib(server.pid)
    labels = [str(s) for s in statuses]
    counts = {label: labels.count(label) for label in sorted(set(labels))}
    return {"build": name, "peak_rss_mib": round(peak, 1), "idle_rss_mib": round(idle, 1),
            "statuses": counts, "seconds": round(wall, 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, help="an imgcas binary from another commit")
    parser.add_argument("--queue-target",
                        help="IMGCAS_QUEUE_TARGET for both servers (default: the default, 500ms);"
                             " e.g. 120s lets every request queue instead of being refused")
    parser.add_argument("--originals", type=Path,
                        help="a directory to keep the 24 MP originals in between runs")
    args = parser.parse_args()
    binary = lib.build()
    work = args.originals or lib.tempdir("memory-originals")
    work.mkdir(parents=True, exist_ok=True)
    originals = make_originals(binary, work)
    env = {"IMGCAS_QUEUE_TARGET": args.queue_target} if args.queue_target else {}
    runs = [measure("current", binary, originals, env)]
    if args.old:
        runs.append(measure(f"old ({args.old})", args.old, originals, env))
    lib.table(["build", "peak RSS MiB", "idle RSS MiB", "statuses", "s"],
              [[r["build"], r["peak_rss_mib"], r["idle_rss_mib"], r["statuses"], r["seconds"]]
               for r in runs])
    name = "memory-cold" + (f"-queue-{args.queue_target}" if args.queue_target else "")
    lib.save(name, {"count": COUNT, "megapixels": 24, "limit_mib": LIMIT_MIB,
                    "queue_target": args.queue_target or "500ms (default)", "runs": runs})
    current = runs[0]
    ok = current["peak_rss_mib"] <= LIMIT_MIB and set(current["statuses"]) <= {"200", "503"}
    print(f"current build: peak {current['peak_rss_mib']} MiB (limit {LIMIT_MIB}), "
          f"{'OK' if ok else 'OVER THE TARGET'}")
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
