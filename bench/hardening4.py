"""Audit #4's findings measured again against a running node (issue 67), on loopback only:

1. the JPEG XL bomb (testdata/crafted/jxl-flat-7000x7000.jxl, 6.9 KB declaring 7000x7000,
   asked `w=100`): the node's CPU seconds and peak memory for it, under the default settings,
   and with `server.request_timeout=1s` the CPU it burns after its answer;
2. the same after-the-answer CPU for a drawing (300 rectangles painted with one 500-stop
   gradient, `limits.max_cost` raised so it is admitted);
3. the lockout: with the documented budget (`default`: 1,000,000 units a second, 50,000,000
   at once), one anonymous client spends its budget with dear runs by hash (`q=auto:best`
   AVIF); the longest `Retry-After` it gets, whether another client is still served, and what
   a run dearer than the budget refills in `limits.max_budget_wait` gets;
4. the learned factors after hostile runs: honest PNG runs and the JPEG XL bomb's kin (flat
   2000x2000 JPEG XL files, each new bytes) interleaved for `MINUTES`, then the classes'
   factors as `/metrics` reads them.

The node is the binary `IMGCAS_BIN` names (else the release build). Writes
bench/results/hardening4.json (`ONLY_RUNS=1`: the first table alone).
"""

import hashlib
import os
import struct
import sys
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402

ROOT = lib.ROOT
MINUTES = float(os.environ.get("MINUTES", "3"))


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def get(url, headers=None, timeout=120):
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def flat_png(side, rgb):
    raw = b"".join(b"\x00" + bytes(rgb) * side for _ in range(side))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def gradient_svg(rects=300, stops=500):
    stop = "".join(f'<stop offset="{i / stops:.5f}" stop-color="#{(i * 37) % 0xffffff:06x}"/>' for i in range(stops))
    shapes = "".join(f'<rect x="{i % 40}" y="{i % 30}" width="960" height="960" fill="url(#g)"/>' for i in range(rects))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="1000" height="1000"><defs>'
            f'<linearGradient id="g">{stop}</linearGradient></defs>{shapes}</svg>').encode()


def measured(node, url):
    """Asks `url` of the node (process `node`) once: (status, seconds to the answer, the node's
    CPU seconds to the answer, CPU seconds in the 6 s after it, peak MB)."""
    before = cpu_seconds(node.pid)
    t0 = time.monotonic()
    status, _, _ = get(url)
    took = time.monotonic() - t0
    at_answer = cpu_seconds(node.pid)
    time.sleep(6)
    after = cpu_seconds(node.pid)
    peak = lib.rss_mb(node.pid, "VmHWM")
    return status, round(took, 2), round(at_answer - before, 2), round(after - at_answer, 2), peak


def after_answer(binary, source, query, **env):
    """Starts a node with `env`, asks for `source` once, and returns (status, seconds to the
    answer, the node's CPU seconds to the answer, CPU seconds in the 6 s after it, peak MB)."""
    with lib.Procs() as procs:
        base, p = lib.start_imgcas(procs, binary, lib.tempdir("hardening4-"), **env)
        return measured(p, f"{base}/v1/image?url={source}&{query}")


def stored_then_asked(binary, body, query, **env):
    """Uploads `body` to a node with `env` but its request limit, and lets its background work
    on it (facts, fingerprint) end; then asks a node started with `env` on the same data for it by hash
    once: the run alone. Returns what [`after_answer`] does."""
    import json

    data = lib.tempdir("hardening4-")
    storing = {k: v for k, v in env.items() if k != "IMGCAS_REQUEST_TIMEOUT"}
    with lib.Procs() as procs:
        base, p = lib.start_imgcas(procs, binary, data, **storing)
        upload = urllib.request.Request(base + "/v1/originals", data=body,
                                        headers={"content-type": "application/octet-stream"})
        digest = json.loads(urllib.request.urlopen(upload, timeout=120).read())["hash"]
        last = cpu_seconds(p.pid)
        for _ in range(60):
            time.sleep(1)
            now = cpu_seconds(p.pid)
            if now - last < 0.05:
                break
            last = now
    with lib.Procs() as procs:
        base, p = lib.start_imgcas(procs, binary, data, **env)
        time.sleep(1)
        return measured(p, f"{base}/v1/image/{digest}?{query}")


