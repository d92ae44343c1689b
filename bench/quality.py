#!/usr/bin/env python3
"""Quality: what `q=auto` serves against fixed qualities and the peers, on real photos.

Every request fits its source inside 512×512 (imgproxy's benchmark shape, as `peers.py`) and
is made by a service with a fresh data dir, under a URL of its own (so each is a download and a
processing run). Sets: `photos` (the JPEGs of `../shared/corpus/photos`), `png` (the same as
PNG) and `large` (the largest corpus photos and the camera photos of LARGE_PHOTOS, all made
progressive with `jpegtran`). Per set and output format (JPEG, WebP, AVIF):

- each `q=auto` level, today's default fixed quality, and fixed qualities 30–95 in steps of 5;
- ipx (sharp/libvips, npm) and thumbor (Pillow, PyPI) at their own default qualities;
- bytes, and SSIMULACRA2 scores (min, p5, median) by two references: `exact`, against the
  lossless rendition of the spec (imgcas's own PNG of it: the faithful decode, never the DC
  scans' 1/8 a lossy JPEG output of a large progressive photo may take where it is measured
  to be hidden), and `vips`, against the source decoded in full by libvips and resized with Lanczos3
  in float (what every engine's output is held to alike);
- butteraugli (libjxl's `butteraugli_main`, the second metric; its 3-norm, lower is better)
  of `q=auto:good`, the default and the peers;
- for each level, the lowest fixed quality whose `exact` score reaches the level's target − 1
  on every photo of the set (the fixed quality that would promise what `q=auto` promises),
  and `q=auto`'s mean bytes against it and against the default;
- CPU per variant, `q=auto:good` against the default fixed quality: the service process's
  user + system time over the set, each request a download and a run, divided by the photos.

The scorer is the processors' example `ssimulacra2` (the same code `q=auto` scores with),
built here. Writes bench/results/quality.{json,png}; `--report` prints and draws again.

Env: SETS (default `photos,png,large`), FORMATS (default `jpeg,webp,avif`), PHOTOS (per set,
default 40), ENGINES (default `imgcas,ipx,thumbor`), LARGE_PHOTOS (folder; by default
`bench/.media/large`, 14 camera photos of 12–22 MP that `bench/media.py` fills),
BUTTERAUGLI (default 1; 0 skips the second metric).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import lib
import media
import peers

SETS = os.environ.get("SETS", "photos,png,large").split(",")
FORMATS = os.environ.get("FORMATS", "jpeg,webp,avif").split(",")
ENGINES = os.environ.get("ENGINES", "imgcas,ipx,thumbor").split(",")
BUTTERAUGLI = os.environ.get("BUTTERAUGLI", "1") != "0"
LEVELS = {"best": 80, "good": 70, "eco": 60, "low": 50}
DEFAULT = {"jpeg": 82, "webp": 80, "avif": 60}
GRID = list(range(30, 100, 5))
BOX = 512


def scorer():
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "imgcas-processors", "--example", "ssimulacra2"],
                   cwd=lib.ROOT, check=True)
    proc = subprocess.Popen([str(lib.ROOT / "target" / "release" / "examples" / "ssimulacra2")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def score(reference, distorted):
        proc.stdin.write(f"{reference}\t{distorted}\n")
        line = proc.stdout.readline().strip()
        if line.startswith("error"):
            raise SystemExit(f"scoring {distorted}: {line}")
        return float(line)

    return score


def butteraugli(reference, distorted_png):
    out = subprocess.run(["butteraugli_main", str(reference), str(distorted_png), "--pnorm", "3"],
                         capture_output=True, text=True)
    # Prints the max norm, then "3-norm: <value>".
    for line in out.stdout.splitlines():
        if "norm" in line:
            return float(line.split(":")[-1])
    return None


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fetch(url):
    with urllib.request.urlopen(url, timeout=120) as r:
        return r.read(), {k.lower(): v for k, v in r.headers.items()}


def stats(values):
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    p5 = values[max(0, int(round(0.05 * (len(values) - 1))))]
    return {"min": round(values[0], 2), "p5": round(p5, 2), "median": round(statistics.median(values), 2),
            "mean": round(statistics.fmean(values), 2)}


def main():
    lib.need("jpegtran")
    import pyvips

    binary = lib.build()
    score = scorer()
    if BUTTERAUGLI and shutil.which("butteraugli_main") is None:
        sys.exit("butteraugli_main missing: apt-get install libjxl-devtools (or BUTTERAUGLI=0)")
    work = lib.tempdir("quality")
    origin = peers.UniqueOrigin()
    if "large" in SETS and not os.environ.get("LARGE_PHOTOS"):
        os.environ["LARGE_PHOTOS"] = str(media.ensure("large"))
    peers.SETS = SETS
    peers.PHOTOS = int(os.environ.get("PHOTOS", "40"))
    sets = peers.make_sets(work, pyvips)
    ipx_binary = peers.install_ipx() if "ipx" in ENGINES else None
    results = {"sets": {}, "levels": LEVELS, "grid": GRID, "default": DEFAULT}
    key = 0
    with lib.Procs() as procs:
        bases = {}
        if "thumbor" in ENGINES:
            bases["thumbor"] = peers.start_thumbor(procs, work)
        if "ipx" in ENGINES:
            bases["ipx"] = peers.start_ipx(procs, ipx_binary)
        for set_name, files in sets.items():
            for name, data in files:
                origin.files[name] = data
            folder = work / set_name
            folder.mkdir()
            # References: libvips' full decode (for `vips`), resized per output below.
            full = {}
            for name, data in files:
                image = pyvips.Image.new_from_buffer(data, "").autorot().colourspace("srgb")
                full[name] = image.flatten(background=[255, 255, 255]) if image.hasalpha() else image
            set_result = results["sets"].setdefault(set_name, {"photos": len(files), "formats": {}})
            for fmt in FORMATS:
                base, proc = lib.start_imgcas(procs, binary, work / f"data-{set_name}-{fmt}")

                def imgcas(query, name):
                    nonlocal key
                    key += 1
                    url = f"http://{origin.host}/u/k{key}/{name}"
                    return fetch(f"{base}/v1/image?url={urllib.parse.quote(url, safe='')}&w={BOX}&h={BOX}&{query}")

                # The exact pixels: imgcas's own PNG of the spec.
                exact = {}
                for name, _ in files:
                    body, _ = imgcas("format=png", name)
                    path = folder / f"{fmt}-exact-{name}.png"
                    path.write_bytes(body)
                    exact[name] = path

                def vips_reference(name, width, height):
                    path = folder / f"vips-{name}-{width}x{height}.png"
                    if not path.exists():
                        image = full[name]
                        image.cast("float").resize(width / image.width, vscale=height / image.height,
                                                   kernel="lanczos3").cast("uchar").pngsave(str(path))
                    return path

                def measure(label, get, second=False):
                    sizes, exact_scores, vips_scores, butter, chosen, header_scores = [], [], [], [], [], []
                    started = cpu_seconds(proc.pid)
                    outputs = []
                    for name, _ in files:
                        body, headers = get(name)
                        outputs.append((name, body, headers))
                    cpu = (cpu_seconds(proc.pid) - started) / len(files)
                    for name, body, headers in outputs:
                        path = folder / f"{fmt}-{label.replace(':', '-')}-{name}.{fmt}"
                        path.write_bytes(body)
                        out = pyvips.Image.new_from_buffer(body, "")
                        sizes.append(len(body))
                        if label.startswith(("ipx", "thumbor")):
                            exact_scores.append(None)
                        else:
                            exact_scores.append(score(exact[name], path))
                        reference = vips_reference(name, out.width, out.height)
                        vips_scores.append(score(reference, path))
                        if "x-imgcas-quality" in headers:
                            chosen.append(int(headers["x-imgcas-quality"]))
                            header_scores.append(float(headers["x-imgcas-score"]))
                        if second and BUTTERAUGLI:
                            png = path.with_suffix(".png")
                            out.colourspace("srgb").pngsave(str(png))
                            butter.append(butteraugli(reference, png))
                    entry = {
                        "mean_bytes": round(statistics.fmean(sizes)),
                        "exact": stats(exact_scores),
                        "vips": stats(vips_scores),
                        "cpu_ms_per_variant": round(cpu * 1000, 1) if cpu else None,
                        "exact_scores": [None if s is None else round(s, 2) for s in exact_scores],
                    }
                    if chosen:
                        entry["quality_chosen"] = {"min": min(chosen), "median": statistics.median(chosen),
                                                   "max": max(chosen)}
                        entry["header"] = stats(header_scores)
                    if butter and any(b is not None for b in butter):
                        entry["butteraugli_3norm"] = stats(butter)
                    return entry

                rows = {}
                for level in LEVELS:
                    rows[f"auto:{level}"] = measure(
                        f"auto:{level}", lambda n, lv=level: imgcas(f"format={fmt}&q=auto:{lv}", n),
                        second=(level == "good"))
                rows["default"] = measure("default", lambda n: imgcas(f"format={fmt}", n), second=True)
                for q in GRID:
                    rows[f"q{q}"] = measure(f"q{q}", lambda n, q=q: imgcas(f"format={fmt}&q={q}", n))
                # The searches' encodes, from the service's counters.
                searches = lib.metric(base, "imgcas_quality_searches_total") or 0
                encodes = lib.metric(base, "imgcas_quality_search_encodes_total") or 0
                for engine in ("ipx", "thumbor"):
                    if engine not in bases:
                        continue
                    path_of = {"ipx": lambda k, n: f"/f_{fmt},fit_inside,s_{BOX}x{BOX}/http://{origin.host}/u/{k}/{n}",
                               "thumbor": lambda k, n: f"/unsafe/fit-in/{BOX}x{BOX}/filters:format({fmt})/{origin.host}/u/{k}/{n}"}[engine]

                    def peer(name, engine=engine, path_of=path_of):
                        nonlocal key
                        key += 1
                        return fetch(bases[engine] + path_of(f"k{key}", name))

                    entry = measure(engine, peer, second=True)
                    entry["cpu_ms_per_variant"] = None  # another process: not measured here
                    rows[engine] = entry
                # For each level: the lowest fixed quality holding target − 1 on every photo.
                floors = {}
                for level, target in LEVELS.items():
                    holding = [q for q in GRID if rows[f"q{q}"]["exact"]["min"] >= target - 1]
                    fixed = holding[0] if holding else None
                    auto = rows[f"auto:{level}"]
                    floors[level] = {
                        "fixed_quality": fixed,
                        "auto_bytes_vs_fixed": round(auto["mean_bytes"] / rows[f"q{fixed}"]["mean_bytes"], 3) if fixed else None,
                        "auto_bytes_vs_default": round(auto["mean_bytes"] / rows["default"]["mean_bytes"], 3),
                        "auto_min_exact": auto["exact"]["min"],
                        "auto_min_header": auto.get("header", {}).get("min"),
                    }
                set_result["formats"][fmt] = {
                    "rows": rows,
                    "floors": floors,
                    "encodes_per_search": round(encodes / searches, 2) if searches else None,
                    "cpu_auto_good_vs_default": round(rows["auto:good"]["cpu_ms_per_variant"]
                                                      / rows["default"]["cpu_ms_per_variant"], 2),
                }
                proc.terminate()
                proc.wait()
                print(f"{set_name} {fmt}: done", file=sys.stderr)
    results["machine"] = {"cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%d %H:%M")}
    lib.save("quality", results)
    report(results)


def report(results):
    rows = []
    for set_name, s in results["sets"].items():
        for fmt, f in s["formats"].items():
            good = f["floors"]["good"]
            auto = f["rows"]["auto:good"]
            default = f["rows"]["default"]
            peer = lambda e: f["rows"].get(e, {}).get("vips", {}) or {}
            rows.append([
                set_name, fmt, auto["mean_bytes"], default["mean_bytes"],
                f"q{good['fixed_quality']}", good["auto_bytes_vs_fixed"], good["auto_bytes_vs_default"],
                auto["exact"]["min"], auto["exact"]["p5"], auto["exact"]["median"],
                default["exact"]["min"], default["exact"]["median"],
                peer("ipx").get("median", "-"), peer("thumbor").get("median", "-"),
                f["encodes_per_search"], f["cpu_auto_good_vs_default"],
            ])
    lib.table(["set", "format", "auto B", "default B", "fixed@floor", "÷fixed", "÷default", "auto min",
               "auto p5", "auto med", "default min", "default med", "ipx med(vips)", "thumbor med(vips)",
               "encodes", "CPU ×"], rows)
    groups = [f"{s} {f}" for s, sf in results["sets"].items() for f in sf["formats"]]
    series = {}
    for label in ("auto:good", "default"):
        series[label] = [results["sets"][g.split()[0]]["formats"][g.split()[1]]["rows"][label]["mean_bytes"] / 1000
                         for g in groups]
    series["fixed at the floor"] = [
        (lambda f: f["rows"][f"q{f['floors']['good']['fixed_quality']}"]["mean_bytes"] / 1000
         if f["floors"]["good"]["fixed_quality"] else 0)(results["sets"][g.split()[0]]["formats"][g.split()[1]])
        for g in groups]
    lib.chart("quality", "Mean bytes at 512 px: q=auto:good (SSIMULACRA2 ≥ 70) against fixed qualities",
              groups, series, "kB per image",
              notes="fixed at the floor: the lowest fixed quality whose every output scores ≥ 69 (exact pixels)",
              figsize=(11, 4.8))


if __name__ == "__main__":
    if "--report" in sys.argv:
        report(json.loads((lib.RESULTS / "quality.json").read_text()))
    else:
        main()
