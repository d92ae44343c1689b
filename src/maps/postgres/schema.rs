//! The PostgreSQL maps' schema, as numbered migrations embedded in the binary, and the one
//! routine that applies them at startup.
//!
//! Portable SQL — plain tables, `INSERT … ON CONFLICT`, row locks — so that engines that
//! speak PostgreSQL's protocol without its extensions can hold the maps later. In particular no
//! advisory lock: nodes starting together serialise on a row of `imgcas_schema` instead
//! (`SELECT … FOR UPDATE`), and the migrations run in that row's transaction, so a node either
//! sees the schema before or after a migration, never half of one. One exception, named:
//! migration 13 keeps the store's totals by row triggers in PL/pgSQL (built into PostgreSQL,
//! no extension), so that every statement that writes a URL, an original or a variant, bulk
//! deletes included, moves them in its own transaction; an engine without triggers would
//! need those statements to move the totals themselves.

use std::time::Duration;

use tokio_postgres::error::SqlState;

use super::super::MapError;
use super::sql::{params, Run, Session};
use super::store_error;

/// Counter rows the variants' byte total is spread over, so that concurrent writers of
/// different originals rarely wait on one row.
pub(super) const BYTE_SHARDS: i32 = 16;

/// The migrations, in order; the schema's version is how many have been applied. A released
/// migration never changes: a change is a new one at the end.
const MIGRATIONS: &[&str] = &[
    // 1: the three maps and the variants' byte count.
    "CREATE TABLE imgcas_urls (
        -- SHA-256 of the URL: URLs of any length, one index entry of 32 bytes each
        url_key bytea PRIMARY KEY,
        url text NOT NULL,
        hash bytea NOT NULL,
        etag text,
        last_modified text,
        checked_at_ms bigint NOT NULL,
        requested_at_ms bigint NOT NULL,
        -- greatest(checked_at_ms, requested_at_ms), kept by every write, so that forgetting
        -- unused entries is a range of an index
        last_used_ms bigint NOT NULL
    );
    CREATE INDEX imgcas_urls_by_last_use ON imgcas_urls (last_used_ms);
    CREATE TABLE imgcas_originals (
        hash bytea PRIMARY KEY,
        format text,
        width integer,
        height integer,
        has_alpha boolean NOT NULL,
        bytes bigint NOT NULL,
        first_seen_ms bigint NOT NULL
    );
    CREATE TABLE imgcas_variants (
        hash bytea NOT NULL,
        processor_version integer NOT NULL,
        spec text NOT NULL,
        -- an image: its format, size and byte length (the bytes are in the blob store)
        format text,
        width integer,
        height integer,
        body_bytes bigint,
        -- a cached error: its kind (ProcessFailure::to_byte) and message
        failure smallint,
        message text,
        counted_bytes bigint NOT NULL,
        served_at_ms bigint NOT NULL,
        PRIMARY KEY (hash, processor_version, spec)
    );
    CREATE INDEX imgcas_variants_by_last_served ON imgcas_variants (served_at_ms);
    CREATE TABLE imgcas_variant_bytes (
        shard integer PRIMARY KEY,
        bytes bigint NOT NULL
    );
    INSERT INTO imgcas_variant_bytes (shard, bytes) VALUES
        (0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0), (7, 0),
        (8, 0), (9, 0), (10, 0), (11, 0), (12, 0), (13, 0), (14, 0), (15, 0);",
    // 2: claims on jobs (downloads, processing runs), held by one node until they expire.
    "CREATE TABLE imgcas_claims (
        key text PRIMARY KEY,
        owner text NOT NULL,
        -- changed by every write: the owner's proof that the claim is still its own
        token bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        renewed_at timestamptz NOT NULL
    );",
    // 3: near-duplicates — a fingerprint per original with its DCT hash cut into four 16-bit
    // bands, one B-tree each (multi-index hashing, `maps/near.rs`); aliases of near-duplicates
    // to their canonical original; and the canonical original a URL is served from.
    "CREATE TABLE imgcas_fingerprints (
        hash bytea PRIMARY KEY,
        version integer NOT NULL,
        -- NULL: the bytes are no picture (nothing to compare, nothing to compute again)
        phash bigint,
        block_hash bigint,
        colour bigint,
        width integer,
        height integer,
        band0 smallint, band1 smallint, band2 smallint, band3 smallint
    );
    CREATE INDEX imgcas_fingerprints_band0 ON imgcas_fingerprints (band0);
    CREATE INDEX imgcas_fingerprints_band1 ON imgcas_fingerprints (band1);
    CREATE INDEX imgcas_fingerprints_band2 ON imgcas_fingerprints (band2);
    CREATE INDEX imgcas_fingerprints_band3 ON imgcas_fingerprints (band3);
    CREATE TABLE imgcas_aliases (
        hash bytea PRIMARY KEY,
        canonical bytea NOT NULL
    );
    -- own hash ‖ canonical hash (64 bytes): valid only while `hash` is that own hash
    ALTER TABLE imgcas_urls ADD COLUMN canonical bytea;",
    // 4: takedowns — the URLs of a hash found by index (built over existing rows by the
    // CREATE INDEX itself), the takedown list, and the purge generation nodes poll to drop
    // what they hold in memory.
    "CREATE INDEX imgcas_urls_by_hash ON imgcas_urls (hash);
    -- (`canonical` holds own hash ‖ canonical hash: the index is on the canonical half)
    CREATE INDEX imgcas_urls_by_canonical ON imgcas_urls (substring(canonical from 33))
        WHERE canonical IS NOT NULL;
    CREATE TABLE imgcas_takedowns (
        hash bytea PRIMARY KEY,
        taken_down_ms bigint NOT NULL
    );
    CREATE TABLE imgcas_purge (
        id integer PRIMARY KEY,
        generation bigint NOT NULL
    );
    INSERT INTO imgcas_purge (id, generation) VALUES (1, 0);
    -- facts computed once from an original's pixels (placeholders, frames), as JSON
    ALTER TABLE imgcas_originals ADD COLUMN facts text;",
    // 5: an original's size once orientation is applied, read from its header when stored
    // (NULL for rows written before: their variants' routing reads the header instead).
    "ALTER TABLE imgcas_originals ADD COLUMN upright_width integer,
        ADD COLUMN upright_height integer;",
    // 6: the moderation blocklist, an entry's JSON by its id.
    "CREATE TABLE imgcas_blocklist (
        id text PRIMARY KEY,
        entry text NOT NULL
    );",
    // 7: a variant row keeps, when rewritten, the count it replaced, so that one statement
    // can both rewrite it and move the byte total by the difference (`PUT_VARIANT`).
    "ALTER TABLE imgcas_variants ADD COLUMN prior_counted bigint NOT NULL DEFAULT 0;",
    // 8: what a `q=auto` search chose for a variant: the encoder quality and the SSIMULACRA2
    // score in tenths (NULL for other variants, and a score NULL for an animation's).
    "ALTER TABLE imgcas_variants ADD COLUMN chosen_quality smallint,
        ADD COLUMN chosen_score smallint;",
    // 9: quotas the nodes spend together (issue 54, `maps/quotas.rs`): an origin's download
    // slots, pauses of an origin, token buckets (an origin's request rate, a tenant's
    // budget), and the origin failures held per URL. Every row expires on this server's
    // clock and is swept with the claims.
    "CREATE TABLE imgcas_origin_slots (
        origin text NOT NULL,
        slot integer NOT NULL,
        owner text NOT NULL,
        token bigint NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (origin, slot)
    );
    CREATE TABLE imgcas_origin_pauses (
        origin text PRIMARY KEY,
        until timestamptz NOT NULL
    );
    CREATE TABLE imgcas_buckets (
        key text PRIMARY KEY,
        level double precision NOT NULL,
        at timestamptz NOT NULL,
        -- when the bucket is full again if nothing takes from it (swept a minute after)
        full_at timestamptz NOT NULL
    );
    CREATE TABLE imgcas_url_failures (
        url_key text PRIMARY KEY,
        error text NOT NULL,
        streak integer NOT NULL,
        held_until timestamptz NOT NULL,
        remembered_until timestamptz NOT NULL
    );",
    // 10: the originals indexed by the version of their facts (0: none), kept by the
    // database from the facts' own JSON, so that the facts backfill reads only the originals
    // lacking current facts (a store whose facts are current: one index probe, no rows).
    "ALTER TABLE imgcas_originals ADD COLUMN facts_version integer
        GENERATED ALWAYS AS (COALESCE((facts::json ->> 'version')::integer, 0)) STORED;
    CREATE INDEX imgcas_originals_by_facts_version
        ON imgcas_originals (facts_version, hash);",
    // 11: the originals indexed by the version of their fingerprint (0: none), kept by the
    // fingerprint's write (and an original's, which finds one written before it), for the
    // fingerprint backfill as 10 is for the facts'.
    "ALTER TABLE imgcas_originals ADD COLUMN fingerprint_version integer NOT NULL DEFAULT 0;
    UPDATE imgcas_originals o SET fingerprint_version = f.version
        FROM imgcas_fingerprints f WHERE f.hash = o.hash;
    CREATE INDEX imgcas_originals_by_fingerprint_version
        ON imgcas_originals (fingerprint_version, hash);",
    // 12: where each long walk over the store stands (`maps/walk_log.rs`), one row per walk.
    "CREATE TABLE imgcas_walks (
        name text PRIMARY KEY,
        position text NOT NULL
    );",
    // 13: the store's totals kept as it changes (issue 69), so that `/admin` and `imgcas
    // stats` read sixteen rows instead of every URL and original. Per original served: its URLs
    // of its own bytes and of near-duplicate bytes (`imgcas_url_counts`); the sums, spread over
    // sixteen shards by the hash's first byte so that writers of different originals rarely
    // wait on one row (`imgcas_totals`). Triggers move them in the statement that writes a URL
    // entry or an original, whichever statement that is (bulk deletes included). Both
    // triggers take the served hash's counts row first, so a URL and its original written at
    // once by two nodes are counted in turn, each seeing the other. The URL map's bytes
    // (`url_row_bytes`) are kept alike, by the URL's own shard, and the variants' images,
    // bytes and errors (`variant_totals`) by their original's. Then the counts of the rows
    // already there, after the triggers exist (a write waits for this transaction, then counts
    // itself).
    "CREATE TABLE imgcas_url_counts (
        hash bytea PRIMARY KEY,
        exact bigint NOT NULL,
        near bigint NOT NULL
    );
    CREATE TABLE imgcas_totals (
        shard integer PRIMARY KEY,
        originals bigint NOT NULL DEFAULT 0,
        original_bytes bigint NOT NULL DEFAULT 0,
        urls bigint NOT NULL DEFAULT 0,
        pointed_bytes bigint NOT NULL DEFAULT 0,
        exact_saved_bytes bigint NOT NULL DEFAULT 0,
        near_urls bigint NOT NULL DEFAULT 0,
        near_saved_bytes bigint NOT NULL DEFAULT 0,
        -- what the URL entries count against limits.urls_max_bytes (`url_row_bytes`)
        url_bytes bigint NOT NULL DEFAULT 0,
        -- the variants: images stored, their bytes, cached errors (`VariantTotals`)
        variant_images bigint NOT NULL DEFAULT 0,
        variant_image_bytes bigint NOT NULL DEFAULT 0,
        variant_errors bigint NOT NULL DEFAULT 0
    );
    INSERT INTO imgcas_totals (shard) SELECT generate_series(0, 15);
    CREATE FUNCTION imgcas_url_row_bytes(url text, etag text, last_modified text)
        RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
        SELECT (2 * octet_length(url) + COALESCE(octet_length(etag), 0)
                + COALESCE(octet_length(last_modified), 0) + 160)::bigint $$;
    -- the original a URL row is served from, and whether by near-duplicate bytes (its
    -- canonical column names one only while its first half is the row's own hash)
    CREATE FUNCTION imgcas_serving(own bytea, canonical bytea) RETURNS bytea
        LANGUAGE sql IMMUTABLE AS $$
        SELECT CASE WHEN canonical IS NOT NULL AND length(canonical) = 64
                         AND substring(canonical for 32) = own
                    THEN substring(canonical from 33) ELSE own END $$;
    CREATE FUNCTION imgcas_count_url(served bytea, is_near boolean, step bigint) RETURNS void
        LANGUAGE plpgsql AS $$
        DECLARE
            e bigint; n bigint; b bigint;
        BEGIN
            INSERT INTO imgcas_url_counts AS c (hash, exact, near)
                VALUES (served, CASE WHEN is_near THEN 0 ELSE step END,
                        CASE WHEN is_near THEN step ELSE 0 END)
                ON CONFLICT (hash) DO UPDATE
                    SET exact = greatest(c.exact + EXCLUDED.exact, 0),
                        near = greatest(c.near + EXCLUDED.near, 0)
                RETURNING c.exact, c.near INTO e, n;
            SELECT bytes INTO b FROM imgcas_originals WHERE hash = served;
            UPDATE imgcas_totals SET
                urls = urls + step,
                pointed_bytes = pointed_bytes + coalesce(b, 0) * step,
                exact_saved_bytes = exact_saved_bytes + CASE
                    WHEN is_near OR b IS NULL THEN 0
                    WHEN step > 0 AND e >= 2 THEN b
                    WHEN step < 0 AND e >= 1 THEN -b
                    ELSE 0 END,
                near_urls = near_urls
                    + CASE WHEN is_near AND b IS NOT NULL THEN step ELSE 0 END,
                near_saved_bytes = near_saved_bytes
                    + CASE WHEN is_near THEN coalesce(b, 0) * step ELSE 0 END
              WHERE shard = get_byte(served, 0) % 16;
            DELETE FROM imgcas_url_counts WHERE hash = served AND exact = 0 AND near = 0;
        END $$;
    CREATE FUNCTION imgcas_count_url_row() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            old_served bytea; new_served bytea; old_near boolean; new_near boolean;
            row_bytes bigint := 0;
        BEGIN
            IF TG_OP <> 'INSERT' THEN
                old_served := imgcas_serving(OLD.hash, OLD.canonical);
                old_near := old_served <> OLD.hash;
                row_bytes := row_bytes
                    - imgcas_url_row_bytes(OLD.url, OLD.etag, OLD.last_modified);
            END IF;
            IF TG_OP <> 'DELETE' THEN
                new_served := imgcas_serving(NEW.hash, NEW.canonical);
                new_near := new_served <> NEW.hash;
                row_bytes := row_bytes
                    + imgcas_url_row_bytes(NEW.url, NEW.etag, NEW.last_modified);
            END IF;
            IF row_bytes <> 0 THEN
                UPDATE imgcas_totals SET url_bytes = url_bytes + row_bytes
                 WHERE shard = get_byte(coalesce(NEW.url_key, OLD.url_key), 0) % 16;
            END IF;
            IF old_served IS NOT DISTINCT FROM new_served
               AND old_near IS NOT DISTINCT FROM new_near THEN
                RETURN NULL;
            END IF;
            IF old_served IS NOT NULL THEN
                PERFORM imgcas_count_url(old_served, old_near, -1);
            END IF;
            IF new_served IS NOT NULL THEN
                PERFORM imgcas_count_url(new_served, new_near, 1);
            END IF;
            RETURN NULL;
        END $$;
    CREATE TRIGGER imgcas_count_urls
        AFTER INSERT OR DELETE OR UPDATE OF url, hash, canonical, etag, last_modified
        ON imgcas_urls FOR EACH ROW EXECUTE FUNCTION imgcas_count_url_row();
    CREATE FUNCTION imgcas_count_original_row() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            h bytea; b bigint; step bigint; e bigint; n bigint;
        BEGIN
            IF TG_OP = 'INSERT' THEN
                h := NEW.hash; b := NEW.bytes; step := 1;
            ELSE
                h := OLD.hash; b := OLD.bytes; step := -1;
            END IF;
            INSERT INTO imgcas_url_counts AS c (hash, exact, near) VALUES (h, 0, 0)
                ON CONFLICT (hash) DO UPDATE SET exact = c.exact
                RETURNING c.exact, c.near INTO e, n;
            UPDATE imgcas_totals SET
                originals = originals + step,
                original_bytes = original_bytes + b * step,
                pointed_bytes = pointed_bytes + b * (e + n) * step,
                exact_saved_bytes = exact_saved_bytes + b * greatest(e - 1, 0) * step,
                near_urls = near_urls + n * step,
                near_saved_bytes = near_saved_bytes + b * n * step
              WHERE shard = get_byte(h, 0) % 16;
            DELETE FROM imgcas_url_counts WHERE hash = h AND exact = 0 AND near = 0;
            RETURN NULL;
        END $$;
    CREATE TRIGGER imgcas_count_originals AFTER INSERT OR DELETE
        ON imgcas_originals FOR EACH ROW EXECUTE FUNCTION imgcas_count_original_row();
    CREATE FUNCTION imgcas_count_variant_row() RETURNS trigger LANGUAGE plpgsql AS $$
        DECLARE
            images bigint := 0; image_bytes bigint := 0; errors bigint := 0;
            h bytea;
        BEGIN
            IF TG_OP <> 'INSERT' THEN
                h := OLD.hash;
                IF OLD.failure IS NULL THEN
                    images := images - 1;
                    image_bytes := image_bytes - coalesce(OLD.body_bytes, 0);
                ELSE
                    errors := errors - 1;
                END IF;
            END IF;
            IF TG_OP <> 'DELETE' THEN
                h := NEW.hash;
                IF NEW.failure IS NULL THEN
                    images := images + 1;
                    image_bytes := image_bytes + coalesce(NEW.body_bytes, 0);
                ELSE
                    errors := errors + 1;
                END IF;
            END IF;
            IF images <> 0 OR image_bytes <> 0 OR errors <> 0 THEN
                UPDATE imgcas_totals SET variant_images = variant_images + images,
                       variant_image_bytes = variant_image_bytes + image_bytes,
                       variant_errors = variant_errors + errors
                 WHERE shard = get_byte(h, 0) % 16;
            END IF;
            RETURN NULL;
        END $$;
    CREATE TRIGGER imgcas_count_variants AFTER INSERT OR DELETE OR UPDATE OF failure, body_bytes
        ON imgcas_variants FOR EACH ROW EXECUTE FUNCTION imgcas_count_variant_row();
    INSERT INTO imgcas_url_counts (hash, exact, near)
        SELECT imgcas_serving(hash, canonical),
               count(*) FILTER (WHERE imgcas_serving(hash, canonical) = hash),
               count(*) FILTER (WHERE imgcas_serving(hash, canonical) <> hash)
          FROM imgcas_urls GROUP BY 1;
    UPDATE imgcas_totals t SET
        originals = s.originals, original_bytes = s.original_bytes, urls = s.urls,
        pointed_bytes = s.pointed_bytes, exact_saved_bytes = s.exact_saved_bytes,
        near_urls = s.near_urls, near_saved_bytes = s.near_saved_bytes
      FROM (SELECT get_byte(o.hash, 0) % 16 AS shard,
                   count(*) AS originals, sum(o.bytes) AS original_bytes, 0 AS urls,
                   sum(o.bytes * (coalesce(c.exact, 0) + coalesce(c.near, 0))) AS pointed_bytes,
                   sum(o.bytes * greatest(coalesce(c.exact, 0) - 1, 0)) AS exact_saved_bytes,
                   sum(coalesce(c.near, 0)) AS near_urls,
                   sum(o.bytes * coalesce(c.near, 0)) AS near_saved_bytes
              FROM imgcas_originals o LEFT JOIN imgcas_url_counts c ON c.hash = o.hash
             GROUP BY 1) s
     WHERE t.shard = s.shard;
    UPDATE imgcas_totals t SET urls = s.urls
      FROM (SELECT get_byte(hash, 0) % 16 AS shard, sum(exact + near) AS urls
              FROM imgcas_url_counts GROUP BY 1) s
     WHERE t.shard = s.shard;
    UPDATE imgcas_totals t SET url_bytes = s.url_bytes
      FROM (SELECT get_byte(url_key, 0) % 16 AS shard,
                   sum(imgcas_url_row_bytes(url, etag, last_modified)) AS url_bytes
              FROM imgcas_urls GROUP BY 1) s
     WHERE t.shard = s.shard;
    UPDATE imgcas_totals t SET variant_images = s.images, variant_image_bytes = s.bytes,
           variant_errors = s.errors
      FROM (SELECT get_byte(hash, 0) % 16 AS shard,
                   count(*) FILTER (WHERE failure IS NULL) AS images,
                   coalesce(sum(body_bytes) FILTER (WHERE failure IS NULL), 0) AS bytes,
                   count(*) FILTER (WHERE failure IS NOT NULL) AS errors
              FROM imgcas_variants GROUP BY 1) s
     WHERE t.shard = s.shard;",
    // 14: the focal point set for an original (`PUT /v1/originals/{hash}/focus`), as JSON.
    "ALTER TABLE imgcas_originals ADD COLUMN focus text;",
];

