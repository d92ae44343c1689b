//! The moderation blocklist's role of the maps: its entry, as stored and as the routes and
//! `imgcas blocklist` read and write it, and the trait each backend implements.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::MapError;

/// One entry of the moderation blocklist (docs/api.md, "Blocklist"): bytes refused by
/// their SHA-256, pictures by their fingerprint within a radius, or both. Also the shape
/// `GET /v1/blocklist` and `imgcas blocklist export` write (one JSON object per entry), and
/// the JSON `POST /v1/blocklist` reads (its `sha256`, `fingerprint`, `radius` and `note`).
///
/// - `id`: the SHA-256 in hex when it has one, else `fp-` and its fingerprint.
/// - `fingerprint`: 16 hex digits (the DCT hash alone) or 64 (the whole fingerprint, as the
///   near index keeps it: its other hashes guard the match as reporting does).
/// - `radius`: the largest Hamming distance of the DCT hash that matches (with a
///   fingerprint; when listing, none takes `moderation.blocklist_radius`).
/// - `matched`: set on entries imgcas listed itself: the entry whose fingerprint these bytes
///   matched (refused on the way in, or taken down when that entry was listed), or
///   `validation` for bytes the validation service refused. Lifting that entry lifts them.
/// - `took_down`: listing it took a stored original down (lifting it lifts that takedown).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BlockEntry {
    pub id: String,
    // What is absent is left out of the JSON: an exported line says only what it lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub radius: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub matched: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub took_down: bool,
    pub listed_ms: u64,
}

/// The moderation blocklist, shared by every node like the takedown list.
#[async_trait]
pub trait Blocklist: Send + Sync {
    /// Lists `entry` durably, replacing one of the same id; returns whether it is new.
    async fn block(&self, entry: &BlockEntry) -> Result<bool, MapError>;

    /// Takes entry `id` off the list, durably; returns whether it was listed.
    async fn unblock(&self, id: &str) -> Result<bool, MapError>;

    /// Every entry.
    async fn blocklist(&self) -> Result<Vec<BlockEntry>, MapError>;
}
