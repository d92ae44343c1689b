//! The JSON the service answers and its own client reads back: the error body, the upload and
//! info answers of `/v1/originals`, and the batch of `POST /v1/ingest`. One serde definition
//! each, used by the server to write them and by `imgcas ingest --server` to read them, so
//! the two cannot drift apart.
//!
//! An ingested item's status is derived from its [`Outcome`], never stored beside the flags
//! it comes from: a failed item has no hash, a stored one no error, by construction.

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{BlockEntry, Focus, OriginalInfo, WalkPosition};

/// docs/api.md's error body: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    pub error: ErrorBody,
}

/// The inside of an error body, as an error answer or an ingest item carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: String,
    pub message: String,
}

impl From<&Error> for ErrorBody {
    fn from(e: &Error) -> Self {
        ErrorBody {
            code: e.code().to_string(),
            message: e.to_string(),
        }
    }
}

/// What an original is: the upload answer's and the info answer's common part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginalAnswer {
    pub hash: ContentHash,
    pub format: Option<String>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub bytes: u64,
}

impl OriginalAnswer {
    pub fn new(hash: ContentHash, info: &OriginalInfo) -> Self {
        OriginalAnswer {
            hash,
            format: info.format.map(|f| f.name().to_string()),
            width: info.width,
            height: info.height,
            bytes: info.bytes,
        }
    }
}

/// `POST /v1/originals`, per file (docs/api.md "Upload answer").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadAnswer {
    #[serde(flatten)]
    pub original: OriginalAnswer,
    pub duplicate: bool,
    /// Where its variants are served: `/v1/image/<hash>`.
    pub url: String,
    /// The best other original within the report radius (largest, then oldest), or null.
    #[serde(default)]
    pub near_duplicate_of: Option<ContentHash>,
}

/// `DELETE /v1/urls?url=<url>`: whether the URL had an entry, and the hash it mapped to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForgottenUrlAnswer {
    pub url: String,
    pub forgotten: bool,
    pub hash: Option<String>,
}

/// `DELETE /v1/originals/<hash>`: what the takedown removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakedownAnswer {
    pub hash: String,
    /// The hash was not on the takedown list before (a repeated takedown finishes one a
    /// crash interrupted, and removes what a lagging node stored meanwhile).
    pub newly_listed: bool,
    pub variants_removed: u64,
    pub urls_forgotten: u64,
    pub bytes_freed: u64,
}

/// `DELETE /v1/takedowns/<hash>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiftedAnswer {
    pub hash: String,
    /// The hash was on the takedown list.
    pub lifted: bool,
    /// URL entries that remembered the hash as taken down, forgotten so they download again.
    pub urls_forgotten: u64,
}

/// One entry of `GET /v1/takedowns`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakedownEntry {
    pub hash: String,
    /// When it was taken down, ms since the Unix epoch.
    pub taken_down_ms: u64,
}

/// `GET /v1/takedowns`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakedownsAnswer {
    pub takedowns: Vec<TakedownEntry>,
}

/// `GET /v1/originals/<hash>/info`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InfoAnswer {
    #[serde(flatten)]
    pub original: OriginalAnswer,
    /// RFC 3339, seconds.
    pub first_seen: String,
    /// The perceptual (DCT) hash, 16 hex digits; null for bytes that are no picture.
    pub fingerprint: Option<String>,
    /// Other originals within the report radius.
    pub near_duplicates: u64,
    /// Placeholders and frames (null placeholders for bytes that are no picture).
    #[serde(flatten)]
    pub facts: FactsAnswer,
    /// What `q=auto` chose for this original's stored `q=auto` variants, by canonical spec
    /// (absent from answers of servers before it).
    #[serde(default)]
    pub auto_quality: Vec<AutoQualityAnswer>,
    /// The focal point set for the original (absent when none is, and from answers of
    /// servers before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub focus: Option<FocusAnswer>,
}

/// An original's focal point as the API says it: fractions from 0 to 1 of the oriented
/// source (`x`, `y`), and the region it was set as, if it was.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FocusAnswer {
    pub x: f64,
    pub y: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub width: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub height: Option<f64>,
}