/// Brings the schema to this binary's version. Safe to run from many nodes at once.
pub(super) async fn migrate(session: &mut Session) -> Result<(), MapError> {
    create_version_table(session).await?;
    session
        .execute(
            "INSERT INTO imgcas_schema (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
            params![],
        )
        .await?;
    let txn = session.begin().await?;
    // Every node starting now waits here until the one ahead of it has committed.
    let rows = txn
        .query(
            "SELECT version FROM imgcas_schema WHERE id = 1 FOR UPDATE",
            params![],
        )
        .await?;
    let version: i32 = match rows.first() {
        Some(row) => row.try_get(0).map_err(store_error)?,
        None => return Err(MapError::Corrupt("imgcas_schema has no row".into())),
    };
    let known = MIGRATIONS.len() as i32;
    if version > known {
        return Err(MapError::Store(format!(
            "the maps' schema is at version {version}, newer than this binary's {known}: \
             run a newer imgcas"
        )));
    }
    for sql in &MIGRATIONS[version as usize..] {
        txn.batch(sql).await?;
    }
    if version < known {
        txn.execute(
            "UPDATE imgcas_schema SET version = $1 WHERE id = 1",
            params![known],
        )
        .await?;
        tracing::info!(from = version, to = known, "maps schema migrated");
    }
    txn.commit().await
}

/// `CREATE TABLE IF NOT EXISTS` is not safe against itself: two sessions creating the table
/// at once can both pass the check, and the loser then fails on the catalog (as a unique
/// violation, or "type … already exists"). It only needs to look again.
async fn create_version_table(session: &Session) -> Result<(), MapError> {
    let mut attempt = 0;
    loop {
        let created = session
            .batch(
                "CREATE TABLE IF NOT EXISTS imgcas_schema (
                    id integer PRIMARY KEY,
                    version integer NOT NULL
                )",
            )
            .await;
        match created {
            Ok(()) => return Ok(()),
            Err(e)
                if attempt < 5
                    && matches!(
                        e.code(),
                        Some(&SqlState::UNIQUE_VIOLATION)
                            | Some(&SqlState::DUPLICATE_TABLE)
                            | Some(&SqlState::DUPLICATE_OBJECT)
                    ) =>
            {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(20 * attempt)).await;
            }
            Err(e) => return Err(store_error(e)),
        }
    }
}
