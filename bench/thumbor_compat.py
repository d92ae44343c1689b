#!/usr/bin/env python3
"""The thumbor dialect against thumbor itself (issue 51, item 8): URLs signed by thumbor's own
client library (libthumbor, PyPI) are sent to a real thumbor (PyPI, PIL engine) and to
imgcas's `/thumbor/` route, on real photos; each pair of answers must have the same size and
the same picture (PSNR between the two, both decoded, at least MIN_PSNR dB: the resamplers and
encoders differ, the crop and the framing must not).

Every server binds 127.0.0.1: a static origin for the photos, thumbor (with a security key,
unsafe URLs off) and imgcas (with the same key). IMGCAS_BIN names the binary (CI passes the
debug build the tests made); without it the release binary is built. Needs thumbor and
libthumbor importable (bench/.venv: bench/requirements.txt). Exits 1 when a pair differs.
Writes bench/results/thumbor_compat.json.
"""

import io
import json
import math
import sys
import time
import urllib.error
import urllib.request

import lib

KEY = "imgcas-compat-key"
MIN_PSNR = 22.0
PHOTOS = [
    "acani-picture_1_2.jpg",  # 640×960, the audit's portrait
    "kodak-01.jpg",  # 768×512
    "kodak-04.jpg",  # 512×768
    "cameratrap-ocelot.jpg",  # 1046×802
    "cameratrap-human.jpg",  # 1600×900
    "cameratrap-african_elephants.jpg",  # 1600×1200
]
# libthumbor's generate() arguments: one shape each, as merchants write them.
SHAPES = [
    ("crop 300x200", dict(width=300, height=200)),
    ("fit-in 300x300", dict(width=300, height=300, fit_in=True)),
    ("proportional 0x200", dict(width=0, height=200)),
    ("aligned 300x300 left top", dict(width=300, height=300, halign="left", valign="top")),
    ("no_upscale 3000x2000", dict(width=3000, height=2000, filters=["no_upscale()"])),
    ("no_upscale 500x2000", dict(width=500, height=2000, filters=["no_upscale()"])),
    ("manual crop, fit-in 200x200", dict(crop=((100, 50), (500, 350)), width=200, height=200, fit_in=True)),
    ("fit-in 2000x2000 upscale", dict(width=2000, height=2000, fit_in=True, filters=["upscale()"])),
]


def corpus():
    for candidate in (lib.ROOT.parent / "shared" / "corpus" / "photos", lib.ROOT / "testdata" / "photos"):
        if candidate.is_dir():
            return candidate
    sys.exit("no photos: ../shared/corpus/photos is missing")


def start_thumbor(procs, work):
    return lib.start_thumbor(procs, work, [
        "STORAGE = 'thumbor.storages.no_storage'",
        "RESULT_STORAGE = None",
        f"SECURITY_KEY = '{KEY}'",
        "ALLOW_UNSAFE_URL = False",
        "QUALITY = 90",
    ])


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def psnr(a, b):
    """PSNR of two pictures of one size, in luma: the two resamplers' and encoders' noise,
    tens of dB; a shifted crop or another framing, under twenty."""
    from PIL import ImageChops

    diff = ImageChops.difference(a.convert("L"), b.convert("L"))
    pixels = diff.tobytes()
    mse = sum(v * v for v in pixels) / len(pixels)
    return 99.0 if mse == 0 else 10 * math.log10(255 * 255 / mse)


def main():
    from libthumbor import CryptoURL
    from PIL import Image

    binary = lib.build()
    photos = corpus()
    work = lib.tempdir("thumbor-compat")
    origin = lib.StaticOrigin()
    for photo in PHOTOS:
        origin.set(f"/{photo}", (photos / photo).read_bytes())
    host = origin.base.removeprefix("http://")
    crypto = CryptoURL(key=KEY)
    rows, failures = [], 0
    with lib.Procs() as procs:
        thumbor = start_thumbor(procs, work)
        imgcas, _ = lib.start_imgcas(procs, binary, work / "data", IMGCAS_THUMBOR_KEY=KEY)
        for photo in PHOTOS:
            source = f"{host}/{photo}"
            for label, shape in SHAPES:
                path = crypto.generate(image_url=source, **shape)
                answers = {}
                for engine, base in (("thumbor", thumbor), ("imgcas", imgcas + "/thumbor")):
                    status, body = get(base + path)
                    answers[engine] = (status, Image.open(io.BytesIO(body)) if status == 200 else None)
                (ts, timg), (cs, cimg) = answers["thumbor"], answers["imgcas"]
                row = dict(photo=photo, shape=label, path=path, thumbor_status=ts, imgcas_status=cs)
                if timg is None or cimg is None:
                    row.update(same=False, why="status")
                else:
                    row.update(thumbor_size=list(timg.size), imgcas_size=list(cimg.size))
                    if timg.size != cimg.size:
                        row.update(same=False, why="size")
                    else:
                        score = psnr(timg, cimg)
                        row.update(psnr=round(score, 1), same=score >= MIN_PSNR, why="" if score >= MIN_PSNR else "picture")
                failures += not row["same"]
                rows.append(row)
                print(
                    f"{'same' if row['same'] else 'DIFFERS':8} {photo:36} {label:30} "
                    f"thumbor {row.get('thumbor_size', ts)} imgcas {row.get('imgcas_size', cs)} "
                    f"{row.get('psnr', '')}",
                    flush=True,
                )
    origin.close()
    same = len(rows) - failures
    print(f"{same} of {len(rows)} answers the same size and picture as thumbor's")
    lib.RESULTS.mkdir(parents=True, exist_ok=True)
    (lib.RESULTS / "thumbor_compat.json").write_text(json.dumps(
        dict(measured=time.strftime("%Y-%m-%d"), min_psnr=MIN_PSNR, same=same, total=len(rows), rows=rows),
        indent=1,
    ))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
