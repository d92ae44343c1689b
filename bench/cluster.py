#!/usr/bin/env python3
"""Three nodes against one, on this machine: the same PostgreSQL maps and S3 bucket setup
for both, the realistic shape of traffic spread round-robin over the nodes.

- Workload: PHOTOS distinct real photographs (shared/corpus/photos) behind 10 URLs each, on
  a loopback origin; REQUESTS requests picking URLs by Zipf popularity (s = 1.1) and one of
  four specs, from 16 client threads, sent round-robin to the nodes.
- Reported for one node and for three: processing runs in the whole cluster (the sum of the
  nodes' /metrics) against the distinct (image, spec) pairs requested, downloads against
  distinct URLs, client p50/p90/p99 and errors; hit throughput (wrk on one stored variant by
  hash, 64 connections, split over the nodes).
- The price of the shared maps: wrk on a hot variant by URL (the URL lookup: both answer it
  from memory, PostgreSQL's for a second at a time), and on a hot-cache miss without bucket
  bytes (a cached processing error by hash, hot cache off: every request reads the variants
  row, from the redb file or with a PostgreSQL round trip).
- PARTS=cluster,url,miss picks the measurements (all by default).

PostgreSQL (Debian's package) and moto (pip) are started on loopback ports by the script.
Writes bench/results/cluster.json.
"""

import json
import os
import random
import shutil
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import http.client
from pathlib import Path

import lib
from realistic import SPECS, zipf_weights  # the same four specs and popularity law

REQUESTS = int(os.environ.get("REQUESTS", "6000"))
PHOTOS = int(os.environ.get("PHOTOS", "100"))
URLS_PER_PHOTO = 10
THREADS = 16
MAX_SECONDS = 300
CORPUS = lib.ROOT.parent / "shared" / "corpus" / "photos"