def main():
    binary = lib.build()
    origin = lib.StaticOrigin()
    results = {}
    try:
        bomb = (ROOT / "testdata/crafted/jxl-flat-7000x7000.jxl").read_bytes()
        origin.set("/bomb.jxl", bomb)
        origin.set("/drawing.svg", gradient_svg())
        rows = []
        for name, path, query, env in [
            ("JPEG XL bomb, defaults", "/bomb.jxl", "w=100", {}),
            ("JPEG XL bomb, request_timeout=1s", "/bomb.jxl", "w=101", {"IMGCAS_REQUEST_TIMEOUT": "1s"}),
            ("300 rects of a 500-stop gradient, max_cost raised, request_timeout=1s", "/drawing.svg", "w=1000",
             {"IMGCAS_REQUEST_TIMEOUT": "1s", "IMGCAS_MAX_COST": "1000000000000"}),
        ]:
            status, took, cpu, cpu_after, peak = after_answer(binary, origin.base + path, query, **env)
            rows.append([name, status, took, cpu, cpu_after, peak])
        drawing = gradient_svg()
        for name, body, query, env in [
            ("JPEG XL bomb stored first, its run alone", bomb, "w=100", {}),
            ("JPEG XL bomb stored first, its run alone, request_timeout=1s", bomb, "w=101",
             {"IMGCAS_REQUEST_TIMEOUT": "1s"}),
            ("the drawing stored first, its run alone, max_cost raised, request_timeout=1s", drawing,
             "w=1000", {"IMGCAS_REQUEST_TIMEOUT": "1s", "IMGCAS_MAX_COST": "1000000000000"}),
        ]:
            status, took, cpu, cpu_after, peak = stored_then_asked(binary, body, query, **env)
            rows.append([name, status, took, cpu, cpu_after, peak])
        lib.table(["case", "status", "answer s", "CPU s to answer", "CPU s after", "peak MB"], rows)
        results["runs"] = rows
        if os.environ.get("ONLY_RUNS"):
            lib.save("hardening4-runs", results)
            return

        # The lockout.
        with lib.Procs() as procs:
            base, _ = lib.start_imgcas(
                procs, binary, lib.tempdir("hardening4-"),
                IMGCAS_TENANTS="default=rate=1000000&burst=50000000",
            )
            big = lib.photo(binary, 12, Path(lib.tempdir("hardening4-")) / "big.jpg")
            upload = urllib.request.Request(base + "/v1/originals", data=Path(big).read_bytes(),
                                            headers={"content-type": "image/jpeg"})
            import json
            digest = json.loads(urllib.request.urlopen(upload).read())["hash"]
            longest, statuses = 0, []
            for width in range(400, 1200, 40):
                status, headers, _ = get(f"{base}/v1/image/{digest}?w={width}&format=avif&q=auto:best")
                statuses.append(status)
                if status == 429:
                    longest = max(longest, int(headers.get("Retry-After", headers.get("retry-after", "0"))))
            other, _, _ = get(f"{base}/v1/image/{digest}?w=300", headers={"x-forwarded-for": "198.51.100.7"})
            # (Forwarded is ignored without trusted proxies: the same client.)
            dear, _, body = get(f"{base}/v1/image/{digest}?format=png&lossless=1&w=4000")
            results["lockout"] = {
                "statuses": statuses, "longest_retry_after_s": longest,
                "same_client_forging_xff": other, "dear_run": [dear, body.decode(errors="replace")[:200]],
            }
            print("lockout:", results["lockout"])

        # Learned factors after hostile runs among honest ones.
        with lib.Procs() as procs:
            base, _ = lib.start_imgcas(procs, binary, lib.tempdir("hardening4-"))
            end = time.monotonic() + MINUTES * 60
            i = 0
            cjxl = lib.shutil.which("cjxl")
            while time.monotonic() < end and i < 10_000:
                i += 1
                png = flat_png(1200, (i % 256, 40, 90))
                origin.set(f"/honest{i}.png", png)
                get(f"{base}/v1/image?url={origin.base}/honest{i}.png&w=300&format=png")
                if cjxl and i % 3 == 0:
                    work = Path(lib.tempdir("hardening4-"))
                    (work / "f.png").write_bytes(flat_png(2000, (i % 256, 200, 10)))
                    lib.subprocess.run([cjxl, str(work / "f.png"), str(work / "f.jxl"), "-d", "1"],
                                       capture_output=True, check=True)
                    origin.set(f"/hostile{i}.jxl", (work / "f.jxl").read_bytes())
                    get(f"{base}/v1/image?url={origin.base}/hostile{i}.jxl&w=300&format=png")
            text = urllib.request.urlopen(base + "/metrics").read().decode()
            factors = {
                line.split('class="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("imgcas_cost_class_factor{")
            }
            results["learned"] = {"requests": i, "minutes": MINUTES, "factors": factors}
            print("learned factors after", i, "honest requests (a third with a hostile one):", factors)
    finally:
        origin.close()
    lib.save("hardening4", results)


if __name__ == "__main__":
    main()
