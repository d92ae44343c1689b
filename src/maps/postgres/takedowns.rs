//! Takedowns.

use super::*;

const TAKE_DOWN: Statement = Statement {
    op: "take_down",
    sql: "INSERT INTO imgcas_takedowns (hash, taken_down_ms) VALUES ($1, $2)
          ON CONFLICT (hash) DO NOTHING",
};

const LIFT_TAKEDOWN: Statement = Statement {
    op: "lift_takedown",
    sql: "DELETE FROM imgcas_takedowns WHERE hash = $1",
};

const TAKEDOWNS: Statement = Statement {
    op: "takedowns",
    sql: "SELECT hash, taken_down_ms FROM imgcas_takedowns",
};

const IS_TAKEN_DOWN: Statement = Statement {
    op: "is_taken_down",
    sql: "SELECT 1 FROM imgcas_takedowns WHERE hash = $1",
};

const PURGE_GENERATION_SWEEPING_CLAIMS: Statement = Statement {
    op: "purge_generation",
    sql: "WITH swept AS (DELETE FROM imgcas_claims
                          WHERE expires_at < now() - interval '1 minute'),
               slots AS (DELETE FROM imgcas_origin_slots
                          WHERE expires_at < now() - interval '1 minute'),
               pauses AS (DELETE FROM imgcas_origin_pauses
                           WHERE until < now() - interval '1 minute'),
               failures AS (DELETE FROM imgcas_url_failures
                             WHERE remembered_until < now()),
               buckets AS (DELETE FROM imgcas_buckets
                            WHERE full_at < now() - interval '1 minute')
          SELECT generation FROM imgcas_purge WHERE id = 1",
};

const PURGE_GENERATION: Statement = Statement {
    op: "purge_generation",
    sql: "SELECT generation FROM imgcas_purge WHERE id = 1",
};

const BUMP_PURGE_GENERATION: Statement = Statement {
    op: "bump_purge_generation",
    sql: "UPDATE imgcas_purge SET generation = generation + 1 WHERE id = 1
          RETURNING generation",
};

#[async_trait]
impl Takedowns for PostgresStore {
    async fn take_down(&self, hash: &ContentHash, at_ms: u64) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let n = self.execute(&TAKE_DOWN, params![raw, ms(at_ms)]).await?;
        Ok(n == 1)
    }

    async fn lift_takedown(&self, hash: &ContentHash) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let n = self.execute(&LIFT_TAKEDOWN, params![raw]).await?;
        Ok(n == 1)
    }

    async fn takedowns(&self) -> Result<Vec<(ContentHash, u64)>, MapError> {
        let rows = self.query(&TAKEDOWNS, params![]).await?;
        rows.iter()
            .map(|row| {
                let at: i64 = row.try_get("taken_down_ms").map_err(store_error)?;
                Ok((hash_of(row, "hash")?, unsigned(at)))
            })
            .collect()
    }

    async fn is_taken_down(&self, hash: &ContentHash) -> Result<bool, MapError> {
        let raw: &[u8] = hash.as_bytes();
        let rows = self.query(&IS_TAKEN_DOWN, params![raw]).await?;
        Ok(!rows.is_empty())
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
                .query(&PURGE_GENERATION_SWEEPING_CLAIMS, params![])
                .await?;
            return Ok(rows.first().map_or(0, |row| unsigned(row.get(0))));
        }
        let rows = self.query(&PURGE_GENERATION, params![]).await?;
        Ok(rows.first().map_or(0, |row| unsigned(row.get(0))))
    }

    async fn bump_purge_generation(&self) -> Result<u64, MapError> {
        let rows = self.query(&BUMP_PURGE_GENERATION, params![]).await?;
        Ok(rows.first().map_or(0, |row| unsigned(row.get(0))))
    }
}
