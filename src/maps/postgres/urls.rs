//! The URL map's table and its index by hash.

use super::*;

const PUT_URL: Statement = Statement {
    op: "put_url",
    sql: upsert_url!("($1, $2, $3, $4, $5, $6, $7, $8, $9)"),
};

/// The URL map's bytes as kept by every write of an entry (`schema.rs`, migration 13).
const URL_BYTES: Statement = Statement {
    op: "url_bytes",
    sql: "SELECT COALESCE(SUM(url_bytes), 0)::bigint AS n FROM imgcas_totals",
};

const EVICTION_CANDIDATES: Statement = Statement {
    op: "evict_urls",
    sql: concat!(
        "SELECT url_key, ",
        url_row_bytes!(),
        " AS size FROM imgcas_urls ORDER BY last_used_ms, url_key LIMIT $1"
    ),
};

const URL: Statement = Statement {
    op: "url",
    sql: "SELECT * FROM imgcas_urls WHERE url_key = $1",
};

const URL_WITH_ORIGINAL: Statement = Statement {
    op: "url_with_original",
    sql: "SELECT u.*, o.hash AS o_hash, o.format, o.width, o.height, o.has_alpha,
                o.bytes, o.first_seen_ms, o.facts, o.upright_width, o.upright_height, o.focus
           FROM imgcas_urls u
           LEFT JOIN imgcas_originals o ON o.hash = CASE
                WHEN u.canonical IS NOT NULL AND length(u.canonical) = 64
                     AND substring(u.canonical for 32) = u.hash
                THEN substring(u.canonical from 33) ELSE u.hash END
          WHERE u.url_key = $1",
};

const REMOVE_URL: Statement = Statement {
    op: "remove_url",
    sql: "DELETE FROM imgcas_urls WHERE url_key = $1",
};

/// A page of the URL map in key order (the SHA-256 of the URL), after the key `$1`.
const URLS_PAGE: Statement = Statement {
    op: "urls_page",
    sql: "SELECT * FROM imgcas_urls WHERE url_key > $1 ORDER BY url_key LIMIT $2",
};

const URLS_OF: Statement = Statement {
    op: "urls_of",
    sql: "SELECT * FROM imgcas_urls WHERE hash = $1
          UNION
          SELECT * FROM imgcas_urls
           WHERE canonical IS NOT NULL AND substring(canonical from 33) = $1",
};

const MARK_URLS_REQUESTED: Statement = Statement {
    op: "mark_urls_requested",
    sql: "UPDATE imgcas_urls AS u
            SET requested_at_ms = s.at,
                last_used_ms = GREATEST(u.checked_at_ms, s.at)
           FROM (SELECT * FROM unnest($1::bytea[], $2::bigint[]) AS t (url_key, at)) AS s
          WHERE u.url_key = s.url_key AND u.requested_at_ms < s.at",
};

const FORGET_URLS: Statement = Statement {
    op: "forget_urls",
    sql: "DELETE FROM imgcas_urls WHERE url_key IN (
          SELECT url_key FROM imgcas_urls WHERE last_used_ms < $1 LIMIT $2)",
};

const EVICT_URLS: Statement = Statement {
    op: "evict_urls",
    sql: "DELETE FROM imgcas_urls WHERE url_key = ANY($1)",
};

#[async_trait]
impl UrlMap for PostgresStore {
    async fn url(&self, url: &str) -> Result<Option<UrlEntry>, MapError> {
        let rows = self.query(&URL, params![url_key(url)]).await?;
        rows.first().map(url_entry).transpose()
    }

    async fn url_with_original(
        &self,
        url: &str,
    ) -> Result<(Option<UrlEntry>, Option<OriginalInfo>), MapError> {
        // The originals row of the hash served: the canonical half of `canonical` while it
        // belongs to this hash (see `url_entry`), else the hash.
        let rows = self
            .query(&URL_WITH_ORIGINAL, params![url_key(url)])
            .await?;
        let Some(row) = rows.first() else {
            return Ok((None, None));
        };
        let entry = url_entry(row)?;
        let found: Option<&[u8]> = row.try_get("o_hash").map_err(store_error)?;
        let original = match found {
            Some(h) if h == entry.serving().as_bytes().as_slice() => Some(original_info(row)?),
            _ => None,
        };
        Ok((Some(entry), original))
    }

    async fn put_url(&self, url: &str, entry: &UrlEntry) -> Result<(), MapError> {
        let hash: &[u8] = entry.hash.as_bytes();
        let c = UrlColumns::of(url, entry);
        self.execute(
            &PUT_URL,
            params![
                c.key,
                url,
                hash,
                entry.etag,
                entry.last_modified,
                ms(entry.checked_at_ms),
                ms(entry.requested_at_ms),
                ms(entry.last_used_ms()),
                c.canonical
            ],
        )
        .await
        .map(|_| ())
    }

    async fn remove_url(&self, url: &str) -> Result<(), MapError> {
        self.execute(&REMOVE_URL, params![url_key(url)])
            .await
            .map(|_| ())
    }

    async fn urls_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, UrlEntry)>, MapError> {
        // The empty key sorts before every URL's.
        let after = after.map_or_else(Vec::new, url_key);
        let rows = self
            .query(&URLS_PAGE, params![after, page_limit(limit)])
            .await?;
        rows.iter()
            .map(|row| {
                let url: String = row.try_get("url").map_err(store_error)?;
                Ok((url, url_entry(row)?))
            })
            .collect()
    }

    async fn urls_of(&self, hash: &ContentHash) -> Result<Vec<(String, UrlEntry)>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self.query(&URLS_OF, params![raw]).await?;
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
        let keys: Vec<Vec<u8>> = requested.iter().map(|(u, _)| url_key(u)).collect();
        let stamps: Vec<i64> = requested.iter().map(|(_, at)| ms(*at)).collect();
        self.execute(&MARK_URLS_REQUESTED, params![keys, stamps])
            .await
            .map(|_| ())
    }

    async fn forget_urls(&self, unused_since_ms: u64) -> Result<u64, MapError> {
        let mut forgotten = 0;
        loop {
            let n = self
                .execute(&FORGET_URLS, params![ms(unused_since_ms), FORGET_BATCH])
                .await?;
            forgotten += n;
            if n < FORGET_BATCH as u64 {
                return Ok(forgotten);
            }
        }
    }

    async fn url_bytes(&self) -> Result<u64, MapError> {
        let rows = self.query(&URL_BYTES, params![]).await?;
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
                .query(&EVICTION_CANDIDATES, params![FORGET_BATCH])
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
            evicted += self.execute(&EVICT_URLS, params![keys]).await?;
        }
        Ok(evicted)
    }
}
