//! Online growth (issue 69, part 4): the maps — and the blob store with them, a node's
//! directory into a bucket or back — moved to other ones while the node serves, the way
//! Mezzanine moved its rows:
//!
//! 1. **backfilling**: every write goes to the source (which leads: it answers the reads)
//!    and then to the target (`mirror.rs`, `blobs.rs`; queued and made in order in the
//!    background, `follow.rs`, so a request waits for the source alone); the backfill (`backfill.rs`) walks the
//!    source's originals by hash range and makes the target hold what the source holds for
//!    each — index entry, bytes, fingerprint, URL entries, variants — comparing a checksum
//!    of both sides' state per original and copying again what differs; a sample of reads is
//!    compared with the target (shadow reads);
//! 2. **validated**: the backfill reached the end with every range equal; the mirror goes on;
//! 3. **cut_over** (asked): the target leads, and the source is still written;
//! 4. **finished** (asked): the source is retired; the node serves from the target, and its
//!    configuration should now name it (`maps.url`, the bucket).
//!
//! `rollback` goes back to the source alone: at once before the cutover; after it, through
//! **rolling_back**, the backfill run the other way (the source made to hold what the target
//! took while it led) before the source leads again.
//!
//! Where the migration stands is written in the source's maps (the walk log's row
//! `maps_migration`), made durable before a phase takes effect, and read at every start: a
//! node killed in any phase comes back in it, its backfill taken up from its last page (and
//! followed by a full run before it validates: a write whose mirror the kill cut off may lie
//! behind the cursor). A start in `validated` backfills again first, for the same reason, as
//! does a cutover asked after a mirrored write failed.

mod backfill;
pub(super) mod blobs;
mod follow;
mod lead_only;
pub(super) mod mirror;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use self::follow::{FollowQueue, Follower, MirrorCounts, Sides};
use super::Pipeline;
use crate::blob::{BlobStore, FsBlobStore, S3BlobStore};
use crate::config::{Config, MapsBackend, StorageBackend};
use crate::error::Error;
use crate::maps::{now_ms, MapStore, OpenOptions, WalkPosition};

/// The walk log's row where the migration's record is kept (in the source's maps).
const RECORD: &str = super::walks::MIGRATION_RECORD;

/// The phases (see the module's comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Backfilling,
    Validated,
    CutOver,
    Finished,
    RollingBack,
    RolledBack,
}

/// What the source's maps keep of a migration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationRecord {
    /// The target maps, as asked (`postgres://…`, `redb://<dir>`).
    pub to: String,
    /// The bucket the blob store moves into (the node's S3 settings, this bucket), when it
    /// moves from a directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    pub phase: Phase,
    pub started_ms: u64,
    /// When the phase began.
    pub phase_ms: u64,
    /// Mirrored writes that had failed when the backfill last reached its end (a cutover
    /// asked after more failed backfills again first).
    #[serde(default)]
    pub failures_at_validation: u64,
}

/// The migration as `GET /admin/migrate` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationState {
    /// The record, the target's password left out.
    pub to: String,
    pub bucket: Option<String>,
    pub phase: Phase,
    pub started_ms: u64,
    pub phase_ms: u64,
    /// The backfill's walk (`migration_backfill`): originals handled, its report.
    pub backfill: Option<backfill::BackfillState>,
    /// On this node since it started: mirrored writes that failed, shadow reads compared.
    pub mirrored_writes_failed: u64,
    /// The target's writes queued on this node and not yet made (`follow.rs`).
    #[serde(default)]
    pub mirrored_writes_queued: u64,
    pub shadow_same: u64,
    pub shadow_different: u64,
    pub shadow_absent: u64,
    /// What to do next, in words.
    pub next: String,
}

