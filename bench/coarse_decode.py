#!/usr/bin/env python3
"""What the coarse shrink-on-load costs the look: the table `coarse_ok` is drawn from.

A progressive JPEG reduced 8 to 16 times can decode at 1/8 from its DC scans alone (coarse)
or at the margin rule's 1/4 (full, as a lossless output of the same spec decodes). For each
photo, made progressive losslessly by `jpegtran`, each output format, quality and reduction,
the processors' example `coarse_decode` encodes both and scores both with SSIMULACRA2 against
the lossless rendition of the spec (the full decode's pixels). Sets: `photos` (the JPEGs of
`../shared/corpus/photos`, 1–2 MP) and `large` (the JPEGs of LARGE_PHOTOS: 12 MP+ camera
photos; by default `bench/.media/large`, which `bench/media.py` fills). Writes
bench/results/coarse_decode.{tsv,json} and prints the table and the rule it gives: per format,
from which reduction on, and up to which quality, every set and every reduction measured from
there loses at most a point on average and 1.2 on any photo. `--report` prints them again
from the TSV.

Env: LARGE_PHOTOS (folder, default `bench/.media/large`), PHOTOS (per set, default
12), FORMATS, QUALITIES, REDUCTIONS (passed to the example).
"""

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import lib
import media

PHOTOS = int(os.environ.get("PHOTOS", "12"))
# The loss a rule may keep: SSIMULACRA2 points, on average over a set and on its worst photo.
MEAN_BOUND = 1.0
WORST_BOUND = 1.2
CORPUS = lib.ROOT.parent / "shared" / "corpus"


def jpeg_size(path):
    """(width, height) from a JPEG's frame header, or None."""
    data = path.read_bytes()
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        i += 2 + length
    return None


def progressive(sources, work, prefix):
    out = [work / f"{prefix}-{i}-{src.stem}.jpg" for i, src in enumerate(sources)]
    return [dst for src, dst in zip(sources, out) if lib.make_progressive(src, dst)]


def main():
    lib.need("jpegtran")
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "imgcas-processors", "--example", "coarse_decode"],
                   cwd=lib.ROOT, check=True)
    example = lib.ROOT / "target" / "release" / "examples" / "coarse_decode"
    work = lib.tempdir("coarse-decode-")
    # Photos that reduced 8 times still make an output the metric can read (the example skips
    # smaller ones), spread over the corpus by name.
    shared = [p for p in sorted((CORPUS / "photos").glob("*.jpg")) if max(jpeg_size(p) or (0, 0)) >= 1536]
    sets = {"photos": shared[::max(1, len(shared) // PHOTOS)][:PHOTOS]}
    large = Path(os.environ["LARGE_PHOTOS"]) if os.environ.get("LARGE_PHOTOS") else media.ensure("large")
    sets["large"] = sorted(large.glob("*.[jJ][pP][gG]"))[:PHOTOS]
    rows = []
    for name, sources in sets.items():
        files = progressive(sources, work, name)
        out = subprocess.run([str(example), *map(str, files)], check=True, capture_output=True, text=True)
        for row in csv.DictReader(io.StringIO(out.stdout), delimiter="\t"):
            rows.append({"set": name, **row})
    lib.RESULTS.mkdir(parents=True, exist_ok=True)
    with open(lib.RESULTS / "coarse_decode.tsv", "w") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    lib.save("coarse_decode", {"rows": rows})
    report(rows)


def report(rows):
    """The table, then the rule it gives: per set, format and reduction, the highest quality up
    to which every quality measured keeps the loss within the bound (a point on average, 1.2
    on every photo); then per format, from which reduction on every set and every reduction
    measured from there keeps which quality (`ResolvedSpec::hides_coarse_decode`)."""
    lib.table(list(rows[0]), [list(r.values()) for r in rows])
    by_key = {}
    for r in rows:
        by_key.setdefault((r["set"], r["format"], int(r["reduction"])), []).append(r)
    hidden = {}
    for key, measured in by_key.items():
        hidden[key] = 0
        for r in sorted(measured, key=lambda r: int(r["quality"])):
            if float(r["mean_loss"]) > MEAN_BOUND or float(r["max_loss"]) > WORST_BOUND:
                break
            hidden[key] = int(r["quality"])
    print(f"\nhighest quality up to which the coarse decode is hidden (mean ≤ {MEAN_BOUND}, "
          f"every photo ≤ {WORST_BOUND}; 0: at none measured)")
    for (set_name, fmt, reduction), q in sorted(hidden.items()):
        print(set_name, fmt, reduction, q, sep="\t")
    print("\nthe rule: from which reduction on, up to which quality")
    for fmt in sorted({k[1] for k in hidden}):
        reductions = sorted({k[2] for k in hidden if k[1] == fmt})
        rule = "never"
        for r in reductions:
            kept = min(q for (_, f, at), q in hidden.items() if f == fmt and at >= r)
            if kept > 0:
                rule = f"from {r} on, up to q{kept}"
                break
        print(fmt, rule, sep="\t")

if __name__ == "__main__":
    if "--report" in sys.argv:
        with open(lib.RESULTS / "coarse_decode.tsv", newline="") as f:
            report(list(csv.DictReader(f, delimiter="\t")))
    else:
        main()
