#!/usr/bin/env python3
"""What the coarse shrink-on-load costs the look: the table `coarse_ok` is drawn from.

A progressive JPEG reduced 8 to 16 times can decode at 1/8 from its DC scans alone (coarse)
or at the margin rule's 1/4 (full, as a lossless output of the same spec decodes). For each
photo, made progressive losslessly by `jpegtran`, each output format, quality and reduction,
the processors' example `coarse_decode` encodes both and scores both with SSIMULACRA2 against
the lossless rendition of the spec (the full decode's pixels). Sets: `photos` (the JPEGs of
`../shared/corpus/photos`, 1–2 MP) and `large` (the JPEGs of LARGE_PHOTOS: 12 MP+ camera
photos; by default `bench/.media/large`, which `bench/media.py` fills). Writes bench/results/coarse_decode.{tsv,json} and prints, per set and format, the
highest quality at which the mean loss is at most a point and the largest at most two.

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
    out = []
    for i, src in enumerate(sources):
        dst = work / f"{prefix}-{i}-{src.stem}.jpg"
        made = subprocess.run(["jpegtran", "-progressive", "-copy", "all", "-outfile", str(dst), str(src)])
        if made.returncode == 0:
            out.append(dst)
        else:
            print(f"skipped {src}: jpegtran failed", file=sys.stderr)
    return out


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
    lib.table(list(rows[0]), [list(r.values()) for r in rows])
    # The rule's inputs: per set, format and reduction, the highest quality up to which every
    # quality measured hides the coarse decode (mean loss ≤ 1 point, every photo's ≤ 2).
    by_key = {}
    for r in rows:
        by_key.setdefault((r["set"], r["format"], r["reduction"]), []).append(r)
    print("\nhighest quality up to which the coarse decode is hidden (0: at none measured)")
    for key, measured in sorted(by_key.items()):
        hidden = 0
        for r in sorted(measured, key=lambda r: int(r["quality"])):
            if float(r["mean_loss"]) > 1.0 or float(r["max_loss"]) > 2.0:
                break
            hidden = int(r["quality"])
        print("\t".join(key), hidden, sep="\t")


if __name__ == "__main__":
    main()
