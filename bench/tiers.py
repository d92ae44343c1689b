#!/usr/bin/env python3
"""Admission's tiers and tenants under load (issue 32), each target a ratio measured in one
run against the same server without the competing load.

1. Ingest vs interactive: interactive cold requests (a new width of a stored photo each, so
   every one is a processing run) arrive at a steady rate, first alone, then while
   `imgcas ingest --server` pushes 2,000 new originals with 2 warm specs each. Target: their
   p95 with the ingest <= 1.5x their p95 alone, and the ingest completes (every item 2xx or a
   clear error, none lost).
2. Two tenants: tenant B (URLs of host `localhost`) asks for new originals at a steady rate,
   first alone, then while tenant A (host `127.0.0.1`) asks for 10x as many. Target: B's p95
   with A <= 1.5x B's p95 alone.

The originals are the shared photographs (`../shared/corpus/photos/`), each cut and
re-encoded a few ways with Pillow so that every request names bytes never seen before. The
server runs on this machine's 2 cores with the load generators beside it.

    bench/.venv/bin/python bench/tiers.py

Results: bench/results/tiers.json.
"""

import concurrent.futures
import io
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402

from PIL import Image  # noqa: E402

PHOTOS = lib.ROOT.parent / "shared" / "corpus" / "photos"
INGEST_ITEMS = 2000
INTERACTIVE_RATE = 4.0  # requests per second
ALONE_SECONDS = 60
B_RATE = 1.5
A_FACTOR = 10
TENANT_SECONDS = 90


def variants(count, salt):
    """`count` distinct JPEGs made from the photos: a crop of each, shifted per round."""
    photos = sorted(p for p in PHOTOS.iterdir() if p.suffix.lower() in (".jpg", ".jpeg"))
    images = []
    for p in photos:
        im = Image.open(p)
        im.load()
        images.append(im.convert("RGB"))
    out = []
    round_ = 0
    while len(out) < count:
        for im in images:
            if len(out) == count:
                break
            w, h = im.size
            dx, dy = (round_ * 7 + salt) % 40, (round_ * 5 + salt) % 30
            crop = im.crop((dx, dy, w - 40 + dx, h - 30 + dy))
            buf = io.BytesIO()
            crop.save(buf, "JPEG", quality=85 - (round_ % 5))
            out.append(buf.getvalue())
        round_ += 1
    return out


def get(url):
    started = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        e.read()
        status = e.code
    except Exception:
        status = 0
    return status, (time.monotonic() - started) * 1000.0


def steady(urls, rate, stop=None):
    """Asks for `urls` at `rate` per second (open loop) until they run out or `stop` is
    set; returns (status, ms) per request."""
    results = []
    lock = threading.Lock()

    def one(url):
        r = get(url)
        with lock:
            results.append(r)

    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        t0 = time.monotonic()
        for i, url in enumerate(urls):
            if stop is not None and stop.is_set():
                break
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(one, url)
    return results


def summary(results):
    ok = sorted(ms for status, ms in results if status == 200)
    if not ok:
        return {"n": len(results), "ok": 0}
    p = lambda q: ok[min(len(ok) - 1, int(q * len(ok)))]
    return {
        "n": len(results),
        "ok": len(ok),
        "refused_503": sum(1 for s, _ in results if s == 503),
        "other": sum(1 for s, _ in results if s not in (200, 503)),
        "p50_ms": round(p(0.50), 1),
        "p95_ms": round(p(0.95), 1),
        "p99_ms": round(p(0.99), 1),
        "mean_ms": round(statistics.mean(ok), 1),
    }


def image_url(base, source, query):
    return f"{base}/v1/image?url={urllib.request.quote(source, safe='')}&{query}"


