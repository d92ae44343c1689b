//! The maps on PostgreSQL (`maps.url = "postgres://…"`): one database shared by every node
//! of a cluster, so what one node learned (a URL's hash, an upload, a variant) every node
//! knows.
//!
//! What it owns: a pool of connections (deadpool over tokio-postgres), the schema
//! (`schema.rs`, migrated at open) and the rows' encoding, here; each role of [`MapStore`]
//! is implemented in a file of its own (`urls.rs`, `originals.rs`, `fingerprints.rs`,
//! `variants.rs`, `takedowns.rs`, `blocklist.rs`, `claims.rs`). Unlike the embedded file, the rows
//! do not hold variant bytes: those are in the blob store (the bucket all nodes share), and a
//! row says only how long they are ([`VariantBody::InBlobStore`]). Every write is committed
//! before it returns, so [`MapStore::flush`] has nothing to do.
//!
//! This store keeps no memory of its rows: [`Cached`] wears it as a shared store (URL
//! entries remembered for a second, the last one seen answered through an outage).
//! Originals are remembered too: an index entry changes only when its facts are added (a
//! node whose memory predates them computes them once more, and keeps the same), and only
//! `verify --repair` and a takedown drop one; a takedown moves the purge generation, on
//! which every node drops its memory ([`MapStore::drop_memory`]).
//!
//! The variants' byte total is kept in [`schema::BYTE_SHARDS`] counter rows, changed in the
//! transaction that changes a variant, so the budget check is a sixteen-row read however many
//! variants there are.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use imgcas_processors::{OutputFormat, ProcessFailure, FINGERPRINT_VERSION};

use super::cache::Cached;
use super::{
    near, now_ms, BlockEntry, Blocklist, Claim, ClaimOutcome, Claims, Evicted, Fingerprint,
    Fingerprinted, Fingerprints, MapError, MapStore, NearMatch, OriginalFacts, OriginalInfo,
    Originals, Takedowns, UrlEntry, UrlMap, VariantBody, VariantKey, VariantRow, VariantTotals,
    Variants,
};
use crate::hash::ContentHash;

mod blocklist;
mod claims;
mod connect;
mod fingerprints;
mod originals;
mod schema;
mod takedowns;
mod urls;
mod variants;

/// Connections per node. Each request needs one only for the length of a statement, so a few
/// dozen serve thousands of requests a second; three nodes stay well under the server's
/// default limit of 100.
const POOL_SIZE: usize = 16;
/// How long a statement may wait for a connection, or a connection take to open, before the
/// maps count as unavailable (503 `storage_unavailable`, not a hung request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// [`super::url_row_bytes`] in SQL, over a row of `imgcas_urls`.
const URL_ROW_BYTES: &str = "(2 * octet_length(url) + COALESCE(octet_length(etag), 0) \
     + COALESCE(octet_length(last_modified), 0) + 160)::bigint";
/// Least recently served variants considered per eviction round.
const EVICTION_BATCH: i64 = 1_000;
/// URL entries dropped per statement when forgetting (short transactions).
const FORGET_BATCH: i64 = 10_000;
/// What a variant row costs beyond its key and bytes (row header, index entries), counted
/// against the budget so that many tiny variants are not free.
const ROW_OVERHEAD: i64 = 64;

pub(super) fn store_error(e: tokio_postgres::Error) -> MapError {
    // The driver's Display of a server error is only "db error"; the server's message is
    // what an operator needs.
    match e.as_db_error() {
        Some(db) => MapError::Store(format!("PostgreSQL: {}", db.message())),
        None => MapError::Store(format!("PostgreSQL: {}", connect::describe(&e))),
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> MapError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => store_error(e),
        e => MapError::Store(format!("PostgreSQL: {e}")),
    }
}

/// The maps' tables in one database. Its memory of rows is [`Cached`]'s, which every
/// handle given out wears ([`PostgresMaps`]).
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
}

/// The shared maps as the service uses them: the database, with this node's memory.
pub type PostgresMaps = Cached<PostgresStore>;

impl PostgresMaps {
    /// Connects to `url` and brings the schema up to date.
    pub async fn open(url: &str) -> Result<PostgresMaps, MapError> {
        PostgresMaps::open_with(url, None).await
    }

