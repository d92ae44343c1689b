"""The hit path of two imgcas builds side by side, with nginx as the peer, in one run.

    bench/.venv/bin/python bench/hit_compare.py OLD_BINARY NEW_BINARY

Each build serves one cached variant by hash and by URL, with its hot cache on (default) and
off (every hit reads the variants map); wrk runs every target in turn, ROUNDS times, so drift
of the machine falls on all of them alike. Prints the median req/s of each, as a ratio to
nginx serving the same bytes. For checking a change to the hit path against the release
before it (build the old one from a worktree: `git worktree add /tmp/old <rev>`)."""
import json
import os
import shutil
import sys
import urllib.parse
import urllib.request

import lib

SECONDS = int(os.environ.get("SECONDS_PER_RUN", "8"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CONNECTIONS = int(os.environ.get("CONNECTIONS", "64"))


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    lib.need("wrk", "nginx")
    builds = {"old": sys.argv[1], "new": sys.argv[2]}
    work = lib.tempdir("hit-compare")
    results = {}
    try:
        with lib.Procs() as procs:
            source = lib.photo(builds["new"], 12, work / "photo.jpg")
            origin = lib.StaticOrigin()
            origin.set("/photo.jpg", source.read_bytes())
            targets = []
            for hot in ("on", "off"):
                for name, binary in builds.items():
                    env = {} if hot == "on" else {"IMGCAS_HOT_CACHE_BYTES": 0}
                    base, _ = lib.start_imgcas(procs, binary, work / f"{name}-{hot}", **env)
                    upload = urllib.request.Request(
                        base + "/v1/originals",
                        data=source.read_bytes(),
                        headers={"content-type": "image/jpeg"},
                    )
                    digest = json.load(urllib.request.urlopen(upload))["hash"]
                    by_hash = f"{base}/v1/image/{digest}?w=700&format=jpeg&q=80"
                    body = urllib.request.urlopen(by_hash).read()
                    query = {"url": origin.base + "/photo.jpg", "w": 700, "format": "jpeg", "q": 80}
                    by_url = f"{base}/v1/image?{urllib.parse.urlencode(query)}"
                    urllib.request.urlopen(by_url).read()
                    label = f"{name}, hot cache {hot}"
                    targets += [(f"{label}: by hash", by_hash), (f"{label}: by URL", by_url)]
            targets.insert(0, ("nginx static", lib.serve_static(procs, work, body)))
            for _ in range(ROUNDS):
                for label, url in targets:
                    lib.wrk(url, CONNECTIONS, 1)
                    results.setdefault(label, []).append(lib.wrk(url, CONNECTIONS, SECONDS))
            origin.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    median = lambda xs: sorted(xs)[len(xs) // 2]
    ref = median([r["rps"] for r in results["nginx static"]])
    print(f"\n{len(body)}-byte JPEG, wrk {CONNECTIONS} connections, {SECONDS} s x {ROUNDS} rounds, interleaved")
    rows = []
    for label, runs in results.items():
        rps = median([r["rps"] for r in runs])
        rows.append((label, f"{rps:.0f}", f"{rps / ref:.2f}x", f"{median([r['p99'] for r in runs]):.2f}",
                     " ".join(f"{r['rps']:.0f}" for r in runs)))
    lib.table(("server", "median req/s", "vs nginx", "p99 ms", "runs"), rows)
    lib.save("hit-compare", {"seconds": SECONDS, "rounds": ROUNDS, "runs": results})


if __name__ == "__main__":
    main()
