//! The long walks over the store (issue 69) — today the facts and fingerprint backfills a node
//! runs at start — and the one driver they share, [`Pipeline::run_walk`]:
//!
//! - **A page at a time.** A walk is a function from a cursor to its next page (the cursor it
//!   ended on and the rows it handled, or the end); the driver never holds more than a page.
//! - **Resumable.** After every page the driver writes the walk's position in the maps
//!   (`WalkLog`): a run cut off by a restart, a crash or a lost lease is taken up from its
//!   last page by the next one, on this node or another.
//! - **Shared.** In a cluster one node runs a given walk at a time, under a lease (`walk:<name>`,
//!   `shared/design/leases.md`); the others wait for it to end, trying at every time to
//!   live, and show the runner's position (`/admin/savings`' `walks`). A node that takes
//!   the lease over after the runner ended finds nothing left in one page.
//! - **Throttled.** At most `maintenance.walk_rows_per_second` rows a second (0: no limit);
//!   each row's work runs in the background tier, which yields to requests (admission).
//! - **Seen.** `imgcas_walk_rows{walk}` and `imgcas_walk_running{walk}` in `/metrics`, a log
//!   line at start, every ten seconds and at the end.
//!
//! The role's other rooms, whose state its handle `Walks` owns: `maintenance.rs` (`stats`,
//! `verify`, `gc`), `check.rs` (the online check of the store, a walk itself), `copy.rs`
//! (`maps copy`) and `upkeep.rs` (bounded growth: the variants' byte budget, unused URLs
//! forgotten).

use std::future::Future;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::Error;
use crate::maps::{now_ms, StoreReading, WalkPosition};
use crate::pipeline::claims::Turn;
use crate::pipeline::Pipeline;

mod check;
mod copy;
mod maintenance;
mod upkeep;

pub use check::{CheckReport, CheckState, RangeSums, CHECK_RANGES};
pub use copy::{copy_maps, CopyReport};
pub use maintenance::{GcReport, Progress, StatsReport, VerifyReport};

/// The walks' own state, composed into the pipeline.
pub(super) struct Walks {
    /// The maps' totals as last read, and when (`maintenance.rs`, `store_totals`), read at
    /// most once per its maximum age.
    totals: tokio::sync::Mutex<Option<(Instant, StoreReading)>>,
    /// An online check of the store runs from this node (`check.rs`).
    checking: std::sync::atomic::AtomicBool,
    /// Use records, the variants' byte count and the sweep schedule (`upkeep.rs`).
    upkeep: upkeep::Upkeep,
}

impl Walks {
    pub(super) fn new(config: &crate::config::Config) -> Walks {
        Walks {
            totals: tokio::sync::Mutex::new(None),
            checking: Default::default(),
            upkeep: upkeep::Upkeep::new(config),
        }
    }

    /// The variants' bytes, as last known (for `/metrics`).
    pub(super) fn variant_bytes(&self) -> u64 {
        self.upkeep.variant_bytes()
    }
}

/// The walks, by what they walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Facts of the originals lacking current ones (`facts.rs`).
    Facts,
    /// Fingerprints of the originals lacking current ones (`near.rs`).
    Fingerprints,
    /// The originals index against the blob store (`check.rs`).
    Check,
    /// A migration's backfill (`migrate/backfill.rs`).
    Migration,
}

impl Walk {
    /// Its name in the maps, metrics, the log and `/admin`.
    pub fn name(self) -> &'static str {
        match self {
            Walk::Facts => "facts_backfill",
            Walk::Fingerprints => "fingerprint_backfill",
            Walk::Check => "store_check",
            Walk::Migration => "migration_backfill",
        }
    }
}

/// The walk log's row where a migration of the maps keeps its record (`migrate/`): it shares
/// the walks' table, and is no walk.
pub(in crate::pipeline) const MIGRATION_RECORD: &str = "maps_migration";

/// What one page of a walk did: the cursor it ended on, and the rows it handled.
pub(in crate::pipeline) type Page<C> = Option<(C, u64)>;

/// How often a running walk says where it is in the log.
const LOG_EVERY: Duration = Duration::from_secs(10);

