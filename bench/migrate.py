#!/usr/bin/env python3
"""Online growth (issue 69): a node on the embedded maps and a directory, holding ORIGINALS
uploaded originals and URLS URLs with a variant each, moved into PostgreSQL and a bucket (s3s-fs)
with `imgcas maps migrate` while steady traffic runs, against the same traffic before it.

- Traffic, RATE requests a second on 4 threads, the whole time: 80 % hits by URL, 10 % new
  URLs (download, store, a variant), 10 % uploads of new originals. Each request's latency,
  status and phase are recorded; every acknowledged upload and URL is kept.
- Phases: BEFORE seconds of traffic alone; the migration started (backfill at the default
  `maintenance.walk_rows_per_second`) and timed to `validated`; the cutover, AFTER seconds;
  the finish. Then a fresh node configured on the target alone is asked for every
  acknowledged upload (byte for byte) and URL (served, the origin not asked again).
- Reported: p50/p99 of each phase and p99 during ÷ before; requests that failed; the
  backfill's length and rate; ranges checked and equal at validation; shadow reads;
  acknowledged writes missing on the target.
- ORIGINALS (default 20,000; the issue's 1,000,000 takes the fill ~an hour here), URLS
  (default 2,000), RATE (default 40), BEFORE and AFTER (default 20 s), WALK_RATE (the
  backfill's rows a second; default the setting's default), S3 (`s3s-fs`, the
  default, or `moto`: moto answers on one Python thread, and the backfill's copies then wait
  on it — 43 originals a second here — not on imgcas).

PostgreSQL (Debian's package) and the S3 server are started on loopback ports by the script.
Writes bench/results/migrate.json.
"""

import json
import os
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import lib
from cluster import Postgres, create_bucket, s3_env, start_moto, start_s3s_fs

ORIGINALS = int(os.environ.get("ORIGINALS", "20000"))
URLS = int(os.environ.get("URLS", "2000"))
RATE = float(os.environ.get("RATE", "40"))
BEFORE = float(os.environ.get("BEFORE", "20"))
AFTER = float(os.environ.get("AFTER", "20"))
S3 = os.environ.get("S3", "s3s-fs")
# The walks' rate (`maintenance.walk_rows_per_second`; the backfill is one): unset, the default.
WALK_RATE = os.environ.get("WALK_RATE")
TOKEN = "bench-migration-admin-token"