class Postgres:
    """A throwaway PostgreSQL server on a loopback port (as `postgres` when run as root)."""

    def __init__(self, work, max_connections=200):
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
        if not bins:
            raise SystemExit("needs PostgreSQL's server binaries: apt-get install postgresql")
        self.bin = bins[-1]
        self.dir = Path(work) / "pg"
        self.dir.mkdir(parents=True)
        root = os.geteuid() == 0
        self.prefix = ["runuser", "-u", "postgres", "--"] if root else []
        if root:
            subprocess.run(["chown", "-R", "postgres:postgres", str(Path(work))], check=True)
        self.port = lib.free_port()
        subprocess.run(self.prefix + [str(self.bin / "initdb"), "-D", str(self.dir / "data"), "-U", "imgcas",
                                      "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"],
                       check=True, stdout=subprocess.DEVNULL)
        self.opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        if max_connections:  # None: the server's default (100)
            self.opts += f" -c max_connections={max_connections}"
        self.start()

    def start(self):
        """Starts the server (again, after `stop`: the soak's outages)."""
        subprocess.run(self.prefix + [str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-l",
                                      str(self.dir / "log"), "-w", "-o", self.opts, "start"],
                       check=True, stdout=subprocess.DEVNULL)

    def database(self, name):
        subprocess.run([str(self.bin / "psql"), "-X", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "imgcas",
                        "-d", "postgres", "-c", f"CREATE DATABASE {name}"], check=True)
        return f"postgres://imgcas@127.0.0.1:{self.port}/{name}"

    def scalar(self, sql, database="postgres"):
        out = subprocess.run([str(self.bin / "psql"), "-X", "-q", "-t", "-A", "-h", "127.0.0.1", "-p", str(self.port),
                              "-U", "imgcas", "-d", database, "-c", sql], check=True, capture_output=True, text=True)
        return out.stdout.strip()

    def stop(self):
        subprocess.run(self.prefix + [str(self.bin / "pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_moto(procs):
    port = lib.free_port()
    procs.start(["python3", "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    lib.wait_http(endpoint + "/")
    return endpoint


def start_s3s_fs(procs, root):
    """`s3s-fs` over `root` (`examples/s3_fs_server.rs`, built here) on a loopback port: an S3
    that answers on more than one thread, for benches that send many requests a second."""
    subprocess.run(["cargo", "build", "--release", "-q", "--example", "s3_fs_server"],
                   cwd=lib.ROOT, check=True)
    port = lib.free_port()
    Path(root).mkdir(parents=True, exist_ok=True)
    procs.start([str(lib.ROOT / "target" / "release" / "examples" / "s3_fs_server"), str(root),
                 str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # It answers unsigned requests with 403: wait for the port instead.
    return lib.wait_port(port, "s3s-fs")


def create_bucket(endpoint, name):
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="bench", aws_secret_access_key="bench-secret")
    s3.create_bucket(Bucket=name)


def s3_env(endpoint, bucket):
    return dict(IMGCAS_STORAGE="s3", IMGCAS_S3_BUCKET=bucket, IMGCAS_S3_ENDPOINT=endpoint,
                IMGCAS_S3_FORCE_PATH_STYLE="true", AWS_ACCESS_KEY_ID="bench",
                AWS_SECRET_ACCESS_KEY="bench-secret")


def workload(bases, origin, paths, picks, specs):
    """Sends the picks round-robin over `bases`; returns records and elapsed seconds."""
    records, lock = [], threading.Lock()
    it, it_lock = iter(range(len(picks))), threading.Lock()
    deadline = time.monotonic() + MAX_SECONDS

    def worker(n):
        conns = [http.client.HTTPConnection("127.0.0.1", int(b.rsplit(":", 1)[1]), timeout=60) for b in bases]
        local = []
        while time.monotonic() < deadline:
            with it_lock:
                i = next(it, None)
            if i is None:
                break
            conn = conns[i % len(conns)]
            q = "url=" + urllib.parse.quote(origin.base + paths[picks[i]], safe="") + "&" + specs[i]
            t = time.perf_counter()
            conn.request("GET", "/v1/image?" + q)
            r = conn.getresponse()
            r.read()
            local.append(((time.perf_counter() - t) * 1000, r.status, r.getheader("x-imgcas-source-hash"), specs[i], picks[i]))
        for c in conns:
            c.close()
        with lock:
            records.extend(local)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return records, time.monotonic() - started


def run_cluster(binary, pg, moto, origin, paths, picks, specs, nodes, work, tag):
    db = pg.database(f"bench_{tag}")
    create_bucket(moto, f"bench-{tag}")
    env = s3_env(moto, f"bench-{tag}")
    with lib.Procs() as procs:
        bases = []
        for n in range(nodes):
            base, _ = lib.start_imgcas(procs, binary, work / f"{tag}-{n}", IMGCAS_MAPS_URL=db,
                                       IMGCAS_NODE_ID=f"{tag}-{n}", **env)
            bases.append(base)
        records, elapsed = workload(bases, origin, paths, picks, specs)
        runs = sum(lib.metric(b, "imgcas_processing_runs_total") for b in bases)
        downloads = sum(lib.metric(b, "imgcas_origin_downloads_total") for b in bases)
        waits = sum(lib.metric(b, "imgcas_claim_waits_total") for b in bases)
        # Hit throughput: one stored variant by hash, the connections split over the nodes.
        ok = [r for r in records if r[1] == 200]
        h, spec = ok[0][2], ok[0][3]
        per_node = max(1, 64 // len(bases))
        results = [None] * len(bases)

        def hit(k):
            results[k] = lib.wrk(f"{bases[k]}/v1/image/{h}?{spec}", per_node, 8, threads=1)

        threads = [threading.Thread(target=hit, args=(k,)) for k in range(len(bases))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lat = statistics.quantiles([r[0] for r in records], n=100)
    return {
        "nodes": nodes,
        "requests": len(records),
        "seconds": elapsed,
        "errors": len(records) - len(ok),
        "processing_runs": int(runs),
        "distinct_pairs": len({(r[2], r[3]) for r in ok}),
        "downloads": int(downloads),
        "distinct_urls": len({r[4] for r in records}),
        "claim_waits": int(waits),
        "p50_ms": lat[49],
        "p90_ms": lat[89],
        "p99_ms": lat[98],
        "hit_rps": sum(r["rps"] for r in results),
        "hit_p99_ms": max(r["p99"] for r in results),
    }


def url_hit_cost(binary, pg, moto, origin, path, work):
    """A hot variant by URL: the embedded maps answer the URL lookup from memory, the
    PostgreSQL maps with a round trip each time (another node may have changed the entry)."""
    out = {}
    for backend in ("redb", "postgres"):
        env = {}
        if backend == "postgres":
            create_bucket(moto, "bench-url")
            env.update(IMGCAS_MAPS_URL=pg.database("bench_url"), **s3_env(moto, "bench-url"))
        with lib.Procs() as procs:
            base, _ = lib.start_imgcas(procs, binary, work / f"url-{backend}", **env)
            url = f"{base}/v1/image?url={urllib.parse.quote(origin.base + path, safe='')}&w=200&format=webp"
            for _ in range(2):
                urllib.request.urlopen(url).read()
            out[backend] = lib.wrk(url, 16, 8)
    return out


def miss_cost(binary, pg, moto, work):
    """A hot-cache miss with no bucket read: a cached processing error by hash (a BMP whose
    processing fails for good, so its row holds no bytes), with the hot cache off. Every
    request reads the variants row: from the redb file, or from PostgreSQL."""
    bad = lib.ROOT.parent / "shared" / "corpus" / "image-rs-image" / "bad" / "bmp" / "Bad_shortfile.bmp"
    out = {}
    for backend in ("redb", "postgres"):
        env = dict(IMGCAS_HOT_CACHE_BYTES="0")
        if backend == "postgres":
            create_bucket(moto, "bench-miss")
            env.update(IMGCAS_MAPS_URL=pg.database("bench_miss"), **s3_env(moto, "bench-miss"))
        with lib.Procs() as procs:
            base, _ = lib.start_imgcas(procs, binary, work / f"miss-{backend}", **env)
            req = urllib.request.Request(base + "/v1/originals", data=bad.read_bytes(), method="POST",
                                         headers={"content-type": "application/octet-stream"})
            h = json.loads(urllib.request.urlopen(req).read())["hash"]
            url = f"{base}/v1/image/{h}?w=10"
            for _ in range(2):
                try:
                    urllib.request.urlopen(url)
                except urllib.error.HTTPError as e:
                    assert e.code == 422, e.code
            out[backend] = lib.wrk(url, 16, 8)
    return out


def main():
    lib.need("wrk")
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        raise SystemExit("needs moto[server]: pip install 'moto[server]'")
    binary = lib.build()
    work = lib.tempdir("cluster")
    photos = sorted(CORPUS.glob("*.jpg"))[:PHOTOS]
    if len(photos) < PHOTOS:
        raise SystemExit(f"needs {PHOTOS} photos in {CORPUS}")
    rng = random.Random(42)
    origin = lib.StaticOrigin()
    paths = []
    for j in range(PHOTOS * URLS_PER_PHOTO):
        path = f"/m{j % 97}/p{j}.jpg"
        origin.set(path, photos[(j * 7919) % PHOTOS].read_bytes())
        paths.append(path)
    ranked = list(range(len(paths)))
    rng.shuffle(ranked)
    picks = rng.choices(ranked, weights=zipf_weights(len(paths), 1.1), k=REQUESTS)
    specs = rng.choices([s for s, _ in SPECS], weights=[w for _, w in SPECS], k=REQUESTS)

    parts = os.environ.get("PARTS", "cluster,url,miss").split(",")
    pg = None
    one = three = by_url = miss = None
    try:
        pg = Postgres(work)
        with lib.Procs() as procs:
            moto = start_moto(procs)
            if "cluster" in parts:
                print("== one node", flush=True)
                one = run_cluster(binary, pg, moto, origin, paths, picks, specs, 1, work, "one")
                print("== three nodes", flush=True)
                three = run_cluster(binary, pg, moto, origin, paths, picks, specs, 3, work, "three")
            if "url" in parts:
                print("== hot variant by URL: redb vs PostgreSQL maps", flush=True)
                by_url = url_hit_cost(binary, pg, moto, origin, paths[0], work)
            if "miss" in parts:
                print("== hot-cache miss (a cached error's row): redb vs PostgreSQL maps", flush=True)
                miss = miss_cost(binary, pg, moto, work)
    finally:
        if pg:
            pg.stop()
        origin.close()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\ncluster: {REQUESTS} requests, {PHOTOS} photos x {URLS_PER_PHOTO} URLs, Zipf, round-robin; {os.cpu_count()} cores shared")
    if one:
        rows = []
        for name, r in (("1 node", one), ("3 nodes", three)):
            rows.append((name, f"{r['requests']} in {r['seconds']:.1f} s, {r['errors']} errors",
                         f"{r['processing_runs']} runs / {r['distinct_pairs']} pairs",
                         f"{r['downloads']} / {r['distinct_urls']} URLs", str(r["claim_waits"]),
                         f"{r['p50_ms']:.0f} / {r['p90_ms']:.0f} / {r['p99_ms']:.0f} ms",
                         f"{r['hit_rps']:.0f} req/s, p99 {r['hit_p99_ms']:.1f} ms"))
        lib.table(("setup", "requests", "processing", "downloads", "claim waits", "p50/p90/p99", "hit throughput"), rows)
    for title, pair in (("hot variant by URL (16 conns)", by_url),
                        ("hot-cache miss: a cached error's row by hash (16 conns)", miss)):
        if not pair:
            continue
        redb, post = pair["redb"], pair["postgres"]
        lib.table((title, "req/s", "p50", "p99"), [
            ("embedded redb maps", f"{redb['rps']:.0f}", f"{redb['p50']:.2f} ms", f"{redb['p99']:.2f} ms"),
            ("PostgreSQL maps", f"{post['rps']:.0f}", f"{post['p50']:.2f} ms", f"{post['p99']:.2f} ms"),
        ])
        print(f"PostgreSQL maps: {post['p50'] - redb['p50']:.2f} ms more at p50; "
              f"{(1000 / post['rps'] - 1000 / redb['rps']) * 1000:.0f} us more of the machine per request at saturation")
    # A partial run (PARTS) keeps the other parts' figures from the last run.
    results = lib.RESULTS / "cluster.json"
    saved = json.loads(results.read_text()) if results.exists() else {}
    fresh = {"one_node": one, "three_nodes": three, "by_url": by_url, "miss": miss}
    saved.update({k: v for k, v in fresh.items() if v is not None})
    lib.save("cluster", saved)


if __name__ == "__main__":
    main()
