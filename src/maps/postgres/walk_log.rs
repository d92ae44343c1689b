//! The walks' positions: one row per walk, its position as JSON text.

use super::super::walk_log::{decode, encode, WalkLog, WalkPosition};
use super::*;

const WALK: Statement = Statement {
    op: "walk_position",
    sql: "SELECT position FROM imgcas_walks WHERE name = $1",
};

const PUT_WALK: Statement = Statement {
    op: "put_walk_position",
    sql: "INSERT INTO imgcas_walks (name, position) VALUES ($1, $2)
          ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position",
};

const WALKS: Statement = Statement {
    op: "walk_positions",
    sql: "SELECT name, position FROM imgcas_walks ORDER BY name",
};

#[async_trait]
impl WalkLog for PostgresStore {
    async fn walk_position(&self, name: &str) -> Result<Option<WalkPosition>, MapError> {
        let rows = self.query(&WALK, params![name]).await?;
        rows.first()
            .map(|r| {
                let raw: &str = r.try_get(0).map_err(store_error)?;
                decode(name, raw.as_bytes())
            })
            .transpose()
    }

    async fn put_walk_position(&self, name: &str, position: &WalkPosition) -> Result<(), MapError> {
        let json = encode(position)?;
        self.execute(&PUT_WALK, params![name, json])
            .await
            .map(|_| ())
    }

    async fn walk_positions(&self) -> Result<Vec<(String, WalkPosition)>, MapError> {
        let rows = self.query(&WALKS, params![]).await?;
        rows.iter()
            .map(|r| {
                let name: String = r.try_get(0).map_err(store_error)?;
                let raw: &str = r.try_get(1).map_err(store_error)?;
                let position = decode(&name, raw.as_bytes())?;
                Ok((name, position))
            })
            .collect()
    }
}
