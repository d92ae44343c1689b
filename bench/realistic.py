#!/usr/bin/env python3
"""Realistic workload: a marketplace's traffic in miniature.

- 1,000 distinct product photos (800x600 JPEGs cut from the test photograph) behind 10,000 URLs
  (each photo under 10 merchants' URLs), on a loopback origin with ETags and 304s;
- REQUESTS requests (default 40,000) picking URLs by Zipf popularity (s = 1.1) and one of
  four specs (thumbnail, listing, detail, square crop) by fixed weights, from 16 client
  threads;
- halfway, 5 % of the URLs (500) get new content at the origin; imgcas revalidates a URL after
  10 s (IMGCAS_REVALIDATE_AFTER) and must pick the change up.

Reports the share of requests served without processing, processing runs vs distinct
(image, spec) pairs seen, client p50/p90/p99, origin downloads and 304s, and the bytes imgcas
stores (originals once per content, variants once per content and spec) against what a
URL-keyed cache would store (an original and its variants per URL and version). Writes
bench/results/realistic.{json,png}.
"""

import hashlib
import http.client
import io
import itertools
import os
import random
import shutil
import statistics
import threading
import time
import urllib.parse

import lib

REQUESTS = int(os.environ.get("REQUESTS", "40000"))
IMAGES = 1000
URLS = 10_000
CHANGED = URLS * 5 // 100
THREADS = 16
MAX_SECONDS = 240
SPECS = [
    ("w=200&format=webp", 0.35),
    ("w=400&format=webp", 0.30),
    ("w=800&format=jpeg", 0.20),
    ("w=120&h=120&fit=cover&format=jpeg", 0.15),
]