impl From<&Focus> for FocusAnswer {
    fn from(f: &Focus) -> Self {
        let part = |v: u16| f64::from(v) / 10_000.0;
        let region = |i: usize| f.region.map(|r| part(r[i]));
        FocusAnswer {
            x: part(f.x),
            y: part(f.y),
            left: region(0),
            top: region(1),
            width: region(2),
            height: region(3),
        }
    }
}

/// `PUT` and `DELETE /v1/originals/<hash>/focus`: the focal point now set (null once
/// cleared), and how many variants placed by a focal point were removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FocusSetAnswer {
    pub hash: String,
    pub focus: Option<FocusAnswer>,
    pub variants_removed: u64,
}

/// One `q=auto` variant of an original: its canonical spec, the encoder quality its search
/// chose and the SSIMULACRA2 score reached (one decimal; null where nothing was searched:
/// an animation, or an output over the searched size).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoQualityAnswer {
    pub spec: String,
    pub quality: u8,
    pub score: Option<f64>,
}

/// What a page may paint before the image loads, and whether it moves: part of `info` and
/// of `format=json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FactsAnswer {
    /// BlurHash, 4 × 3 components.
    pub blurhash: Option<String>,
    /// ThumbHash, base64.
    pub thumbhash: Option<String>,
    /// `#rrggbb`.
    pub dominant_color: Option<String>,
    pub has_alpha: bool,
    pub animated: bool,
    pub frames: u32,
    /// One play of an animation in milliseconds, as its frames' delays declare it; null for a
    /// still picture.
    #[serde(default)]
    pub duration_ms: Option<u64>,
}

/// `GET /v1/originals/<hash>/similar`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimilarAnswer {
    pub hash: ContentHash,
    pub max_distance: u32,
    /// The search read as many candidates as one search may (`maps::NEAR_READ_CAP`) and
    /// stopped: closer originals than those listed may exist.
    #[serde(default)]
    pub partial: bool,
    /// Closest first; the original itself excluded.
    pub similar: Vec<SimilarOriginal>,
}

/// One original of a [`SimilarAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimilarOriginal {
    pub hash: ContentHash,
    /// Bits of the 64-bit perceptual hash that differ.
    pub distance: u32,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub bytes: u64,
    pub format: Option<String>,
}

/// The body of `POST /v1/ingest`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    pub urls: Vec<String>,
    #[serde(default)]
    pub warm: Vec<String>,
}

/// The answer of `POST /v1/ingest`: one result per URL, in request order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IngestAnswer {
    pub results: Vec<ItemResult>,
    pub summary: Summary,
}

/// How one item (a URL, or a file in `imgcas ingest`) came out, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Bytes never stored before.
    New,
    /// Bytes already stored (under this URL or another name): nothing new was kept.
    Duplicate,
    /// A known URL whose bytes are not the ones it pointed at before.
    Changed,
    Failed,
}

/// One warmed variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarmResult {
    /// The canonical spec built (a `format=auto` spec warms one variant per output format).
    pub spec: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// For `q=auto`: the encoder quality its search chose (`X-Imgcas-Quality`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality: Option<u8>,
    /// For `q=auto`: the SSIMULACRA2 score reached, one decimal (`X-Imgcas-Score`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// `true` when this call ran the processing (`false`: it was stored already).
    #[serde(default)]
    pub processed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
}

impl WarmResult {
    pub fn failed(spec: String, error: ErrorBody) -> Self {
        WarmResult {
            spec,
            format: None,
            bytes: None,
            quality: None,
            score: None,
            processed: false,
            error: Some(error),
        }
    }
}

/// A stored item: what its original is and how this call found it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredItem {
    pub original: OriginalAnswer,
    /// The bytes were stored already (no new original).
    pub duplicate: bool,
    /// The URL pointed at other bytes before this call.
    pub changed: bool,
    /// The bytes crossed the wire to the service (`false`: a `304`, or a held mapping).
    pub downloaded: bool,
    /// The best other original within the report radius, if any.
    pub near_duplicate_of: Option<ContentHash>,
    pub warm: Vec<WarmResult>,
}

/// What became of an item.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Stored(StoredItem),
    Failed(ErrorBody),
}

