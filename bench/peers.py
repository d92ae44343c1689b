#!/usr/bin/env python3
"""Peers: imgcas against ipx 3 (sharp/libvips, npm) and thumbor (Pillow, PyPI) in the shape of
imgproxy's own benchmark harness (imgproxy/image-servers-benchmark): two clients, every
request fits its source inside 512×512, JPEG q80 progressive / WebP q75 / AVIF q65, and every
request is a processing run.

All three servers fetch from one loopback origin, which serves each photo of a set under
endless distinct URLs (`/u/<run>-<n>/<name>`), each with distinct bytes (a counter appended
after the picture's end, which decoders ignore): no server can answer from a cache, and imgcas
(by URL, with a fresh data dir per set and format) downloads, hashes and stores a new original
for every request, as a marketplace's endless new merchant URLs make it do.

Sets (photos real, never synthetic):
- `photos`: JPEGs of `../shared/corpus/photos` (1–2 MP, mostly baseline);
- `large`: large progressive JPEGs, made losslessly with `jpegtran -progressive` from the
  largest photos of `../shared/corpus` and from every JPEG in `LARGE_PHOTOS` (a folder of
  12 MP+ camera photos, when given);
- `png`, `webp`: the `photos` set converted (libvips; WebP at q90).

Per set and output format: req/s, p50 and p95 (wrk, one thread, 2 connections, PHASE
seconds after a warm-up), and, over SAMPLES photos of the set (every photo by default: on
six, a 0.02 dB difference between two engines was chance, one way on six photos and the
other way on forty), the output's bytes and its PSNR against a reference made with no
shortcut (the source decoded at full size by libvips, Lanczos3 in float to the output's size).
Writes bench/results/peers.{json,png}.

Peers install into ignored folders, never into the project: ipx with npm into
bench/.peers/ipx; thumbor and pyvips are bench/requirements.txt (bench/.venv). ipx has no
progressive JPEG option: its JPEGs are baseline (cheaper to write).

`IMGCAS_PREV_BIN` adds the engine `imgcas_prev`: an earlier build of imgcas, run as imgcas is,
in the same run (a renovation's "no slower than before"); such a run is written to
bench/results/peers-vs-previous.json, leaving the published peers.json as it is.

`--report` prints the table and draws the chart again from bench/results/peers.json.

Env: PHASE (seconds per run, default 15), SETS (default `photos,large,png,webp`), FORMATS
(default `jpeg,webp,avif`), ENGINES (default `imgcas,ipx,thumbor`), PHOTOS (photos per set,
default 40), SAMPLES (PSNR samples per set, default all), LARGE_PHOTOS (folder, optional).
"""

import http.server
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import lib

PHASE = int(os.environ.get("PHASE", "15"))
WARMUP = 3
CLIENTS = 2
SETS = os.environ.get("SETS", "photos,large,png,webp").split(",")
FORMATS = os.environ.get("FORMATS", "jpeg,webp,avif").split(",")
ENGINES = os.environ.get("ENGINES", "imgcas,ipx,thumbor").split(",")
PREV_BIN = os.environ.get("IMGCAS_PREV_BIN")
if PREV_BIN and "imgcas_prev" not in ENGINES:
    ENGINES.append("imgcas_prev")
PHOTOS = int(os.environ.get("PHOTOS", "40"))
SAMPLES = int(os.environ.get("SAMPLES", "0")) or None
QUALITY = {"jpeg": 80, "webp": 75, "avif": 65}
BOX = 512
CORPUS = lib.ROOT.parent / "shared" / "corpus"
# The largest photographs of the shared corpus (6–8 MP).
LARGEST = [
    "sharp-fixtures/photos/gain-map.jpg",
    "avif/Link-U/hato.jpg",
    "sharp-fixtures/photos/2569067123_aca715a2ee_o.jpg",
]
IPX_DIR = lib.ROOT / "bench" / ".peers" / "ipx"
CONTENT_TYPES = {".jpg": "image/jpeg", ".png": "image/png", ".webp": "image/webp"}


class UniqueOrigin:
    """A threaded origin on loopback: `/u/<anything>/<name>` is the file `name` of the set
    with `<anything>` appended after the picture's end, so each URL has bytes of its own."""

    def __init__(self):
        self.files = {}
        origin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = self.path.split("/")
                body = origin.files.get(parts[-1]) if len(parts) == 4 and parts[1] == "u" else None
                if body is None:
                    self.send_response(404)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                body = body + b"\0" + parts[2].encode()
                self.send_response(200)
                self.send_header("content-type", CONTENT_TYPES.get(Path(parts[-1]).suffix, "application/octet-stream"))
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = lib.serve_loopback(Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"


def install_ipx():
    """ipx 3 from npm into bench/.peers/ipx (sharp brings libvips prebuilt)."""
    binary = IPX_DIR / "node_modules" / ".bin" / "ipx"
    if not binary.exists():
        IPX_DIR.mkdir(parents=True, exist_ok=True)
        (IPX_DIR / "package.json").write_text('{"private": true}\n')
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "ipx@3"], cwd=IPX_DIR, check=True)
    return binary


