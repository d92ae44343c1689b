#!/usr/bin/env python3
"""Ten nodes on one PostgreSQL and one bucket (moto), polite to one merchant's origin as a
cluster (issue 54). Reports:

- slots and rate: SLOW_URLS distinct URLs of one slow origin (200 ms an answer) requested at
  once through the ten nodes, then as many of a fast one (the same origin, answering at once): the origin's most requests in flight at once (against
  `fetch.per_host_concurrency`, 8) and its most requests within any second (against
  `fetch.per_host_rate` + its burst, 100 + 100), and how long the batch took;
- a pause: the origin answers one URL `429` with `Retry-After: 5`; for the next 5 s every node
  is asked for other URLs of that origin: requests that reached the origin meanwhile (0
  expected), and that it is asked again once the pause is over;
- a refusing origin (a listener that accepts and closes at once): one URL asked on every node
  every 100 ms for 10 s: connections it received (the backoff's steps, 1 + 2 + 4 s…, not
  ten nodes' worth);
- hot keys: a variant stored by node 0, then 200 concurrent requests for it spread over nodes
  1-9, which never served it: reads of its object from the bucket per node (at most 1);
- the cost model: a mixed workload of real photos (JPEG, WebP, AVIF, PNG, q=auto) on one
  node: the learned estimate's error of the runs' time against the fixed one (the plan's
  cost at the average rate), both recorded by the service for the same runs.

PostgreSQL (Debian's package) and moto (pip) are started on loopback ports by the script.
PARTS=slots,rate,pause,refusing,hot,cost picks the parts (all by default; `cost` alone starts
one node); COST_LOG=<file> writes node 0's log of each run's class, cost and time there.
Writes bench/results/politeness.json.
"""

import json
import os
import random
import shutil
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lib
from cluster import CORPUS, Postgres, create_bucket, s3_env, start_moto

NODES = 10
SLOW_URLS = int(os.environ.get("SLOW_URLS", "500"))
SLOW_S = 0.2
PAUSE_S = 5
REFUSING_S = 10
MIXED_RUNS = int(os.environ.get("MIXED_RUNS", "120"))


