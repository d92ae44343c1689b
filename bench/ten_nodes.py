#!/usr/bin/env python3
"""Ten nodes on one PostgreSQL (its default max_connections, 100) and one bucket (moto), on
this machine, every node's database traffic through a delay proxy of this script's own on
loopback (0 ms, then 1 ms added each way). Reports (issue 34):

- 100 concurrent requests for one new URL and spec, spread over the ten nodes: downloads
  and processing runs in the whole cluster (one each expected), and the answers;
- a takedown on one node while every node is being asked for the content: how long until
  every node answers 451, and any 5xx meanwhile;
- a claim holder killed mid-download (the origin answers slowly): another node takes the
  claim over once it expires, and answers;
- the latency of a new URL, a new spec of it, and a hit by URL on a node that has not seen
  the URL, with 0 and with 1 ms added between node and database (medians of ROUNDS rounds,
  the two delays in turn; half the difference in ms is the round trips);
- 5xx answers over the whole run other than 503 `overloaded`.

PostgreSQL (Debian's package) and moto (pip) are started on loopback ports by the script.
Writes bench/results/ten_nodes.json.
"""

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import lib
from cluster import CORPUS, Postgres, create_bucket, s3_env, start_moto

NODES = 10
ROUNDS = int(os.environ.get("ROUNDS", "9"))
CLAIM_TTL_S = 3
TOKEN = "bench-admin-token-0123456789abcdef"


class DelayProxy:
    """A TCP proxy on loopback that holds every chunk `delay` seconds in each direction
    (kept in order); the delay can be changed while it runs."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.delay = 0.0
        # How long chunks were really held while a delay was set (an event loop's timers
        # are coarser than a millisecond, and the machine is busy): the unit the round
        # trips are counted in.
        self.held = []
        self.port = lib.free_port()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        threading.Thread(target=self._run, args=(ready,), daemon=True).start()
        ready.wait()

    def _run(self, ready):
        asyncio.set_event_loop(self.loop)

        async def start():
            await asyncio.start_server(self._client, "127.0.0.1", self.port)
            ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    async def _pipe(self, reader, writer):
        queue = asyncio.Queue()

        async def deliver():
            while True:
                due, chunk = await queue.get()
                if chunk is None:
                    break
                wait = due - self.loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if self.delay > 0:
                    self.held.append(self.loop.time() - (due - self.delay))
                writer.write(chunk)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(deliver())
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                await queue.put((self.loop.time() + self.delay, chunk))
        except ConnectionError:
            pass
        await queue.put((0, None))
        await sender

    async def _client(self, reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                             return_exceptions=True)


def get(url, timeout=60):
    """(status, headers, body) of a GET; errors are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def image_url(base, source, query):
    return f"{base}/v1/image?url={urllib.parse.quote(source, safe='')}&{query}"


class Answers:
    """Every answer's status, for the 5xx count at the end."""

    def __init__(self):
        self.lock = threading.Lock()
        self.statuses = []
        self.bad = []

    def note(self, status, body):
        with self.lock:
            self.statuses.append(status)
            if status >= 500 and b'"overloaded"' not in body:
                self.bad.append((status, body[:200].decode("utf-8", "replace")))


def concurrent_cold(bases, origin, photo, answers):
    origin.set("/cold.jpg", photo)
    source = origin.base + "/cold.jpg"
    runs0 = sum(lib.metric(b, "imgcas_processing_runs_total", TOKEN) for b in bases)
    downloads0 = sum(lib.metric(b, "imgcas_origin_downloads_total", TOKEN) for b in bases)

    def one(i):
        status, _, body = get(image_url(bases[i % len(bases)], source, "w=320&format=webp"))
        answers.note(status, body)
        return status, body

    with ThreadPoolExecutor(100) as pool:
        got = list(pool.map(one, range(100)))
    ok = [b for s, b in got if s == 200]
    return {
        "requests": 100,
        "ok": len(ok),
        "statuses": sorted({s for s, _ in got}),
        "same_bytes": len(set(ok)) == 1,
        "downloads": int(sum(lib.metric(b, "imgcas_origin_downloads_total", TOKEN) for b in bases) - downloads0),
        "processing_runs": int(sum(lib.metric(b, "imgcas_processing_runs_total", TOKEN) for b in bases) - runs0),
    }


