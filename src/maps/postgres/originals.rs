//! Originals.

use super::*;

const ADD_ORIGINAL: Statement = Statement {
    op: "add_original",
    sql: insert_original!(),
};

/// One statement: the index row (kept if the hash has one, `$1`–`$10`), the URL's entry
/// (`$11`–`$18`, its hash `$1`), the claim given up as a tombstone (`$19`, `$20`, its life
/// `$21`; see `claims.rs`), and whether the hash is on the takedown list.
const RECORD_DOWNLOAD: Statement = Statement {
    op: "record_download",
    sql: concat!(
        "WITH o AS (",
        insert_original!(),
        " RETURNING 1),
              u AS (",
        upsert_url!("($11, $12, $1, $13, $14, $15, $16, $17, $18)"),
        "),
              c AS (UPDATE imgcas_claims SET owner = '', token = 0,
                           expires_at = now() + $21 * interval '1 second', renewed_at = now()
                     WHERE key = $19 AND token = $20)
         SELECT (SELECT count(*) FROM o) AS new,
                EXISTS (SELECT 1 FROM imgcas_takedowns WHERE hash = $1) AS listed"
    ),
};

const ORIGINAL: Statement = Statement {
    op: "original",
    sql: "SELECT * FROM imgcas_originals WHERE hash = $1",
};

const PUT_FACTS: Statement = Statement {
    op: "put_facts",
    sql: "UPDATE imgcas_originals SET facts = $2 WHERE hash = $1",
};

const PUT_FOCUS: Statement = Statement {
    op: "put_focus",
    sql: "UPDATE imgcas_originals SET focus = $2 WHERE hash = $1",
};

const REMOVE_ORIGINAL: Statement = Statement {
    op: "remove_original",
    sql: "DELETE FROM imgcas_originals WHERE hash = $1",
};

const REMOVE_FINGERPRINT: Statement = Statement {
    op: "remove_original",
    sql: "DELETE FROM imgcas_fingerprints WHERE hash = $1",
};

const ORIGINALS_PAGE: Statement = Statement {
    op: "originals_page",
    sql: "SELECT * FROM imgcas_originals WHERE hash > $1 ORDER BY hash LIMIT $2",
};

/// The originals whose facts are not of version `$1`, after (`$2`, `$3`) in (version, hash)
/// order: two ranges of the index by facts version, one either side of `$1`, so that the
/// rows of version `$1` are never read.
const LACKING_FACTS: Statement = Statement {
    op: "lacking_facts",
    sql: "(SELECT facts_version AS version, hash FROM imgcas_originals
            WHERE facts_version < $1 AND (facts_version, hash) > ($2, $3)
            ORDER BY facts_version, hash LIMIT $4)
          UNION ALL
          (SELECT facts_version AS version, hash FROM imgcas_originals
            WHERE facts_version > $1 AND (facts_version, hash) > ($2, $3)
            ORDER BY facts_version, hash LIMIT $4)
          ORDER BY version, hash LIMIT $4",
};