/// The migration's state owned by the pipeline: the source as configured, who leads now, and
/// the record.
pub(super) struct Migration {
    source: Arc<dyn MapStore>,
    source_blobs: Arc<dyn BlobStore>,
    pub(super) sides: Arc<ArcSwap<Sides>>,
    pub(super) counts: Arc<MirrorCounts>,
    /// The follower's writes under way (`follow.rs`).
    pub(super) follow: Arc<FollowQueue>,
    /// One phase change at a time.
    turn: tokio::sync::Mutex<()>,
}

/// Why a migration cannot be asked what it was asked.
fn conflict(message: impl Into<String>) -> Error {
    Error::Conflict(message.into())
}

impl Migration {
    /// The maps and blob store the pipeline uses — the source's, or the two sides of a
    /// migration the source's record says is under way — and the migration's state.
    pub(super) async fn open(
        config: &Config,
        source: Arc<dyn MapStore>,
        source_blobs: Arc<dyn BlobStore>,
    ) -> Result<Migration, Error> {
        let record = read_record(source.as_ref()).await?;
        let alone = || Sides {
            lead: source.clone(),
            lead_blobs: source_blobs.clone(),
            follow: None,
        };
        let sides = match &record {
            None => alone(),
            Some(r) => match r.phase {
                Phase::RolledBack => alone(),
                phase => {
                    let (maps, blobs, same_blobs) =
                        open_target(config, &r.to, r.bucket.as_deref()).await?;
                    sides_for(phase, &source, &source_blobs, maps, blobs, same_blobs)
                }
            },
        };
        let counts = Arc::<MirrorCounts>::default();
        Ok(Migration {
            source,
            source_blobs,
            sides: Arc::new(ArcSwap::from_pointee(sides)),
            follow: Arc::new(FollowQueue::start(counts.clone())),
            counts,
            turn: tokio::sync::Mutex::new(()),
        })
    }
}

/// Who leads in `phase`.
fn sides_for(
    phase: Phase,
    source: &Arc<dyn MapStore>,
    source_blobs: &Arc<dyn BlobStore>,
    target: Arc<dyn MapStore>,
    target_blobs: Arc<dyn BlobStore>,
    same_blobs: bool,
) -> Sides {
    match phase {
        Phase::Backfilling | Phase::Validated => Sides {
            lead: source.clone(),
            lead_blobs: source_blobs.clone(),
            follow: Some(Follower {
                maps: target,
                blobs: target_blobs,
                same_blobs,
            }),
        },
        Phase::CutOver | Phase::RollingBack => Sides {
            lead: target,
            lead_blobs: target_blobs,
            follow: Some(Follower {
                maps: source.clone(),
                blobs: source_blobs.clone(),
                same_blobs,
            }),
        },
        Phase::Finished => Sides {
            lead: target,
            lead_blobs: target_blobs,
            follow: None,
        },
        Phase::RolledBack => Sides {
            lead: source.clone(),
            lead_blobs: source_blobs.clone(),
            follow: None,
        },
    }
}

async fn read_record(source: &dyn MapStore) -> Result<Option<MigrationRecord>, Error> {
    let Some(position) = source.walk_position(RECORD).await? else {
        return Ok(None);
    };
    let Some(text) = position.cursor else {
        return Ok(None);
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::Internal(format!("the migration's record cannot be read: {e}")))
}

