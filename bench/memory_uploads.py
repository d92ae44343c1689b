#!/usr/bin/env python3
"""Memory under a flood of new originals (issue 50, item 8): one node on the embedded default
takes UPLOADS uploads of distinct tiny PNGs from 8 clients, and its RSS is read before, at
the end, and after IDLE_S idle seconds; then it is stopped with SIGTERM and the time to exit
measured. Two configurations in one run, on the same binary:

- `bounded`: the defaults (`maps.cache_bytes` 64 MiB, `limits.background_queue` 1,024);
- `unbounded`: redb's own page cache (1 GiB) and no bound on queued background work, as
  the node was before audit #3.

Audit #3 measured 100,000 uploads taking a node from 100 MB to 529 MB (573 MB after 20 s
idle) and 15 s to stop. All traffic stays on loopback. Writes bench/results/memory-uploads.json.
"""

import os
import signal
import threading
import time
import urllib.request

import lib

UPLOADS = int(os.environ.get("UPLOADS", "100000"))
CLIENTS = 8
IDLE_S = 20


def run(binary, name, env):
    work = lib.tempdir(f"memory-{name}")
    with lib.Procs() as procs:
        base, proc = lib.start_imgcas(procs, binary, work, **env)
        time.sleep(1)
        before = lib.rss_mb(proc.pid)
        counter, lock, statuses = iter(range(UPLOADS)), threading.Lock(), {}
        started = time.monotonic()

        def client():
            while True:
                with lock:
                    n = next(counter, None)
                if n is None:
                    return
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

        threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - started
        end = lib.rss_mb(proc.pid)
        time.sleep(IDLE_S)
        idle = lib.rss_mb(proc.pid)
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        stop_s = time.monotonic() - asked
    result = dict(uploads=UPLOADS, per_second=round(UPLOADS / took), statuses=statuses,
                  rss_before_mb=before, rss_end_mb=end, rss_idle_mb=idle, stop_s=round(stop_s, 2))
    print(name, result, flush=True)
    return result


def main():
    binary = lib.build()
    results = {
        "bounded": run(binary, "bounded", {}),
        "unbounded": run(binary, "unbounded", dict(IMGCAS_MAPS_CACHE_BYTES=str(1 << 30),
                                                   IMGCAS_BACKGROUND_QUEUE=str(10**9))),
    }
    lib.save("memory-uploads", results)


if __name__ == "__main__":
    main()