def make_sets(work, pyvips):
    """name -> list of (file name, bytes)."""
    photos = sorted(p for p in (CORPUS / "photos").glob("*.jpg"))[:PHOTOS]
    sets = {}
    if "photos" in SETS:
        sets["photos"] = [(p.name, p.read_bytes()) for p in photos]
    if "large" in SETS:
        sources = [CORPUS / p for p in LARGEST]
        if os.environ.get("LARGE_PHOTOS"):
            sources += sorted(Path(os.environ["LARGE_PHOTOS"]).glob("*.[jJ][pP][gG]"))
        large = []
        for i, src in enumerate(sources):
            out = work / f"large-{i}.jpg"
            if not lib.make_progressive(src, out):
                continue
            large.append((f"large-{i}.jpg", out.read_bytes()))
        sets["large"] = large
    for kind in ("png", "webp"):
        if kind not in SETS:
            continue
        converted = []
        for p in photos:
            image = pyvips.Image.new_from_file(str(p), access="sequential")
            data = image.pngsave_buffer() if kind == "png" else image.webpsave_buffer(Q=90)
            converted.append((p.stem + "." + kind, data))
        sets[kind] = converted
    return sets


def imgcas_path(origin, fmt):
    q = QUALITY[fmt]
    extra = "&progressive=1" if fmt == "jpeg" else ""
    return lambda key, name: (
        "/v1/image?url=" + urllib.parse.quote(f"http://{origin}/u/{key}/{name}", safe="")
        + f"&w={BOX}&h={BOX}&format={fmt}&q={q}{extra}"
    )


def thumbor_path(origin, fmt):
    q = QUALITY[fmt]
    return lambda key, name: f"/unsafe/fit-in/{BOX}x{BOX}/filters:format({fmt}):quality({q})/{origin}/u/{key}/{name}"


def ipx_path(origin, fmt):
    q = QUALITY[fmt]
    return lambda key, name: f"/f_{fmt},q_{q},fit_inside,s_{BOX}x{BOX}/http://{origin}/u/{key}/{name}"


def lua_script(path, run, names, make_path):
    """wrk requests walking the set's photos under ever new keys `<run>-<n>`."""
    # The path template with placeholders for key and name, built by the engine's own function.
    template = make_path("KEY", "NAME")
    lines = ["local names = {" + ",".join(json.dumps(n) for n in names) + "}", "local n = 0",
             "function request()", "  n = n + 1",
             "  local name = names[(n % #names) + 1]",
             f"  local path = string.gsub(string.gsub({json.dumps(template)}, 'KEY', '{run}-' .. n), 'NAME', name)",
             "  return wrk.format('GET', path)", "end",
             "function done(summary, latency, requests)",
             "  io.write(string.format('P95_US %d\\n', latency:percentile(95)))",
             "  io.write(string.format('ERRORS %d\\n', summary.errors.status))",
             "end"]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_wrk(base, script, seconds):
    out = subprocess.run(
        ["wrk", "-t1", f"-c{CLIENTS}", f"-d{seconds}s", "--latency", "--timeout", "30s", "-s", str(script), base],
        check=True, capture_output=True, text=True,
    ).stdout
    lat = {int(p): lib._ms(v, u) for p, v, u in lib._LAT.findall(out)}
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50_ms": lat.get(50),
        "p95_ms": int(re.search(r"P95_US (\d+)", out).group(1)) / 1000.0,
        "requests": int(re.search(r"(\d+) requests in", out).group(1)),
        "errors": int(re.search(r"ERRORS (\d+)", out).group(1)),
    }


def psnr(reference, output):
    a, b = reference.cast("float"), output.cast("float")
    if a.bands != b.bands:
        a, b = a[:3], b[:3]
    mse = ((a - b) ** 2).avg()
    return 10 * math.log10(255 * 255 / mse) if mse > 0 else 99.0


def quality(pyvips, base, make_path, files, run):
    """Mean output bytes and PSNR over the sampled photos (one request each)."""
    sizes, scores = [], []
    for i, (name, data) in enumerate(files):
        with urllib.request.urlopen(base + make_path(f"{run}-q{i}", name), timeout=60) as r:
            body = r.read()
        out = pyvips.Image.new_from_buffer(body, "").colourspace("srgb")
        full = pyvips.Image.new_from_buffer(data, "").autorot().colourspace("srgb")
        if full.hasalpha():
            full = full.flatten(background=[255, 255, 255])
        if out.hasalpha():
            out = out.flatten(background=[255, 255, 255])
        reference = full.cast("float").resize(out.width / full.width, vscale=out.height / full.height, kernel="lanczos3")
        sizes.append(len(body))
        scores.append(psnr(reference, out))
    return sum(sizes) / len(sizes), sum(scores) / len(scores)


