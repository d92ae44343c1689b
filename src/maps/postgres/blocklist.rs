//! The moderation blocklist: one row per entry, the entry as JSON text.

use super::*;

const BLOCK: Statement = Statement {
    op: "block",
    sql: "INSERT INTO imgcas_blocklist (id, entry) VALUES ($1, $2)
          ON CONFLICT (id) DO UPDATE SET entry = EXCLUDED.entry
          RETURNING (xmax = 0) AS inserted",
};

const UNBLOCK: Statement = Statement {
    op: "unblock",
    sql: "DELETE FROM imgcas_blocklist WHERE id = $1",
};

const BLOCKLIST: Statement = Statement {
    op: "blocklist",
    sql: "SELECT entry FROM imgcas_blocklist ORDER BY id",
};

#[async_trait]
impl Blocklist for PostgresStore {
    async fn block(&self, entry: &BlockEntry) -> Result<bool, MapError> {
        let json = serde_json::to_string(entry).map_err(|e| MapError::Corrupt(e.to_string()))?;
        // `xmax = 0` only on a row this statement inserted (not one it updated).
        let rows = self.query(&BLOCK, params![entry.id, json]).await?;
        Ok(rows.first().is_some_and(|r| r.get::<_, bool>(0)))
    }

    async fn unblock(&self, id: &str) -> Result<bool, MapError> {
        let n = self.execute(&UNBLOCK, params![id]).await?;
        Ok(n == 1)
    }

    async fn blocklist(&self) -> Result<Vec<BlockEntry>, MapError> {
        let rows = self.query(&BLOCKLIST, params![]).await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(r.get::<_, &str>(0))
                    .map_err(|e| MapError::Corrupt(format!("blocklist entry: {e}")))
            })
            .collect()
    }
}
