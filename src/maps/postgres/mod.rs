//! The maps on PostgreSQL (`maps.url = "postgres://…"`): one database shared by every node
//! of a cluster, so what one node learned (a URL's hash, an upload, a variant) every node
//! knows.
//!
//! What it owns: a pool of connections (deadpool over tokio-postgres; how they connect, TLS
//! included, is `connect.rs`), the schema (`schema.rs`, migrated at open) and the rows'
//! encoding, here; how a statement is sent and counted (`sql.rs`: typed, unnamed, one round
//! trip, nothing a transaction pooler would lose); each role of [`MapStore`] is implemented
//! in a file of its own (`urls.rs`, `originals.rs`, `fingerprints.rs`, `variants.rs`,
//! `takedowns.rs`, `blocklist.rs`, `claims.rs`), its statements named constants beside it.
//! Unlike the embedded file, the rows do not hold variant bytes: those are in the blob store
//! (the bucket all nodes share), and a row says only how long they are
//! ([`VariantBody::InBlobStore`]). Every write is committed before it returns, so
//! [`MapStore::flush`] has nothing to do.
//!
//! This store keeps no memory of its rows: [`Cached`] wears it as a shared store (URL
//! entries remembered for a second, the last one seen answered through an outage).
//! Originals are remembered too: an index entry changes only when its facts are added (a
//! node whose memory predates them computes them once more, and keeps the same), and only
//! `verify --repair` and a takedown drop one; a takedown moves the purge generation, on
//! which every node drops its memory ([`MapStore::drop_memory`]).
//!
//! The variants' byte total is kept in [`schema::BYTE_SHARDS`] counter rows, changed by the
//! statement that changes a variant, so the budget check is a sixteen-row read however many
//! variants there are.
//!
//! A request waits on few statements: each write that ends a job also gives its claim up
//! and reads the takedown list ([`super::ListedAtWrite`]), in one statement.

use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::Row;

use imgcas_processors::{Chosen, OutputFormat, ProcessFailure, FINGERPRINT_VERSION};

use super::cache::Cached;
use super::{
    near, now_ms, BlockEntry, Blocklist, Claim, ClaimOutcome, Claims, Evicted, Fingerprint,
    Fingerprinted, Fingerprints, Focus, ListedAtWrite, MapError, MapStore, NearFound, NearMatch,
    OriginalFacts, OriginalInfo, Originals, Recorded, Takedowns, UrlEntry, UrlMap, VariantBody,
    VariantKey, VariantRow, VariantTotals, Variants, VersionCursor,
};
use crate::hash::ContentHash;
use sql::{params, Params, RoundTrips, Run, Session, Statement};

// SQL shared by several statements, as macros: statements are constants put together with
// `concat!` (declared before the files that use them).
/// [`super::url_row_bytes`] in SQL, over a row of `imgcas_urls` (a macro: statements are
/// constants put together with `concat!`).
macro_rules! url_row_bytes {
    () => {
        "(2 * octet_length(url) + COALESCE(octet_length(etag), 0)
          + COALESCE(octet_length(last_modified), 0) + 160)::bigint"
    };
}

/// A URL entry written (kept, or replacing the one stored), its values in `VALUES (…)`:
/// `url_key, url, hash, etag, last_modified, checked_at_ms, requested_at_ms, last_used_ms,
/// canonical`.
macro_rules! upsert_url {
    ($values:literal) => {
        concat!(
            "INSERT INTO imgcas_urls (url_key, url, hash, etag, last_modified, checked_at_ms,
                 requested_at_ms, last_used_ms, canonical)
             VALUES ",
            $values,
            " ON CONFLICT (url_key) DO UPDATE SET hash = EXCLUDED.hash,
                 etag = EXCLUDED.etag, canonical = EXCLUDED.canonical,
                 last_modified = EXCLUDED.last_modified, checked_at_ms = EXCLUDED.checked_at_ms,
                 requested_at_ms = EXCLUDED.requested_at_ms, last_used_ms = EXCLUDED.last_used_ms"
        )
    };
}

/// An originals index row (`$1`–`$10`), kept as it is when the hash has one.
macro_rules! insert_original {
    () => {
        "INSERT INTO imgcas_originals
             (hash, format, width, height, has_alpha, bytes, first_seen_ms, facts,
              upright_width, upright_height, fingerprint_version)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
                 (SELECT COALESCE(max(version), 0) FROM imgcas_fingerprints WHERE hash = $1))
         ON CONFLICT (hash) DO NOTHING"
    };
}

mod blocklist;
mod claims;
mod connect;
mod fingerprints;
mod originals;
mod quotas;
mod schema;
mod sql;
mod takedowns;
mod urls;
mod variants;
mod walk_log;

