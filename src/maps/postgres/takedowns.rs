//! Takedowns.

use super::*;

#[async_trait]
impl Takedowns for PostgresStore {
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
}
