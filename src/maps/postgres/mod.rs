//! The maps on PostgreSQL (`maps.url = "postgres://…"`): one database shared by every node
//! of a cluster, so what one node learned (a URL's hash, an upload, a variant) every node
//! knows.
//!
//! What it owns: a pool of connections (deadpool over tokio-postgres), the schema
//! (`schema.rs`, migrated at open) and the rows' encoding. Unlike the embedded file, the rows
//! do not hold variant bytes: those are in the blob store (the bucket all nodes share), and a
//! row says only how long they are ([`VariantBody::InBlobStore`]). Every write is committed
//! before it returns, so [`MapStore::flush`] has nothing to do.
//!
//! URL entries are answered from memory for a second after they were read or written
//! (another node may change them, so not longer), and the last one seen is kept to answer
//! while the database does not (an outage then costs hot hits nothing). Originals are cached: an index entry changes only when its facts
//! are added (a node whose memory predates them computes them once more, and keeps the same),
//! and only `verify --repair` and a takedown drop one; a takedown moves the purge generation,
//! on which every node drops this memory ([`MapStore::drop_memory`]).
//!
//! The variants' byte total is kept in [`schema::BYTE_SHARDS`] counter rows, changed in the
//! transaction that changes a variant, so the budget check is a sixteen-row read however many
//! variants there are.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use imgcas_processors::{OutputFormat, ProcessFailure, FINGERPRINT_VERSION};

use super::{
    near, now_ms, Claim, ClaimOutcome, Evicted, Fingerprint, Fingerprinted, MapError, MapStore,
    NearMatch, OriginalFacts, OriginalInfo, UrlEntry, VariantBody, VariantKey, VariantRow,
    VariantTotals,
};
use crate::hash::ContentHash;

mod schema;

/// Connections per node. Each request needs one only for the length of a statement, so a few
/// dozen serve thousands of requests a second; three nodes stay well under the server's
/// default limit of 100.
const POOL_SIZE: usize = 16;
/// How long a statement may wait for a connection, or a connection take to open, before the
/// maps count as unavailable (503 `storage_unavailable`, not a hung request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a node answers a URL entry from memory before asking the database again. Another
/// node's revalidation reaches this node at most this late, which `fetch.revalidate_after`
/// (minutes) does not notice; in exchange a hot variant by URL costs no round trip (measured
/// by `bench/cluster.py`: 5x the requests per second of a query per request).
const URL_FRESH_FOR: Duration = Duration::from_secs(1);
/// [`super::url_row_bytes`] in SQL, over a row of `imgcas_urls`.
const URL_ROW_BYTES: &str = "(2 * octet_length(url) + COALESCE(octet_length(etag), 0) \
     + COALESCE(octet_length(last_modified), 0) + 160)::bigint";
/// Originals remembered in memory.
const RECENT_ORIGINALS: u64 = 100_000;
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
        None => MapError::Store(format!("PostgreSQL: {e}")),
    }
}

fn pool_error(e: deadpool_postgres::PoolError) -> MapError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => store_error(e),
        e => MapError::Store(format!("PostgreSQL: {e}")),
    }
}

#[derive(Clone)]
pub struct PostgresMaps {
    pool: Pool,
    recent: moka::sync::Cache<ContentHash, OriginalInfo>,
    /// The URL entries this node read or wrote last, answered only while the database does
    /// not answer: requests for URLs this node serves keep resolving (and hot variants keep
    /// being served) through an outage.
    last_seen_urls: moka::sync::Cache<String, UrlEntry>,
    /// The same entries, answered without a query for [`URL_FRESH_FOR`] after they were read
    /// or written: a hot variant by URL then costs no round trip.
    recent_urls: moka::sync::Cache<String, Option<UrlEntry>>,
}

