//! Takedowns.

use super::*;

#[async_trait]
impl Takedowns for PostgresStore {
    async fn take_down(&self, hash: &ContentHash, at_ms: u64) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let n = self
            .execute(
                "take_down",
                "INSERT INTO imgcas_takedowns (hash, taken_down_ms) VALUES ($1, $2)
                 ON CONFLICT (hash) DO NOTHING",
                params![raw, ms(at_ms)],
            )
            .await?;
        Ok(n == 1)
    }

    async fn lift_takedown(&self, hash: &ContentHash) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let n = self
            .execute(
                "lift_takedown",
                "DELETE FROM imgcas_takedowns WHERE hash = $1",
                params![raw],
            )
            .await?;
        Ok(n == 1)
    }

    async fn takedowns(&self) -> Result<Vec<(ContentHash, u64)>, MapError> {
        let rows = self
            .query(
                "takedowns",
                "SELECT hash, taken_down_ms FROM imgcas_takedowns",
                params![],
            )
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
            .query(
                "is_taken_down",
                "SELECT 1 FROM imgcas_takedowns WHERE hash = $1",
                params![raw],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    fn listed_at_write(&self, hash: &ContentHash) -> Option<bool> {
        self.listed_at_write.remove(hash)
    }

    async fn purge_generation(&self) -> Result<u64, MapError> {
        // Batched with this read (a second apart on every node): now and then, claims whose
        // time ran out a while ago (tombstones of published results, claims of dead
        // nodes) are swept, so the table holds only what is under way.
        let reads = self
            .generation_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if reads % CLAIMS_SWEPT_EVERY == CLAIMS_SWEPT_EVERY - 1 {
            let rows = self
                .query(
                    "purge_generation",
                    "WITH swept AS (DELETE FROM imgcas_claims
                                     WHERE expires_at < now() - interval '1 minute')
                     SELECT generation FROM imgcas_purge WHERE id = 1",
                    params![],
                )
                .await?;
            return Ok(rows.first().map_or(0, |row| unsigned(row.get(0))));
        }
        let rows = self
            .query(
                "purge_generation",
                "SELECT generation FROM imgcas_purge WHERE id = 1",
                params![],
            )
            .await?;
        Ok(rows.first().map_or(0, |row| unsigned(row.get(0))))
    }

    async fn bump_purge_generation(&self) -> Result<u64, MapError> {
        let rows = self
            .query(
                "bump_purge_generation",
                "UPDATE imgcas_purge SET generation = generation + 1 WHERE id = 1
                 RETURNING generation",
                params![],
            )
            .await?;
        Ok(rows.first().map_or(0, |row| unsigned(row.get(0))))
    }
}