/// Opens the target's maps and its blob store; `true` when that is the node's own blob
/// store (one bucket for both).
async fn open_target(
    config: &Config,
    to: &str,
    bucket: Option<&str>,
) -> Result<(Arc<dyn MapStore>, Arc<dyn BlobStore>, bool), Error> {
    let unavailable = |what: &str, e: String| Error::StorageUnavailable(format!("{what}: {e}"));
    let backend = MapsBackend::of(Some(to)).map_err(|e| Error::invalid_option("to", &e))?;
    let maps =
        crate::maps::open_backend(&backend, &config.data_dir, &OpenOptions::of(&config.maps))
            .await
            .map_err(|e| unavailable("the target maps", e.to_string()))?;
    let (blobs, same): (Arc<dyn BlobStore>, bool) = match (&backend, bucket) {
        (_, Some(bucket)) => {
            let mut s3 = config.storage.s3.clone();
            s3.bucket = Some(bucket.to_string());
            let same = config.storage.backend == StorageBackend::S3
                && config.storage.s3.bucket.as_deref() == Some(bucket);
            let store = S3BlobStore::connect(&s3)
                .await
                .map_err(|e| unavailable("the target bucket", e.to_string()))?;
            (Arc::new(store), same)
        }
        (MapsBackend::Postgres(_), None) => {
            if config.storage.backend != StorageBackend::S3 {
                return Err(Error::invalid_option(
                    "bucket",
                    "maps on PostgreSQL keep their bytes in a bucket: name it (`--bucket`), on \
                     the node's S3 settings",
                ));
            }
            (crate::blob::open(config).await?, true)
        }
        (MapsBackend::Embedded | MapsBackend::EmbeddedAt(_), None) => {
            let dir = backend
                .embedded_dir(&config.data_dir)
                .unwrap_or(&config.data_dir);
            let store = FsBlobStore::open(dir)
                .map_err(|e| unavailable("the target's blob directory", e.to_string()))?;
            (Arc::new(store), false)
        }
    };
    Ok((maps, blobs, same))
}

impl Pipeline {
    fn migration(&self) -> &Migration {
        &self.shared.migration
    }

    /// Writes `record` in the source's maps, durably, before its phase takes effect.
    async fn write_record(&self, record: &MigrationRecord) -> Result<(), Error> {
        let m = self.migration();
        let position = WalkPosition {
            cursor: Some(
                serde_json::to_string(record).map_err(|e| Error::Internal(e.to_string()))?,
            ),
            node: self.shared.node_id.clone(),
            started_ms: record.started_ms,
            updated_ms: now_ms(),
            ..WalkPosition::default()
        };
        m.source.put_walk_position(RECORD, &position).await?;
        m.source.flush().await?;
        Ok(())
    }

    /// The migration's record, as the source keeps it.
    pub async fn migration_record(&self) -> Result<Option<MigrationRecord>, Error> {
        read_record(self.migration().source.as_ref()).await
    }

    /// Starts a migration to the maps `to` (and, from a directory, the bucket `bucket`):
    /// writes mirrored from now on, the backfill started.
    pub async fn migrate_start(&self, to: &str, bucket: Option<&str>) -> Result<(), Error> {
        let m = self.migration();
        let _turn = m.turn.lock().await;
        if let Some(r) = self.migration_record().await? {
            if !matches!(r.phase, Phase::RolledBack | Phase::Finished) {
                return Err(conflict(format!(
                    "a migration is under way (phase {:?}): finish it or roll it back first",
                    r.phase
                )));
            }
            if r.phase == Phase::Finished {
                return Err(conflict(
                    "this node's maps were migrated: configure it on the target (maps.url) first",
                ));
            }
        }
        if m.source.shared() {
            // Every node would have to mirror from the same moment; this one alone knows.
            return Err(conflict(
                "the maps are shared by a cluster: a migration runs on a node that owns its maps \
                 (the embedded ones); move a cluster's maps with `imgcas maps copy`",
            ));
        }
        let config = &self.shared.config;
        let source_backend = config
            .maps_backend()
            .map_err(|e| Error::Internal(e.to_string()))?;
        let target_backend =
            MapsBackend::of(Some(to)).map_err(|e| Error::invalid_option("to", &e))?;
        let same_dir = match (
            source_backend.embedded_dir(&config.data_dir),
            target_backend.embedded_dir(&config.data_dir),
        ) {
            (Some(a), Some(b)) => a == b,
            (None, None) => source_backend == target_backend,
            _ => false,
        };
        if same_dir {
            return Err(Error::invalid_option("to", "names the maps this node uses"));
        }
        let (maps, blobs, same_blobs) = open_target(config, to, bucket).await?;
        let now = now_ms();
        let record = MigrationRecord {
            to: to.to_string(),
            bucket: bucket.map(str::to_string),
            phase: Phase::Backfilling,
            started_ms: now,
            phase_ms: now,
            failures_at_validation: 0,
        };
        // A backfill of an earlier migration must not be taken up: this one starts over.
        self.shared
            .maps
            .put_walk_position(
                super::walks::Walk::Migration.name(),
                &WalkPosition::default(),
            )
            .await?;
        self.write_record(&record).await?;
        let _closed = m.follow.closed().await;
        m.sides.store(Arc::new(sides_for(
            Phase::Backfilling,
            &m.source,
            &m.source_blobs,
            maps,
            blobs,
            same_blobs,
        )));
        tracing::info!(to = %crate::config::maps::redacted(to), "migration started: writes mirrored, backfill under way");
        self.spawn_backfill(false);
        Ok(())
    }