#[async_trait]
impl Originals for PostgresStore {
    async fn original(&self, hash: &ContentHash) -> Result<Option<OriginalInfo>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self.query(&ORIGINAL, params![raw]).await?;
        rows.first().map(original_info).transpose()
    }

    async fn add_original(
        &self,
        hash: &ContentHash,
        info: &OriginalInfo,
    ) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let c = OriginalColumns::of(info)?;
        let inserted = self
            .execute(
                &ADD_ORIGINAL,
                params![
                    raw,
                    crate::maps::format_by_name::name(info.format),
                    c.width,
                    c.height,
                    info.has_alpha,
                    ms(info.bytes),
                    ms(info.first_seen_ms),
                    c.facts,
                    c.upright_width,
                    c.upright_height
                ],
            )
            .await?;
        Ok(inserted == 1)
    }

    async fn record_download(
        &self,
        url: &str,
        entry: &UrlEntry,
        info: &OriginalInfo,
        claim: Option<&Claim>,
    ) -> Result<Recorded, MapError> {
        // One statement: the index row (kept if the hash has one), the URL's entry, and
        // the claim given up.
        let raw: &[u8] = entry.hash.as_bytes();
        let o = OriginalColumns::of(info)?;
        let u = UrlColumns::of(url, entry);
        let rows = self
            .query(
                &RECORD_DOWNLOAD,
                params![
                    raw,
                    crate::maps::format_by_name::name(info.format),
                    o.width,
                    o.height,
                    info.has_alpha,
                    ms(info.bytes),
                    ms(info.first_seen_ms),
                    o.facts,
                    o.upright_width,
                    o.upright_height,
                    u.key,
                    url,
                    entry.etag,
                    entry.last_modified,
                    ms(entry.checked_at_ms),
                    ms(entry.requested_at_ms),
                    ms(entry.last_used_ms()),
                    u.canonical,
                    claim.map(|c| c.key.as_str()),
                    claim.map(|c| c.token),
                    TOMBSTONE_SECS
                ],
            )
            .await?;
        let Some(row) = rows.first() else {
            return Err(MapError::Store(
                "PostgreSQL: a download's record returned no row".into(),
            ));
        };
        let new: i64 = row.try_get("new").map_err(store_error)?;
        Ok(Recorded {
            new_original: new == 1,
            listed: Some(row.try_get("listed").map_err(store_error)?),
        })
    }

    async fn put_facts(&self, hash: &ContentHash, facts: &OriginalFacts) -> Result<(), MapError> {
        let raw: &[u8] = hash.as_bytes();
        let json = facts_json(Some(facts))?;
        self.execute(&PUT_FACTS, params![raw, json])
            .await
            .map(|_| ())
    }

    async fn put_focus(&self, hash: &ContentHash, focus: Option<&Focus>) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let json = focus
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| MapError::Corrupt(e.to_string()))?;
        Ok(self.execute(&PUT_FOCUS, params![raw, json]).await? == 1)
    }

    async fn remove_original(&self, hash: &ContentHash) -> Result<(), MapError> {
        let raw: &[u8] = hash.as_bytes();
        self.execute(&REMOVE_ORIGINAL, params![raw]).await?;
        self.execute(&REMOVE_FINGERPRINT, params![raw])
            .await
            .map(|_| ())
    }

    async fn originals_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, OriginalInfo)>, MapError> {
        let after: Vec<u8> = after.map_or_else(Vec::new, |h| h.as_bytes().to_vec());
        let rows = self
            .query(&ORIGINALS_PAGE, params![after, page_limit(limit)])
            .await?;
        rows.iter()
            .map(|row| Ok((hash_of(row, "hash")?, original_info(row)?)))
            .collect()
    }

    async fn lacking_facts(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        self.lacking(&LACKING_FACTS, version, after, limit).await
    }
}

impl PostgresStore {
    /// A page of an index by version (`statement`: [`LACKING_FACTS`] or its kin): the rows
    /// whose version is not `version`, after `after`.
    pub(super) async fn lacking(
        &self,
        statement: &Statement,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        // Versions are small counters; one past `i32` is a version no row holds.
        let version = i32::try_from(version).unwrap_or(i32::MAX);
        let (after_version, after_hash) = match after {
            Some(c) => (
                i32::try_from(c.version).unwrap_or(i32::MAX),
                c.hash.as_bytes().to_vec(),
            ),
            // Before every row: versions are never negative, and the empty hash sorts first.
            None => (-1, Vec::new()),
        };
        let rows = self
            .query(
                statement,
                params![version, after_version, after_hash, page_limit(limit)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let has: i32 = row.try_get("version").map_err(store_error)?;
                Ok(VersionCursor {
                    version: u32::try_from(has)
                        .map_err(|_| MapError::Corrupt(format!("version {has}")))?,
                    hash: hash_of(row, "hash")?,
                })
            })
            .collect()
    }
}
