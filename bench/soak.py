#!/usr/bin/env python3
"""A soak with faults (issue 50, item 6): three nodes on one PostgreSQL (maps) and one moto
bucket (bytes), under Zipf traffic by URL, uploads of distinct small pictures and change
probes (an origin object replaced, then asked for again), while faults come on a schedule:

- a node killed (SIGKILL) and started again on its data dir;
- a node stalled (SIGSTOP for STALL_S seconds, then SIGCONT);
- PostgreSQL stopped for OUTAGE_S seconds, then started;
- the S3 server paused (SIGSTOP for OUTAGE_S seconds), so that it accepts connections and
  never answers.

Every node's RSS is sampled each second. Reported: answers by status inside and outside the
fault windows (and how many outside were not 200/201), the longest answer during an S3
pause, RSS per node (start, peak, end, after IDLE_S idle seconds), that every acknowledged
upload is served with its own bytes by every node at the end, processing runs against the
distinct (image, spec) pairs asked, and `imgcas verify` on the cluster's maps.

SOAK_SECONDS (default 1320, the audit's 22 minutes) sets the length; the faults repeat every
CYCLE_S seconds. PostgreSQL (Debian's package) and moto (pip) are started on loopback ports
by the script; all traffic stays on loopback. Writes bench/results/soak.json.
"""

import hashlib
import http.client
import json
import os
import random
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import lib
from cluster import CORPUS, Postgres, create_bucket, s3_env, start_moto
from realistic import SPECS, zipf_weights

SOAK_SECONDS = int(os.environ.get("SOAK_SECONDS", "1320"))
CYCLE_S = int(os.environ.get("CYCLE_S", "120"))
STALL_S = 5
OUTAGE_S = 8
IDLE_S = 20
PHOTOS = int(os.environ.get("PHOTOS", "40"))
URLS_PER_PHOTO = 10
CLIENTS = 8
NODES = 3


class Cluster:
    """NODES nodes on one PostgreSQL database and one bucket, each on its own port and data
    dir, started again on the same ones after a kill."""

    def __init__(self, procs, binary, work, maps_url, bucket_env):
        self.procs, self.binary, self.work = procs, binary, work
        self.env = dict(bucket_env, IMGCAS_MAPS_URL=maps_url, IMGCAS_REVALIDATE_AFTER="5s",
                        IMGCAS_CLAIM_TTL="3s")
        self.nodes = [None] * NODES
        self.ports = [lib.free_port() for _ in range(NODES)]
        for i in range(NODES):
            self.start(i)

    def start(self, i):
        data = Path(self.work) / f"node{i}"
        data.mkdir(exist_ok=True)
        env = dict(os.environ, IMGCAS_LISTEN=f"127.0.0.1:{self.ports[i]}", IMGCAS_DATA_DIR=str(data),
                   IMGCAS_LOG="warn", IMGCAS_ALLOW_PRIVATE_NETWORKS="true", **self.env)
        log = open(Path(self.work) / f"node{i}.log", "ab")
        self.nodes[i] = self.procs.start([str(self.binary), "serve"], env=env,
                                         stdout=subprocess.DEVNULL, stderr=log)
        lib.wait_http(self.base(i) + "/healthz", timeout=60)

    def base(self, i):
        return f"http://127.0.0.1:{self.ports[i]}"


