#!/usr/bin/env python3
"""Memory under a flood of new originals (issue 50, item 8): one node on the embedded default
takes UPLOADS uploads of distinct tiny PNGs from 8 clients, and its RSS is read before, at
the end, and after IDLE_S idle seconds; then it is stopped with SIGTERM and the time to exit
measured; RSS is also sampled at every twentieth of the uploads, so that a plateau shows as one.
Configurations, on the same binary in one run (`CONFIGS=defaults,small` picks):

- `defaults`: `maps.cache_bytes` 64 MiB, `maps.entries_cache_bytes` 32 MiB,
  `limits.background_queue` 1,024;
- `small`: the same bounds set small (16 MiB of pages, 4 MiB of entries, 64 queued tasks):
  what the settings buy;
- `unbounded`: redb's own page cache (1 GiB) and no bound on queued background work, as
  the node was before audit #3;
- `small_allocator_own`: `small` with glibc's own arena bound (`limits.allocator_arenas` 0).

`UPLOADS_<NAME>` sets one configuration's count (at the defaults the caches fill for about
120,000 uploads; a plateau shows from about 150,000).

Audit #3 measured 100,000 uploads taking a node from 100 MB to 529 MB (573 MB after 20 s
idle) and 15 s to stop. All traffic stays on loopback. The run is added to
bench/results/memory-uploads.json under `LABEL` (earlier runs are kept beside it).
"""

import json

import os
import signal
import threading
import time
import urllib.request

import lib

UPLOADS = int(os.environ.get("UPLOADS", "100000"))
CONFIGS = {
    "defaults": {},
    "small": dict(IMGCAS_MAPS_CACHE_BYTES=str(16 << 20), IMGCAS_MAPS_ENTRIES_CACHE_BYTES=str(4 << 20),
                  IMGCAS_BACKGROUND_QUEUE="64"),
    "unbounded": dict(IMGCAS_MAPS_CACHE_BYTES=str(1 << 30), IMGCAS_BACKGROUND_QUEUE=str(10**9)),
    # The small bounds with glibc's own arena bound (eight per core) instead of
    # `limits.allocator_arenas`' default (the number of cores).
    "small_allocator_own": dict(IMGCAS_MAPS_CACHE_BYTES=str(16 << 20), IMGCAS_MAPS_ENTRIES_CACHE_BYTES=str(4 << 20),
                                IMGCAS_BACKGROUND_QUEUE="64", IMGCAS_ALLOCATOR_ARENAS="0"),
}
CLIENTS = 8
IDLE_S = 20


def run(binary, name, env):
    uploads = int(os.environ.get(f"UPLOADS_{name.upper()}", UPLOADS))
    work = lib.tempdir(f"memory-{name}")
    with lib.Procs() as procs:
        base, proc = lib.start_imgcas(procs, binary, work, **env)
        time.sleep(1)
        before = lib.rss_mb(proc.pid)
        lock, statuses, curve = threading.Lock(), {}, []
        started = time.monotonic()

        def upload(n):
            if n % max(1, uploads // 20) == 0:
                curve.append((n, lib.rss_mb(proc.pid), lib.rss_mb(proc.pid, "RssAnon")))
            request = urllib.request.Request(base + "/v1/originals", data=lib.tiny_png(n), method="POST",
                                             headers={"content-type": "image/png"})
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            except Exception:
                status = 0
            with lock:
                statuses[status] = statuses.get(status, 0) + 1

        lib.each_on_threads(range(uploads), CLIENTS, upload)
        took = time.monotonic() - started
        end = lib.rss_mb(proc.pid)
        time.sleep(IDLE_S)
        idle, idle_anon = lib.rss_mb(proc.pid), lib.rss_mb(proc.pid, "RssAnon")
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stop_s = time.monotonic() - asked
    result = dict(uploads=uploads, per_second=round(uploads / took), statuses=statuses,
                  rss_before_mb=before, rss_end_mb=end, rss_idle_mb=idle, stop_s=round(stop_s, 2),
                  rss_mb_at_uploads=sorted(curve), rss_anon_idle_mb=idle_anon)
    print(name, result, flush=True)
    return result


def main():
    binary = lib.build()
    names = os.environ.get("CONFIGS", "defaults,unbounded").split(",")
    run_results = {name: run(binary, name, CONFIGS[name]) for name in names}
    path = lib.RESULTS / "memory-uploads.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[os.environ.get("LABEL", time.strftime("%Y-%m-%d"))] = run_results
    lib.save("memory-uploads", results)


if __name__ == "__main__":
    main()
