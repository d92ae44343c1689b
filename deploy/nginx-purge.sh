#!/usr/bin/env bash
# Purges nginx's cache (deploy/nginx-cdn.conf) of every entry tagged with TAG: an original's
# SHA-256 drops every variant of it, by hash and by any URL; `url-<sha256 of the URL>` drops
# what one URL served. Open-source nginx has no purge by tag, but a cache file keeps the
# upstream's response headers, and imgcas tags every image answer (`Surrogate-Key`,
# `Cache-Tag`): this finds the files whose headers carry the tag and removes them. nginx then
# treats those entries as missing and asks imgcas again. Run it as a user who may delete in
# the cache directory.
#
# Usage: nginx-purge.sh CACHE_DIR TAG   (prints how many entries it removed)
set -eu  # no pipefail: `grep -q` may end a pipe early, by design
if [ $# -ne 2 ]; then
  echo "usage: $0 CACHE_DIR TAG" >&2
  exit 2
fi
dir=$1
tag=$2
# Tags are hex digests, or `url-` and one: anything else would be a pattern, not a tag.
if ! [[ $tag =~ ^(url-)?[0-9a-f]{64}$ ]]; then
  echo "not a tag imgcas sends: $tag" >&2
  exit 2
fi
if [ ! -d "$dir" ]; then
  echo "not a directory: $dir" >&2
  exit 2
fi
case $dir in -*) dir=./$dir ;; esac
removed=0
failed=0
# The headers sit near the start of a cache file, after nginx's own binary header; the tag must
# be a whole item of either header line. Only entries are read: their names are 32 hex
# digits, where a file nginx is still writing has a numeric suffix (`use_temp_path=off`).
# One pass over the directory: the time grows with the number of entries.
while IFS= read -r -d '' file; do
  if head -c 65536 "$file" | tr -d '\r' |
    grep -aEiq "^surrogate-key: (.* )?$tag( |\$)|^cache-tag: (.*,)?$tag(,|\$)"; then
    if rm -f -- "$file"; then
      removed=$((removed + 1))
    else
      failed=$((failed + 1))
    fi
  fi
done < <(find "$dir" -type f -regextype posix-extended -regex '.*/[0-9a-f]{32}' -print0)
echo "$removed"
if [ "$failed" -gt 0 ]; then
  echo "$failed tagged entries could not be removed" >&2
  exit 1
fi