/// One ingested item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "ItemWire", try_from = "ItemWire")]
pub struct ItemResult {
    /// The URL as given (`POST /v1/ingest`), or the file's path (`imgcas ingest`).
    pub source: String,
    pub outcome: Outcome,
}

impl ItemResult {
    pub fn failed(source: String, error: &Error) -> Self {
        Self::failed_with(source, error.into())
    }

    /// A failure as a server described it.
    pub fn failed_with(source: String, error: ErrorBody) -> Self {
        ItemResult {
            source,
            outcome: Outcome::Failed(error),
        }
    }

    pub fn stored(source: String, item: StoredItem) -> Self {
        ItemResult {
            source,
            outcome: Outcome::Stored(item),
        }
    }

    pub fn status(&self) -> Status {
        match &self.outcome {
            Outcome::Failed(_) => Status::Failed,
            Outcome::Stored(s) if s.changed => Status::Changed,
            Outcome::Stored(s) if s.duplicate => Status::Duplicate,
            Outcome::Stored(_) => Status::New,
        }
    }

    pub fn stored_item(&self) -> Option<&StoredItem> {
        match &self.outcome {
            Outcome::Stored(s) => Some(s),
            Outcome::Failed(_) => None,
        }
    }

    /// Bytes the service received but did not keep a second time.
    pub fn bytes_saved(&self) -> u64 {
        match &self.outcome {
            Outcome::Stored(s) if s.duplicate && s.downloaded => s.original.bytes,
            _ => 0,
        }
    }
}

/// Items with the same new bytes raced to store them; whichever won, the report credits the
/// first in order as new and calls the rest duplicates, as a sequential run would.
pub fn credit_first(results: &mut [ItemResult]) {
    let mut first_of: std::collections::HashMap<ContentHash, usize> = Default::default();
    for i in 0..results.len() {
        let Some(hash) = results[i].stored_item().map(|s| s.original.hash) else {
            continue;
        };
        let Some(&first) = first_of.get(&hash) else {
            first_of.insert(hash, i);
            continue;
        };
        let later_is_new = results[i].stored_item().is_some_and(|s| !s.duplicate);
        let first_is_plain_duplicate = results[first]
            .stored_item()
            .is_some_and(|s| s.duplicate && !s.changed);
        if later_is_new && first_is_plain_duplicate {
            for (r, duplicate) in [(first, false), (i, true)] {
                if let Outcome::Stored(s) = &mut results[r].outcome {
                    s.duplicate = duplicate;
                }
            }
        }
    }
}

/// Counts over a batch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    pub new: u64,
    pub duplicate: u64,
    pub changed: u64,
    pub failed: u64,
    /// Items whose bytes crossed the wire to us.
    pub downloaded: u64,
    /// Bytes received but not stored again (dedup).
    pub bytes_saved: u64,
    /// Variants built by this call, and warm runs that failed.
    pub warmed: u64,
    pub warm_failed: u64,
    /// Items whose picture is a near-duplicate of another original.
    #[serde(default)]
    pub near_duplicates: u64,
}

impl Summary {
    pub fn add(&mut self, item: &ItemResult) {
        match item.status() {
            Status::New => self.new += 1,
            Status::Duplicate => self.duplicate += 1,
            Status::Changed => self.changed += 1,
            Status::Failed => self.failed += 1,
        }
        self.bytes_saved += item.bytes_saved();
        if let Some(s) = item.stored_item() {
            self.downloaded += u64::from(s.downloaded);
            self.near_duplicates += u64::from(s.near_duplicate_of.is_some());
            for w in &s.warm {
                if w.error.is_some() {
                    self.warm_failed += 1;
                } else if w.processed {
                    self.warmed += 1;
                }
            }
        }
    }

    pub fn of(results: &[ItemResult]) -> Summary {
        let mut summary = Summary::default();
        for r in results {
            summary.add(r);
        }
        summary
    }
}

