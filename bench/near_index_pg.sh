#!/usr/bin/env bash
# The near-neighbour index on PostgreSQL at scale (benches/near_index_pg.rs, a real server the
# test harness starts from Debian's package). Writes bench/results/near-index-pg.json.
# NEAR_INDEX_PG_SIZES=250000,1000000,2000000 picks the sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo bench --bench near_index_pg