impl PostgresMaps {
    /// Connects to `url` and brings the schema up to date.
    pub async fn open(url: &str) -> Result<PostgresMaps, MapError> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| MapError::Store(format!("maps.url is not a PostgreSQL URL: {e}")))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("imgcas");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
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
        let maps = PostgresMaps {
            pool,
            recent: moka::sync::Cache::new(RECENT_ORIGINALS),
            last_seen_urls: super::url_entry_cache(None),
            recent_urls: super::url_entry_cache(Some(URL_FRESH_FOR)),
        };
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
        (hash, format, width, height, has_alpha, bytes, first_seen_ms, facts)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
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
impl MapStore for PostgresMaps {
    fn holds_variant_bytes(&self) -> bool {
        false
    }

    async fn url(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        if let Some(known) = self.recent_urls.get(url) {
            return Ok(known);
        }
        self.url_now(url).await
    }

    async fn url_now(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        let rows = match self
            .query(
                "SELECT * FROM imgcas_urls WHERE url_key = $1",
                &[&url_key(url)],
            )
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                return match self.last_seen_urls.get(url) {
                    Some(entry) => {
                        tracing::debug!(%url, error = %e, "database unavailable; URL entry as last seen");
                        Ok(Some(entry))
                    }
                    None => Err(e),
                }
            }
        };
        let entry = rows.first().map(url_entry).transpose()?;
        self.saw_url(url, entry.as_ref());
        Ok(entry)
    }

    async fn put_url(&self, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
        let client = self.client().await?;
        let written = put_url_on(&client, url, entry).await;
        match written {
            Ok(()) => self.saw_url(url, Some(entry)),
            Err(_) => self.recent_urls.invalidate(url),
        }
        written
    }

    async fn remove_url(&self, url: &str) -> Result<(), MapError> {
        self.saw_url(url, None);
        self.execute(
            "DELETE FROM imgcas_urls WHERE url_key = $1",
            &[&url_key(url)],
        )
        .await
        .map(|_| ())
    }

    async fn urls(&self) -> Result<Vec<(String, UrlEntry)>, MapError> {
        let rows = self.query("SELECT * FROM imgcas_urls", &[]).await?;
        rows.iter()
            .map(|row| {
                let url: String = row.try_get("url").map_err(store_error)?;
                Ok((url, url_entry(row)?))
            })
            .collect()
    }

    async fn urls_of(&self, hash: &ContentHash) -> Result<Vec<(String, UrlEntry)>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query(
                "SELECT * FROM imgcas_urls WHERE hash = $1
                 UNION
                 SELECT * FROM imgcas_urls
                  WHERE canonical IS NOT NULL AND substring(canonical from 33) = $1",
                &[&raw],
            )
            .await?;
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let entry = url_entry(row)?;
            // A canonical half left by an older node's rewrite names nothing (`url_entry`).
            if entry.hash == *hash || entry.canonical == Some(*hash) {
                found.push((row.try_get("url").map_err(store_error)?, entry));
            }
        }
        Ok(found)
    }

    async fn mark_urls_requested(&self, requested: &[(String, u64)]) -> Result<(), MapError> {
        if requested.is_empty() {
            return Ok(());
        }
        for (url, _) in requested {
            self.recent_urls.invalidate(url);
        }
        let keys: Vec<Vec<u8>> = requested.iter().map(|(u, _)| url_key(u)).collect();
        let stamps: Vec<i64> = requested.iter().map(|(_, at)| ms(*at)).collect();
        self.execute(
            "UPDATE imgcas_urls AS u
                SET requested_at_ms = s.at,
                    last_used_ms = GREATEST(u.checked_at_ms, s.at)
               FROM (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS t (url_key, at)) AS s
              WHERE u.url_key = s.url_key AND u.requested_at_ms < s.at",
            &[&keys, &stamps],
        )
        .await
        .map(|_| ())
    }

    async fn forget_urls(&self, unused_since_ms: u64) -> Result<u64, MapError> {
        let mut forgotten = 0;
        loop {
            let n = self
                .execute(
                    "DELETE FROM imgcas_urls WHERE url_key IN (
                        SELECT url_key FROM imgcas_urls WHERE last_used_ms < $1 LIMIT $2)",
                    &[&ms(unused_since_ms), &FORGET_BATCH],
                )
                .await?;
            forgotten += n;
            if n < FORGET_BATCH as u64 {
                if forgotten > 0 {
                    self.recent_urls.invalidate_all();
                }
                return Ok(forgotten);
            }
        }
    }

    async fn url_bytes(&self) -> Result<u64, MapError> {
        let rows = self
            .query(
                &format!("SELECT COALESCE(SUM({URL_ROW_BYTES}), 0)::bigint AS n FROM imgcas_urls"),
                &[],
            )
            .await?;
        let n: i64 = rows
            .first()
            .map(|r| r.try_get("n"))
            .transpose()
            .map_err(store_error)?
            .unwrap_or(0);
        Ok(n.max(0) as u64)
    }

    async fn evict_urls(&self, target_bytes: u64) -> Result<u64, MapError> {
        let mut over = self.url_bytes().await?.saturating_sub(target_bytes);
        let mut evicted = 0;
        while over > 0 {
            let rows = self
                .query(
                    &format!(
                        "SELECT url_key, {URL_ROW_BYTES} AS size FROM imgcas_urls
                         ORDER BY last_used_ms, url_key LIMIT $1"
                    ),
                    &[&FORGET_BATCH],
                )
                .await?;
            if rows.is_empty() {
                break;
            }
            let mut keys: Vec<Vec<u8>> = Vec::new();
            for row in &rows {
                if over == 0 {
                    break;
                }
                let size: i64 = row.try_get("size").map_err(store_error)?;
                keys.push(row.try_get("url_key").map_err(store_error)?);
                over = over.saturating_sub(size.max(0) as u64);
            }
            evicted += self
                .execute("DELETE FROM imgcas_urls WHERE url_key = ANY($1)", &[&keys])
                .await?;
        }
        if evicted > 0 {
            self.recent_urls.invalidate_all();
            self.last_seen_urls.invalidate_all();
        }
        Ok(evicted)
    }

    async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError> {
        if let Some(info) = self.recent.get(hash) {
            return Ok(Some(info));
        }
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query("SELECT * FROM imgcas_originals WHERE hash = $1", &[&raw])
            .await?;
        let info = rows.first().map(original_info).transpose()?;
        if let Some(info) = &info {
            self.recent.insert(*hash, info.clone());
        }
        Ok(info)
    }

    async fn add_original(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        let client = self.client().await?;
        insert_original_on(&client, hash, info).await
    }

    async fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(store_error)?;
        let new = insert_original_on(&txn, &entry.hash, info).await?;
        put_url_on(&txn, url, entry).await?;
        txn.commit().await.map_err(store_error)?;
        self.saw_url(url, Some(entry));
        Ok(new)
    }

    async fn put_facts(&self, hash: &ContentHash, facts: &OriginalFacts) -> Result<(), MapError> {
        let raw: &[u8] = hash.as_bytes();
        let json = facts_json(Some(facts))?;
        self.execute(
            "UPDATE imgcas_originals SET facts = $2 WHERE hash = $1",
            &[&raw, &json],
        )
        .await?;
        self.recent.invalidate(hash);
        Ok(())
    }

    async fn remove_original(&self, hash: &ContentHash) -> Result<(), MapError> {
        let raw: &[u8] = hash.as_bytes();
        self.execute("DELETE FROM imgcas_originals WHERE hash = $1", &[&raw])
            .await?;
        self.execute("DELETE FROM imgcas_fingerprints WHERE hash = $1", &[&raw])
            .await?;
        self.recent.invalidate(hash);
        Ok(())
    }

    async fn original_hashes(&self) -> Result<Vec<ContentHash>, MapError> {
        let rows = self.query("SELECT hash FROM imgcas_originals", &[]).await?;
        rows.iter().map(|row| hash_of(row, "hash")).collect()
    }

    async fn fingerprint(&self, hash: &ContentHash) -> Result<Option<Fingerprinted>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query(
                "SELECT * FROM imgcas_fingerprints WHERE hash = $1 AND version = $2",
                &[&raw, &(FINGERPRINT_VERSION as i32)],
            )
            .await?;
        rows.first().map(fingerprinted).transpose()
    }

    async fn put_fingerprint(
        &self,
        hash: &ContentHash,
        fingerprint: &Fingerprinted,
    ) -> Result<(), MapError> {
        let raw: &[u8] = hash.as_bytes();
        let fp = fingerprint.picture();
        let signed = |v: u64| v as i64;
        let dim = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        let band = |b: usize| fp.map(|f| near::band_of(f.phash, b) as i16);
        self.execute(
            "INSERT INTO imgcas_fingerprints
                (hash, version, phash, block_hash, colour, width, height,
                 band0, band1, band2, band3)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT (hash) DO UPDATE SET version = EXCLUDED.version,
                phash = EXCLUDED.phash, block_hash = EXCLUDED.block_hash,
                colour = EXCLUDED.colour, width = EXCLUDED.width, height = EXCLUDED.height,
                band0 = EXCLUDED.band0, band1 = EXCLUDED.band1, band2 = EXCLUDED.band2,
                band3 = EXCLUDED.band3",
            &[
                &raw,
                &(FINGERPRINT_VERSION as i32),
                &fp.map(|f| signed(f.phash)),
                &fp.map(|f| signed(f.block_hash)),
                &fp.map(|f| signed(f.colour)),
                &fp.map(|f| dim(f.width)),
                &fp.map(|f| dim(f.height)),
                &band(0),
                &band(1),
                &band(2),
                &band(3),
            ],
        )
        .await?;
        Ok(())
    }

    async fn near(&self, phash: u64, radius: u32) -> Result<Vec<NearMatch>, MapError> {
        let [p0, p1, p2, p3] = near::probes(phash, radius)
            .map(|values| values.into_iter().map(|v| v as i16).collect::<Vec<i16>>());
        // Candidates by exact band, verified in the database (bit_count of the XOR).
        let rows = self
            .query(
                "SELECT * FROM imgcas_fingerprints
                  WHERE (band0 = ANY($1) OR band1 = ANY($2) OR band2 = ANY($3)
                         OR band3 = ANY($4))
                    AND version = $5
                    AND bit_count((phash # $6)::bit(64)) <= $7",
                &[
                    &p0,
                    &p1,
                    &p2,
                    &p3,
                    &(FINGERPRINT_VERSION as i32),
                    &(phash as i64),
                    &i64::from(radius),
                ],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            if let Fingerprinted::Picture(fingerprint) = fingerprinted(row)? {
                out.push(NearMatch {
                    hash: hash_of(row, "hash")?,
                    distance: (fingerprint.phash ^ phash).count_ones(),
                    fingerprint,
                });
            }
        }
        out.sort_by_key(|m| (m.distance, m.hash));
        Ok(out)
    }

    async fn unfingerprinted(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<ContentHash>, MapError> {
        let after: Vec<u8> = after.map_or_else(Vec::new, |h| h.as_bytes().to_vec());
        let rows = self
            .query(
                "SELECT o.hash FROM imgcas_originals o
                   LEFT JOIN imgcas_fingerprints f ON f.hash = o.hash AND f.version = $1
                  WHERE f.hash IS NULL AND o.hash > $2
                  ORDER BY o.hash LIMIT $3",
                &[
                    &(FINGERPRINT_VERSION as i32),
                    &after,
                    &(limit.min(1 << 20) as i64),
                ],
            )
            .await?;
        rows.iter().map(|row| hash_of(row, "hash")).collect()
    }

    async fn fingerprints(&self) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
        let rows = self
            .query(
                "SELECT * FROM imgcas_fingerprints WHERE version = $1 AND phash IS NOT NULL",
                &[&(FINGERPRINT_VERSION as i32)],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            if let Fingerprinted::Picture(fp) = fingerprinted(row)? {
                out.push((hash_of(row, "hash")?, fp));
            }
        }
        Ok(out)
    }

    async fn alias(&self, hash: &ContentHash) -> Result<Option<ContentHash>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query(
                "SELECT canonical FROM imgcas_aliases WHERE hash = $1",
                &[&raw],
            )
            .await?;
        rows.first()
            .map(|row| hash_of(row, "canonical"))
            .transpose()
    }

    async fn put_alias(&self, own: &ContentHash, canonical: &ContentHash) -> Result<(), MapError> {
        let (own, canonical): (&[u8], &[u8]) = (own.as_bytes(), canonical.as_bytes());
        self.execute(
            "INSERT INTO imgcas_aliases (hash, canonical) VALUES ($1, $2)
             ON CONFLICT (hash) DO UPDATE SET canonical = EXCLUDED.canonical",
            &[&own, &canonical],
        )
        .await?;
        Ok(())
    }

    async fn variant(&self, key: &VariantKey) -> Result<Option<VariantRow>, MapError> {
        let raw: &[u8] = key.hash.as_bytes();
        let rows = self
            .query(
                "SELECT format, width, height, body_bytes, failure, message FROM imgcas_variants
                  WHERE hash = $1 AND processor_version = $2 AND spec = $3",
                &[&raw, &(key.processor_version as i32), &key.canonical_spec],
            )
            .await?;
        rows.first().map(variant_row).transpose()
    }

    async fn put_variant(&self, key: &VariantKey, row: &VariantRow) -> Result<(), MapError> {
        self.write_variant(key, row, None).await
    }

    async fn put_variant_claimed(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: &Claim,
    ) -> Result<(), MapError> {
        self.write_variant(key, row, Some(claim)).await
    }

    fn shared(&self) -> bool {
        true
    }

    async fn try_claim(
        &self,
        key: &str,
        owner: &str,
        token: i64,
        ttl: Duration,
    ) -> Result<ClaimOutcome, MapError> {
        let ttl_secs = ttl.as_secs_f64();
        // Insert, or take over an expired claim: one statement, decided on the database's
        // clock. No row back means someone else holds it.
        let won = self
            .query(
                "INSERT INTO imgcas_claims (key, owner, token, expires_at, renewed_at)
                 VALUES ($1, $2, $3, now() + $4 * interval '1 second', now())
                 ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner,
                     token = EXCLUDED.token, expires_at = EXCLUDED.expires_at,
                     renewed_at = EXCLUDED.renewed_at
                  WHERE imgcas_claims.expires_at < now()
                 RETURNING token",
                &[&key, &owner, &token, &ttl_secs],
            )
            .await?;
        if !won.is_empty() {
            return Ok(ClaimOutcome::Won);
        }
        let holder = self
            .query("SELECT owner FROM imgcas_claims WHERE key = $1", &[&key])
            .await?;
        Ok(ClaimOutcome::HeldBy(holder.first().map_or_else(
            || "(released just now)".to_string(),
            |r| r.get(0),
        )))
    }

    async fn renew_claim(
        &self,
        claim: &Claim,
        new_token: i64,
        ttl: Duration,
    ) -> Result<bool, MapError> {
        let ttl_secs = ttl.as_secs_f64();
        let renewed = self
            .execute(
                "UPDATE imgcas_claims SET token = $3,
                        expires_at = now() + $4 * interval '1 second', renewed_at = now()
                  WHERE key = $1 AND token = $2",
                &[&claim.key, &claim.token, &new_token, &ttl_secs],
            )
            .await?;
        Ok(renewed == 1)
    }

    async fn release_claim(&self, claim: &Claim) -> Result<(), MapError> {
        self.execute(
            "DELETE FROM imgcas_claims WHERE key = $1 AND token = $2",
            &[&claim.key, &claim.token],
        )
        .await
        .map(|_| ())
    }

    async fn mark_variants_served(&self, served: &[(VariantKey, u64)]) -> Result<(), MapError> {
        if served.is_empty() {
            return Ok(());
        }
        let keys: Vec<&VariantKey> = served.iter().map(|(k, _)| k).collect();
        let (hashes, versions, specs) = key_arrays(&keys);
        let stamps: Vec<i64> = served.iter().map(|(_, at)| ms(*at)).collect();
        self.execute(
            "UPDATE imgcas_variants AS v SET served_at_ms = s.at
               FROM (SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[], $4::bigint[])
                       AS t (hash, version, spec, at)) AS s
              WHERE v.hash = s.hash AND v.processor_version = s.version AND v.spec = s.spec
                AND v.served_at_ms < s.at",
            &[&hashes, &versions, &specs, &stamps],
        )
        .await
        .map(|_| ())
    }

    async fn variant_bytes(&self) -> Result<u64, MapError> {
        let rows = self
            .query(
                "SELECT CAST(COALESCE(SUM(bytes), 0) AS bigint) FROM imgcas_variant_bytes",
                &[],
            )
            .await?;
        let total: i64 = rows.first().map_or(0, |r| r.get(0));
        Ok(unsigned(total))
    }

    async fn evict_variants(&self, target_bytes: u64) -> Result<Evicted, MapError> {
        let mut evicted = Evicted::default();
        loop {
            let total = self.variant_bytes().await?;
            evicted.remaining_bytes = total;
            if total <= target_bytes {
                return Ok(evicted);
            }
            let candidates = self
                .query(
                    "SELECT hash, processor_version, spec, counted_bytes FROM imgcas_variants
                      ORDER BY served_at_ms, hash, processor_version, spec LIMIT $1",
                    &[&EVICTION_BATCH],
                )
                .await?;
            if candidates.is_empty() {
                return Ok(evicted);
            }
            // The least recently served, up to what brings the total to the target.
            let mut doomed = Vec::new();
            let mut freed = 0u64;
            for row in &candidates {
                if total - freed.min(total) <= target_bytes {
                    break;
                }
                let counted: i64 = row.try_get("counted_bytes").map_err(store_error)?;
                freed += unsigned(counted);
                doomed.push(variant_key(row)?);
            }
            let gone = self.remove_keys(&doomed).await?;
            evicted
                .keys
                .extend(doomed.into_iter().filter(|k| gone.contains(k)));
        }
    }

    async fn variant_keys(&self) -> Result<Vec<VariantKey>, MapError> {
        let rows = self
            .query(
                "SELECT hash, processor_version, spec FROM imgcas_variants",
                &[],
            )
            .await?;
        rows.iter().map(variant_key).collect()
    }

    async fn remove_variants(&self, keys: &[VariantKey]) -> Result<u64, MapError> {
        let mut removed = 0;
        for batch in keys.chunks(EVICTION_BATCH as usize) {
            removed += self.remove_keys(batch).await?.len() as u64;
        }
        Ok(removed)
    }

    async fn variant_totals(&self) -> Result<VariantTotals, MapError> {
        let rows = self
            .query(
                "SELECT CAST(COALESCE(SUM(CASE WHEN failure IS NULL THEN 1 ELSE 0 END), 0) AS bigint),
                        CAST(COALESCE(SUM(body_bytes), 0) AS bigint),
                        CAST(COALESCE(SUM(CASE WHEN failure IS NULL THEN 0 ELSE 1 END), 0) AS bigint)
                   FROM imgcas_variants",
                &[],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Ok(VariantTotals::default());
        };
        Ok(VariantTotals {
            images: unsigned(row.get(0)),
            image_bytes: unsigned(row.get(1)),
            errors: unsigned(row.get(2)),
        })
    }

    async fn variants_of(&self, hash: &ContentHash) -> Result<Vec<(VariantKey, u64)>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query(
                "SELECT hash, processor_version, spec, counted_bytes FROM imgcas_variants
                  WHERE hash = $1",
                &[&raw],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let counted: i64 = row.try_get("counted_bytes").map_err(store_error)?;
                Ok((variant_key(row)?, unsigned(counted)))
            })
            .collect()
    }

    async fn remove_aliases(&self, hash: &ContentHash) -> Result<u64, MapError> {
        let raw: &[u8] = hash.as_bytes();
        self.execute(
            "DELETE FROM imgcas_aliases WHERE hash = $1 OR canonical = $1",
            &[&raw],
        )
        .await
    }

    async fn take_down(&self, hash: &ContentHash, at_ms: u64) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let n = self
            .execute(
                "INSERT INTO imgcas_takedowns (hash, taken_down_ms) VALUES ($1, $2)
                 ON CONFLICT (hash) DO NOTHING",
                &[&raw, &ms(at_ms)],
            )
            .await?;
        Ok(n == 1)
    }

    async fn lift_takedown(&self, hash: &ContentHash) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let n = self
            .execute("DELETE FROM imgcas_takedowns WHERE hash = $1", &[&raw])
            .await?;
        Ok(n == 1)
    }

    async fn takedowns(&self) -> Result<Vec<(ContentHash, u64)>, MapError> {
        let rows = self
            .query("SELECT hash, taken_down_ms FROM imgcas_takedowns", &[])
            .await?;
        rows.iter()
            .map(|row| {
                let at: i64 = row.try_get("taken_down_ms").map_err(store_error)?;
                Ok((hash_of(row, "hash")?, unsigned(at)))
            })
            .collect()
    }

    async fn is_taken_down(&self, hash: &ContentHash) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query("SELECT 1 FROM imgcas_takedowns WHERE hash = $1", &[&raw])
            .await?;
        Ok(!rows.is_empty())
    }

    async fn purge_generation(&self) -> Result<u64, MapError> {
        let rows = self
            .query("SELECT generation FROM imgcas_purge WHERE id = 1", &[])
            .await?;
        Ok(rows.first().map_or(0, |row| unsigned(row.get(0))))
    }

    async fn bump_purge_generation(&self) -> Result<u64, MapError> {
        let rows = self
            .query(
                "UPDATE imgcas_purge SET generation = generation + 1 WHERE id = 1
                 RETURNING generation",
                &[],
            )
            .await?;
        Ok(rows.first().map_or(0, |row| unsigned(row.get(0))))
    }

    fn drop_memory(&self) {
        // Originals are content-addressed, but a takedown removes them: another node's
        // removal must not be answered from here. URL entries it removed likewise.
        self.recent.invalidate_all();
        self.recent_urls.invalidate_all();
        self.last_seen_urls.invalidate_all();
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
        self.query("SELECT 1", &[]).await.map(|_| ())
    }
}

impl PostgresMaps {
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

impl PostgresMaps {
    /// Remembers what the database said of a URL (or what this node wrote). The absence of
    /// an entry is not kept: a URL that is not in the map (one the guard is about to refuse,
    /// say) leaves nothing in memory behind it (issue 28).
    fn saw_url(&self, url: &str, entry: Option<&UrlEntry>) {
        match entry {
            Some(e) => {
                self.last_seen_urls.insert(url.to_string(), e.clone());
                self.recent_urls.insert(url.to_string(), Some(e.clone()));
            }
            None => {
                self.last_seen_urls.invalidate(url);
                self.recent_urls.invalidate(url);
            }
        }
    }

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