/// Connections per node unless `maps.pool_size` says otherwise. Each request needs one only
/// for the length of a statement, so a few dozen serve thousands of requests a second.
pub const DEFAULT_POOL_SIZE: usize = 16;
/// How long a statement may wait for a connection, or a connection take to open, before the
/// maps count as unavailable (503 `storage_unavailable`, not a hung request). A server at its
/// connection limit (`too many clients`) is asked again within the same time.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The first pause before asking a server at its connection limit again; doubled each time.
const CONNECT_RETRY_PAUSE: Duration = Duration::from_millis(10);
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

/// Whether a failure to get a connection is the server refusing one for now (its
/// connection limit, or starting up), which a moment's wait may cure.
fn refused_for_now(e: &deadpool_postgres::PoolError) -> bool {
    match e {
        deadpool_postgres::PoolError::Backend(e) => e.code().is_some_and(|code| {
            *code == SqlState::TOO_MANY_CONNECTIONS || *code == SqlState::CANNOT_CONNECT_NOW
        }),
        _ => false,
    }
}

/// The maps' tables in one database. Its memory of rows is [`Cached`]'s, which every
/// handle given out wears ([`PostgresMaps`]).
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    trips: RoundTrips,
    /// Purge generation reads so far: every [`CLAIMS_SWEPT_EVERY`]th also sweeps claims.
    generation_reads: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// How long a published result's claim stays as a tombstone (see `claims.rs`).
const TOMBSTONE_SECS: f64 = 5.0;
/// Every how many purge generation reads (one a second per node) expired claims are swept.
const CLAIMS_SWEPT_EVERY: u64 = 30;

/// How a node connects besides its URL.
#[derive(Clone, Debug)]
pub struct PgOptions {
    /// Connections this node keeps at most (`maps.pool_size`).
    pub pool_size: usize,
    /// Where the password is read when the URL names none (`maps.password_file`).
    pub password_file: Option<std::path::PathBuf>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            pool_size: DEFAULT_POOL_SIZE,
            password_file: None,
        }
    }
}

impl PgOptions {
    /// The options the configuration's `maps` section gives.
    pub fn of(maps: &crate::config::MapsConfig) -> PgOptions {
        PgOptions {
            pool_size: maps.pool_size.unwrap_or(DEFAULT_POOL_SIZE),
            password_file: maps.password_file.clone(),
        }
    }
}

/// The shared maps as the service uses them: the database, with this node's memory.
pub type PostgresMaps = Cached<PostgresStore>;

impl PostgresMaps {
    /// Connects to `url` and brings the schema up to date.
    pub async fn open(url: &str) -> Result<PostgresMaps, MapError> {
        PostgresMaps::open_with(url, &PgOptions::default()).await
    }

    /// [`PostgresMaps::open`] with these options (the pool's size, the password file).
    pub async fn open_with(url: &str, options: &PgOptions) -> Result<PostgresMaps, MapError> {
        Ok(Cached::new(PostgresStore::open_with(url, options).await?))
    }
}

impl PostgresStore {
    /// Connects to `url` and brings the schema up to date (a store without memory).
    pub async fn open(url: &str) -> Result<PostgresStore, MapError> {
        PostgresStore::open_with(url, &PgOptions::default()).await
    }

    /// [`PostgresStore::open`] with these options: TLS and the password as `connect.rs`
    /// reads them, the pool as large as `options` says.
    pub async fn open_with(url: &str, options: &PgOptions) -> Result<PostgresStore, MapError> {
        let (mut config, tls) = connect::connect_config(url, options.password_file.as_deref())?;
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
            .max_size(options.pool_size.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| MapError::Store(format!("PostgreSQL pool: {e}")))?;
        let maps = PostgresStore {
            pool,
            trips: RoundTrips::default(),
            generation_reads: Default::default(),
        };
        let mut session = maps.session("migrate").await?;
        schema::migrate(&mut session).await?;
        Ok(maps)
    }

