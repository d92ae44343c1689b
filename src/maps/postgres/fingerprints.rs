//! Fingerprints.

use super::*;

const FINGERPRINT: Statement = Statement {
    op: "fingerprint",
    sql: "SELECT * FROM imgcas_fingerprints WHERE hash = $1 AND version = $2",
};

/// A fingerprint written (its original's index by fingerprint version following), and whether its hash is on the takedown list (for the check the
/// pipeline makes right after, [`ListedAtWrite`]).
const PUT_FINGERPRINT: Statement = Statement {
    op: "put_fingerprint",
    sql: "WITH up AS (INSERT INTO imgcas_fingerprints
             (hash, version, phash, block_hash, colour, width, height,
              band0, band1, band2, band3)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
          ON CONFLICT (hash) DO UPDATE SET version = EXCLUDED.version,
             phash = EXCLUDED.phash, block_hash = EXCLUDED.block_hash,
             colour = EXCLUDED.colour, width = EXCLUDED.width, height = EXCLUDED.height,
             band0 = EXCLUDED.band0, band1 = EXCLUDED.band1, band2 = EXCLUDED.band2,
             band3 = EXCLUDED.band3),
               o AS (UPDATE imgcas_originals SET fingerprint_version = $2
                      WHERE hash = $1 AND fingerprint_version <> $2)
          SELECT EXISTS (SELECT 1 FROM imgcas_takedowns WHERE hash = $1) AS listed",
};

