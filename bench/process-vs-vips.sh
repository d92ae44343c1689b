#!/usr/bin/env bash
# imgcas process vs vipsthumbnail, as whole commands, on the same photo JPEGs (12 MP and
# 23.5 MP) to 400 px JPEG and WebP. Prints mean times, the ratio (vips / imgcas: above 1 means
# imgcas is faster) and each output's PSNR against a full-decode Lanczos3 reference.
#
# Then, in-process: where one thumbnail's time goes (best of 15), next to libjpeg-turbo's own
# shrink-on-load decode of the same file (`djpeg -scale 1/4`, if libjpeg-turbo-progs is there),
# which is the floor for any JPEG thumbnailer on that file.
#
# Needs: libvips-tools and hyperfine (Debian: apt-get install libvips-tools hyperfine
# libjpeg-turbo-progs). Everything runs locally on files; no network.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in vips vipsthumbnail hyperfine python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install libvips-tools hyperfine" >&2; exit 2; }
done

cargo build --release -q --bin imgcas
cargo build --release -q -p imgcas-processors --example compare --example breakdown
imgcas=target/release/imgcas
compare=target/release/examples/compare
breakdown=target/release/examples/breakdown
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Photo-like sources: a real photograph (testdata, MIT) upscaled, so that both tools decode the
# same natural-image JPEG. Sizes keep a 4:3 shape so every output is exactly 400x300.
photo=testdata/exif-orientation/Landscape_1.jpg
vips resize "$photo" "$work/12mp.jpg[Q=90]" 2.222222 --vscale 2.5
vips resize "$photo" "$work/24mp.jpg[Q=90]" 3.111111 --vscale 3.5

printf '%-6s %-5s %12s %12s %8s %12s %12s\n' source out imgcas_ms vips_ms ratio psnr_imgcas psnr_vips
for size in 12mp 24mp; do
  src="$work/$size.jpg"
  w=$(vipsheader -f width "$src"); h=$(vipsheader -f height "$src")
  hscale=$(python3 -c "print(400/$w)"); vscale=$(python3 -c "print(300/$h)")
  vips resize "$src" "$work/ref-$size.png" "$hscale" --vscale "$vscale" --kernel lanczos3
  for fmt in jpeg webp; do
    ext=$fmt; [ "$fmt" = jpeg ] && ext=jpg
    q=82; [ "$fmt" = webp ] && q=80
    hyperfine -N --warmup 3 --runs 20 --export-json "$work/t.json" \
      "$imgcas process $src --spec w=400&format=$fmt -o $work/imgcas.$ext" \
      "vipsthumbnail $src -s 400x -o $work/vips.$ext[Q=$q]" >/dev/null 2>&1
    read -r ours theirs < <(python3 -c "
import json; r=json.load(open('$work/t.json'))['results']
print(r[0]['mean']*1000, r[1]['mean']*1000)")
    p_ours=$($compare "$work/imgcas.$ext" "$work/ref-$size.png" | sed 's/ .*//; s/psnr=//')
    p_vips=$($compare "$work/vips.$ext" "$work/ref-$size.png" | sed 's/ .*//; s/psnr=//')
    printf '%-6s %-5s %12.1f %12.1f %8.2f %12s %12s\n' "$size" "$fmt" "$ours" "$theirs" \
      "$(python3 -c "print($theirs/$ours)")" "$p_ours" "$p_vips"
  done
done

echo
echo "in-process, w=400 JPEG (imgcas-processors, best of 15 runs per stage):"
for size in 12mp 24mp; do
  printf '%-6s %s\n' "$size" "$($breakdown "$work/$size.jpg" 'w=400&format=jpeg')"
  if command -v djpeg >/dev/null; then
    hyperfine -N --warmup 3 --runs 20 --export-json "$work/d.json" \
      "djpeg -scale 1/4 -outfile /dev/null $work/$size.jpg" >/dev/null 2>&1
    floor=$(python3 -c "
import json; r=json.load(open('$work/d.json'))['results'][0]
print(round(r['min']*1000, 1))")
    printf '%-6s djpeg -scale 1/4 (decode only, whole command, fastest run): %s ms\n' "$size" "$floor"
  fi
done
