//! Variants.

use super::*;

#[async_trait]
impl Variants for PostgresStore {
    fn holds_variant_bytes(&self) -> bool {
        false
    }

    async fn variant(&self, key: &VariantKey) -> Result<Option<VariantRow>, MapError> {
        let raw: &[u8] = key.hash.as_bytes();
        let rows = self
            .query(
                "variant",
                "SELECT format, width, height, body_bytes, failure, message FROM imgcas_variants
                  WHERE hash = $1 AND processor_version = $2 AND spec = $3",
                params![raw, (key.processor_version as i32), key.canonical_spec],
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

    async fn mark_variants_served(&self, served: &[(VariantKey, u64)]) -> Result<(), MapError> {
        if served.is_empty() {
            return Ok(());
        }
        let keys: Vec<&VariantKey> = served.iter().map(|(k, _)| k).collect();
        let (hashes, versions, specs) = key_arrays(&keys);
        let stamps: Vec<i64> = served.iter().map(|(_, at)| ms(*at)).collect();
        self.execute(
            "mark_variants_served",
            "UPDATE imgcas_variants AS v SET served_at_ms = s.at
               FROM (SELECT * FROM unnest($1::bytea[], $2::integer[], $3::text[], $4::bigint[])
                       AS t (hash, version, spec, at)) AS s
              WHERE v.hash = s.hash AND v.processor_version = s.version AND v.spec = s.spec
                AND v.served_at_ms < s.at",
            params![hashes, versions, specs, stamps],
        )
        .await
        .map(|_| ())
    }

    async fn variant_bytes(&self) -> Result<u64, MapError> {
        let rows = self
            .query(
                "variant_bytes",
                "SELECT CAST(COALESCE(SUM(bytes), 0) AS bigint) FROM imgcas_variant_bytes",
                params![],
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
                    "evict_variants",
                    "SELECT hash, processor_version, spec, counted_bytes FROM imgcas_variants
                      ORDER BY served_at_ms, hash, processor_version, spec LIMIT $1",
                    params![EVICTION_BATCH],
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
                "variant_keys",
                "SELECT hash, processor_version, spec FROM imgcas_variants",
                params![],
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
"variant_totals", 
                "SELECT CAST(COALESCE(SUM(CASE WHEN failure IS NULL THEN 1 ELSE 0 END), 0) AS bigint),
                        CAST(COALESCE(SUM(body_bytes), 0) AS bigint),
                        CAST(COALESCE(SUM(CASE WHEN failure IS NULL THEN 0 ELSE 1 END), 0) AS bigint)
                   FROM imgcas_variants",
                params![],
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
                "variants_of",
                "SELECT hash, processor_version, spec, counted_bytes FROM imgcas_variants
                  WHERE hash = $1",
                params![raw],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let counted: i64 = row.try_get("counted_bytes").map_err(store_error)?;
                Ok((variant_key(row)?, unsigned(counted)))
            })
            .collect()
    }
}