/// The fingerprints within `$7` bits of `$6`: candidates by exact band value (`$1`–`$4`, the
/// probes of `maps/near.rs`), verified in the database (`bit_count` of the XOR); the
/// candidates read capped at `$8` (one more than the caller's cap, which tells that the cap
/// cut the search), the closest `$9` of them.
const NEAR_CLOSEST: Statement = Statement {
    op: "near",
    sql: "SELECT *, count(*) OVER () AS read FROM (
            SELECT * FROM imgcas_fingerprints
             WHERE (band0 = ANY($1) OR band1 = ANY($2) OR band2 = ANY($3)
                    OR band3 = ANY($4))
               AND version = $5
               AND bit_count((phash # $6)::bit(64)) <= $7
             LIMIT $8) AS read
          ORDER BY bit_count((phash # $6)::bit(64)), hash LIMIT $9",
};

/// The originals whose fingerprint is not of version `$1`, after (`$2`, `$3`): as
/// `LACKING_FACTS` (`originals.rs`), by the index by fingerprint version.
const LACKING_FINGERPRINTS: Statement = Statement {
    op: "lacking_fingerprints",
    sql: "(SELECT fingerprint_version AS version, hash FROM imgcas_originals
            WHERE fingerprint_version < $1 AND (fingerprint_version, hash) > ($2, $3)
            ORDER BY fingerprint_version, hash LIMIT $4)
          UNION ALL
          (SELECT fingerprint_version AS version, hash FROM imgcas_originals
            WHERE fingerprint_version > $1 AND (fingerprint_version, hash) > ($2, $3)
            ORDER BY fingerprint_version, hash LIMIT $4)
          ORDER BY version, hash LIMIT $4",
};

const FINGERPRINTS_PAGE: Statement = Statement {
    op: "fingerprints_page",
    sql: "SELECT * FROM imgcas_fingerprints WHERE hash > $2 AND version = $1
            AND phash IS NOT NULL ORDER BY hash LIMIT $3",
};

const ALIAS: Statement = Statement {
    op: "alias",
    sql: "SELECT canonical FROM imgcas_aliases WHERE hash = $1",
};

const PUT_ALIAS: Statement = Statement {
    op: "put_alias",
    sql: "INSERT INTO imgcas_aliases (hash, canonical) VALUES ($1, $2)
          ON CONFLICT (hash) DO UPDATE SET canonical = EXCLUDED.canonical",
};

const REMOVE_ALIASES: Statement = Statement {
    op: "remove_aliases",
    sql: "DELETE FROM imgcas_aliases WHERE hash = $1 OR canonical = $1",
};

/// The pictures among fingerprint rows, with their distance from `phash`, closest first (then
/// by hash).
fn near_matches(rows: &[Row], phash: u64) -> Result<Vec<NearMatch>, MapError> {
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
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

#[async_trait]
impl Fingerprints for PostgresStore {
    async fn fingerprint(&self, hash: &ContentHash) -> Result<Option<Fingerprinted>, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self
            .query(&FINGERPRINT, params![raw, (FINGERPRINT_VERSION as i32)])
            .await?;
        rows.first().map(fingerprinted).transpose()
    }

    async fn put_fingerprint(
        &self,
        hash: &ContentHash,
        fingerprint: &Fingerprinted,
    ) -> Result<ListedAtWrite, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let fp = fingerprint.picture();
        let signed = |v: u64| v as i64;
        let dim = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        let band = |b: usize| fp.map(|f| near::band_of(f.phash, b) as i16);
        let rows = self
            .query(
                &PUT_FINGERPRINT,
                params![
                    raw,
                    (FINGERPRINT_VERSION as i32),
                    fp.map(|f| signed(f.phash)),
                    fp.map(|f| signed(f.block_hash)),
                    fp.map(|f| signed(f.colour)),
                    fp.map(|f| dim(f.width)),
                    fp.map(|f| dim(f.height)),
                    band(0),
                    band(1),
                    band(2),
                    band(3)
                ],
            )
            .await?;
        match rows.first() {
            Some(row) => Ok(Some(row.try_get("listed").map_err(store_error)?)),
            None => Ok(None),
        }
    }

    async fn near_closest(
        &self,
        phash: u64,
        radius: u32,
        limit: usize,
        read_cap: usize,
    ) -> Result<NearFound, MapError> {
        let [p0, p1, p2, p3] = near::probes(phash, radius)
            .map(|values| values.into_iter().map(|v| v as i16).collect::<Vec<i16>>());
        let cap = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let rows = self
            .query(
                &NEAR_CLOSEST,
                params![
                    p0,
                    p1,
                    p2,
                    p3,
                    (FINGERPRINT_VERSION as i32),
                    (phash as i64),
                    i64::from(radius),
                    cap(read_cap.saturating_add(1)),
                    cap(limit)
                ],
            )
            .await?;
        // Read one past the cap: the cap cut the search (the rows themselves are the
        // closest of those read, whichever they were).
        let read = match rows.first() {
            Some(row) => row.try_get::<_, i64>("read").map_err(store_error)?,
            None => 0,
        };
        let read = usize::try_from(read).unwrap_or(usize::MAX);
        let mut matches = near_matches(&rows, phash)?;
        // (The row read past the cap is not the caller's.)
        matches.truncate(read_cap);
        Ok(NearFound {
            partial: read > read_cap,
            matches,
        })
    }

    async fn lacking_fingerprints(
        &self,
        version: u32,
        after: Option<VersionCursor>,
        limit: usize,
    ) -> Result<Vec<VersionCursor>, MapError> {
        self.lacking(&LACKING_FINGERPRINTS, version, after, limit)
            .await
    }

    async fn fingerprints_page(
        &self,
        after: Option<ContentHash>,
        limit: usize,
    ) -> Result<Vec<(ContentHash, Fingerprint)>, MapError> {
        let after: Vec<u8> = after.map_or_else(Vec::new, |h| h.as_bytes().to_vec());
        let rows = self
            .query(
                &FINGERPRINTS_PAGE,
                params![(FINGERPRINT_VERSION as i32), after, page_limit(limit)],
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
        let rows = self.query(&ALIAS, params![raw]).await?;
        rows.first()
            .map(|row| hash_of(row, "canonical"))
            .transpose()
    }

    async fn put_alias(&self, own: &ContentHash, canonical: &ContentHash) -> Result<(), MapError> {
        let (own, canonical): (&[u8], &[u8]) = (own.as_bytes(), canonical.as_bytes());
        self.execute(&PUT_ALIAS, params![own, canonical]).await?;
        Ok(())
    }

    async fn remove_aliases(&self, hash: &ContentHash) -> Result<u64, MapError> {
        let raw: &[u8] = hash.as_bytes();
        self.execute(&REMOVE_ALIASES, params![raw]).await
    }
}