    /// [`PostgresMaps::open`], the password read from `password_file` when `url` names none.
    pub async fn open_with(
        url: &str,
        password_file: Option<&Path>,
    ) -> Result<PostgresMaps, MapError> {
        Ok(Cached::new(PostgresStore::open(url, password_file).await?))
    }
}

impl PostgresStore {
    /// Connects to `url` (TLS and password: `connect.rs`) and brings the schema up to date
    /// (a store without memory).
    pub async fn open(url: &str, password_file: Option<&Path>) -> Result<PostgresStore, MapError> {
        let (mut config, tls) = connect::connect_config(url, password_file)?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("imgcas");
        }
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| MapError::Store(format!("PostgreSQL pool: {e}")))?;
        let maps = PostgresStore { pool };
        let mut client = maps.client().await?;
        schema::migrate(&mut client).await?;
        Ok(maps)
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, MapError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// Runs one statement on a pooled connection.
    async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, MapError> {
        let client = self.client().await?;
        client.execute(sql, params).await.map_err(store_error)
    }

    async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>, MapError> {
        let client = self.client().await?;
        client.query(sql, params).await.map_err(store_error)
    }
}

/// `u64` milliseconds as PostgreSQL's `bigint` (saturating: no stamp is that far off).
fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn hash_of(row: &Row, column: &str) -> Result<ContentHash, MapError> {
    let raw: &[u8] = row.try_get(column).map_err(store_error)?;
    ContentHash::from_slice(raw).ok_or_else(|| MapError::Corrupt(format!("{column}: not a hash")))
}

fn dimension(v: Option<i32>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok())
}

fn url_entry(row: &Row) -> Result<UrlEntry, MapError> {
    let hash = hash_of(row, "hash")?;
    Ok(UrlEntry {
        hash,
        etag: row.try_get("etag").map_err(store_error)?,
        last_modified: row.try_get("last_modified").map_err(store_error)?,
        checked_at_ms: unsigned(row.try_get("checked_at_ms").map_err(store_error)?),
        requested_at_ms: unsigned(row.try_get("requested_at_ms").map_err(store_error)?),
        // `own hash ‖ canonical hash`: a node of the release before canonical mode that
        // rewrites the row for new bytes leaves the column as it was, and it then names
        // other bytes than the row's: such a mapping no longer holds.
        canonical: row
            .try_get::<_, Option<&[u8]>>("canonical")
            .map_err(store_error)?
            .filter(|raw| raw.len() == 64 && raw[..32] == hash.0)
            .and_then(|raw| ContentHash::from_slice(&raw[32..])),
    })
}

/// A row of `imgcas_fingerprints` (of the current version).
fn fingerprinted(row: &Row) -> Result<Fingerprinted, MapError> {
    let get = |c: &str| -> Result<Option<i64>, MapError> { row.try_get(c).map_err(store_error) };
    let dim = |c: &str| -> Result<u32, MapError> {
        Ok(dimension(row.try_get(c).map_err(store_error)?).unwrap_or(0))
    };
    Ok(match (get("phash")?, get("block_hash")?, get("colour")?) {
        (Some(phash), Some(block_hash), Some(colour)) => Fingerprinted::Picture(Fingerprint {
            phash: phash as u64,
            block_hash: block_hash as u64,
            colour: colour as u64,
            width: dim("width")?,
            height: dim("height")?,
        }),
        _ => Fingerprinted::NotAPicture,
    })
}

fn original_info(row: &Row) -> Result<OriginalInfo, MapError> {
    Ok(OriginalInfo {
        format: row.try_get("format").map_err(store_error)?,
        width: dimension(row.try_get("width").map_err(store_error)?),
        height: dimension(row.try_get("height").map_err(store_error)?),
        upright: dimension(row.try_get("upright_width").map_err(store_error)?).zip(dimension(
            row.try_get("upright_height").map_err(store_error)?,
        )),
        has_alpha: row.try_get("has_alpha").map_err(store_error)?,
        bytes: unsigned(row.try_get("bytes").map_err(store_error)?),
        first_seen_ms: unsigned(row.try_get("first_seen_ms").map_err(store_error)?),
        // Facts a newer release wrote in a shape this one does not read are computed again.
        facts: row
            .try_get::<_, Option<String>>("facts")
            .map_err(store_error)?
            .and_then(|json| serde_json::from_str(&json).ok()),
    })
}

