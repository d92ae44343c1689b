#!/usr/bin/env python3
"""Hit path: a cached ~20 KB variant from imgcas vs nginx serving the same bytes as a static
file, both under wrk at the same fixed concurrency on loopback. Prints req/s, p50 and p99 and
the ratios (imgcas / nginx); writes bench/results/hit-path.{json,png}.

Also measures the same variant asked by URL (`/v1/image?url=…`, mapping fresh), which adds the
URL map read to the by-hash path.

Env: SECONDS_PER_RUN (default 10), CONNECTIONS (default 64).
"""

import os
import shutil
import urllib.request
import urllib.parse

import lib

SECONDS = int(os.environ.get("SECONDS_PER_RUN", "10"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "64"))


def main():
    lib.need("wrk", "nginx")
    binary = lib.build()
    work = lib.tempdir("hit")
    try:
        with lib.Procs() as procs:
            base, _ = lib.start_imgcas(procs, binary, work / "data")
            source = lib.photo(binary, 12, work / "photo.jpg")
            origin = lib.StaticOrigin()
            origin.set("/photo.jpg", source.read_bytes())
            upload = urllib.request.Request(
                base + "/v1/originals",
                data=source.read_bytes(),
                headers={"content-type": "image/jpeg"},
            )
            import json

            digest = json.load(urllib.request.urlopen(upload))["hash"]
            # The width whose JPEG is closest to 20 KB.
            best = None
            for w in range(300, 1300, 50):
                path = f"/v1/image/{digest}?w={w}&format=jpeg&q=80"
                size = len(urllib.request.urlopen(base + path).read())
                if best is None or abs(size - 20_000) < abs(best[1] - 20_000):
                    best = (path, size, w)
            path, size, width = best
            body = urllib.request.urlopen(base + path).read()
            nginx_file = lib.serve_static(procs, work, body)
            by_url = "/v1/image?" + urllib.parse.urlencode(
                {"url": origin.base + "/photo.jpg", "w": width, "format": "jpeg", "q": 80}
            )
            urllib.request.urlopen(base + by_url).read()
            runs = {}
            targets = [
                ("nginx static", nginx_file),
                ("imgcas by hash", base + path),
                ("imgcas by URL", base + by_url),
            ]
            for label, url in targets:
                lib.wrk(url, CONNECTIONS, 2)  # warm-up: connections, caches
                runs[label] = lib.wrk(url, CONNECTIONS, SECONDS)
            origin.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ref = runs["nginx static"]
    print(f"\nhit path: one {size}-byte JPEG variant, wrk {CONNECTIONS} connections x {SECONDS} s, loopback, {os.cpu_count()} cores shared by server and wrk")
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
    lib.save("hit-path", {"bytes": size, "connections": CONNECTIONS, "seconds": SECONDS, "runs": runs})
    lib.chart(
        "hit-path",
        f"Hit path: {size} B variant, {CONNECTIONS} connections",
        ["req/s"],
        {k: [v["rps"]] for k, v in runs.items()},
        "requests per second",
        notes="p99 ms: " + ", ".join(f"{k} {v['p99']:.2f}" for k, v in runs.items()),
    )


if __name__ == "__main__":
    main()