    /// Moves the migration to `phase`: the record first, then who leads.
    async fn migrate_to(&self, record: MigrationRecord, phase: Phase) -> Result<(), Error> {
        let _closed = self.migration().follow.closed().await;
        self.migrate_to_closed(record, phase).await
    }

    /// [`Self::migrate_to`], with mirrored writes held off and the follower's queue empty.
    async fn migrate_to_closed(
        &self,
        mut record: MigrationRecord,
        phase: Phase,
    ) -> Result<(), Error> {
        let m = self.migration();
        record.phase = phase;
        record.phase_ms = now_ms();
        if phase == Phase::Validated {
            record.failures_at_validation = m.counts.writes_failed.load(Ordering::SeqCst);
        }
        let sides = m.sides.load_full();
        let (target, target_blobs, same_blobs) = match (&sides.follow, phase) {
            // Who is the target: the follower before the cutover, the leader after.
            (Some(f), _) if Arc::ptr_eq(&sides.lead, &m.source) => {
                (f.maps.clone(), f.blobs.clone(), f.same_blobs)
            }
            (Some(f), _) => (sides.lead.clone(), sides.lead_blobs.clone(), f.same_blobs),
            (None, _) => {
                let (maps, blobs, same) =
                    open_target(&self.shared.config, &record.to, record.bucket.as_deref()).await?;
                (maps, blobs, same)
            }
        };
        if phase == Phase::Finished {
            // Everything written so far is durable in the target before the source is let go.
            target.flush().await?;
        }
        self.write_record(&record).await?;
        m.sides.store(Arc::new(sides_for(
            phase,
            &m.source,
            &m.source_blobs,
            target,
            target_blobs,
            same_blobs,
        )));
        tracing::info!(?phase, "migration phase");
        Ok(())
    }

    /// The record, or 409 when no migration is under way.
    async fn record_under_way(&self) -> Result<MigrationRecord, Error> {
        match self.migration_record().await? {
            Some(r) if !matches!(r.phase, Phase::RolledBack | Phase::Finished) => Ok(r),
            _ => Err(conflict("no migration is under way")),
        }
    }

    /// The target leads from now on (the source still written): only once the backfill
    /// found every range equal, and no mirrored write failed since.
    pub async fn migrate_cutover(&self) -> Result<(), Error> {
        let _turn = self.migration().turn.lock().await;
        let record = self.record_under_way().await?;
        if record.phase != Phase::Validated {
            return Err(conflict(format!(
                "the cutover waits for the backfill to validate every range (phase {:?})",
                record.phase
            )));
        }
        // Every write the target was sent is made (or failed) before it may lead.
        let closed = self.migration().follow.closed().await;
        let failed = self.migration().counts.writes_failed.load(Ordering::SeqCst);
        if failed != record.failures_at_validation {
            // A write the target missed since: found by backfilling again.
            self.migrate_to_closed(record, Phase::Backfilling).await?;
            drop(closed);
            self.spawn_backfill(false);
            return Err(conflict(
                "a mirrored write failed since the backfill validated: it runs again; ask again \
                 once it has",
            ));
        }
        self.migrate_to_closed(record, Phase::CutOver).await
    }

