#!/usr/bin/env python3
"""The real media the look benchmarks measure on, beyond `../shared/corpus`: large camera
photos (12–22 MP) and real animations, listed in `bench/media.tsv` with the public repository,
path and commit each comes from, its licence as the source states it, and its SHA-256.

The files are not kept in this repository (about 45 MB): they are read out of snapshots of
the listed repositories (`git` directories, as a snapshot tool leaves them: MIRRORS, default
`../.mirror`, one folder `owner+name` a repository) into `bench/.media/<set>/`, each checked
against its SHA-256, and the large photos made progressive losslessly by `jpegtran` into
`bench/.media/large-progressive/` (what `quality_oracle` is given). Prints the folders;
`coarse_decode.py` and `quality.py` read `bench/.media/large` as LARGE_PHOTOS by default, and
`processors/examples/anim_compare.rs` is given the files of `bench/.media/anim`.

`python3 bench/media.py [--check]` (`--check`: only say which files are missing).
"""

import csv
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import lib

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "bench" / "media.tsv"
OUT = ROOT / "bench" / ".media"
MIRRORS = Path(os.environ.get("MIRRORS", ROOT.parent / ".mirror"))


def rows():
    with open(LIST, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def git_dir(repo):
    """The snapshot's git directory of `owner/name`, if there is one."""
    base = MIRRORS / repo.replace("/", "+")
    if (base / "HEAD").exists():
        return base
    found = sorted(p.parent for p in base.glob("**/HEAD") if (p.parent / "objects").is_dir())
    return found[0] if found else None


def folder(set_name):
    return OUT / set_name


def ensure(set_name):
    """`bench/.media/<set>`, filled and checked; exits naming what could not be had."""
    missing = []
    for row in rows():
        if row["set"] != set_name:
            continue
        path = folder(set_name) / row["file"]
        if path.exists() and hashlib.sha256(path.read_bytes()).hexdigest() == row["sha256"]:
            continue
        git = git_dir(row["repo"])
        if git is None:
            missing.append(f"{row['file']}: no snapshot of {row['repo']} under {MIRRORS}")
            continue
        shown = subprocess.run(["git", "--git-dir", str(git), "show", f"{row['commit']}:{row['path_in_repo']}"],
                               capture_output=True)
        if shown.returncode != 0:
            shown = subprocess.run(["git", "--git-dir", str(git), "show", f"HEAD:{row['path_in_repo']}"],
                                   capture_output=True)
        if shown.returncode != 0 or hashlib.sha256(shown.stdout).hexdigest() != row["sha256"]:
            missing.append(f"{row['file']}: not in {git} as listed")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(shown.stdout)
    if missing:
        sys.exit("missing media (fetch the listed repositories first):\n  " + "\n  ".join(missing))
    return folder(set_name)


def main():
    sets = sorted({r["set"] for r in rows()})
    if "--check" in sys.argv:
        for row in rows():
            path = folder(row["set"]) / row["file"]
            if not path.exists():
                print(f"missing: {row['set']}/{row['file']} ({row['repo']})")
        return
    for s in sets:
        print(ensure(s))
    print(progressive())


def progressive():
    """`bench/.media/large-progressive`: the large photos through `jpegtran -progressive`."""
    out = OUT / "large-progressive"
    out.mkdir(parents=True, exist_ok=True)
    for src in sorted(ensure("large").glob("*.jpg")):
        dst = out / src.name
        if not dst.exists() and not lib.make_progressive(src, dst):
            sys.exit(f"{src}: jpegtran failed")
    return out


if __name__ == "__main__":
    main()
