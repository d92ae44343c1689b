"""Shared parts of the benchmark scripts: the release binary, servers on loopback ports
(imgcas, nginx, a static origin), wrk runs and their parsing, tables and charts.

Every server binds 127.0.0.1 and every load generator targets it; every loop is bounded in
count or time. Results (JSON and a PNG chart per script) go to bench/results/.
"""

import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PHOTO = ROOT / "testdata" / "exif-orientation" / "Landscape_1.jpg"


def need(*tools):
    missing = [t for t in tools if shutil.which(t) is None and not Path(f"/usr/sbin/{t}").exists()]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: see bench/README.md (apt-get install wrk nginx)")


def build():
    """The release binary (built if needed), or the one IMGCAS_BIN names (a build kept aside,
    so that a long run measures one commit while the tree moves on)."""
    if os.environ.get("IMGCAS_BIN"):
        return Path(os.environ["IMGCAS_BIN"])
    subprocess.run(["cargo", "build", "--release", "-q", "--bin", "imgcas"], cwd=ROOT, check=True)
    return ROOT / "target" / "release" / "imgcas"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, what, timeout=20.0):
    """Waits until something accepts connections on loopback `port` (for servers that answer
    a bare request with an error); returns its base URL."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{what} did not start")
            time.sleep(0.05)


def wait_http(url, timeout=20.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not come up")
        time.sleep(0.05)


class Procs:
    """Child processes, each in a process group of its own, stopped with everything they
    forked (SIGTERM to the group, then SIGKILL) on exit. thumbor's `--processes` workers are
    forks: stopping the parent alone left them listening, idle, after every run."""

    def __init__(self):
        self.children = []

    def start(self, args, **kw):
        p = subprocess.Popen(args, start_new_session=True, **kw)
        self.children.append(p)
        return p

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in reversed(self.children):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            # Whatever of the group outlived the leader (or the leader itself, stuck).
            time.sleep(0.2)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def start_imgcas(procs, binary, data_dir, log_file=None, **env):
    """`imgcas serve` on a free port; returns its base URL and the process. With `log_file`,
    its log (access lines included, at the default level) goes there; else warnings only."""
    port = free_port()
    full_env = dict(os.environ)
    full_env.update(
        IMGCAS_LISTEN=f"127.0.0.1:{port}",
        IMGCAS_DATA_DIR=str(data_dir),
        IMGCAS_LOG="info" if log_file else "warn",
        IMGCAS_ALLOW_PRIVATE_NETWORKS="true",
    )
    full_env.update({k: str(v) for k, v in env.items()})
    stderr = None
    if log_file:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        stderr = open(log_file, "ab")
    p = procs.start([str(binary), "serve"], env=full_env, stdout=subprocess.DEVNULL, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthz")
    return base, p


def start_thumbor(procs, work, settings, processes=1, port=None):
    """thumbor (PyPI, PIL engine) on a free loopback port, loading sources over HTTP from
    127.0.0.1 only, with `settings` (thumbor.conf lines) added, on `port` if given; returns its
    base URL."""
    conf = work / "thumbor.conf"
    conf.write_text(
        "LOADER = 'thumbor.loaders.http_loader'\n"
        "ALLOWED_SOURCES = ['127.0.0.1']\n"
        "ENGINE = 'thumbor.engines.pil'\n" + "".join(f"{line}\n" for line in settings)
    )
    thumbor = shutil.which("thumbor") or os.path.join(os.path.dirname(sys.executable), "thumbor")
    port = port or free_port()
    procs.start(
        [thumbor, "-i", "127.0.0.1", "-p", str(port), "-c", str(conf), "-l", "error", "--processes", str(processes)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/healthcheck", timeout=60)
    return base


def nginx_binary():
    return shutil.which("nginx") or "/usr/sbin/nginx"


def start_nginx(procs, workdir, server_block, access_log=False):
    """nginx in the foreground with one `server { }` (containing `listen {port}`). With
    `access_log`, it logs every request to a file through a 64 KB buffer (flushed each
    second), nginx's own way of keeping the write off the request."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    user = "user root;\n" if os.geteuid() == 0 else ""
    access = f"access_log {workdir}/access.log combined buffer=64k flush=1s;" if access_log else "access_log off;"
    conf = (
        f"{user}daemon off;\nworker_processes auto;\npid {workdir}/nginx.pid;\n"
        f"error_log {workdir}/error.log warn;\nevents {{ worker_connections 1024; }}\n"
        f"http {{\n {access}\n client_body_temp_path {workdir}/client;\n"
        f" proxy_temp_path {workdir}/proxy;\n fastcgi_temp_path {workdir}/fcgi;\n"
        f" uwsgi_temp_path {workdir}/uwsgi;\n scgi_temp_path {workdir}/scgi;\n"
        f" {server_block.replace('{port}', str(port))}\n}}\n"
    )
    (workdir / "nginx.conf").write_text(conf)
    procs.start(
        [nginx_binary(), "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-e", str(workdir / "error.log")],
        stdout=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return base
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit("nginx did not start: " + (workdir / "error.log").read_text())
            time.sleep(0.05)


def serve_static(procs, work, body, name="variant.jpg", access_log=False):
    """nginx serving `body` as a static file the fast way (sendfile, open-file cache): the
    peer of the hit path. Returns the file's URL."""
    docroot = Path(work) / "www"
    docroot.mkdir(parents=True, exist_ok=True)
    (docroot / name).write_bytes(body)
    base = start_nginx(
        procs,
        Path(work) / "nginx",
        "server { listen 127.0.0.1:{port}; root " + str(docroot) + ";"
        " sendfile on; tcp_nopush on; open_file_cache max=100 inactive=60s;"
        " location / { add_header Cache-Control 'public, max-age=31536000'; } }",
        access_log=access_log,
    )
    return f"{base}/{name}"


def serve_loopback(handler):
    """A threaded HTTP server of `handler` on a free loopback port, serving from a daemon
    thread; returns the server (its port: `server_address[1]`)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class StaticOrigin:
    """A threaded origin on loopback serving bytes by path, with ETag/Last-Modified and 304s.
    `set(path, bytes)` changes what a path serves (a new ETag with it)."""

    def __init__(self):
        self.files = {}
        self.lock = threading.Lock()
        self.requests = 0
        self.full = 0
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                with origin.lock:
                    origin.requests += 1
                    entry = origin.files.get(self.path)
                if entry is None:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body, etag = entry
                if self.headers.get("if-none-match") == etag:
                    self.send_response(304)
                    self.send_header("etag", etag)
                    self.end_headers()
                    return
                with origin.lock:
                    origin.full += 1
                self.send_response(200)
                self.send_header("content-type", "image/jpeg")
                self.send_header("content-length", str(len(body)))
                self.send_header("etag", etag)
                self.end_headers()
                self.wfile.write(body)

        self.server = serve_loopback(Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def set(self, path, body):
        import hashlib

        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        with self.lock:
            self.files[path] = (body, etag)

    def close(self):
        self.server.shutdown()


def photo(binary, megapixels, path, quality=90):
    """A photo-like JPEG of about `megapixels` MP (4:3), made from the test photograph by
    imgcas itself, so no other tool is needed to produce inputs."""
    w = {12: 4000, 24: 5656}[megapixels]
    h = w * 3 // 4
    subprocess.run(
        [str(binary), "process", str(PHOTO), "--spec", f"w={w}&h={h}&fit=fill&enlarge=1&format=jpeg&q={quality}", "-o", str(path)],
        check=True,
        stderr=subprocess.DEVNULL,
    )
    return Path(path)


_LAT = re.compile(r"^\s+(\d+)%\s+([\d.]+)(us|ms|s)\s*$", re.M)


def _ms(value, unit):
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def wrk(url, connections, seconds, threads=2, script=None, headers=()):
    """Runs wrk with --latency; returns req/s, p50/p90/p99 (ms), requests and non-2xx."""
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    for h in headers:
        args += ["-H", h]
    if script:
        args += ["-s", str(script)]
    out = subprocess.run(args + [url], check=True, capture_output=True, text=True).stdout
    lat = {int(p): _ms(v, u) for p, v, u in _LAT.findall(out)}
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": rps,
        "p50": lat.get(50),
        "p90": lat.get(90),
        "p99": lat.get(99),
        "requests": total,
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
    }


def metric(base, name, token=None, **labels):
    """Sum of a Prometheus series from /metrics (label values matched exactly); `token`: the
    admin token, when the server has one."""
    request = urllib.request.Request(base + "/metrics")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    text = urllib.request.urlopen(request).read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        rest = line[len(name):]
        if rest and rest[0] not in "{ ":
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def table(headers, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).rjust(w) for x, w in zip(r, widths))
    print(line(headers))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line(r))


def save(name, data):
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")


def chart(name, title, groups, series, ylabel, notes="", figsize=(8, 4.5)):
    """A grouped bar chart: `series` maps a label to one value per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=figsize, dpi=100)
    n = len(series)
    width = 0.8 / n
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, values, width, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    if notes:
        fig.text(0.01, 0.01, notes, fontsize=8, color="#555")
    fig.tight_layout(rect=(0, 0.04 if notes else 0, 1, 1))
    out = RESULTS / f"{name}.png"
    fig.savefig(out)
    print(f"chart: {out.relative_to(ROOT)}")