def main():
    lib.need("runuser")
    binary = lib.build()
    random.seed(50)
    photos = sorted(CORPUS.glob("*.jpg"))[:PHOTOS]
    if not photos:
        raise SystemExit(f"no photos in {CORPUS}")
    work = lib.tempdir("soak")
    with lib.Procs() as procs:
        pg = Postgres(work)
        maps_url = pg.database("soak")
        moto = start_moto(procs)
        moto_proc = procs.children[-1]
        create_bucket(moto, "soak")
        origin = lib.StaticOrigin()
        paths = []
        for i, photo in enumerate(photos):
            body = photo.read_bytes()
            for k in range(URLS_PER_PHOTO):
                path = f"/p{i}/u{k}.jpg"
                origin.set(path, body)
                paths.append(path)
        cluster = Cluster(procs, binary, work, maps_url, s3_env(moto, "soak"))
        weights = zipf_weights(len(paths), 1.1)
        windows, windows_lock = [], threading.Lock()
        records, uploads, lock = [], {}, threading.Lock()
        asked = set()
        stop = threading.Event()
        started = time.monotonic()

        def in_fault(t):
            with windows_lock:
                return any(a - 1 <= t <= b + 6 for a, b, _ in windows)

        def client(n):
            rng = random.Random(n)
            count = 0
            while not stop.is_set():
                node = rng.randrange(NODES)
                base = cluster.base(node)
                t0 = time.monotonic()
                kind = rng.random()
                try:
                    if kind < 0.02:
                        count += 1
                        body = lib.tiny_png(n * 10_000_000 + count)
                        req = urllib.request.Request(base + "/v1/originals", data=body, method="POST",
                                                     headers={"content-type": "image/png"})
                        with urllib.request.urlopen(req, timeout=30) as r:
                            status = r.status
                            if status in (200, 201):
                                answer = json.loads(r.read())
                                with lock:
                                    uploads[answer["hash"]] = hashlib.sha256(body).hexdigest()
                        what = "upload"
                    else:
                        path = rng.choices(paths, weights)[0]
                        spec = rng.choices([s for s, _ in SPECS], [w for _, w in SPECS])[0]
                        if kind < 0.03:
                            # A change probe: the object replaced with another photo's bytes.
                            other = photos[rng.randrange(len(photos))].read_bytes()
                            origin.set(path, other)
                            what = "probe"
                        else:
                            what = "image"
                        url = origin.base + path
                        query = urllib.parse.urlencode({"url": url}) + "&" + spec
                        with lock:
                            asked.add((path, spec))
                        with urllib.request.urlopen(f"{base}/v1/image?{query}", timeout=60) as r:
                            r.read()
                            status = r.status
                except urllib.error.HTTPError as e:
                    status = e.code
                except Exception:
                    status = 0
                t1 = time.monotonic()
                with lock:
                    records.append((t0 - started, t1 - t0, status, what))

        rss, rss_lock = {i: [] for i in range(NODES)}, threading.Lock()

        def sampler():
            while not stop.is_set():
                t = time.monotonic() - started
                with rss_lock:
                    for i in range(NODES):
                        rss[i].append((round(t, 1), lib.rss_mb(cluster.nodes[i].pid)))
                time.sleep(1)

        def fault(name, action, undo, hold):
            t = time.monotonic() - started
            action()
            time.sleep(hold)
            undo()
            with windows_lock:
                windows.append((t, time.monotonic() - started, name))
            print(f"{t:7.1f}s {name} for {hold}s", flush=True)

        threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(CLIENTS)]
        threads.append(threading.Thread(target=sampler, daemon=True))
        for t in threads:
            t.start()
        schedule = [
            ("node 1 killed", lambda: cluster.nodes[1].send_signal(signal.SIGKILL), lambda: cluster.start(1), STALL_S),
            ("node 2 stalled", lambda: cluster.nodes[2].send_signal(signal.SIGSTOP),
             lambda: cluster.nodes[2].send_signal(signal.SIGCONT), STALL_S),
            ("PostgreSQL stopped", pg.stop, lambda: pg.start(), OUTAGE_S),
            ("S3 paused", lambda: moto_proc.send_signal(signal.SIGSTOP),
             lambda: moto_proc.send_signal(signal.SIGCONT), OUTAGE_S),
        ]
        step = CYCLE_S / (len(schedule) + 1)
        k = 0
        while time.monotonic() - started < SOAK_SECONDS - step:
            time.sleep(step)
            name, action, undo, hold = schedule[k % len(schedule)]
            fault(name, action, undo, hold)
            k += 1
        remaining = SOAK_SECONDS - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
        stop.set()
        for t in threads:
            t.join(timeout=90)
        end_rss = {i: lib.rss_mb(cluster.nodes[i].pid) for i in range(NODES)}
        time.sleep(IDLE_S)
        idle_rss = {i: lib.rss_mb(cluster.nodes[i].pid) for i in range(NODES)}

        # Every acknowledged upload, from every node, with its own bytes.
        wrong = missing = 0
        for h, digest in uploads.items():
            for i in range(NODES):
                try:
                    with urllib.request.urlopen(f"{cluster.base(i)}/v1/originals/{h}", timeout=30) as r:
                        if hashlib.sha256(r.read()).hexdigest() != digest:
                            wrong += 1
                except Exception:
                    missing += 1
        runs = sum(lib.metric(cluster.base(i), "imgcas_processing_runs_total") or 0 for i in range(NODES))
        downloads = sum(lib.metric(cluster.base(i), "imgcas_origin_downloads_total") or 0 for i in range(NODES))
        verify = subprocess.run([str(binary), "verify"], capture_output=True, text=True,
                                env=dict(os.environ, IMGCAS_DATA_DIR=str(Path(work) / "node0"), **cluster.env))

        outside = [r for r in records if not in_fault(r[0])]
        inside = [r for r in records if in_fault(r[0])]

        def by_status(rs):
            out = {}
            for r in rs:
                out[str(r[2])] = out.get(str(r[2]), 0) + 1
            return out

        s3_pauses = [(a, b) for a, b, n in windows if n == "S3 paused"]
        during_s3 = [r[1] for r in records if any(a <= r[0] <= b for a, b in s3_pauses)]
        peak = {i: max((v for _, v in rss[i] if v), default=None) for i in range(NODES)}
        first = {i: next((v for _, v in rss[i] if v), None) for i in range(NODES)}
        result = dict(
            seconds=SOAK_SECONDS, nodes=NODES, clients=CLIENTS, faults=windows,
            requests=len(records), uploads_acknowledged=len(uploads),
            outside_faults=by_status(outside),
            outside_not_ok=sum(1 for r in outside if r[2] not in (200, 201)),
            inside_faults=by_status(inside),
            slowest_answer_during_s3_pause_s=round(max(during_s3), 2) if during_s3 else None,
            uploads_wrong=wrong, uploads_missing=missing,
            processing_runs=runs, distinct_url_spec_pairs=len(asked), downloads=downloads,
            rss_mb={i: dict(start=first[i], peak=peak[i], end=end_rss[i], idle=idle_rss[i]) for i in range(NODES)},
            verify_exit=verify.returncode, verify_tail=verify.stdout.strip().splitlines()[-1:] if verify.stdout else [],
        )
        print(json.dumps(result, indent=2))
        lib.save("soak", dict(result, rss_samples=rss))
        origin.close()
        pg.stop()


if __name__ == "__main__":
    main()