    /// The source is retired: the node serves from the target alone.
    pub async fn migrate_finish(&self) -> Result<(), Error> {
        let _turn = self.migration().turn.lock().await;
        let record = self.record_under_way().await?;
        if record.phase != Phase::CutOver {
            return Err(conflict(format!(
                "finish follows the cutover (phase {:?})",
                record.phase
            )));
        }
        self.migrate_to(record, Phase::Finished).await
    }

    /// Back to the source alone: at once before the cutover; after it, once the source holds
    /// what the target took while it led (the backfill, run the other way).
    pub async fn migrate_rollback(&self) -> Result<(), Error> {
        let _turn = self.migration().turn.lock().await;
        let record = self.record_under_way().await?;
        match record.phase {
            Phase::Backfilling | Phase::Validated => {
                self.migrate_to(record, Phase::RolledBack).await
            }
            Phase::CutOver => {
                self.shared
                    .maps
                    .put_walk_position(
                        super::walks::Walk::Migration.name(),
                        &WalkPosition::default(),
                    )
                    .await?;
                self.migrate_to(record, Phase::RollingBack).await?;
                self.spawn_backfill(false);
                Ok(())
            }
            phase => Err(conflict(format!(
                "a rollback is under way (phase {phase:?})"
            ))),
        }
    }

    /// Where the migration stands, `None` when none was ever started here.
    pub async fn migration_state(&self) -> Result<Option<MigrationState>, Error> {
        let Some(r) = self.migration_record().await? else {
            return Ok(None);
        };
        let counts = &self.migration().counts;
        let backfill = self.backfill_state().await?;
        let next = match r.phase {
            Phase::Backfilling => "wait: the backfill copies and compares every range".into(),
            Phase::Validated => {
                "every range is equal: `imgcas maps migrate --cutover` when ready".into()
            }
            Phase::CutOver => "the target leads: `imgcas maps migrate --finish` retires the \
                               source (or --rollback)"
                .into(),
            Phase::Finished => format!(
                "done: set maps.url to the target{} and restart",
                r.bucket
                    .as_deref()
                    .map(|b| format!(" and the blob store to bucket `{b}`"))
                    .unwrap_or_default()
            ),
            Phase::RollingBack => "wait: the source takes what the target took".into(),
            Phase::RolledBack => "rolled back: the source alone".into(),
        };
        Ok(Some(MigrationState {
            to: crate::config::maps::redacted(&r.to),
            bucket: r.bucket.clone(),
            phase: r.phase,
            started_ms: r.started_ms,
            phase_ms: r.phase_ms,
            backfill,
            mirrored_writes_failed: counts.writes_failed.load(Ordering::Relaxed),
            mirrored_writes_queued: self.migration().follow.queued(),
            shadow_same: counts.shadow_same.load(Ordering::Relaxed),
            shadow_different: counts.shadow_different.load(Ordering::Relaxed),
            shadow_absent: counts.shadow_absent.load(Ordering::Relaxed),
            next,
        }))
    }

    /// At a node's start: a migration whose backfill was under way (or validated: a kill
    /// may have cut off a mirrored write since) backfills again from where it stood.
    pub async fn resume_migration(&self) -> Result<(), Error> {
        let Some(record) = self.migration_record().await? else {
            return Ok(());
        };
        match record.phase {
            Phase::Backfilling | Phase::RollingBack => self.spawn_backfill(true),
            Phase::Validated => {
                let _turn = self.migration().turn.lock().await;
                self.migrate_to(record, Phase::Backfilling).await?;
                self.spawn_backfill(false);
            }
            _ => {}
        }
        Ok(())
    }
}