def request(method, url, body=None, token=True):
    req = urllib.request.Request(url, data=body, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {TOKEN}")
    if body is not None and method == "POST" and url.endswith("/admin/migrate"):
        req.add_header("Content-Type", "application/json")
    t = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            data, status = r.read(), r.status
    except urllib.error.HTTPError as e:
        data, status = e.read(), e.code
    except OSError as e:
        data, status = str(e).encode(), 0
    return (time.perf_counter() - t) * 1000, status, data


def image_url(base, source, w):
    return f"{base}/v1/image?url={urllib.parse.quote(source, safe='')}&w={w}&format=png"


def migration(base):
    _, status, data = request("GET", base + "/admin/migrate")
    assert status == 200, (status, data)
    return json.loads(data)["migration"]


class Traffic:
    """Steady mixed traffic on `base`, its records tagged with the phase it ran in."""

    def __init__(self, base, origin):
        self.base, self.origin = base, origin
        self.phase = "before"
        self.records, self.uploads, self.urls = [], [], []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.n = 10_000_000

    def one(self):
        with self.lock:
            self.n += 1
            n, phase = self.n, self.phase
            known = self.urls[n % len(self.urls)] if self.urls else None
        kind = "hit" if n % 10 < 8 else ("new_url" if n % 10 == 8 else "upload")
        if kind == "hit" and known:
            ms, status, _ = request("GET", image_url(self.base, known, 24), token=False)
        elif kind == "upload" or not known:
            kind = "upload"
            body = lib.tiny_png(n)
            ms, status, data = request("POST", self.base + "/v1/originals", body)
            if 200 <= status < 300:
                with self.lock:
                    self.uploads.append((json.loads(data)["hash"], body))
        else:
            path = f"/traffic/{n}.png"
            self.origin.set(path, lib.tiny_png(n))
            source = self.origin.base + path
            ms, status, _ = request("GET", image_url(self.base, source, 24), token=False)
            if status == 200:
                with self.lock:
                    self.urls.append(source)
        with self.lock:
            self.records.append((phase, kind, ms, status))

    def run(self):
        def worker():
            every = 4 / RATE
            next_at = time.monotonic()
            while not self.stop.is_set():
                self.one()
                next_at += every
                time.sleep(max(0.0, next_at - time.monotonic()))

        self.threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()


def summary(records, phase):
    ms = sorted(r[2] for r in records if r[0] == phase and 200 <= r[3] < 300)
    failed = sum(1 for r in records if r[0] == phase and not 200 <= r[3] < 300)
    if not ms:
        return {"requests": 0, "failed": failed}
    return {"requests": len(ms) + failed, "failed": failed, "p50_ms": round(statistics.median(ms), 2),
            "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2)}


def cpu_seconds(pid):
    """User and system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid, below=0.05, quiet=3, longest=180):
    """Seconds until the process used under `below` of a core for `quiet` seconds running."""
    start, calm = time.monotonic(), 0
    while calm < quiet and time.monotonic() - start < longest:
        used = cpu_seconds(pid)
        time.sleep(1)
        calm = calm + 1 if cpu_seconds(pid) - used < below else 0
    return round(time.monotonic() - start, 1)


def main():
    binary = lib.build()
    work = lib.tempdir("imgcas-migrate")
    result = {"originals": ORIGINALS, "urls": URLS, "rate": RATE, "s3": S3,
              "walk_rows_per_second": WALK_RATE or "default (1000)"}
    pg = Postgres(work)
    try:
        with lib.Procs() as procs:
            if S3 == "moto":
                endpoint = start_moto(procs)
                create_bucket(endpoint, "migrate")
            else:
                endpoint = start_s3s_fs(procs, work / "s3")
                (work / "s3" / "migrate").mkdir()
            origin = lib.StaticOrigin()
            target = pg.database("migrate")
            s3 = {k: v for k, v in s3_env(endpoint, "migrate").items()
                  if k not in ("IMGCAS_STORAGE", "IMGCAS_S3_BUCKET")}
            env = dict(IMGCAS_STORAGE="fs", IMGCAS_ADMIN_TOKEN=TOKEN, IMGCAS_S3_REGION="us-east-1",
                       IMGCAS_VARIANTS_MAX_BYTES=str(1 << 40), IMGCAS_URLS_MAX_BYTES=str(1 << 38), **s3)
            if WALK_RATE:
                env["IMGCAS_WALK_ROWS_PER_SECOND"] = WALK_RATE
            data = work / "node"
            data.mkdir()
            base, node = lib.start_imgcas(procs, binary, data, log_file=work / "node.log", **env)
            t = time.monotonic()
            stored = []
            lock = threading.Lock()

            def fill_upload(n):
                body = lib.tiny_png(n)
                _, status, data = request("POST", base + "/v1/originals", body)
                assert 200 <= status < 300, (status, data)
                with lock:
                    stored.append((json.loads(data)["hash"], body))

            lib.each_on_threads(range(ORIGINALS), 8, fill_upload)
            sources = []

            def fill_url(n):
                path = f"/before/{n}.png"
                origin.set(path, lib.tiny_png(50_000_000 + n))
                _, status, _ = request("GET", image_url(base, origin.base + path, 24), token=False)
                assert status == 200, status
                with lock:
                    sources.append(origin.base + path)

            lib.each_on_threads(range(URLS), 8, fill_url)
            result["fill_s"] = round(time.monotonic() - t, 1)
            print("filled in", result["fill_s"], "s", flush=True)

            # The fill's facts and fingerprints are computed in the background: "before" is
            # measured once the node is idle again, not while it catches up.
            result["settled_s"] = wait_idle(node.pid)
            traffic = Traffic(base, origin)
            traffic.urls = list(sources)
            traffic.uploads = list(stored)
            traffic.run()
            time.sleep(BEFORE)
            rss_before = lib.rss_mb(node.pid)
            with traffic.lock:
                traffic.phase = "during"
            started = time.monotonic()
            body = json.dumps({"to": target, "bucket": "migrate"}).encode()
            _, status, data = request("POST", base + "/admin/migrate", body)
            assert status == 202, (status, data)
            peak_rss = rss_before
            while True:
                m = migration(base)
                peak_rss = max(peak_rss, lib.rss_mb(node.pid) or 0)
                if m["phase"] == "validated":
                    break
                time.sleep(0.5)
            result["backfill_s"] = round(time.monotonic() - started, 1)
            result["backfill_originals_per_s"] = round(ORIGINALS / result["backfill_s"], 1)
            result["validated"] = m
            result["rss_mb"] = {"before": rss_before, "peak_during": peak_rss}
            _, status, data = request("POST", base + "/admin/migrate/cutover")
            assert status == 200, (status, data)
            with traffic.lock:
                traffic.phase = "after_cutover"
            time.sleep(AFTER)
            _, status, data = request("POST", base + "/admin/migrate/finish")
            assert status == 200, (status, data)
            traffic.finish()
            result["finished"] = migration(base)
            records = traffic.records
            for phase in ("before", "during", "after_cutover"):
                result[phase] = summary(records, phase)
                # By kind too: hits read the leader alone; uploads and new URLs write twice.
                result[phase]["by_kind"] = {
                    kind: summary([r for r in records if r[1] == kind], phase)
                    for kind in ("hit", "new_url", "upload")}
            b, d = result["before"], result["during"]
            result["p99_during_over_before"] = round(d["p99_ms"] / b["p99_ms"], 2)
            result["p50_during_over_before"] = round(d["p50_ms"] / b["p50_ms"], 2)
            print(json.dumps({k: result[k] for k in ("before", "during", "after_cutover")}), flush=True)

            # A fresh node on the target alone: every acknowledged write there.
            fresh = work / "fresh"
            fresh.mkdir()
            target_env = dict(s3_env(endpoint, "migrate"), IMGCAS_MAPS_URL=target, IMGCAS_ADMIN_TOKEN=TOKEN,
                              IMGCAS_S3_REGION="us-east-1")
            fresh_base, _ = lib.start_imgcas(procs, binary, fresh, **target_env)
            lib.wait_http(fresh_base + "/readyz", timeout=120)
            missing = {"uploads": 0, "urls": 0}

            def check_upload(item):
                hash_, body = item
                _, status, data = request("GET", f"{fresh_base}/v1/originals/{hash_}")
                if status != 200 or data != body:
                    with lock:
                        missing["uploads"] += 1

            def check_url(source):
                _, status, _ = request("GET", image_url(fresh_base, source, 24), token=False)
                if status != 200:
                    with lock:
                        missing["urls"] += 1

            lib.each_on_threads(traffic.uploads, 8, check_upload)
            downloads_before = origin.full
            lib.each_on_threads(traffic.urls, 8, check_url)
            missing_uploads, missing_urls = missing["uploads"], missing["urls"]
            result["acknowledged"] = {"uploads": len(traffic.uploads), "urls": len(traffic.urls),
                                      "uploads_missing_on_target": missing_uploads,
                                      "urls_failing_on_target": missing_urls,
                                      "urls_downloaded_again": origin.full - downloads_before}
            origin.close()
    finally:
        pg.stop()
    lib.save(os.environ.get("RESULT", "migrate"), result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