def takedown_everywhere(binary, bases, origin, photo, answers):
    origin.set("/gone.jpg", photo)
    source = origin.base + "/gone.jpg"
    source_hash = None
    for b in bases:
        status, headers, body = get(image_url(b, source, "w=200&format=webp"))
        answers.note(status, body)
        source_hash = headers.get("x-imgcas-source-hash") or headers.get("X-Imgcas-Source-Hash")
    stop, seen = threading.Event(), {}
    during = []

    def load(k):
        while not stop.is_set():
            for url in (image_url(bases[k], source, "w=200&format=webp"),
                        f"{bases[k]}/v1/image/{source_hash}?w=120"):
                status, _, body = get(url)
                answers.note(status, body)
                during.append(status)
                if status == 451 and url.startswith(f"{bases[k]}/v1/image?"):
                    seen.setdefault(k, time.monotonic())

    threads = [threading.Thread(target=load, args=(k,)) for k in range(len(bases))]
    for t in threads:
        t.start()
    time.sleep(0.3)
    started = time.monotonic()
    out = subprocess.run([str(binary), "purge", source_hash, "--server", bases[0], "--admin-token", TOKEN],
                         capture_output=True, text=True, env=dict(os.environ, IMGCAS_LOG="off"))
    deadline = time.monotonic() + 10
    while len(seen) < len(bases) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join()
    return {
        "purge_exit": out.returncode,
        "all_refused_after_s": (max(seen.values()) - started) if len(seen) == len(bases) else None,
        "requests_during": len(during),
        "5xx_during": sum(1 for s in during if s >= 500),
    }


def killed_holder(bases, procs_by_base, origin, photo, answers):
    """The node asked first holds the download's claim while the origin takes 2 s; it is
    killed; a request on another node completes once the claim expires."""
    origin.set("/slow.jpg", photo)
    origin.slow["/slow.jpg"] = 2.0
    source = origin.base + "/slow.jpg"
    victim, survivor = bases[-1], bases[0]
    threading.Thread(target=get, args=(image_url(victim, source, "w=200"),), daemon=True).start()
    deadline = time.monotonic() + 5
    while origin.requests_for("/slow.jpg") == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    procs_by_base[victim].kill()
    procs_by_base[victim].wait()
    killed = time.monotonic()
    status, _, body = get(image_url(survivor, source, "w=200"), timeout=60)
    answers.note(status, body)
    return {"status": status, "answered_after_kill_s": time.monotonic() - killed,
            "claim_ttl_s": CLAIM_TTL_S}


def latencies(bases, origin, photos, proxy, answers):
    """Rounds of (0 ms, 1 ms) in turn, each on bytes never seen (a photo with a trailer of
    its own after the end of the JPEG: the same pixels, another hash), so every new URL is a
    download and a run, on nodes already warm."""
    out = {d: {"new_url": [], "new_spec": [], "hit_other_node": []} for d in (0, 1)}
    for r in range(ROUNDS):
        for delay_ms in (0, 1):
            proxy.delay = delay_ms / 1000.0
            path = f"/lat-{delay_ms}-{r}.jpg"
            origin.set(path, photos[r % len(photos)] + f"imgcas-bench-{delay_ms}-{r}".encode())
            source = origin.base + path
            a, b = bases[r % 4], bases[4 + r % 4]
            for key, base, query in (("new_url", a, "w=160&format=webp"),
                                     ("new_spec", a, "w=180&format=webp"),
                                     ("hit_other_node", b, "w=160&format=webp")):
                t = time.perf_counter()
                status, _, body = get(image_url(base, source, query))
                out[delay_ms][key].append((time.perf_counter() - t) * 1000)
                answers.note(status, body)
                if status != 200:
                    print(f"  {key}: {status} {body[:120]!r}")
            time.sleep(1.2)  # past the nodes' one-second memory of URL entries
    proxy.delay = 0.0
    lat = {f"{d}ms": {k: statistics.median(v) for k, v in keys.items()} for d, keys in out.items()}
    lat["held_ms"] = statistics.mean(proxy.held) * 1000 if proxy.held else None
    return lat


class SlowOrigin(lib.StaticOrigin):
    """The static origin, with paths that answer after a delay, and requests counted by
    path."""

    def __init__(self):
        super().__init__()
        self.slow = {}
        self.by_path = {}
        handler = self.server.RequestHandlerClass
        origin = self
        plain = handler.do_GET

        def do_GET(h):
            with origin.lock:
                origin.by_path[h.path] = origin.by_path.get(h.path, 0) + 1
            if h.path in origin.slow:
                time.sleep(origin.slow[h.path])
            plain(h)

        handler.do_GET = do_GET

    def requests_for(self, path):
        with self.lock:
            return self.by_path.get(path, 0)


