#!/usr/bin/env python3
"""The moderation blocklist on the shared photographs, end to end through HTTP (issue 32).

Half of the photos of `../shared/corpus/photos/` are listed by their image
(`POST /v1/blocklist`, the default radius); then copies of every photo are uploaded
(`POST /v1/originals`): resized to half and a quarter, re-encoded as JPEG at quality 50 and
95, and changed to PNG and WebP (made with Pillow, never with imgcas, from the photo as it
shows: its EXIF orientation applied). A copy of a listed
photo must answer 451 `blocked` (recall); a distinct photo, or a copy of one, must never be
refused by listing another (false refusals). Target: recall >= 99 %, no false refusal.

    bench/.venv/bin/python bench/blocklist.py

Results: bench/results/blocklist.json.
"""

import io
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import lib  # noqa: E402

from PIL import Image, ImageOps  # noqa: E402

PHOTOS = lib.ROOT.parent / "shared" / "corpus" / "photos"
TOKEN = "bench-blocklist-token-0123456789"


def transforms(raw):
    """The copies of a photo: (name, bytes)."""
    image = Image.open(io.BytesIO(raw))
    image.load()
    # Upright first, as the photo shows: a copy that dropped the EXIF orientation without
    # applying it would show the picture turned, a different picture.
    rgb = ImageOps.exif_transpose(image).convert("RGB")

    def save(img, fmt, **kw):
        out = io.BytesIO()
        img.save(out, fmt, **kw)
        return out.getvalue()

    w, h = rgb.size
    return [
        ("resize_50", save(rgb.resize((max(1, w // 2), max(1, h // 2)), Image.LANCZOS), "JPEG", quality=85)),
        ("resize_25", save(rgb.resize((max(1, w // 4), max(1, h // 4)), Image.LANCZOS), "JPEG", quality=85)),
        ("jpeg_q50", save(rgb, "JPEG", quality=50)),
        ("jpeg_q95", save(rgb, "JPEG", quality=95)),
        ("png", save(rgb, "PNG")),
        ("webp", save(rgb, "WEBP", quality=80)),
    ]


def post(base, path, body, content_type):
    request = urllib.request.Request(
        base + path,
        data=body,
        method="POST",
        headers={"authorization": f"Bearer {TOKEN}", "content-type": content_type},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def main():
    photos = sorted(p for p in PHOTOS.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    if not photos:
        sys.exit(f"no photos in {PHOTOS}")
    listed, distinct = photos[0::2], photos[1::2]
    binary = lib.build()
    data_dir = lib.tempdir("blocklist")
    with lib.Procs() as procs:
        base, _ = lib.start_imgcas(procs, binary, data_dir, IMGCAS_ADMIN_TOKEN=TOKEN)
        not_listed = []
        for p in listed:
            status, answer = post(base, "/v1/blocklist", p.read_bytes(), "image/jpeg")
            if status != 200:
                # Bytes imgcas cannot read as a picture: listed by nothing, left out.
                not_listed.append((p.name, status, answer))
        listed = [p for p in listed if p.name not in {n for n, _, _ in not_listed}]
        per_transform = {}
        false_refusals = []
        errors = []
        for group, expect_blocked in ((listed, True), (distinct, False)):
            for p in group:
                raw = p.read_bytes()
                copies = transforms(raw)
                if not expect_blocked:
                    copies.insert(0, ("original", raw))
                for name, body in copies:
                    status, answer = post(base, "/v1/originals", body, "application/octet-stream")
                    blocked = status == 451
                    if status not in (200, 201, 451):
                        errors.append((p.name, name, status, answer))
                        continue
                    if expect_blocked:
                        t = per_transform.setdefault(name, {"n": 0, "refused": 0, "missed": []})
                        t["n"] += 1
                        t["refused"] += blocked
                        if not blocked:
                            t["missed"].append(p.name)
                    elif blocked:
                        false_refusals.append((p.name, name, answer))
        checked_distinct = sum(1 + 6 for _ in distinct)
    found = sum(t["refused"] for t in per_transform.values())
    total = sum(t["n"] for t in per_transform.values())
    rows = [(name, t["n"], t["refused"], f"{100 * t['refused'] / t['n']:.1f} %") for name, t in per_transform.items()]
    rows.append(("all", total, found, f"{100 * found / total:.2f} %"))
    lib.table(["copy of a listed photo", "uploaded", "refused 451", "recall"], rows)
    print(f"\ndistinct photos and their copies uploaded: {checked_distinct}, refused: {len(false_refusals)}")
    if not_listed:
        print(f"photos that could not be listed (no picture): {len(not_listed)}")
    if errors:
        print(f"other answers: {errors[:5]}")
    lib.save(
        "blocklist",
        {
            "listed": len(listed),
            "not_listed": [n for n, _, _ in not_listed],
            "recall": {name: {k: v for k, v in t.items()} for name, t in per_transform.items()},
            "recall_all": found / total if total else None,
            "distinct_uploads": checked_distinct,
            "false_refusals": false_refusals,
            "errors": errors,
            "target": "recall >= 0.99 on the copies of listed photos; no distinct photo refused",
        },
    )
    ok = total and found / total >= 0.99 and not false_refusals
    print("target met" if ok else "TARGET MISSED")


if __name__ == "__main__":
    main()