def start_thumbor(procs, work):
    return lib.start_thumbor(procs, work, [
        "STORAGE = 'thumbor.storages.no_storage'",
        "RESULT_STORAGE = None",
        "PROGRESSIVE_JPEG = True",
        "PILLOW_RESAMPLING_FILTER = 'LANCZOS'",
        "AVIF_SPEED = 8",
    ], processes=os.cpu_count() or 2)


def start_ipx(procs, binary):
    port = lib.free_port()
    procs.start(
        [str(binary), "serve", "--host", "127.0.0.1", "--port", str(port), "--domains", "127.0.0.1"],
        cwd=IPX_DIR, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=dict(os.environ, IPX_HTTP_DOMAINS="127.0.0.1"),
    )
    # ipx answers 400 to a path without modifiers: wait for its port instead.
    return lib.wait_port(port, "ipx", timeout=30)


def main():
    lib.need("wrk", "jpegtran")
    import pyvips

    binary = lib.build()
    ipx_binary = install_ipx() if "ipx" in ENGINES else None
    work = lib.tempdir("peers")
    origin = UniqueOrigin()
    sets = make_sets(work, pyvips)
    results = []
    run = 0
    with lib.Procs() as procs:
        bases = {}
        if "thumbor" in ENGINES:
            bases["thumbor"] = start_thumbor(procs, work)
        if "ipx" in ENGINES:
            bases["ipx"] = start_ipx(procs, ipx_binary)
        for set_name, files in sets.items():
            for name, data in files:
                origin.files[name] = data
            names = [n for n, _ in files]
            samples = files[:: max(1, len(files) // SAMPLES)][:SAMPLES] if SAMPLES else files
            for fmt in FORMATS:
                for engine in ENGINES:
                    make_path = {"imgcas": imgcas_path, "imgcas_prev": imgcas_path, "thumbor": thumbor_path,
                                 "ipx": ipx_path}[engine](origin.host, fmt)
                    imgcas_proc = None
                    if engine.startswith("imgcas"):
                        # A fresh data dir per set and format: every request stores a new original.
                        build = Path(PREV_BIN) if engine == "imgcas_prev" else binary
                        base, imgcas_proc = lib.start_imgcas(procs, build, work / f"data-{set_name}-{fmt}")
                    else:
                        base = bases[engine]
                    run += 1
                    warm = lua_script(work / "warm.lua", f"w{run}", names, make_path)
                    run_wrk(base, warm, WARMUP)
                    script = lua_script(work / "run.lua", f"r{run}", names, make_path)
                    measured = run_wrk(base, script, PHASE)
                    out_bytes, score = quality(pyvips, base, make_path, samples, f"q{run}")
                    row = {"set": set_name, "format": fmt, "engine": engine, **measured,
                           "out_bytes": round(out_bytes), "psnr_db": round(score, 2)}
                    results.append(row)
                    print(json.dumps(row), flush=True)
                    if imgcas_proc is not None:
                        imgcas_proc.terminate()
                        imgcas_proc.wait(timeout=30)
                        shutil.rmtree(work / f"data-{set_name}-{fmt}", ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    lib.save("peers-vs-previous" if PREV_BIN else "peers", {"phase_s": PHASE, "clients": CLIENTS, "box": BOX, "quality": QUALITY, "results": results})
    report(results)


def report(results):
    by = {(r["set"], r["format"], r["engine"]): r for r in results}
    cells = sorted({(r["set"], r["format"]) for r in results}, key=lambda c: (SETS.index(c[0]), FORMATS.index(c[1])))
    rows = []
    for s, f in cells:
        row = [f"{s} -> {f}"]
        against = ["imgcas_prev"] if PREV_BIN else [e for e in ENGINES if e != "imgcas"]
        best_peer = max((by[(s, f, e)]["rps"] for e in against if (s, f, e) in by), default=None)
        for e in ENGINES:
            r = by.get((s, f, e))
            row.append(f"{r['rps']:.1f} / {r['p95_ms']:.0f} ms / {r['out_bytes'] / 1000:.1f} KB / {r['psnr_db']:.2f} dB" if r else "-")
        mine = by.get((s, f, "imgcas"))
        row.append(f"{mine['rps'] / best_peer:.2f}x" if mine and best_peer else "-")
        rows.append(row)
    print()
    lib.table(["set -> output"] + [f"{e}: req/s / p95 / bytes / PSNR" for e in ENGINES] + [("imgcas / imgcas_prev" if PREV_BIN else "imgcas / faster peer")], rows)
    lib.chart(
        "peers-vs-previous" if PREV_BIN else "peers",
        f"imgproxy's benchmark shape: fit {BOX}x{BOX}, {CLIENTS} clients, every request a new original",
        [f"{s}\n{f}" for s, f in cells],
        {e: [by[(s, f, e)]["rps"] if (s, f, e) in by else 0 for s, f in cells] for e in ENGINES},
        "requests / s (higher is better)",
        notes="ipx's JPEGs are baseline (it has no progressive option); imgcas's and thumbor's progressive",
        figsize=(13, 5),
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--report"]:
        # The table and chart again from the last run's JSON.
        report(json.loads((lib.RESULTS / "peers.json").read_text())["results"])
    else:
        main()
