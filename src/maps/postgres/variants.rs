//! Variants.

use super::*;

const VARIANT: Statement = Statement {
    op: "variant",
    sql: "SELECT format, width, height, body_bytes, failure, message, chosen_quality,
                 chosen_score FROM imgcas_variants
          WHERE hash = $1 AND processor_version = $2 AND spec = $3",
};

const MARK_VARIANTS_SERVED: Statement = Statement {
    op: "mark_variants_served",
    sql: "UPDATE imgcas_variants AS v SET served_at_ms = s.at
           FROM (SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[], $4::bigint[])
                   AS t (hash, version, spec, at)) AS s
          WHERE v.hash = s.hash AND v.processor_version = s.version AND v.spec = s.spec
            AND v.served_at_ms < s.at",
};

const VARIANT_BYTES: Statement = Statement {
    op: "variant_bytes",
    sql: "SELECT CAST(COALESCE(SUM(bytes), 0) AS bigint) FROM imgcas_variant_bytes",
};

const EVICT_VARIANTS: Statement = Statement {
    op: "evict_variants",
    sql: "SELECT hash, processor_version, spec, counted_bytes FROM imgcas_variants
          ORDER BY served_at_ms, hash, processor_version, spec LIMIT $1",
};

/// A page of variant keys in the primary key's order, after (`$1`, `$2`, `$3`): a range of
/// that index (the comparison and the order use the same collation).
const VARIANT_KEYS_PAGE: Statement = Statement {
    op: "variant_keys_page",
    sql: "SELECT hash, processor_version, spec FROM imgcas_variants
           WHERE (hash, processor_version, spec) > ($1, $2, $3)
           ORDER BY hash, processor_version, spec LIMIT $4",
};

/// The variants' images, bytes and errors, as kept by every write (`schema.rs`, migration 13).
const VARIANT_TOTALS: Statement = Statement {
    op: "variant_totals",
    sql: "SELECT CAST(COALESCE(SUM(variant_images), 0) AS bigint),
               CAST(COALESCE(SUM(variant_image_bytes), 0) AS bigint),
               CAST(COALESCE(SUM(variant_errors), 0) AS bigint)
          FROM imgcas_totals",
};

const VARIANTS_OF: Statement = Statement {
    op: "variants_of",
    sql: "SELECT hash, processor_version, spec, counted_bytes FROM imgcas_variants
          WHERE hash = $1",
};

#[async_trait]
impl Variants for PostgresStore {
    fn holds_variant_bytes(&self) -> bool {
        false
    }

    async fn variant(&self, key: &VariantKey) -> Result<Option<VariantRow>, MapError> {
        let raw: &[u8] = key.hash.as_bytes();
        let rows = self
            .query(
                &VARIANT,
                params![raw, (key.processor_version as i32), key.canonical_spec],
            )
            .await?;
        rows.first().map(variant_row).transpose()
    }

    async fn put_variant(&self, key: &VariantKey, row: &VariantRow) -> Result<(), MapError> {
        self.write_variant(key, row, None).await.map(|_| ())
    }

    async fn put_variant_claimed(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: &Claim,
    ) -> Result<ListedAtWrite, MapError> {
        self.write_variant(key, row, Some(claim)).await
    }

    async fn mark_variants_served(&self, served: &[(VariantKey, u64)]) -> Result<(), MapError> {
        if served.is_empty() {
            return Ok(());
        }
        let keys: Vec<&VariantKey> = served.iter().map(|(k, _)| k).collect();
        let (hashes, versions, specs) = key_arrays(&keys);
        let stamps: Vec<i64> = served.iter().map(|(_, at)| ms(*at)).collect();
        self.execute(
            &MARK_VARIANTS_SERVED,
            params![hashes, versions, specs, stamps],
        )
        .await
        .map(|_| ())
    }