fn variant_key(row: &Row) -> Result<VariantKey, MapError> {
    let version: i32 = row.try_get("processor_version").map_err(store_error)?;
    Ok(VariantKey {
        hash: hash_of(row, "hash")?,
        canonical_spec: row.try_get("spec").map_err(store_error)?,
        processor_version: version as u32,
    })
}

fn variant_row(row: &Row) -> Result<VariantRow, MapError> {
    let failure: Option<i16> = row.try_get("failure").map_err(store_error)?;
    if let Some(code) = failure {
        let kind = u8::try_from(code)
            .ok()
            .and_then(ProcessFailure::from_byte)
            .ok_or_else(|| MapError::Corrupt(format!("variant failure kind {code}")))?;
        let message: Option<String> = row.try_get("message").map_err(store_error)?;
        return Ok(VariantRow::Failed {
            kind,
            message: message.unwrap_or_default(),
        });
    }
    let format: Option<String> = row.try_get("format").map_err(store_error)?;
    let format = format
        .as_deref()
        .and_then(OutputFormat::from_name)
        .ok_or_else(|| MapError::Corrupt(format!("variant format {format:?}")))?;
    let width: Option<i32> = row.try_get("width").map_err(store_error)?;
    let height: Option<i32> = row.try_get("height").map_err(store_error)?;
    let len: Option<i64> = row.try_get("body_bytes").map_err(store_error)?;
    Ok(VariantRow::Image {
        format,
        width: dimension(width).unwrap_or(0),
        height: dimension(height).unwrap_or(0),
        body: VariantBody::InBlobStore {
            len: unsigned(len.unwrap_or(0)),
        },
    })
}

/// The columns a variant row sets, in the order the statements below bind them.
struct VariantColumns {
    format: Option<&'static str>,
    width: Option<i32>,
    height: Option<i32>,
    body_bytes: Option<i64>,
    failure: Option<i16>,
    message: Option<String>,
    counted_bytes: i64,
}

impl VariantColumns {
    fn of(key: &VariantKey, row: &VariantRow) -> Result<VariantColumns, MapError> {
        let key_bytes = (32 + 4 + key.canonical_spec.len()) as i64;
        Ok(match row {
            VariantRow::Image {
                format,
                width,
                height,
                body,
            } => {
                let VariantBody::InBlobStore { len } = body else {
                    return Err(MapError::Store(
                        "PostgreSQL maps keep variant bytes in the blob store, not in rows".into(),
                    ));
                };
                let len = ms(*len);
                VariantColumns {
                    format: Some(format.name()),
                    width: i32::try_from(*width).ok(),
                    height: i32::try_from(*height).ok(),
                    body_bytes: Some(len),
                    failure: None,
                    message: None,
                    counted_bytes: key_bytes + len + ROW_OVERHEAD,
                }
            }
            VariantRow::Failed { kind, message } => VariantColumns {
                format: None,
                width: None,
                height: None,
                body_bytes: None,
                failure: Some(i16::from(kind.to_byte())),
                message: Some(message.clone()),
                counted_bytes: key_bytes + message.len() as i64 + ROW_OVERHEAD,
            },
        })
    }
}

/// The counter row a variant's bytes are counted in.
fn shard_of(hash: &ContentHash) -> i32 {
    i32::from(hash.as_bytes()[0]) % schema::BYTE_SHARDS
}

async fn add_bytes(client: &impl GenericClient, shard: i32, delta: i64) -> Result<(), MapError> {
    if delta != 0 {
        client
            .execute(
                "UPDATE imgcas_variant_bytes SET bytes = bytes + $2 WHERE shard = $1",
                &[&shard, &delta],
            )
            .await
            .map_err(store_error)?;
    }
    Ok(())
}

/// A URL's key in `imgcas_urls` and in claims: its SHA-256, so that URLs of any length fit
/// an index entry (PostgreSQL refuses index entries over ~2.7 KB, and URLs can be longer).
pub(super) fn url_key(url: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(url.as_bytes()).to_vec()
}

