#!/usr/bin/env python3
"""Hit path: a cached ~20 KB variant from imgcas vs nginx serving the same bytes as a static
file, both under wrk at the same fixed concurrency on loopback, both logging every request
(imgcas at its default level, to a file; nginx `access_log` with a 64 KB buffer). Prints
req/s, p50 and p99 and the ratios (imgcas / nginx); writes bench/results/hit-path.{json,png}.

The same variant is asked by hash and by URL (`/v1/image?url=…`, mapping fresh). The targets
run in turn, ROUNDS times, and the median of each is reported, so drift of the machine falls
on all of them alike.

Env: SECONDS_PER_RUN (default 10), CONNECTIONS (default 64), ROUNDS (default 3),
LOGGING (on|off, default on: both servers alike), BEFORE (path of another imgcas build,
measured beside the current one: the before/after of a change).
"""

import json
import os
import shutil
import statistics
import urllib.request
import urllib.parse

import lib

SECONDS = int(os.environ.get("SECONDS_PER_RUN", "10"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "64"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
LOGGING = os.environ.get("LOGGING", "on") == "on"
BEFORE = os.environ.get("BEFORE")


def start(procs, binary, work, name, source, origin):
    """One imgcas build with the photo uploaded; returns (by-hash URL, by-URL URL, size)."""
    log = work / f"{name}.log" if LOGGING else None
    base, _ = lib.start_imgcas(procs, binary, work / name, log_file=log)
    upload = urllib.request.Request(
        base + "/v1/originals", data=source.read_bytes(), headers={"content-type": "image/jpeg"}
    )
    digest = json.load(urllib.request.urlopen(upload))["hash"]
    return base, digest


def main():
    lib.need("wrk", "nginx")
    binary = lib.build()
    work = lib.tempdir("hit")
    try:
        with lib.Procs() as procs:
            source = lib.photo(binary, 12, work / "photo.jpg")
            origin = lib.StaticOrigin()
            origin.set("/photo.jpg", source.read_bytes())
            base, digest = start(procs, binary, work, "now", source, origin)
            # The width whose JPEG is closest to 20 KB.
            best = None
            for w in range(300, 1300, 50):
                path = f"/v1/image/{digest}?w={w}&format=jpeg&q=80"
                size = len(urllib.request.urlopen(base + path).read())
                if best is None or abs(size - 20_000) < abs(best[1] - 20_000):
                    best = (path, size, w)
            path, size, width = best
            body = urllib.request.urlopen(base + path).read()
            nginx_file = lib.serve_static(procs, work, body, access_log=LOGGING)
            by_url = "/v1/image?" + urllib.parse.urlencode(
                {"url": origin.base + "/photo.jpg", "w": width, "format": "jpeg", "q": 80}
            )
            targets = [("nginx static", nginx_file)]
            builds = [("imgcas", base)]
            if BEFORE:
                before, _ = start(procs, BEFORE, work, "before", source, origin)
                builds.append(("imgcas before", before))
            for name, b in builds:
                for url in (b + path, b + by_url):
                    urllib.request.urlopen(url).read()
                targets += [(f"{name} by hash", b + path), (f"{name} by URL", b + by_url)]
            samples = {label: [] for label, _ in targets}
            for _ in range(ROUNDS):
                for label, url in targets:
                    lib.wrk(url, CONNECTIONS, 2)  # warm-up: connections, caches
                    samples[label].append(lib.wrk(url, CONNECTIONS, SECONDS))
            origin.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    runs = {
        label: {
            key: statistics.median(r[key] for r in rs) for key in ("rps", "p50", "p99")
        }
        | {"non2xx": sum(r["non2xx"] for r in rs), "rounds": rs}
        for label, rs in samples.items()
    }
    ref = runs["nginx static"]
    logging = "access logging on in both" if LOGGING else "access logging off in both"
    print(
        f"\nhit path: one {size}-byte JPEG variant, wrk {CONNECTIONS} connections x {SECONDS} s x {ROUNDS} rounds (medians), "
        f"{logging}, loopback, {os.cpu_count()} cores shared by server and wrk"
    )
    rows = []
    for label, r in runs.items():
        rows.append(
            (
                label,
                f"{r['rps']:.0f}",
                f"{r['p50']:.2f}",
                f"{r['p99']:.2f}",
                f"{r['rps'] / ref['rps']:.2f}x",
                f"{r['p99'] / ref['p99']:.2f}x",
                r["non2xx"],
            )
        )
    lib.table(("server", "req/s", "p50 ms", "p99 ms", "req/s vs nginx", "p99 vs nginx", "non-2xx"), rows)
    lib.save(
        "hit-path",
        {"bytes": size, "connections": CONNECTIONS, "seconds": SECONDS, "rounds": ROUNDS, "logging": LOGGING, "runs": runs},
    )
    lib.chart(
        "hit-path",
        f"Hit path: {size} B variant, {CONNECTIONS} connections, {logging}",
        ["req/s"],
        {k: [v["rps"]] for k, v in runs.items()},
        "requests per second",
        notes="p99 ms: " + ", ".join(f"{k} {v['p99']:.2f}" for k, v in runs.items()),
    )


if __name__ == "__main__":
    main()