    async fn variant_bytes(&self) -> Result<u64, MapError> {
        let rows = self.query(&VARIANT_BYTES, params![]).await?;
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
            let candidates = self.query(&EVICT_VARIANTS, params![EVICTION_BATCH]).await?;
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

    async fn variant_keys_page(
        &self,
        after: Option<&VariantKey>,
        limit: usize,
    ) -> Result<Vec<VariantKey>, MapError> {
        let (hash, version, spec) = match after {
            Some(k) => (
                k.hash.as_bytes().to_vec(),
                // Stored as its bits in an `integer` (`variant_key` reads it back alike).
                k.processor_version as i32,
                k.canonical_spec.clone(),
            ),
            // Before every key: the empty hash sorts first.
            None => (Vec::new(), i32::MIN, String::new()),
        };
        let rows = self
            .query(
                &VARIANT_KEYS_PAGE,
                params![hash, version, spec, page_limit(limit)],
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
        let rows = self.query(&VARIANT_TOTALS, params![]).await?;
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
        let rows = self.query(&VARIANTS_OF, params![raw]).await?;
        rows.iter()
            .map(|row| {
                let counted: i64 = row.try_get("counted_bytes").map_err(store_error)?;
                Ok((variant_key(row)?, unsigned(counted)))
            })
            .collect()
    }
}

impl PostgresStore {
    /// Deletes these variants and takes their bytes off the count, in one transaction;
    /// returns the keys that were stored.
    ///
    /// Locks are taken in the order every variant write takes them: the variants' rows,
    /// then their byte counters, then the totals' rows (which the delete's trigger moves; a
    /// write's trigger runs at the end of its statement, after its counter). The other way
    /// round, an eviction and the writes it made room for deadlocked each other.
    async fn remove_keys(&self, keys: &[VariantKey]) -> Result<Vec<VariantKey>, MapError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let refs: Vec<&VariantKey> = keys.iter().collect();
        let (hashes, versions, specs) = key_arrays(&refs);
        let mut session = self.session("remove_variants").await?;
        let txn = session.begin().await?;
        // In key order: two nodes evicting the same least recently served rows at once
        // queue behind each other.
        let rows = txn
            .query(
                "SELECT v.hash, v.processor_version, v.spec, v.counted_bytes
                   FROM imgcas_variants AS v
                   JOIN (SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[])
                           AS t (hash, version, spec)) AS d
                     ON v.hash = d.hash AND v.processor_version = d.version AND v.spec = d.spec
                  ORDER BY v.hash, v.processor_version, v.spec
                    FOR UPDATE OF v",
                params![hashes, versions, specs],
            )
            .await?;
        let mut by_shard = std::collections::BTreeMap::<i32, i64>::new();
        let mut gone = Vec::with_capacity(rows.len());
        for row in &rows {
            let key = variant_key(row)?;
            let counted: i64 = row.try_get("counted_bytes").map_err(store_error)?;
            *by_shard.entry(shard_of(&key.hash)).or_default() += counted;
            gone.push(key);
        }
        if gone.is_empty() {
            txn.commit().await?;
            return Ok(gone);
        }
        for (&shard, &bytes) in &by_shard {
            add_bytes(&txn, shard, -bytes).await?;
        }
        let shards: Vec<i32> = by_shard.keys().copied().collect();
        txn.execute(
            "SELECT 1 FROM imgcas_totals WHERE shard = ANY($1::integer[])
              ORDER BY shard FOR UPDATE",
            params![shards],
        )
        .await?;
        // The rows are locked: the delete removes exactly those read above.
        let refs: Vec<&VariantKey> = gone.iter().collect();
        let (hashes, versions, specs) = key_arrays(&refs);
        txn.execute(
            "DELETE FROM imgcas_variants AS v
              USING (SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[])
                       AS t (hash, version, spec)) AS d
              WHERE v.hash = d.hash AND v.processor_version = d.version AND v.spec = d.spec",
            params![hashes, versions, specs],
        )
        .await?;
        txn.commit().await?;
        Ok(gone)
    }
}

