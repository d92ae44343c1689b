#!/usr/bin/env bash
# The PostgreSQL side of docs/capacity.md, measured: imgcas's own schema (migrated by the
# binary), one million generated rows in each map table with realistic field sizes, then
# the bytes per row of each table and its indexes, as PostgreSQL reports them after VACUUM.
#
#   bench/capacity.sh [rows]        (default 1000000; needs Debian's postgresql package)
#
# Starts its own server (as the `postgres` user when run as root) in a temp dir on a free
# loopback port, and removes it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-1000000}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$bin/initdb" ] || { echo "needs PostgreSQL's server binaries (apt-get install postgresql)"; exit 1; }
imgcas=${IMGCAS_BIN:-target/release/imgcas}
[ -x "$imgcas" ] || cargo build --release --bin imgcas

as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
dir=$(mktemp -d /tmp/imgcas-capacity.XXXXXX)
[ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg "$bin/initdb" -D "$dir/data" -U imgcas --auth=trust --no-sync -E UTF8 --locale=C >/dev/null
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
trap 'as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
psql() { "$bin/psql" -X -q -t -A -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U imgcas "$@"; }
psql -d postgres -c "CREATE DATABASE capacity"
url="postgres://imgcas@127.0.0.1:$port/capacity"

# The schema as the binary makes it: any command that opens the maps migrates them (this one
# then stops at the bucket, which does not exist: only the migration is wanted).
IMGCAS_MAPS_URL=$url IMGCAS_STORAGE=s3 IMGCAS_S3_BUCKET=none IMGCAS_S3_ENDPOINT=http://127.0.0.1:9 \
  AWS_ACCESS_KEY_ID=x AWS_SECRET_ACCESS_KEY=x IMGCAS_LOG=off "$imgcas" stats >/dev/null 2>&1 || true
psql -d capacity -c "SELECT version FROM imgcas_schema" | grep -q . || { echo "migration failed"; exit 1; }

echo "generating $rows rows per table…" >&2
psql -d capacity <<SQL
-- A merchant image URL (~95 characters), its hash, an ETag and a Last-Modified as origins send.
INSERT INTO imgcas_urls
SELECT sha256(convert_to(u, 'UTF8')), u, h, etag, lm, c, r, l FROM (
SELECT 'https://cdn.merchant-' || (i % 5000) || '.example.com/products/' || i || '/images/main-'
         || substr(md5(i::text), 1, 16) || '.jpg' AS u,
       decode(md5(i::text) || md5((i + 1)::text), 'hex') AS h,
       '"' || md5((i * 7)::text) || '"' AS etag,
       'Wed, 21 Oct 2015 07:28:00 GMT' AS lm,
       1764000000000 + i AS c, 1764000000000 + i AS r, 1764000000000 + i AS l
  FROM generate_series(1, $rows) AS i) AS generated;
INSERT INTO imgcas_originals
SELECT decode(md5(i::text) || md5((i + 1)::text), 'hex'), 'jpeg', 1600, 1200, false,
       180000 + i % 200000, 1764000000000 + i
  FROM generate_series(1, $rows) AS i;
-- Three variants per original among 1M rows: canonical specs as the pipeline writes them.
INSERT INTO imgcas_variants
SELECT decode(md5((i / 3)::text) || md5((i / 3 + 1)::text), 'hex'), 1,
       (ARRAY['format=webp&w=400', 'fit=cover&format=avif&h=300&w=300', 'format=jpeg&q=80&w=1200'])[i % 3 + 1],
       (ARRAY['webp', 'avif', 'jpeg'])[i % 3 + 1], 400, 300, 25000 + i % 30000, NULL, NULL,
       25000 + i % 30000 + 100, 1764000000000 + i
  FROM generate_series(1, $rows) AS i;
-- Claims are transient (one per job in progress); measured at a busy moment's count.
INSERT INTO imgcas_claims
SELECT 'variant:' || md5(i::text) || md5((i + 1)::text), 'imgcas-a-1234', i, now(), now()
  FROM generate_series(1, 10000) AS i;
VACUUM ANALYZE;
SQL

printf '%-22s %10s %14s %14s %14s %12s\n' table rows heap_bytes index_bytes total_bytes bytes/row
for t in imgcas_urls imgcas_originals imgcas_variants imgcas_claims; do
  psql -d capacity -F ' ' -c "SELECT '$t', count(*), pg_table_size('$t'), pg_indexes_size('$t'),
      pg_total_relation_size('$t'), round(pg_total_relation_size('$t')::numeric / count(*), 1)
      FROM $t" | awk '{ printf "%-22s %10s %14s %14s %14s %12s\n", $1, $2, $3, $4, $5, $6 }'
done