/// An item as it travels: flat, with the status spelled out for readers of the JSON.
#[derive(Serialize, Deserialize)]
struct ItemWire {
    source: String,
    status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hash: Option<ContentHash>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    height: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(default)]
    duplicate: bool,
    #[serde(default)]
    changed: bool,
    #[serde(default)]
    downloaded: bool,
    #[serde(default)]
    near_duplicate_of: Option<ContentHash>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    warm: Vec<WarmResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorBody>,
}

impl From<ItemResult> for ItemWire {
    fn from(item: ItemResult) -> Self {
        let status = item.status();
        let mut wire = ItemWire {
            source: item.source,
            status,
            hash: None,
            format: None,
            width: None,
            height: None,
            bytes: None,
            duplicate: false,
            changed: false,
            downloaded: false,
            near_duplicate_of: None,
            warm: Vec::new(),
            error: None,
        };
        match item.outcome {
            Outcome::Failed(e) => wire.error = Some(e),
            Outcome::Stored(s) => {
                wire.hash = Some(s.original.hash);
                wire.format = s.original.format;
                wire.width = s.original.width;
                wire.height = s.original.height;
                wire.bytes = Some(s.original.bytes);
                wire.duplicate = s.duplicate;
                wire.changed = s.changed;
                wire.downloaded = s.downloaded;
                wire.near_duplicate_of = s.near_duplicate_of;
                wire.warm = s.warm;
            }
        }
        wire
    }
}

impl TryFrom<ItemWire> for ItemResult {
    type Error = String;

    fn try_from(w: ItemWire) -> Result<Self, String> {
        let outcome = match (w.status, w.error, w.hash) {
            (Status::Failed, Some(e), None) => Outcome::Failed(e),
            (Status::Failed, _, _) => return Err("a failed item carries an error only".into()),
            (_, Some(_), _) | (_, _, None) => {
                return Err("a stored item carries a hash and no error".into())
            }
            (_, None, Some(hash)) => Outcome::Stored(StoredItem {
                original: OriginalAnswer {
                    hash,
                    format: w.format,
                    width: w.width,
                    height: w.height,
                    bytes: w.bytes.unwrap_or(0),
                },
                duplicate: w.duplicate,
                changed: w.changed,
                downloaded: w.downloaded,
                near_duplicate_of: w.near_duplicate_of,
                warm: w.warm,
            }),
        };
        let item = ItemResult {
            source: w.source,
            outcome,
        };
        if item.status() != w.status {
            return Err(format!(
                "status {:?} contradicts the item's flags ({:?})",
                w.status,
                item.status()
            ));
        }
        Ok(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(source: &str, duplicate: bool) -> ItemResult {
        ItemResult::stored(
            source.into(),
            StoredItem {
                original: OriginalAnswer {
                    hash: ContentHash::of(b"x"),
                    format: None,
                    width: None,
                    height: None,
                    bytes: 10,
                },
                duplicate,
                changed: false,
                downloaded: true,
                near_duplicate_of: None,
                warm: Vec::new(),
            },
        )
    }

    #[test]
    fn the_first_of_equal_bytes_is_credited_as_new() {
        let mut results = vec![stored("a", true), stored("b", false)];
        credit_first(&mut results);
        let got: Vec<Status> = results.iter().map(ItemResult::status).collect();
        assert_eq!(got, [Status::New, Status::Duplicate]);
        assert_eq!(results[1].bytes_saved(), 10);
    }

    #[test]
    fn status_rules() {
        let with = |changed: bool, duplicate: bool| {
            let mut item = stored("a", duplicate);
            if let Outcome::Stored(s) = &mut item.outcome {
                s.changed = changed;
            }
            item.status()
        };
        assert_eq!(with(false, false), Status::New);
        assert_eq!(with(false, true), Status::Duplicate);
        assert_eq!(with(true, true), Status::Changed);
        assert_eq!(with(true, false), Status::Changed);
    }

    #[test]
    fn items_travel_flat_and_come_back_whole() {
        let item = stored("a", true);
        let json = serde_json::to_value(&item).unwrap();
        assert_eq!(json["status"], "duplicate");
        assert_eq!(json["hash"], ContentHash::of(b"x").to_hex());
        assert!(json.get("error").is_none());
        let back: ItemResult = serde_json::from_value(json).unwrap();
        assert_eq!(back, item);
        let failed = ItemResult::failed("b".into(), &Error::NotFound("gone".into()));
        let json = serde_json::to_value(&failed).unwrap();
        assert_eq!(json["status"], "failed");
        assert_eq!(json["error"]["code"], "not_found");
        assert_eq!(serde_json::from_value::<ItemResult>(json).unwrap(), failed);
    }

    #[test]
    fn contradictory_items_are_refused() {
        let mut json = serde_json::to_value(stored("a", true)).unwrap();
        json["status"] = "new".into();
        assert!(serde_json::from_value::<ItemResult>(json).is_err());
        let json = serde_json::json!({"source": "a", "status": "failed", "hash": "00"});
        assert!(serde_json::from_value::<ItemResult>(json).is_err());
    }
}

/// What listing a blocklist entry did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockAnswer {
    pub entry: BlockEntry,
    pub newly_listed: bool,
    /// Stored originals it matched, taken down.
    pub taken_down: Vec<String>,
}

/// `GET /v1/blocklist`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlocklistAnswer {
    pub entries: Vec<BlockEntry>,
}
/// `DELETE /v1/blocklist/<id>`: the entries lifted (the one named, and those its matches
/// listed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnblockAnswer {
    pub id: String,
    pub lifted: Vec<String>,
}