/// Writes a variant row (a new one, or over the one stored) and moves the byte count by
/// exactly the difference, in one statement: the update keeps the count it replaced in
/// `prior_counted`, so the statement learns the difference from its own `RETURNING` even
/// when another node wrote the same key in between (the insert then waits for that write's
/// commit and takes the update path). `$1`–`$3` the key, `$4`–`$10` the row, `$11` now,
/// `$12` the counter row, `$13`–`$14` a `q=auto` search's choice.
macro_rules! upsert_variant {
    ($source:literal) => {
        concat!(
            "up AS (
               INSERT INTO imgcas_variants (hash, processor_version, spec, format, width,
                   height, body_bytes, failure, message, counted_bytes, served_at_ms,
                   prior_counted, chosen_quality, chosen_score)
               SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 0, $13, $14 ",
            $source,
            "
               ON CONFLICT (hash, processor_version, spec) DO UPDATE SET
                   format = EXCLUDED.format, width = EXCLUDED.width, height = EXCLUDED.height,
                   body_bytes = EXCLUDED.body_bytes, failure = EXCLUDED.failure,
                   message = EXCLUDED.message, chosen_quality = EXCLUDED.chosen_quality,
                   chosen_score = EXCLUDED.chosen_score,
                   prior_counted = imgcas_variants.counted_bytes,
                   counted_bytes = EXCLUDED.counted_bytes,
                   served_at_ms = GREATEST(imgcas_variants.served_at_ms, EXCLUDED.served_at_ms)
               RETURNING counted_bytes - prior_counted AS delta),
             counted AS (
               UPDATE imgcas_variant_bytes SET bytes = bytes + (SELECT delta FROM up)
                WHERE shard = $12 AND EXISTS (SELECT 1 FROM up))
             SELECT count(*) AS written,
                    EXISTS (SELECT 1 FROM imgcas_takedowns WHERE hash = $1) AS listed
               FROM up"
        )
    };
}

/// A variant written without a claim.
const PUT_VARIANT: Statement = Statement {
    op: "put_variant",
    sql: concat!("WITH ", upsert_variant!("")),
};

/// A variant written under a claim, which the same statement gives up: the claim's row
/// becomes a tombstone (see `claims.rs`) on the condition that its token is still ours, and
/// the row is written only if it was (so a node that lost its claim writes nothing over a
/// newer owner's row). `$15` the claim's key, `$16` its token, `$17` the tombstone's life in
/// seconds.
const PUT_VARIANT_CLAIMED: Statement = Statement {
    op: "put_variant_claimed",
    sql: concat!(
        "WITH held AS (
        UPDATE imgcas_claims SET owner = '', token = 0,
               expires_at = now() + $17 * interval '1 second', renewed_at = now()
         WHERE key = $15 AND token = $16 RETURNING 1), ",
        upsert_variant!("FROM held")
    ),
};

impl PostgresStore {
    /// Stores a variant row, under a claim when one is given (see [`PUT_VARIANT_CLAIMED`]);
    /// returns what the write saw of the takedown list.
    async fn write_variant(
        &self,
        key: &VariantKey,
        row: &VariantRow,
        claim: Option<&Claim>,
    ) -> Result<ListedAtWrite, MapError> {
        let c = VariantColumns::of(key, row)?;
        let raw: &[u8] = key.hash.as_bytes();
        let version = key.processor_version as i32;
        let now = ms(now_ms());
        let shard = shard_of(&key.hash);
        let row_params = params![
            raw,
            version,
            key.canonical_spec,
            c.format,
            c.width,
            c.height,
            c.body_bytes,
            c.failure,
            c.message,
            c.counted_bytes,
            now,
            shard,
            c.chosen_quality,
            c.chosen_score
        ];
        let written = match claim {
            None => self.query(&PUT_VARIANT, row_params).await?,
            Some(claim) => {
                let mut all = row_params.to_vec();
                all.extend_from_slice(params![claim.key, claim.token, TOMBSTONE_SECS]);
                self.query(&PUT_VARIANT_CLAIMED, &all).await?
            }
        };
        let (written, listed): (i64, ListedAtWrite) = match written.first() {
            Some(row) => (
                row.try_get("written").map_err(store_error)?,
                Some(row.try_get("listed").map_err(store_error)?),
            ),
            None => (0, None),
        };
        match (written, claim) {
            (0, Some(claim)) => Err(MapError::ClaimLost(format!(
                "{} changed hands; the result is not stored",
                claim.key
            ))),
            // Nothing written: nothing to check after it.
            (0, None) => Ok(None),
            _ => Ok(listed),
        }
    }
}
