#!/usr/bin/env python3
"""CPU per image on a Zipf workload of large originals with four specs per image: imgcas as
it ships (decode cache and mezzanine on) against imgcas with both switched off
(IMGCAS_DECODE_CACHE_BYTES=0, IMGCAS_MEZZANINE=false), and thumbor making the same outputs,
in one run.

- IMAGES distinct 12 MP originals (default 24; the photo of `lib.photo`, each made distinct by
  a trailing byte: the same pixels, another hash) on a loopback origin, JPEG or, with
  ORIGINALS=png, PNG (a format without shrink-on-load: every spec decodes it whole);
- REQUESTS requests (default 600) from 8 threads (a `503 overloaded` is asked again after its
  `Retry-After`, as a CDN would), the image by Zipf popularity (s = 1.1), the
  spec one of four widths (320, 640, 960, 1280; JPEG q80) by fixed weights; the same sequence
  for every server;
- thumbor (PIL engine, no result storage) is asked each distinct (image, spec) pair once: the
  outputs the others make, without their repeats.

CPU is the servers' user + system seconds (/proc, thumbor's processes summed) over the
workload, divided by the distinct images asked. Also checked: imgcas's processing runs for
variants equal the distinct (image, spec) pairs (mezzanine builds are counted apart).
Writes bench/results/zipf-large.json.
"""

import os
import random
import shutil
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request

import lib
from cold_path import start_thumbor

IMAGES = int(os.environ.get("IMAGES", "24"))
ORIGINALS = os.environ.get("ORIGINALS", "jpeg")
REQUESTS = int(os.environ.get("REQUESTS", "600"))
THREADS = 8
WIDTHS = [(320, 0.35), (640, 0.30), (960, 0.20), (1280, 0.15)]


def cpu_seconds(pid, children=True):
    """User + system CPU seconds of a process (and its living descendants)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except FileNotFoundError:
            continue
        if children:
            found = subprocess.run(["pgrep", "-P", str(p)], capture_output=True, text=True).stdout.split()
            stack.extend(int(c) for c in found)
    return total


def schedule():
    rng = random.Random(15)
    weights = [1 / (i + 1) ** 1.1 for i in range(IMAGES)]
    images = rng.choices(range(IMAGES), weights=weights, k=REQUESTS)
    widths = rng.choices([w for w, _ in WIDTHS], weights=[p for _, p in WIDTHS], k=REQUESTS)
    return list(zip(images, widths))


def run(urls):
    """Asks every URL, THREADS at a time; returns the latencies (ms) and the failures."""
    latencies, failures = [], []
    lock = threading.Lock()

    def ask(url):
        start = time.perf_counter()
        for attempt in range(20):
            try:
                urllib.request.urlopen(url, timeout=120).read()
                with lock:
                    latencies.append((time.perf_counter() - start) * 1000)
                break
            except urllib.error.HTTPError as e:
                # Refused while at capacity: asked again after Retry-After, as a CDN or
                # a browser's retry would (the run it wants may have started meanwhile).
                if e.code == 503 and attempt < 19:
                    time.sleep(float(e.headers.get("retry-after") or 1))
                    continue
                with lock:
                    failures.append(str(e))
                break
            except Exception as e:
                with lock:
                    failures.append(str(e))
                break

    lib.each_on_threads(urls, THREADS, ask)
    return latencies, failures


def main():
    binary = lib.build()
    work = lib.tempdir("zipf-large")
    photo_path = lib.photo(binary, 12, work / "photo.jpg")
    if ORIGINALS == "png":
        subprocess.run(
            [str(binary), "process", str(photo_path), "--spec", "format=png", "-o", str(work / "photo.png")],
            check=True,
            stderr=subprocess.DEVNULL,
        )
        photo_path = work / "photo.png"
    ext = photo_path.suffix
    photo = photo_path.read_bytes()
    requests = schedule()
    pairs = sorted(set(requests))
    images = len({i for i, _ in requests})
    results = {}
    try:
        with lib.Procs() as procs:
            origin = lib.StaticOrigin()
            for i in range(IMAGES):
                origin.set(f"/img{i}{ext}", photo + b"\0" + str(i).encode())
            host = origin.base.split("//", 1)[1]
            modes = {
                "imgcas": {},
                "imgcas, decode cache and mezzanine off": {"IMGCAS_DECODE_CACHE_BYTES": 0, "IMGCAS_MEZZANINE": "false"},
            }
            for name, env in modes.items():
                base, p = lib.start_imgcas(procs, binary, work / name.replace(" ", "_").replace(",", ""), **env)
                urls = [f"{base}/v1/image?url={origin.base}/img{i}{ext}&w={w}&format=jpeg&q=80" for i, w in requests]
                before = cpu_seconds(p.pid)
                latencies, failures = run(urls)
                cpu = cpu_seconds(p.pid) - before
                runs = lib.metric(base, "imgcas_processing_runs_total")
                mezzanines = lib.metric(base, "imgcas_mezzanines_built_total")
                decodes = lib.metric(base, "imgcas_source_decodes_total", **{"from": "original"})
                results[name] = {
                    "cpu_s": cpu,
                    "cpu_s_per_image": cpu / images,
                    "variant_runs": runs - mezzanines,
                    "mezzanines": mezzanines,
                    "original_decodes": decodes,
                    "p50_ms": statistics.median(latencies) if latencies else None,
                    "failures": len(failures),
                }
                p.terminate()
                p.wait(timeout=30)
            port = lib.free_port()
            thumbor = start_thumbor(procs, work, port)
            # thumbor forks a process per core: all of them, found by their command line.
            pattern = f"thumbor -i 127.0.0.1 -p {port}"
            pids = [int(p) for p in subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()]
            # A PNG original would come back as PNG: ask for the same JPEG the others make.
            filters = "filters:format(jpeg):quality(80)/" if ORIGINALS == "png" else ""
            urls = [f"{thumbor}/unsafe/{w}x0/{filters}{host}/img{i}{ext}" for i, w in pairs]
            before = sum(cpu_seconds(p, children=False) for p in pids)
            latencies, failures = run(urls)
            cpu = sum(cpu_seconds(p, children=False) for p in pids) - before
            results["thumbor (each pair once)"] = {
                "cpu_s": cpu,
                "cpu_s_per_image": cpu / images,
                "p50_ms": statistics.median(latencies) if latencies else None,
                "failures": len(failures),
            }
            origin.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    on = results["imgcas"]["cpu_s_per_image"]
    print(
        f"\nZipf workload, {REQUESTS} requests over {images} 12 MP {ORIGINALS.upper()} originals, 4 widths: "
        f"{len(pairs)} distinct (image, spec) pairs; {os.cpu_count()} cores"
    )
    rows = []
    for name, r in results.items():
        rows.append(
            (
                name,
                f"{r['cpu_s']:.1f}",
                f"{r['cpu_s_per_image']:.2f}",
                f"{r['cpu_s_per_image'] / on:.2f}x",
                r.get("variant_runs", "-"),
                r.get("mezzanines", "-"),
                r.get("original_decodes", "-"),
                r["failures"],
            )
        )
    lib.table(
        ("server", "CPU s", "CPU s/image", "vs imgcas", "variant runs", "mezzanines", "decodes of originals", "failures"),
        rows,
    )
    name = "zipf-large" if ORIGINALS == "jpeg" else f"zipf-large-{ORIGINALS}"
    lib.save(name, {"requests": REQUESTS, "images": images, "originals": ORIGINALS, "pairs": len(pairs), "results": results})


if __name__ == "__main__":
    main()