def main():
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        raise SystemExit("needs moto[server]: pip install 'moto[server]'")
    binary = lib.build()
    work = lib.tempdir("ten-nodes")
    photos = [p.read_bytes() for p in sorted(CORPUS.glob("*.jpg"))[:12]]
    origin = SlowOrigin()
    answers = Answers()
    pg = None
    result = {}
    try:
        pg = Postgres(work, max_connections=None)
        proxy = DelayProxy(pg.port)
        with lib.Procs() as procs:
            moto = start_moto(procs)
            create_bucket(moto, "bench-ten")
            db = pg.database("bench_ten").replace(f":{pg.port}/", f":{proxy.port}/")
            bases, procs_by_base = [], {}
            for n in range(NODES):
                base, p = lib.start_imgcas(procs, binary, work / f"node-{n}", IMGCAS_MAPS_URL=db,
                                           IMGCAS_NODE_ID=f"node-{n}", IMGCAS_ADMIN_TOKEN=TOKEN,
                                           IMGCAS_CLAIM_TTL=f"{CLAIM_TTL_S}s", **s3_env(moto, "bench-ten"))
                bases.append(base)
                procs_by_base[base] = p
            print("== 100 concurrent cold requests over ten nodes", flush=True)
            result["concurrent_cold"] = concurrent_cold(bases, origin, photos[0], answers)
            print(result["concurrent_cold"], flush=True)
            print("== latency with 0 and 1 ms added each way, in turn", flush=True)
            lat = latencies(bases, origin, photos, proxy, answers)
            result["latency_0ms"], result["latency_1ms"] = lat["0ms"], lat["1ms"]
            result["proxy_held_ms"] = lat["held_ms"]
            print(lat, flush=True)
            print("== a takedown on one node, every node asked meanwhile", flush=True)
            result["takedown"] = takedown_everywhere(binary, bases, origin, photos[1], answers)
            print(result["takedown"], flush=True)
            print("== a claim holder killed mid-download", flush=True)
            result["killed_holder"] = killed_holder(bases, procs_by_base, origin, photos[2], answers)
            print(result["killed_holder"], flush=True)
            connections = pg.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = 'bench_ten'")
            result["connections_at_end"] = int(connections)
    finally:
        if pg:
            pg.stop()
        origin.close()
        shutil.rmtree(work, ignore_errors=True)
    result["answers"] = len(answers.statuses)
    result["overloaded"] = sum(1 for s in answers.statuses if s == 503) - sum(1 for s, _ in answers.bad if s == 503)
    result["other_5xx"] = answers.bad[:20]
    result["other_5xx_count"] = len(answers.bad)
    print(f"\nten nodes, one PostgreSQL (max_connections 100, {os.cpu_count()} cores shared), moto")
    c = result["concurrent_cold"]
    lib.table(("measure", "result"), [
        ("100 concurrent cold requests", f"{c['ok']} × 200, statuses {c['statuses']}, "
                                         f"{c['downloads']} download, {c['processing_runs']} run"),
        ("takedown refused everywhere", f"{result['takedown']['all_refused_after_s']:.2f} s, "
                                        f"{result['takedown']['5xx_during']} 5xx in {result['takedown']['requests_during']}"),
        ("killed claim holder", f"{result['killed_holder']['status']} after "
                                f"{result['killed_holder']['answered_after_kill_s']:.1f} s (TTL {CLAIM_TTL_S} s)"),
        ("5xx other than overloaded", str(result["other_5xx_count"])),
    ])
    rows = []
    for key, name in (("new_url", "a new URL"), ("new_spec", "a new spec of it"),
                      ("hit_other_node", "a hit by URL on another node")):
        z, one = result["latency_0ms"][key], result["latency_1ms"][key]
        held = result["proxy_held_ms"] or 1.0
        rows.append((name, f"{z:.1f} ms", f"{one:.1f} ms", f"{(one - z) / 2 / held:.1f}"))
    lib.table(("latency (median)", "0 ms added", "1 ms each way", "≈ round trips"), rows)
    print(f"(a chunk set to wait 1 ms was held {result['proxy_held_ms']:.2f} ms on average; "
          "round trips = the difference / 2 / that)")
    lib.save("ten_nodes", result)


if __name__ == "__main__":
    main()
