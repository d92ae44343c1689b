//! The `WalkLog` role of the maps: where each long walk over the store stands (issue 69) —
//! its cursor, the rows it has handled, the node running it and when it began, went on and
//! ended — kept in the maps so that a walk resumes where it stopped after a restart or a
//! crash, and every node sharing the maps sees another's progress (`/admin/savings`'
//! `walks`). One small row per walk, written once a page.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::MapError;

/// Where one walk stands.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WalkPosition {
    /// The last key a page ended on, as the walk writes it (its own encoding, JSON); `None`
    /// before its first page.
    pub cursor: Option<String>,
    /// Rows handled by this run of the walk so far.
    pub rows: u64,
    /// The node running it (`cluster.node_id`).
    pub node: String,
    pub started_ms: u64,
    /// When its last page was written down.
    pub updated_ms: u64,
    /// When it reached the end (`None` while it runs, or after it stopped half way).
    pub finished_ms: Option<u64>,
}

/// The walks' positions, one row per walk by its name.
#[async_trait]
pub trait WalkLog: Send + Sync {
    /// Where walk `name` stands, if it ever ran.
    async fn walk_position(&self, name: &str) -> Result<Option<WalkPosition>, MapError>;

    /// Writes where walk `name` stands, replacing what was kept.
    async fn put_walk_position(&self, name: &str, position: &WalkPosition) -> Result<(), MapError>;

    /// Every walk's position, by name (a handful of rows).
    async fn walk_positions(&self) -> Result<Vec<(String, WalkPosition)>, MapError>;
}

/// A position as a row holds it: JSON.
pub(super) fn encode(position: &WalkPosition) -> Result<String, MapError> {
    serde_json::to_string(position).map_err(|e| MapError::Corrupt(e.to_string()))
}

pub(super) fn decode(name: &str, raw: &[u8]) -> Result<WalkPosition, MapError> {
    serde_json::from_slice(raw).map_err(|e| MapError::Corrupt(format!("walk {name}: {e}")))
}
