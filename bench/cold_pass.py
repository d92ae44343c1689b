#!/usr/bin/env python3
"""One cold pass as one process, for timing two builds against each other from outside
(A B A B, whole-process wall time: `/usr/bin/time -v`, or any runner that alternates):
`imgcas serve` on an empty data dir, a loopback origin serving PHOTOS real photographs of
`../shared/corpus/photos`, and every photo asked once in each of FORMATS at `w=512`, by
two clients. Every request is a first one (a download, a decode, a resize and an encode),
so the pass is the cold path and nothing else; the server's start and stop are in it too,
the same for both builds.

    python3 bench/cold_pass.py target/release/imgcas

Env: PHOTOS (default 40), FORMATS (default `jpeg,webp,avif`). Exits 1 if any answer is
not a 200. All traffic stays on loopback.
"""

import os
import shutil
import sys
import threading
import urllib.parse
import urllib.request

import lib

PHOTOS = int(os.environ.get("PHOTOS", "40"))
FORMATS = os.environ.get("FORMATS", "jpeg,webp,avif").split(",")
CLIENTS = 2


def main():
    binary = sys.argv[1]
    photos = sorted((lib.ROOT.parent / "shared" / "corpus" / "photos").glob("*.jpg"))[:PHOTOS]
    origin = lib.StaticOrigin()
    for p in photos:
        origin.set("/" + p.name, p.read_bytes())
    asks = [(p.name, f) for p in photos for f in FORMATS]
    failures, work = [], lib.tempdir("cold-pass")
    with lib.Procs() as procs:
        base, _ = lib.start_imgcas(procs, binary, work)
        lock = threading.Lock()

        def ask(item):
            name, fmt = item
            query = urllib.parse.urlencode(dict(url=f"{origin.base}/{name}", w=512, format=fmt))
            try:
                with urllib.request.urlopen(f"{base}/v1/image?{query}", timeout=120) as r:
                    r.read()
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
            if status != 200:
                with lock:
                    failures.append((name, fmt, status))

        lib.each_on_threads(asks, CLIENTS, ask)
    origin.close()
    shutil.rmtree(work, ignore_errors=True)
    if failures:
        print("not 200:", failures[:5], file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
