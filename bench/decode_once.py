#!/usr/bin/env python3
"""Decode once: what a large original costs imgcas for its first spec, for a `srcset` burst,
and for every spec after the first, all on new 12 MP JPEG originals (the photo of
`lib.photo`, made distinct per original by a trailing byte after its end marker: the same
pixels, another hash). One server, loopback, JPEG out. Prints the table and writes
bench/results/decode-once.json.

1. cold single request: the first spec (w=400 or w=500) of a new original over HTTP (upload
   first, not timed), against the in-process time of `process()` for the same specs
   (`processors/examples/process_times.rs`): the service's overhead on a cold run.
2. srcset burst: four widths (320, 640, 960, 1280) of a new original at once, wall time to the
   last answer, against the largest width (1280) alone on other new originals; and the
   original's decodes (`imgcas_source_decodes_total{from="original"}`) per burst.
3. second spec: a new width of an original whose first spec is stored, against the first
   spec's time in the same run. The two widths (400 and 500, both a 1/4 decode of the 12 MP
   photo) take turns being first, so the comparison is of the position alone: what a stored
   original costs its next spec, not what a wider output costs.

Each measurement is the median over ORIGINALS originals (default 9), the phases interleaved
so drift of the machine falls on all of them alike. Env: ORIGINALS; BINARY (measure another
build, e.g. one from before the mezzanine, for its cold first spec; its result goes to
decode-once-<name>.json instead).
"""

import json
import os
import shutil
import statistics
import subprocess
import threading
import time
import urllib.request

import lib

ORIGINALS = int(os.environ.get("ORIGINALS", "9"))
BURST = (320, 640, 960, 1280)
FIRST = 400
SECOND = 500
# Widths of the second-spec comparison, first and second in turn.
PAIRS = ((FIRST, SECOND), (SECOND, FIRST))


def upload(base, data):
    request = urllib.request.Request(base + "/v1/originals", data=data, headers={"content-type": "image/jpeg"})
    return json.load(urllib.request.urlopen(request))["hash"]


def timed_get(url):
    start = time.perf_counter()
    with urllib.request.urlopen(url) as response:
        response.read()
        assert response.status == 200, url
    return (time.perf_counter() - start) * 1000


def burst(base, digest):
    """All widths at once; returns the wall time to the last answer, ms."""
    errors = []

    def one(width):
        try:
            timed_get(f"{base}/v1/image/{digest}?w={width}&format=jpeg")
        except Exception as e:  # reported below: a failed request spoils the figure
            errors.append(e)

    threads = [threading.Thread(target=one, args=(w,)) for w in BURST]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"burst failed: {errors[0]}")
    return (time.perf_counter() - start) * 1000


def in_process(photo, spec, runs):
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "imgcas-processors", "--example", "process_times"],
        cwd=lib.ROOT,
        check=True,
    )
    out = subprocess.run(
        [str(lib.ROOT / "target/release/examples/process_times"), str(photo), spec, str(runs)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def main():
    binary = os.environ.get("BINARY") or lib.build()
    work = lib.tempdir("decode-once")
    photo = lib.photo(binary, 12, work / "photo.jpg")
    source = photo.read_bytes()
    counter = iter(range(10**6))

    def new_original(base):
        # Bytes after the JPEG's end marker: ignored by decoders, new to the hash.
        return upload(base, source + b"\0" + str(next(counter)).encode())

    first, second, bursts, alone, burst_decodes = [], [], [], [], []
    try:
        with lib.Procs() as procs:
            base, _ = lib.start_imgcas(procs, binary, work / "data")
            # Warm-up: connections, the pools, the page cache.
            timed_get(f"{base}/v1/image/{new_original(base)}?w={FIRST}&format=jpeg")
            for i in range(ORIGINALS):
                digest = new_original(base)
                one, two = PAIRS[i % 2]
                first.append(timed_get(f"{base}/v1/image/{digest}?w={one}&format=jpeg"))
                second.append(timed_get(f"{base}/v1/image/{digest}?w={two}&format=jpeg"))
                digest = new_original(base)
                before = lib.metric(base, "imgcas_source_decodes_total", **{"from": "original"})
                bursts.append(burst(base, digest))
                after = lib.metric(base, "imgcas_source_decodes_total", **{"from": "original"})
                burst_decodes.append(after - before)
                digest = new_original(base)
                alone.append(timed_get(f"{base}/v1/image/{digest}?w={max(BURST)}&format=jpeg"))
        # The first specs are both widths in turn: so is the in-process reference.
        both = [in_process(photo, f"w={w}&format=jpeg", ORIGINALS) for w in (FIRST, SECOND)]
        reference = {"p50_ms": statistics.mean(r["p50_ms"] for r in both), "runs": both}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    med = statistics.median
    rows = [
        ("cold first spec over HTTP", f"{med(first):.1f}", f"in-process process(): {reference['p50_ms']:.1f}", f"{med(first) / reference['p50_ms']:.2f}x", "<= 1.1x"),
        ("srcset burst 320-1280", f"{med(bursts):.1f}", f"w=1280 alone: {med(alone):.1f}", f"{med(bursts) / med(alone):.2f}x", "<= 1.5x"),
        ("second spec (400/500 in turn)", f"{med(second):.1f}", f"first spec: {med(first):.1f}", f"{med(second) / med(first):.2f}x", "<= 1.0x"),
    ]
    print(f"\ndecode once: 12 MP JPEG originals, median of {ORIGINALS}, loopback, {os.cpu_count()} cores")
    lib.table(("measure", "p50 ms", "against", "ratio", "target"), rows)
    print(f"decodes of the original per burst: {sorted(set(burst_decodes))}")
    lib.save(
        "decode-once" if not os.environ.get("BINARY") else "decode-once-other",
        {
            "originals": ORIGINALS,
            "first_ms": first,
            "second_ms": second,
            "burst_ms": bursts,
            "largest_alone_ms": alone,
            "burst_original_decodes": burst_decodes,
            "in_process": reference,
        },
    )


if __name__ == "__main__":
    main()