def make_progressive(src, dst):
    """`src` made progressive losslessly (`jpegtran -progressive`, the same coefficients, its
    metadata kept) into `dst`; False, with a line on stderr, where jpegtran refused it."""
    made = subprocess.run(["jpegtran", "-progressive", "-copy", "all", "-outfile", str(dst), str(src)])
    if made.returncode != 0:
        print(f"skipped {src}: jpegtran failed", file=sys.stderr)
    return made.returncode == 0


def tempdir(prefix):
    return Path(tempfile.mkdtemp(prefix=f"imgcas-bench-{prefix}-"))


def tiny_png(n):
    """A distinct 16×16 PNG for number `n` (uploads of new originals)."""
    import struct
    import zlib

    raw = b"".join(b"\x00" + bytes(((n >> (8 * (i % 4))) + i * 7 + y) & 255 for i in range(48))
                   for y in range(16))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def rss_mb(pid, field="VmRSS"):
    """A process's resident memory in MB (None once it is gone); `field` picks another line of
    /proc/PID/status: `RssAnon` (what the allocator holds) or `RssFile` (the binary's pages)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def each_on_threads(items, count, work):
    """Calls `work(item)` for every item of `items`, on `count` threads that take the next
    item as they finish one, and waits for them all."""
    pending, lock = iter(items), threading.Lock()

    def worker():
        while True:
            with lock:
                item = next(pending, None)
            if item is None:
                return
            work(item)

    run_threads(worker, count)


def run_threads(target, count):
    """Runs `target` on `count` threads at once and waits for them all."""
    threads = [threading.Thread(target=target) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