impl Pipeline {
    /// Runs `walk` to its end, a page at a time (`page(cursor)` → the next page, `None` at
    /// the end), under the cluster's lease, resuming an interrupted run's position; returns
    /// the rows handled by this run (those of the run it resumed included).
    pub(in crate::pipeline) async fn run_walk<C, F, Fut>(
        &self,
        walk: Walk,
        mut page: F,
    ) -> Result<u64, Error>
    where
        C: Serialize + DeserializeOwned,
        F: FnMut(Option<C>) -> Fut,
        Fut: Future<Output = Result<Page<C>, Error>>,
    {
        let s = &self.shared;
        let name = walk.name();
        let waiting_since = now_ms();
        let lease = loop {
            match self.claim(format!("walk:{name}"), false).await? {
                Turn::Ours(lease) => break lease,
                Turn::Theirs(owner) => {
                    tracing::debug!(walk = name, runner = %owner, "walk runs on another node");
                }
                Turn::Published => {}
            }
            tokio::time::sleep(s.config.cluster.claim_ttl).await;
        };
        let kept = s.maps.walk_position(name).await?;
        if let Some(done) = kept.as_ref().and_then(|p| p.finished_ms) {
            if done >= waiting_since {
                // Another node ran it to its end while this one waited: nothing is left
                // that a run of this one would find.
                lease.release().await;
                return Ok(0);
            }
        }
        let mut position = match kept {
            // A run cut off half way: taken up from its last page.
            Some(p) if p.finished_ms.is_none() && p.cursor.is_some() => {
                tracing::info!(walk = name, rows = p.rows, from = %p.node, "walk resumed");
                WalkPosition {
                    node: s.node_id.clone(),
                    ..p
                }
            }
            _ => WalkPosition {
                node: s.node_id.clone(),
                started_ms: now_ms(),
                ..WalkPosition::default()
            },
        };
        let mut cursor: Option<C> = match &position.cursor {
            Some(text) => Some(serde_json::from_str(text).map_err(|e| {
                Error::Internal(format!("walk {name}: a kept cursor cannot be read: {e}"))
            })?),
            None => None,
        };
        let rate = s.config.maintenance.walk_rows_per_second;
        let gauge = |rows: u64, running: bool| {
            s.metrics.with(|| {
                metrics::gauge!("imgcas_walk_rows", "walk" => name).set(rows as f64);
                metrics::gauge!("imgcas_walk_running", "walk" => name)
                    .set(f64::from(u8::from(running)));
            })
        };
        gauge(position.rows, true);
        let mut logged = Instant::now();
        let outcome = loop {
            if !lease.still_ours() {
                // Another node took the walk over (this one stalled past the lease): it goes
                // on from the last page written.
                tracing::warn!(
                    walk = name,
                    rows = position.rows,
                    "walk lease lost; stopping"
                );
                break Ok(position.rows);
            }
            let began = Instant::now();
            let next = match page(cursor.take()).await {
                Ok(next) => next,
                Err(e) => break Err(e),
            };
            let Some((next, rows)) = next else {
                position.finished_ms = Some(now_ms());
                position.updated_ms = now_ms();
                s.maps.put_walk_position(name, &position).await?;
                tracing::info!(walk = name, rows = position.rows, "walk finished");
                break Ok(position.rows);
            };
            position.rows += rows;
            position.updated_ms = now_ms();
            position.cursor = Some(
                serde_json::to_string(&next)
                    .map_err(|e| Error::Internal(format!("walk {name}: {e}")))?,
            );
            s.maps.put_walk_position(name, &position).await?;
            cursor = Some(next);
            gauge(position.rows, true);
            if logged.elapsed() >= LOG_EVERY {
                logged = Instant::now();
                tracing::info!(walk = name, rows = position.rows, "walk under way");
            }
            if rate > 0 {
                let least = Duration::from_secs_f64(rows as f64 / rate as f64);
                if let Some(left) = least.checked_sub(began.elapsed()) {
                    tokio::time::sleep(left).await;
                }
            }
        };
        gauge(position.rows, false);
        lease.release().await;
        outcome
    }

    /// Where every walk stands, as the maps keep it (every node's runs).
    pub async fn walk_positions(&self) -> Result<Vec<(String, WalkPosition)>, Error> {
        let mut positions = self.shared.maps.walk_positions().await?;
        // The migration's record shares the walk log's table; it is no walk.
        positions.retain(|(name, _)| name != MIGRATION_RECORD);
        Ok(positions)
    }
}