const UPSERT_URL: &str = "INSERT INTO imgcas_urls
        (url_key, url, hash, etag, last_modified, checked_at_ms, requested_at_ms, last_used_ms,
         canonical)
    VALUES ($8, $1, $2, $3, $4, $5, $6, $7, $9)
    ON CONFLICT (url_key) DO UPDATE SET hash = EXCLUDED.hash, etag = EXCLUDED.etag,
        canonical = EXCLUDED.canonical,
        last_modified = EXCLUDED.last_modified, checked_at_ms = EXCLUDED.checked_at_ms,
        requested_at_ms = EXCLUDED.requested_at_ms, last_used_ms = EXCLUDED.last_used_ms";

async fn put_url_on(
    client: &impl GenericClient,
    url: &str,
    entry: &UrlEntry,
) -> Result<(), MapError> {
    let hash: &[u8] = entry.hash.as_bytes();
    let canonical: Option<Vec<u8>> = entry
        .canonical
        .map(|c| [entry.hash.as_bytes().as_slice(), c.as_bytes()].concat());
    client
        .execute(
            UPSERT_URL,
            &[
                &url,
                &hash,
                &entry.etag,
                &entry.last_modified,
                &ms(entry.checked_at_ms),
                &ms(entry.requested_at_ms),
                &ms(entry.last_used_ms()),
                &url_key(url),
                &canonical,
            ],
        )
        .await
        .map_err(store_error)?;
    Ok(())
}

const INSERT_ORIGINAL: &str = "INSERT INTO imgcas_originals
        (hash, format, width, height, has_alpha, bytes, first_seen_ms, facts,
         upright_width, upright_height)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
    ON CONFLICT (hash) DO NOTHING";

async fn insert_original_on(
    client: &impl GenericClient,
    hash: &ContentHash,
    info: &OriginalInfo,
) -> Result<bool, MapError> {
    let raw: &[u8] = hash.as_bytes();
    let width = info.width.and_then(|v| i32::try_from(v).ok());
    let height = info.height.and_then(|v| i32::try_from(v).ok());
    let facts = facts_json(info.facts.as_ref())?;
    let upright = info
        .upright
        .and_then(|(w, h)| Some((i32::try_from(w).ok()?, i32::try_from(h).ok()?)));
    let inserted = client
        .execute(
            INSERT_ORIGINAL,
            &[
                &raw,
                &info.format,
                &width,
                &height,
                &info.has_alpha,
                &ms(info.bytes),
                &ms(info.first_seen_ms),
                &facts,
                &upright.map(|(w, _)| w),
                &upright.map(|(_, h)| h),
            ],
        )
        .await
        .map_err(store_error)?;
    Ok(inserted == 1)
}

fn facts_json(facts: Option<&OriginalFacts>) -> Result<Option<String>, MapError> {
    facts
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| MapError::Corrupt(e.to_string()))
}

/// The keys of a batch as three arrays, for `unnest`.
fn key_arrays(keys: &[&VariantKey]) -> (Vec<Vec<u8>>, Vec<i32>, Vec<String>) {
    (
        keys.iter().map(|k| k.hash.as_bytes().to_vec()).collect(),
        keys.iter().map(|k| k.processor_version as i32).collect(),
        keys.iter().map(|k| k.canonical_spec.clone()).collect(),
    )
}

#[async_trait]
impl MapStore for PostgresStore {
    async fn flush(&self) -> Result<(), MapError> {
        // Every write committed before it returned.
        Ok(())
    }

    async fn compact(&self) -> Result<bool, MapError> {
        // PostgreSQL reclaims dead rows itself (autovacuum); nothing waits on imgcas for it.
        Ok(false)
    }

    async fn check(&self) -> Result<(), MapError> {
        self.query("SELECT 1", &[]).await.map(|_| ())
    }
}