def make_photos(count, seed):
    """Distinct 800x600 JPEGs: random crops of the test photograph, slightly re-toned."""
    from PIL import Image, ImageEnhance

    rng = random.Random(seed)
    base = Image.open(lib.PHOTO).convert("RGB")
    out = []
    for _ in range(count):
        w = rng.randint(600, base.width)
        h = w * 3 // 4
        h = min(h, base.height)
        x, y = rng.randint(0, base.width - w), rng.randint(0, base.height - h)
        img = base.crop((x, y, x + w, y + h)).resize((800, 600), Image.BILINEAR)
        img = ImageEnhance.Brightness(img).enhance(rng.uniform(0.85, 1.15))
        buf = io.BytesIO()
        img.save(buf, "JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def zipf_weights(n, s):
    return [1 / (k**s) for k in range(1, n + 1)]


def main():
    try:
        import PIL  # noqa: F401
    except ImportError:
        raise SystemExit("Pillow missing: pip install -r bench/requirements.txt")
    binary = lib.build()
    work = lib.tempdir("realistic")
    rng = random.Random(42)
    print("== making 1,000 photos (+500 replacements)", flush=True)
    photos = make_photos(IMAGES, 1)
    replacements = make_photos(CHANGED, 2)
    sizes = {hashlib.sha256(b).hexdigest(): len(b) for b in photos + replacements}

    origin = lib.StaticOrigin()
    url_image = [(j * 7919) % IMAGES for j in range(URLS)]
    paths = [f"/m{j % 97}/p{j}.jpg" for j in range(URLS)]
    for j, path in enumerate(paths):
        origin.set(path, photos[url_image[j]])
    # Popularity: a random permutation of URLs ranked by Zipf.
    ranked = list(range(URLS))
    rng.shuffle(ranked)
    picks = rng.choices(ranked, weights=zipf_weights(URLS, 1.1), k=REQUESTS)
    specs = rng.choices([s for s, _ in SPECS], weights=[w for _, w in SPECS], k=REQUESTS)
    changed = rng.sample(range(URLS), CHANGED)

    records = []  # (latency ms, cache, url index, source hash, spec, bytes)
    lock = threading.Lock()
    deadline = time.monotonic() + MAX_SECONDS

    try:
        with lib.Procs() as procs:
            base, _ = lib.start_imgcas(procs, binary, work / "data", IMGCAS_REVALIDATE_AFTER="10s")
            port = int(base.rsplit(":", 1)[1])

            def run(indices):
                it = iter(indices)
                it_lock = threading.Lock()

                def worker():
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                    local = []
                    while time.monotonic() < deadline:
                        with it_lock:
                            i = next(it, None)
                        if i is None:
                            break
                        j, spec = picks[i], specs[i]
                        q = "url=" + urllib.parse.quote(origin.base + paths[j], safe="") + "&" + spec
                        t = time.perf_counter()
                        conn.request("GET", "/v1/image?" + q)
                        r = conn.getresponse()
                        body = r.read()
                        ms = (time.perf_counter() - t) * 1000
                        local.append((ms, r.getheader("x-imgcas-cache"), j, r.getheader("x-imgcas-source-hash"), spec, len(body), r.status))
                    conn.close()
                    with lock:
                        records.extend(local)

                lib.run_threads(worker, THREADS)

            started = time.monotonic()
            half = REQUESTS // 2
            print(f"== first half: {half} requests", flush=True)
            run(range(half))
            for k, j in enumerate(changed):
                origin.set(paths[j], replacements[k])
            print(f"== {CHANGED} URLs changed at the origin; second half", flush=True)
            run(range(half, REQUESTS))
            elapsed = time.monotonic() - started
            runs = lib.metric(base, "imgcas_processing_runs_total")
            downloads = lib.metric(base, "imgcas_origin_downloads_total")
            not_modified = lib.metric(base, "imgcas_origin_not_modified_total")
            disk = sum(f.stat().st_size for f in (work / "data").rglob("*") if f.is_file())
        origin_requests, origin_full = origin.requests, origin.full
        origin.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    done = len(records)
    ok = [r for r in records if r[6] == 200]
    errors = done - len(ok)
    pairs = {(h, s) for _, _, _, h, s, _, _ in ok}
    variant_size = {(h, s): n for _, _, _, h, s, n, _ in ok}
    url_versions = {(j, h) for _, _, j, h, _, _, _ in ok}
    url_variants = {(j, h, s) for _, _, j, h, s, _, _ in ok}
    hashes = {h for _, _, _, h, _, _, _ in ok}
    stored = sum(sizes.get(h, 0) for h in hashes) + sum(variant_size.values())
    url_keyed = sum(sizes.get(h, 0) for _, h in url_versions) + sum(variant_size[(h, s)] for _, h, s in url_variants)
    lat = statistics.quantiles([r[0] for r in records], n=100)
    outcomes = {}
    for r in records:
        outcomes[r[1]] = outcomes.get(r[1], 0) + 1
    changed_set = set(changed)
    new_hashes = {hashlib.sha256(b).hexdigest() for b in replacements}
    picked_up = {j for _, _, j, h, _, _, _ in ok if j in changed_set and h in new_hashes}

    without = 1 - runs / max(done, 1)
    summary = {
        "requests": done,
        "seconds": elapsed,
        "errors": errors,
        "served_without_processing": without,
        "processing_runs": int(runs),
        "distinct_pairs": len(pairs),
        "p50_ms": lat[49],
        "p90_ms": lat[89],
        "p99_ms": lat[98],
        "outcomes": outcomes,
        "downloads": int(downloads),
        "not_modified": int(not_modified),
        "origin_requests": origin_requests,
        "origin_full_bodies": origin_full,
        "distinct_urls_requested": len({j for _, _, j, _, _, _, _ in records}),
        "changed_urls_seen_with_new_content": len(picked_up),
        "bytes_stored_imgcas": stored,
        "bytes_stored_url_keyed": url_keyed,
        "data_dir_bytes_on_disk": disk,
    }
    print(f"\nrealistic workload: {done} requests in {elapsed:.1f} s ({done / elapsed:.0f}/s), {THREADS} client threads, {os.cpu_count()} cores shared")
    rows = [
        ("served without processing", f"{without * 100:.2f} %"),
        ("processing runs", f"{int(runs)}"),
        ("distinct (image, spec) pairs seen", f"{len(pairs)}"),
        ("errors", f"{errors}"),
        ("client p50 / p90 / p99", f"{lat[49]:.1f} / {lat[89]:.1f} / {lat[98]:.1f} ms"),
        ("X-Imgcas-Cache", ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items(), key=lambda kv: str(kv[0])))),
        ("origin downloads / 304s", f"{int(downloads)} / {int(not_modified)}"),
        ("distinct URLs requested", f"{summary['distinct_urls_requested']}"),
        ("changed URLs served with new content", f"{len(picked_up)}"),
        ("bytes stored: imgcas (content-keyed)", f"{stored / 2**20:.1f} MiB"),
        ("bytes stored: URL-keyed cache", f"{url_keyed / 2**20:.1f} MiB ({url_keyed / max(stored, 1):.1f}x)"),
        ("imgcas data dir on disk", f"{disk / 2**20:.1f} MiB"),
    ]
    lib.table(("measure", "value"), rows)
    lib.save("realistic", summary)
    lib.chart(
        "realistic",
        f"Realistic workload: {done} requests over {URLS} URLs / {IMAGES} photos",
        ["processing runs", "origin downloads", "MiB stored"],
        {
            "imgcas": [runs, downloads, stored / 2**20],
            "URL-keyed cache": [len(url_variants), len(url_versions), url_keyed / 2**20],
        },
        "count / MiB",
        notes=f"served without processing {without * 100:.2f} %; p50/p90/p99 {lat[49]:.1f}/{lat[89]:.1f}/{lat[98]:.1f} ms",
    )


if __name__ == "__main__":
    main()
