#!/usr/bin/env python3
"""Cold path: every request a new spec (never a cache hit) on 12 MP and 24 MP JPEGs.

- imgcas over HTTP (`/v1/image?url=…&w=N&format=jpeg&q=80`, the source fetched once from a
  loopback origin, as any original would be);
- thumbor over HTTP (PyPI, PIL engine, `--processes` = cores, ALLOWED_SOURCES = 127.0.0.1, no
  result storage; its file storage keeps the source after the first fetch, like imgcas);
- pyvips in-process (`thumbnail_buffer` + `jpegsave_buffer`, one thread per core): libvips
  with no HTTP or storage around it, the floor a service could approach.

Widths walk 200, 201, … so no two requests share a spec. wrk runs with one thread and
2 x cores connections for PHASE seconds per engine and photo. Also the PSNR of each engine's
800 px output against a full-decode Lanczos3 reference (libvips, no shrink-on-load), and its
size. Writes bench/results/cold-path.{json,png}.

Env: PHASE (seconds per run, default 15).
"""

import os
import statistics
import shutil
import sys
import threading
import time
import urllib.parse
import urllib.request

import lib

PHASE = int(os.environ.get("PHASE", "15"))
CORES = os.cpu_count() or 2
CONNECTIONS = 2 * CORES


def unique_width_script(path, template):
    """A wrk script whose requests walk widths 200, 201, … (one wrk thread: one counter)."""
    path.write_text(
        "local n = 0\n"
        "function request()\n"
        "  n = n + 1\n"
        f"  return wrk.format('GET', string.format('{template}', 200 + n % 3000))\n"
        "end\n"
    )
    return path


def psnr(pyvips, reference, output_bytes):
    out = pyvips.Image.new_from_buffer(output_bytes, "")
    w, h = min(out.width, reference.width), min(out.height, reference.height)
    a = reference.crop(0, 0, w, h).cast("float")
    b = out.crop(0, 0, w, h).cast("float")
    mse = ((a - b) ** 2).avg()
    import math

    return 10 * math.log10(255 * 255 / mse) if mse > 0 else float("inf")


def start_thumbor(procs, work, port=None):
    return lib.start_thumbor(procs, work, [
        f"FILE_STORAGE_ROOT_PATH = '{work / 'thumbor-storage'}'",
        "RESULT_STORAGE = None",
        "QUALITY = 80",
    ], processes=CORES, port=port)


def pyvips_run(pyvips, source, seconds):
    """One thumbnail+encode per iteration, one thread per core, for `seconds`."""
    latencies = []
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    counter = iter(range(200, 10**9))

    def worker():
        while time.monotonic() < deadline:
            with lock:
                w = next(counter)
            t = time.perf_counter()
            img = pyvips.Image.thumbnail_buffer(source, 200 + w % 3000)
            img.jpegsave_buffer(Q=80)
            with lock:
                latencies.append((time.perf_counter() - t) * 1000)

    started = time.monotonic()
    lib.run_threads(worker, CORES)
    elapsed = time.monotonic() - started
    q = statistics.quantiles(latencies, n=100)
    return {"rps": len(latencies) / elapsed, "p50": q[49], "p90": q[89], "p99": q[98], "requests": len(latencies), "non2xx": 0}


def main():
    lib.need("wrk")
    try:
        import pyvips
    except ImportError:
        sys.exit("pyvips missing: pip install -r bench/requirements.txt (see bench/README.md)")
    binary = lib.build()
    work = lib.tempdir("cold")
    results = {}
    quality = {}
    try:
        photos = {f"{mp} MP": lib.photo(binary, mp, work / f"{mp}mp.jpg") for mp in (12, 24)}
        origin = lib.StaticOrigin()
        for label, path in photos.items():
            origin.set("/" + path.name, path.read_bytes())
        with lib.Procs() as procs:
            imgcas, _ = lib.start_imgcas(procs, binary, work / "data")
            thumbor = start_thumbor(procs, work)
            for label, path in photos.items():
                source_url = origin.base + "/" + path.name
                quoted = urllib.parse.quote(source_url, safe="")
                templates = {
                    "imgcas": (imgcas, f"/v1/image?url={quoted}&w=%d&format=jpeg&q=80"),
                    "thumbor": (thumbor, f"/unsafe/%dx0/127.0.0.1:{origin.base.rsplit(':', 1)[1]}/{path.name}"),
                }
                src = path.read_bytes()
                ref_full = pyvips.Image.new_from_buffer(src, "")
                reference = ref_full.resize(800 / ref_full.width, vscale=600 / ref_full.height, kernel="lanczos3")
                for engine, (base, template) in templates.items():
                    # First request fetches the source (not measured); the 800 px one is kept
                    # for the quality figures.
                    body = urllib.request.urlopen(base + template.replace("%d", "800"), timeout=120).read()
                    quality[(label, engine)] = (psnr(pyvips, reference, body), len(body))
                    script = unique_width_script(work / f"{engine}.lua", template.replace("%", "%%").replace("%%d", "%d"))
                    print(f"== {label} {engine}: {PHASE} s", flush=True)
                    results[(label, engine)] = lib.wrk(base + "/", CONNECTIONS, PHASE, threads=1, script=script)
                body = pyvips.Image.thumbnail_buffer(src, 800).jpegsave_buffer(Q=80)
                quality[(label, "pyvips")] = (psnr(pyvips, reference, body), len(body))
                print(f"== {label} pyvips in-process: {PHASE} s", flush=True)
                results[(label, "pyvips")] = pyvips_run(pyvips, src, PHASE)
        origin.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"\ncold path: unique specs, JPEG q80 out, {CONNECTIONS} connections, {PHASE} s each, {CORES} cores shared by everything")
    rows = []
    for (label, engine), r in results.items():
        ref = results[(label, "thumbor")]
        p, size = quality[(label, engine)]
        rows.append(
            (
                label,
                engine,
                f"{r['rps']:.1f}",
                f"{r['p50']:.0f}",
                f"{r['p90']:.0f}",
                f"{r['rps'] / ref['rps']:.2f}x",
                f"{p:.2f}",
                size,
                r["non2xx"],
            )
        )
    lib.table(("source", "engine", "img/s", "p50 ms", "p90 ms", "vs thumbor", "PSNR dB", "800px bytes", "non-2xx"), rows)
    lib.save(
        "cold-path",
        {
            "phase_seconds": PHASE,
            "connections": CONNECTIONS,
            "runs": {f"{l} / {e}": {**r, "psnr_db": quality[(l, e)][0], "bytes_800px": quality[(l, e)][1]} for (l, e), r in results.items()},
        },
    )
    labels = list(dict.fromkeys(l for l, _ in results))
    engines = list(dict.fromkeys(e for _, e in results))
    lib.chart(
        "cold-path",
        "Cold path: unique specs, 12 MP and 24 MP JPEG sources",
        labels,
        {e: [results[(l, e)]["rps"] for l in labels] for e in engines},
        "images per second",
        notes="imgcas and thumbor over HTTP on loopback; pyvips in-process (no HTTP, no storage)",
    )


if __name__ == "__main__":
    main()