class Origin:
    """A threaded loopback origin: `/slow/…` answers the photo after SLOW_S, `/limited/…`
    answers 429 with `Retry-After`; every arrival's time and the concurrency are recorded."""

    def __init__(self, body):
        self.body = body
        self.lock = threading.Lock()
        self.arrivals = []
        self.in_flight = 0
        self.most_in_flight = 0
        origin = self

        class Handler(lib.http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                with origin.lock:
                    origin.arrivals.append(time.monotonic())
                    origin.in_flight += 1
                    origin.most_in_flight = max(origin.most_in_flight, origin.in_flight)
                try:
                    if self.path.startswith("/limited/"):
                        self.send_response(429)
                        self.send_header("retry-after", str(PAUSE_S))
                        self.send_header("content-length", "0")
                        self.end_headers()
                        return
                    if not self.path.startswith("/fast/"):
                        time.sleep(SLOW_S)
                    self.send_response(200)
                    self.send_header("content-type", "image/jpeg")
                    self.send_header("content-length", str(len(origin.body)))
                    self.send_header("etag", '"' + self.path.replace("/", "-") + '"')
                    self.end_headers()
                    self.wfile.write(origin.body)
                finally:
                    with origin.lock:
                        origin.in_flight -= 1

        self.server = lib.serve_loopback(Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def most_within(self, seconds, since=0.0):
        with self.lock:
            times = [t for t in self.arrivals if t >= since]
        best, j = 0, 0
        for i in range(len(times)):
            while times[i] - times[j] >= seconds:
                j += 1
            best = max(best, i - j + 1)
        return best

    def arrived(self, start, end=None):
        with self.lock:
            return sum(1 for t in self.arrivals if t >= start and (end is None or t < end))


class Refusing:
    """Accepts every connection and closes it at once: each attempt is counted."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


def get(url, timeout=60):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            r.read()
            return r.status
    except urllib.error.HTTPError as e:
        e.read()
        return e.code


def image_url(base, source, query):
    return f"{base}/v1/image?url={urllib.parse.quote(source, safe='')}&{query}"


def slots_and_rate(bases, origin, kind="slow"):
    sources = [f"{origin.base}/{kind}/{i}.jpg" for i in range(SLOW_URLS)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=100) as pool:
        statuses = list(pool.map(lambda ix: get(image_url(bases[ix[0] % NODES], ix[1], "w=64")),
                                 enumerate(sources)))
    took = time.monotonic() - started
    return {
        "origin": kind,
        "urls": SLOW_URLS,
        "answers_200": statuses.count(200),
        "origin_requests": origin.arrived(started),
        "most_in_flight": origin.most_in_flight,
        "per_host_concurrency": 8,
        "most_within_1s": origin.most_within(1.0, since=started),
        "per_host_rate_plus_burst": 200,
        "seconds": round(took, 2),
    }


def pause(bases, origin):
    assert get(image_url(bases[0], f"{origin.base}/limited/0.jpg", "w=64")) == 502
    answered = time.monotonic()
    asked, statuses = 0, []
    i = 0
    while time.monotonic() - answered < PAUSE_S - 0.3:
        i += 1
        statuses.append(get(image_url(bases[i % NODES], f"{origin.base}/slow/p{i}.jpg", "w=64")))
        asked += 1
        time.sleep(0.05)
    reached_during = origin.arrived(answered + 0.001, answered + PAUSE_S - 0.3)
    time.sleep(max(0.0, PAUSE_S + 0.3 - (time.monotonic() - answered)))
    after = get(image_url(bases[1], f"{origin.base}/slow/after.jpg", "w=64"))
    return {
        "retry_after_s": PAUSE_S,
        "requests_during_pause": asked,
        "answered_502": statuses.count(502),
        "reached_origin_during_pause": reached_during,
        "after_pause_status": after,
    }


def refusing(bases):
    target = Refusing()
    source = f"http://127.0.0.1:{target.port}/gone.jpg"
    started = time.monotonic()
    asked = 0

    def node_loop(base):
        nonlocal asked
        while time.monotonic() - started < REFUSING_S:
            get(image_url(base, source, "w=64"))
            asked += 1
            time.sleep(0.1)

    with ThreadPoolExecutor(max_workers=NODES) as pool:
        list(pool.map(node_loop, bases))
    # The held failure's steps: 1, 2, 4, 8 s after each try (negative.rs).
    steps, t, step = 0, 0.0, 1.0
    while t < REFUSING_S:
        steps += 1
        t += step
        step = min(step * 2, 60.0)
    return {
        "seconds": REFUSING_S,
        "nodes": NODES,
        "requests": asked,
        "origin_connections": target.accepted,
        "backoff_steps": steps,
    }


def hot_keys(bases, origin, body):
    source = f"{origin.base}/slow/hot.jpg"
    assert get(image_url(bases[0], source, "w=200&format=webp")) == 200
    before = [lib.metric(b, "imgcas_variant_object_reads_total") for b in bases]
    with ThreadPoolExecutor(max_workers=200) as pool:
        statuses = list(pool.map(lambda i: get(image_url(bases[1 + i % (NODES - 1)], source, "w=200&format=webp")),
                                 range(200)))
    reads = [lib.metric(b, "imgcas_variant_object_reads_total") - before[i] for i, b in enumerate(bases)]
    return {
        "requests": 200,
        "answers_200": statuses.count(200),
        "object_reads_per_node": reads[1:],
        "most_reads_on_a_node": max(reads[1:]),
    }


def cost_model(base, work):
    first = int(os.environ.get("PHOTOS_FROM", "0"))
    photos = sorted(CORPUS.glob("*.jpg"))[first:first + 40]
    origin = lib.StaticOrigin()
    for i, p in enumerate(photos):
        origin.set(f"/m/{i}.jpg", p.read_bytes())
    specs = ["w=400&format=jpeg", "w=400&format=webp", "w=400&format=avif", "w=300&format=png",
             "w=400&format=webp&q=auto", "w=640&format=jpeg", "w=200&format=avif"]
    rng = random.Random(int(os.environ.get("SEED", "54")))
    jobs = [(rng.randrange(len(photos)), spec, k) for k, spec in
            enumerate(rng.choice(specs) for _ in range(MIXED_RUNS))]
    statuses = []
    for i, spec, k in jobs:
        # A distinct width each time: every request is a run.
        statuses.append(get(image_url(base, f"{origin.base}/m/{i}.jpg", f"{spec}&h={100 + k}&fit=cover")))
    learned = lib.metric(base, "imgcas_run_estimate_error_milliseconds_total", model="learned")
    fixed = lib.metric(base, "imgcas_run_estimate_error_milliseconds_total", model="fixed")
    measured = lib.metric(base, "imgcas_run_measured_milliseconds_total")
    runs = lib.metric(base, "imgcas_run_estimates_total")
    origin.close()
    return {
        "runs": runs,
        "answers_200": statuses.count(200),
        "measured_ms": measured,
        "learned_error_ms": learned,
        "fixed_error_ms": fixed,
        "learned_relative_error": round(learned / measured, 3) if measured else None,
        "fixed_relative_error": round(fixed / measured, 3) if measured else None,
        "learned_over_fixed": round(learned / fixed, 3) if fixed else None,
    }


def main():
    binary = lib.build()
    work = Path(lib.tempdir("imgcas-politeness-"))
    results = {}
    try:
        with lib.Procs() as procs:
            pg = Postgres(work)
            moto = start_moto(procs)
            create_bucket(moto, "politeness")
            maps = pg.database("politeness")
            body = sorted(CORPUS.glob("*.jpg"))[0].read_bytes()
            origin = Origin(body)
            bases = []
            parts = os.environ.get("PARTS", "slots,rate,pause,refusing,hot,cost").split(",")
            for n in range(NODES if parts != ["cost"] else 1):
                extra = {}
                if n == 0 and os.environ.get("COST_LOG"):
                    # Each run's class, cost and time, for a look at the model offline.
                    extra = dict(log_file=os.environ["COST_LOG"], IMGCAS_LOG="warn,imgcas::cost=debug")
                base, _ = lib.start_imgcas(procs, binary, work / f"node{n}", IMGCAS_MAPS_URL=maps,
                                           IMGCAS_NODE_ID=f"node-{n}", **s3_env(moto, "politeness"), **extra)
                bases.append(base)
            steps = [
                ("slots", "slots_and_rate", lambda: slots_and_rate(bases, origin)),
                # The same on an origin that answers at once: the rate is what holds it then.
                ("rate", "rate", lambda: slots_and_rate(bases, origin, "fast")),
                ("pause", "pause", lambda: pause(bases, origin)),
                ("refusing", "refusing", lambda: refusing(bases)),
                ("hot", "hot_keys", lambda: hot_keys(bases, origin, body)),
                ("cost", "cost_model", lambda: cost_model(bases[0], work)),
            ]
            for part, name, run in steps:
                if part in parts:
                    results[name] = run()
                    print(f"{name}:", results[name], flush=True)
            pg.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lib.save("politeness", results)


if __name__ == "__main__":
    main()