impl PostgresStore {
    /// Deletes these variants and takes their bytes off the count, in one transaction;
    /// returns the keys that were stored.
    async fn remove_keys(&self, keys: &[VariantKey]) -> Result<Vec<VariantKey>, MapError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let refs: Vec<&VariantKey> = keys.iter().collect();
        let (hashes, versions, specs) = key_arrays(&refs);
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(store_error)?;
        // Rows are locked in key order first: two nodes evicting the same least recently
        // served rows at once then queue behind each other instead of deadlocking.
        txn.execute(
            "SELECT 1 FROM imgcas_variants AS v
               JOIN (SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[])
                       AS t (hash, version, spec)) AS d
                 ON v.hash = d.hash AND v.processor_version = d.version AND v.spec = d.spec
              ORDER BY v.hash, v.processor_version, v.spec
                FOR UPDATE OF v",
            &[&hashes, &versions, &specs],
        )
        .await
        .map_err(store_error)?;
        let rows = txn
            .query(
                "DELETE FROM imgcas_variants AS v
                  USING (SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[])
                           AS t (hash, version, spec)) AS d
                  WHERE v.hash = d.hash AND v.processor_version = d.version AND v.spec = d.spec
                  RETURNING v.hash, v.processor_version, v.spec, v.counted_bytes",
                &[&hashes, &versions, &specs],
            )
            .await
            .map_err(store_error)?;
        let mut by_shard = std::collections::BTreeMap::<i32, i64>::new();
        let mut gone = Vec::with_capacity(rows.len());
        for row in &rows {
            let key = variant_key(row)?;
            let counted: i64 = row.try_get("counted_bytes").map_err(store_error)?;
            *by_shard.entry(shard_of(&key.hash)).or_default() += counted;
            gone.push(key);
        }
        for (shard, bytes) in by_shard {
            add_bytes(&txn, shard, -bytes).await?;
        }
        txn.commit().await.map_err(store_error)?;
        Ok(gone)
    }
}

impl PostgresStore {
    /// Stores a variant row, under a claim when one is given (checked in the same
    /// transaction, with the claim's row locked so it cannot change hands before commit).
    async fn write_variant(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: Option<&Claim>,
    ) -> Result<(), MapError> {
        let c = VariantColumns::of(key, row)?;
        let raw: &[u8] = key.hash.as_bytes();
        let version = key.processor_version as i32;
        let now = ms(now_ms());
        // $1–$3 the key, $4–$10 the row, $11 now: one list for both statements below.
        let params: [&(dyn ToSql + Sync); 11] = [
            &raw,
            &version,
            &key.canonical_spec,
            &c.format,
            &c.width,
            &c.height,
            &c.body_bytes,
            &c.failure,
            &c.message,
            &c.counted_bytes,
            &now,
        ];
        let mut client = self.client().await?;
        // Insert, or else replace under a row lock; either way the byte count moves by
        // exactly the difference, even with another node writing the same key at once
        // (the insert waits for its commit, then finds the row and takes the update path).
        loop {
            let txn = client.transaction().await.map_err(store_error)?;
            if let Some(claim) = claim {
                let held = txn
                    .query_opt(
                        "SELECT 1 FROM imgcas_claims WHERE key = $1 AND token = $2 FOR SHARE",
                        &[&claim.key, &claim.token],
                    )
                    .await
                    .map_err(store_error)?;
                if held.is_none() {
                    return Err(MapError::ClaimLost(format!(
                        "{} changed hands; the result is not stored",
                        claim.key
                    )));
                }
            }
            let inserted = txn
                .execute(
                    "INSERT INTO imgcas_variants (hash, processor_version, spec, format, width,
                        height, body_bytes, failure, message, counted_bytes, served_at_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                     ON CONFLICT (hash, processor_version, spec) DO NOTHING",
                    &params,
                )
                .await
                .map_err(store_error)?;
            let delta = if inserted == 1 {
                c.counted_bytes
            } else {
                let old = txn
                    .query_opt(
                        "SELECT counted_bytes FROM imgcas_variants
                          WHERE hash = $1 AND processor_version = $2 AND spec = $3 FOR UPDATE",
                        &[&raw, &version, &key.canonical_spec],
                    )
                    .await
                    .map_err(store_error)?;
                // Evicted between the two statements: start again.
                let Some(old) = old else { continue };
                let old: i64 = old.get(0);
                txn.execute(
                    "UPDATE imgcas_variants SET format = $4, width = $5, height = $6,
                        body_bytes = $7, failure = $8, message = $9, counted_bytes = $10,
                        served_at_ms = GREATEST(served_at_ms, $11)
                      WHERE hash = $1 AND processor_version = $2 AND spec = $3",
                    &params,
                )
                .await
                .map_err(store_error)?;
                c.counted_bytes - old
            };
            add_bytes(&txn, shard_of(&key.hash), delta).await?;
            return txn.commit().await.map_err(store_error);
        }
    }
}