/// `GET /admin/savings`, and what `imgcas stats` prints: what deduplication saves, on this
/// node since it started and in the shared store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavingsAnswer {
    /// The node that answered (`cluster.node_id`): `node` is its own figures (none from
    /// `imgcas stats` on the local data dir, which serves nothing).
    pub node_id: String,
    pub node: Option<NodeSavings>,
    /// The maps' totals, every node's (none before the node's first reading of them).
    pub store: Option<StoreSavings>,
    /// Where each long walk over the store stands (the backfills), whichever node runs it,
    /// as the maps keep it.
    #[serde(default)]
    pub walks: Vec<WalkState>,
}

/// One walk's position in [`SavingsAnswer::walks`]: its name and the maps' row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WalkState {
    pub walk: String,
    #[serde(flatten)]
    pub position: WalkPosition,
}

impl WalkState {
    /// Every walk's, as `positions` holds them.
    pub fn all(positions: Vec<(String, WalkPosition)>) -> Vec<WalkState> {
        positions
            .into_iter()
            .map(|(walk, position)| WalkState { walk, position })
            .collect()
    }
}

/// One node's figures since it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSavings {
    pub started_ms: u64,
    /// Image answers (those with an `X-Imgcas-Cache` outcome), and the hits among them.
    pub requests: u64,
    pub hits: u64,
    pub processing_runs: u64,
    /// `requests / processing_runs` (none before the first run).
    pub requests_per_run: Option<f64>,
    /// `hits / requests` (none before the first request).
    pub hit_ratio: Option<f64>,
    /// Bytes of downloads and uploads not stored again: their exact bytes were stored
    /// already, or (canonical mode) a near-duplicate serves them.
    pub exact_saved_bytes: u64,
    pub near_saved_bytes: u64,
    pub downloads: u64,
    pub downloaded_bytes: u64,
}

/// The shared store's totals (every node's) and its budgets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreSavings {
    /// When the maps were read, ms since the epoch.
    pub read_at_ms: u64,
    /// Originals and their bytes, URL entries and the bytes they point at, and what exact
    /// and near-duplicate deduplication saved (`crate::maps::StoreTotals`'s fields).
    #[serde(flatten)]
    pub totals: crate::maps::StoreTotals,
    pub url_bytes: u64,
    pub urls_max_bytes: u64,
    pub variant_bytes: u64,
    pub variants_max_bytes: u64,
}

impl StoreSavings {
    /// A reading of the maps, with the variants' bytes and the two budgets.
    pub fn new(
        reading: &crate::maps::StoreReading,
        variant_bytes: u64,
        urls_max_bytes: u64,
        variants_max_bytes: u64,
    ) -> StoreSavings {
        StoreSavings {
            read_at_ms: reading.read_at_ms,
            totals: reading.totals,
            url_bytes: reading.url_bytes,
            urls_max_bytes,
            variant_bytes,
            variants_max_bytes,
        }
    }
}