    /// A pooled connection for one map operation, its round trips counted under `op`.
    /// Waits while the pool is full or the server at its connection limit, up to
    /// [`CONNECT_TIMEOUT`] in all.
    async fn session(&self, op: &'static str) -> Result<Session, MapError> {
        let deadline = tokio::time::Instant::now() + CONNECT_TIMEOUT;
        let mut pause = CONNECT_RETRY_PAUSE;
        let client = loop {
            match self.pool.get().await {
                Ok(client) => break client,
                Err(e) if refused_for_now(&e) => {
                    let now = tokio::time::Instant::now();
                    if now + pause >= deadline {
                        return Err(pool_error(e));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(pool_error(e)),
            }
        };
        Ok(Session {
            client,
            op,
            trips: self.trips.clone(),
        })
    }

    /// Runs one statement on a pooled connection (one round trip).
    async fn execute(&self, statement: &Statement, params: Params<'_>) -> Result<u64, MapError> {
        let session = self.session(statement.op).await?;
        session.execute(statement.sql, params).await
    }

    async fn query(&self, statement: &Statement, params: Params<'_>) -> Result<Vec<Row>, MapError> {
        let session = self.session(statement.op).await?;
        session.query(statement.sql, params).await
    }
}

/// `u64` milliseconds as PostgreSQL's `bigint` (saturating: no stamp is that far off).
fn ms(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// A page's `LIMIT`: the caller's, within what one answer should carry.
fn page_limit(limit: usize) -> i64 {
    limit.min(1 << 20) as i64
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
        format: crate::maps::format_by_name::read(row.try_get("format").map_err(store_error)?),
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
        focus: row
            .try_get::<_, Option<String>>("focus")
            .map_err(store_error)?
            .map(|json| {
                serde_json::from_str(&json)
                    .map_err(|e| MapError::Corrupt(format!("an original's focus: {e}")))
            })
            .transpose()?,
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
    let quality: Option<i16> = row.try_get("chosen_quality").map_err(store_error)?;
    let score: Option<i16> = row.try_get("chosen_score").map_err(store_error)?;
    let chosen = match quality {
        Some(q) => Some(Chosen {
            quality: u8::try_from(q)
                .map_err(|_| MapError::Corrupt(format!("variant chosen quality {q}")))?,
            score_tenths: score,
        }),
        None => None,
    };
    Ok(VariantRow::Image {
        format,
        width: dimension(width).unwrap_or(0),
        height: dimension(height).unwrap_or(0),
        chosen,
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
    chosen_quality: Option<i16>,
    chosen_score: Option<i16>,
}

impl VariantColumns {
    fn of(key: &VariantKey, row: &VariantRow) -> Result<VariantColumns, MapError> {
        let key_bytes = (32 + 4 + key.canonical_spec.len()) as i64;
        Ok(match row {
            VariantRow::Image {
                format,
                width,
                height,
                chosen,
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
                    chosen_quality: chosen.map(|c| i16::from(c.quality)),
                    chosen_score: chosen.and_then(|c| c.score_tenths),
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
                chosen_quality: None,
                chosen_score: None,
            },
        })
    }
}

/// The counter row a variant's bytes are counted in.
fn shard_of(hash: &ContentHash) -> i32 {
    i32::from(hash.as_bytes()[0]) % schema::BYTE_SHARDS
}

async fn add_bytes(run: &impl Run, shard: i32, delta: i64) -> Result<(), MapError> {
    if delta != 0 {
        run.execute(
            "UPDATE imgcas_variant_bytes SET bytes = bytes + $2 WHERE shard = $1",
            params![shard, delta],
        )
        .await?;
    }
    Ok(())
}

/// A URL's key in `imgcas_urls` and in claims: its SHA-256, so that URLs of any length fit
/// an index entry (PostgreSQL refuses index entries over ~2.7 KB, and URLs can be longer).
pub(super) fn url_key(url: &str) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(url.as_bytes()).to_vec()
}

/// The values of a URL entry's row that are not the entry's own fields as they are.
struct UrlColumns {
    key: Vec<u8>,
    /// own hash ‖ canonical hash (see migration 3).
    canonical: Option<Vec<u8>>,
}

impl UrlColumns {
    fn of(url: &str, entry: &UrlEntry) -> UrlColumns {
        UrlColumns {
            key: url_key(url),
            canonical: entry
                .canonical
                .map(|c| [entry.hash.as_bytes().as_slice(), c.as_bytes()].concat()),
        }
    }
}

/// The values of an originals index row that are not the info's own fields as they are.
struct OriginalColumns {
    width: Option<i32>,
    height: Option<i32>,
    facts: Option<String>,
    upright_width: Option<i32>,
    upright_height: Option<i32>,
}

impl OriginalColumns {
    fn of(info: &OriginalInfo) -> Result<OriginalColumns, MapError> {
        let upright = info
            .upright
            .and_then(|(w, h)| Some((i32::try_from(w).ok()?, i32::try_from(h).ok()?)));
        Ok(OriginalColumns {
            width: info.width.and_then(|v| i32::try_from(v).ok()),
            height: info.height.and_then(|v| i32::try_from(v).ok()),
            facts: facts_json(info.facts.as_ref())?,
            upright_width: upright.map(|(w, _)| w),
            upright_height: upright.map(|(_, h)| h),
        })
    }
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

const LISTED_AND_ORIGINAL: Statement = Statement {
    op: "listed_and_original",
    sql: "SELECT EXISTS (SELECT 1 FROM imgcas_takedowns WHERE hash = $1) AS listed, o.*
            FROM (SELECT 1) AS one
            LEFT JOIN imgcas_originals o ON o.hash = $1",
};

const CHECK: Statement = Statement {
    op: "check",
    sql: "SELECT 1",
};

/// [`MapStore::totals`] in one statement: URL entries grouped by the original they are
/// served from (the canonical half of `canonical` while it belongs to the row's own hash),
/// joined to the originals.
/// The totals as kept: the sum of their shards (`schema.rs`, migration 13).
const KEPT_TOTALS: Statement = Statement {
    op: "totals",
    sql: "SELECT sum(originals)::bigint AS originals,
                 sum(original_bytes)::bigint AS original_bytes,
                 sum(urls)::bigint AS urls,
                 sum(pointed_bytes)::bigint AS pointed_bytes,
                 sum(exact_saved_bytes)::bigint AS exact_saved_bytes,
                 sum(near_urls)::bigint AS near_urls,
                 sum(near_saved_bytes)::bigint AS near_saved_bytes
            FROM imgcas_totals",
};

/// The totals counted afresh from the rows (`imgcas verify --totals`).
const RECOUNT_TOTALS: Statement = Statement {
    op: "recount_totals",
    sql: "WITH pointed AS (
             SELECT CASE WHEN canonical IS NOT NULL AND length(canonical) = 64
                              AND substring(canonical for 32) = hash
                         THEN substring(canonical from 33) ELSE hash END AS serving,
                    count(*) FILTER (WHERE canonical IS NULL OR length(canonical) <> 64
                                     OR substring(canonical for 32) <> hash) AS exact,
                    count(*) FILTER (WHERE canonical IS NOT NULL AND length(canonical) = 64
                                     AND substring(canonical for 32) = hash) AS near
               FROM imgcas_urls GROUP BY 1)
          SELECT (SELECT count(*) FROM imgcas_originals)::bigint AS originals,
                 (SELECT coalesce(sum(bytes), 0) FROM imgcas_originals)::bigint AS original_bytes,
                 (SELECT count(*) FROM imgcas_urls)::bigint AS urls,
                 coalesce(sum(o.bytes * (p.exact + p.near)), 0)::bigint AS pointed_bytes,
                 coalesce(sum(o.bytes * greatest(p.exact - 1, 0)), 0)::bigint AS exact_saved_bytes,
                 coalesce(sum(p.near) FILTER (WHERE o.hash IS NOT NULL), 0)::bigint AS near_urls,
                 coalesce(sum(o.bytes * p.near), 0)::bigint AS near_saved_bytes
            FROM pointed p JOIN imgcas_originals o ON o.hash = p.serving",
};

#[async_trait]
impl MapStore for PostgresStore {
    fn round_trips(&self) -> Vec<(&'static str, u64)> {
        self.trips.read()
    }

    async fn listed_and_original(
        &self,
        hash: &ContentHash,
    ) -> Result<(bool, Option<OriginalInfo>), MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self.query(&LISTED_AND_ORIGINAL, params![raw]).await?;
        let Some(row) = rows.first() else {
            return Ok((false, None));
        };
        let listed: bool = row.try_get("listed").map_err(store_error)?;
        let found: Option<&[u8]> = row.try_get("hash").map_err(store_error)?;
        let info = match found {
            Some(_) => Some(original_info(row)?),
            None => None,
        };
        Ok((listed, info))
    }

    async fn flush(&self) -> Result<(), MapError> {
        // Every write committed before it returned.
        Ok(())
    }

    async fn compact(&self) -> Result<bool, MapError> {
        // PostgreSQL reclaims dead rows itself (autovacuum); nothing waits on imgcas for it.
        Ok(false)
    }

    async fn check(&self) -> Result<(), MapError> {
        self.query(&CHECK, params![]).await.map(|_| ())
    }

    async fn totals(&self) -> Result<super::StoreTotals, MapError> {
        self.totals_by(&KEPT_TOTALS).await
    }

    async fn recount_totals(&self) -> Result<super::StoreTotals, MapError> {
        self.totals_by(&RECOUNT_TOTALS).await
    }
}

impl PostgresStore {
    /// The totals one statement answers, in [`super::StoreTotals`]' columns.
    async fn totals_by(&self, statement: &Statement) -> Result<super::StoreTotals, MapError> {
        let rows = self.query(statement, params![]).await?;
        let Some(row) = rows.first() else {
            return Ok(super::StoreTotals::default());
        };
        let get = |name: &str| -> Result<u64, MapError> {
            let value: Option<i64> = row.try_get(name).map_err(store_error)?;
            Ok(value.and_then(|v| u64::try_from(v).ok()).unwrap_or(0))
        };
        Ok(super::StoreTotals {
            originals: get("originals")?,
            original_bytes: get("original_bytes")?,
            urls: get("urls")?,
            pointed_bytes: get("pointed_bytes")?,
            exact_saved_bytes: get("exact_saved_bytes")?,
            near_urls: get("near_urls")?,
            near_saved_bytes: get("near_saved_bytes")?,
        })
    }
}