def ingest_vs_interactive(binary, origin):
    print("making the originals...", flush=True)
    stored = variants(40, salt=1)
    news = variants(INGEST_ITEMS, salt=3)
    for i, body in enumerate(stored):
        origin.set(f"/stored/{i}.jpg", body)
    for i, body in enumerate(news):
        origin.set(f"/new/{i}.jpg", body)
    data_dir = lib.tempdir("tiers-ingest")
    with lib.Procs() as procs:
        base, _ = lib.start_imgcas(procs, binary, data_dir)
        # The interactive sources are downloaded first: their requests are processing only.
        for i in range(len(stored)):
            get(image_url(base, f"{origin.base}/stored/{i}.jpg", "w=16"))
        # Every request a (photo, width) pair not asked before, all of about the same work:
        # the width grows by one pixel per round of the photos, so both phases ask for
        # nearly the same sizes (a width growing by one per request made the second phase's
        # runs dearer than the first's, and measured that instead of the ingest).
        counter = iter(range(10**9))

        def interactive(n):
            urls = []
            for _ in range(n):
                k = next(counter)
                source = f"{origin.base}/stored/{k % len(stored)}.jpg"
                urls.append(image_url(base, source, f"w={300 + k // len(stored)}&format=webp"))
            return urls

        print(f"interactive alone, {ALONE_SECONDS} s at {INTERACTIVE_RATE}/s...", flush=True)
        alone = summary(steady(interactive(int(ALONE_SECONDS * INTERACTIVE_RATE)), INTERACTIVE_RATE))
        print(f"  {alone}", flush=True)

        url_list = Path(tempfile.mkstemp(prefix="imgcas-bench-urls-")[1])
        url_list.write_text("".join(f"{origin.base}/new/{i}.jpg\n" for i in range(len(news))))
        report_file = Path(tempfile.mkstemp(prefix="imgcas-bench-report-")[1])
        stop = threading.Event()
        during = []
        runner = threading.Thread(
            target=lambda: during.extend(
                steady(interactive(int(3600 * INTERACTIVE_RATE)), INTERACTIVE_RATE, stop)
            )
        )
        print(f"interactive while ingesting {len(news)} new originals with 2 warm specs...", flush=True)
        started = time.monotonic()
        runner.start()
        time.sleep(2)
        cli = subprocess.run(
            [
                str(binary), "ingest", "--server", base, "--url-list", str(url_list),
                "--warm", "w=400&format=webp", "--warm", "w=200&format=jpeg", "--json",
            ],
            stdout=open(report_file, "wb"),
            stderr=subprocess.DEVNULL,
        )
        took = time.monotonic() - started
        stop.set()
        runner.join()
        with_ingest = summary(during)
        print(f"  {with_ingest}", flush=True)
        try:
            report = json.loads(report_file.read_text())
            totals = report.get("summary", {})
        except Exception:
            totals = {"unreadable_report": True}
        shed = lib.metric(base, "imgcas_admission_rejections_total", tier="bulk")
    ratio = with_ingest["p95_ms"] / alone["p95_ms"]
    return {
        "interactive_alone": alone,
        "interactive_with_ingest": with_ingest,
        "p95_ratio": round(ratio, 2),
        "ingest": {
            "items": len(news),
            "exit_code": cli.returncode,
            "seconds": round(took, 1),
            "summary": totals,
            "bulk_refusals": shed,
        },
        "target": "p95 ratio <= 1.5; the ingest completes",
        "met": ratio <= 1.5 and cli.returncode == 0,
    }


def two_tenants(binary, origin):
    print("making the originals...", flush=True)
    b_alone = variants(int(TENANT_SECONDS * B_RATE), salt=11)
    b_with = variants(int(TENANT_SECONDS * B_RATE), salt=13)
    a_news = variants(int(TENANT_SECONDS * B_RATE * A_FACTOR), salt=17)
    for name, bodies in (("b1", b_alone), ("b2", b_with), ("a", a_news)):
        for i, body in enumerate(bodies):
            origin.set(f"/{name}/{i}.jpg", body)
    port = origin.base.rsplit(":", 1)[1]
    data_dir = lib.tempdir("tiers-tenants")
    query = "w=300&format=webp"
    with lib.Procs() as procs:
        base, _ = lib.start_imgcas(procs, binary, data_dir)
        b_urls = lambda name, n: [image_url(base, f"http://localhost:{port}/{name}/{i}.jpg", query) for i in range(n)]
        print(f"tenant B alone, {TENANT_SECONDS} s at {B_RATE}/s...", flush=True)
        alone = summary(steady(b_urls("b1", len(b_alone)), B_RATE))
        print(f"  {alone}", flush=True)
        a_urls = [image_url(base, f"{origin.base}/a/{i}.jpg", query) for i in range(len(a_news))]
        a_results = []
        a_thread = threading.Thread(target=lambda: a_results.extend(steady(a_urls, B_RATE * A_FACTOR)))
        print(f"tenant B with tenant A at {B_RATE * A_FACTOR}/s...", flush=True)
        a_thread.start()
        time.sleep(1)
        with_a = summary(steady(b_urls("b2", len(b_with)), B_RATE))
        a_thread.join()
        a = summary(a_results)
        print(f"  B: {with_a}\n  A: {a}", flush=True)
    ratio = with_a["p95_ms"] / alone["p95_ms"]
    return {
        "b_alone": alone,
        "b_with_a": with_a,
        "a": a,
        "p95_ratio": round(ratio, 2),
        "target": "B's p95 with A <= 1.5x B's p95 alone",
        "met": ratio <= 1.5,
    }


def main():
    which = sys.argv[1:] or ["ingest", "tenants"]
    binary = lib.build()
    origin = lib.StaticOrigin()
    results = {}
    if (lib.RESULTS / "tiers.json").exists():
        results = json.loads((lib.RESULTS / "tiers.json").read_text())
    if "ingest" in which:
        results["ingest_vs_interactive"] = ingest_vs_interactive(binary, origin)
    if "tenants" in which:
        results["two_tenants"] = two_tenants(binary, origin)
    origin.close()
    lib.save("tiers", results)
    rows = []
    if "ingest_vs_interactive" in results:
        r = results["ingest_vs_interactive"]
        rows.append(("interactive p95, ms", r["interactive_alone"]["p95_ms"], r["interactive_with_ingest"]["p95_ms"], r["p95_ratio"], "<= 1.5", r["met"]))
    if "two_tenants" in results:
        r = results["two_tenants"]
        rows.append(("tenant B p95, ms", r["b_alone"]["p95_ms"], r["b_with_a"]["p95_ms"], r["p95_ratio"], "<= 1.5", r["met"]))
    lib.table(["measure", "alone", "with the other load", "ratio", "target", "met"], rows)


if __name__ == "__main__":
    main()
