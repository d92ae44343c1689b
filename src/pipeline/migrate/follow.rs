//! The follower's writes while a migration mirrors, made in the background and in order: a
//! request waits for the leading store's write alone, not for the follower (PostgreSQL and a
//! bucket on the far side of a network are slower than the embedded maps a node grows out
//! of, and a request that waited on both paid the slower store's latency on every write).
//!
//! Why this loses nothing:
//! - Writes about one original (its bytes, index entry, facts, fingerprint, focal point,
//!   variants, and the URL entries that name it) go to the same lane, and a lane makes them
//!   one at a time in the order the leading store took them, so the follower ends where the
//!   leader is. (A URL whose entry moves to other bytes has its new entry in the new bytes'
//!   lane: an older entry still queued in the old lane could land after it. That takes two
//!   changes of one URL's bytes within the queue's delay; the other way round — a URL's
//!   lane of its own — would let an original's facts reach the follower before the download
//!   that indexes it, on every new download.) A write the queue does not carry (the
//!   rare ones: removals, takedowns, evictions) first waits until every lane has made what
//!   was queued before it ([`FollowQueue::settled`]).
//! - Who leads changes only through [`FollowQueue::closed`]: no write is let in between a
//!   leading store's write and its queueing, and every lane is emptied before the switch, so
//!   a queued write never lands on a store after a newer write it would overwrite.
//! - A failure is counted as the synchronous writes' were (the cutover then backfills
//!   again), and a write lost to a kill is found by the full backfill every start in a
//!   mirroring phase runs before it may validate.
//! - The queue is bounded (jobs, and the bytes of originals they carry): when it is full a
//!   request waits for room, as it waited for the follower before.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, RwLock, RwLockReadGuard, Semaphore};

use crate::blob::BlobStore;
use crate::maps::MapStore;

/// The store that follows, and where it keeps its bytes.
pub(in crate::pipeline) struct Follower {
    pub maps: Arc<dyn MapStore>,
    pub blobs: Arc<dyn BlobStore>,
    /// Its blob store is the leading one's (one bucket for both): nothing to copy.
    pub same_blobs: bool,
}

/// Who leads and who follows, swapped whole at each phase.
pub(in crate::pipeline) struct Sides {
    pub lead: Arc<dyn MapStore>,
    pub lead_blobs: Arc<dyn BlobStore>,
    pub follow: Option<Follower>,
}

/// Counts of what mirroring saw, since the node started.
#[derive(Default)]
pub(in crate::pipeline) struct MirrorCounts {
    pub writes_failed: AtomicU64,
    pub shadow_same: AtomicU64,
    pub shadow_different: AtomicU64,
    pub shadow_absent: AtomicU64,
    pub(super) reads: AtomicU64,
    /// Shadow reads asked and not yet answered.
    pub(super) shadows_in_flight: AtomicU64,
}

impl MirrorCounts {
    /// What a follower's write came to: counted (and logged) when it failed.
    pub(super) fn follower_wrote(&self, op: &'static str, outcome: Result<(), String>) {
        if let Err(error) = outcome {
            self.writes_failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(op, %error, "mirrored write failed; the backfill's checksums will find it");
        }
    }
}

/// Lanes the follower's writes are spread over (by what they are about).
const LANES: usize = 8;

/// Room in the queue, in units: a job takes one, and one more per [`UNIT_BYTES`] of the
/// bytes it carries (an original's).
const ROOM: u32 = 1024;

/// Bytes one unit of room holds: the queue holds at most 64 MiB of originals' bytes.
const UNIT_BYTES: usize = 64 * 1024;

/// How long a follower's write may take before it counts as failed (a follower that hangs
/// must not hold its lane without end).
const FOLLOW_WITHIN: Duration = Duration::from_secs(10);

/// A follower's write, as the lane makes it.
pub(in crate::pipeline) type FollowWrite = BoxFuture<'static, Result<(), String>>;

enum Job {
    Write {
        op: &'static str,
        write: FollowWrite,
        _room: OwnedSemaphorePermit,
    },
    /// Answered once the lane made everything queued before it.
    Mark(oneshot::Sender<()>),
}

/// The follower's lanes: see the module's comment.
pub(in crate::pipeline) struct FollowQueue {
    lanes: Vec<mpsc::UnboundedSender<Job>>,
    room: Arc<Semaphore>,
    /// Held shared by a mirrored write from its leading write to its queueing, and alone
    /// by a change of who leads.
    gate: RwLock<()>,
    /// Writes queued and not yet made.
    queued: Arc<AtomicU64>,
}

impl FollowQueue {
    /// The queue and its lanes' tasks (which end when the queue is dropped).
    pub(in crate::pipeline) fn start(counts: Arc<MirrorCounts>) -> Self {
        let queued = Arc::new(AtomicU64::new(0));
        let lanes = (0..LANES)
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                tokio::spawn(lane(rx, counts.clone(), queued.clone()));
                tx
            })
            .collect();
        FollowQueue {
            lanes,
            room: Arc::new(Semaphore::new(ROOM as usize)),
            gate: RwLock::new(()),
            queued,
        }
    }

    /// Held by a mirrored write from the leading store's write until its follower's write
    /// is queued (or made).
    pub(in crate::pipeline) async fn write_turn(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Queues `write` in the lane of what it is `about`, once there is room for it and the
    /// `bytes` it carries: the caller does not wait for the follower.
    pub(in crate::pipeline) async fn queue(
        &self,
        about: impl Hash,
        op: &'static str,
        bytes: usize,
        write: FollowWrite,
    ) {
        let units = (1 + bytes / UNIT_BYTES).min(ROOM as usize) as u32;
        let Ok(room) = self.room.clone().acquire_many_owned(units).await else {
            return; // the semaphore is never closed
        };
        let mut lane = std::collections::hash_map::DefaultHasher::new();
        about.hash(&mut lane);
        let lane = &self.lanes[(lane.finish() % LANES as u64) as usize];
        self.queued.fetch_add(1, Ordering::SeqCst);
        let job = Job::Write {
            op,
            write,
            _room: room,
        };
        if lane.send(job).is_err() {
            // The lane's task is gone (the runtime is shutting down): nothing will make it.
            self.queued.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Returns once every lane has made the writes queued before this call.
    pub(in crate::pipeline) async fn settled(&self) {
        let marks: Vec<_> = self
            .lanes
            .iter()
            .filter_map(|lane| {
                let (tx, rx) = oneshot::channel();
                lane.send(Job::Mark(tx)).ok().map(|_| rx)
            })
            .collect();
        for mark in marks {
            let _ = mark.await;
        }
    }

    /// No mirrored write in progress and every queued one made, for as long as the guard is
    /// held: who leads may change under it.
    pub(in crate::pipeline) async fn closed(&self) -> tokio::sync::RwLockWriteGuard<'_, ()> {
        let closed = self.gate.write().await;
        self.settled().await;
        closed
    }

    /// Writes queued and not yet made (for the migration's status).
    pub(in crate::pipeline) fn queued(&self) -> u64 {
        self.queued.load(Ordering::SeqCst)
    }
}

/// One lane: its jobs in order, each write given [`FOLLOW_WITHIN`].
async fn lane(
    mut jobs: mpsc::UnboundedReceiver<Job>,
    counts: Arc<MirrorCounts>,
    queued: Arc<AtomicU64>,
) {
    while let Some(job) = jobs.recv().await {
        match job {
            Job::Write { op, write, _room } => {
                let outcome = tokio::time::timeout(FOLLOW_WITHIN, write)
                    .await
                    .unwrap_or_else(|_| Err("the follower took too long".into()));
                counts.follower_wrote(op, outcome);
                queued.fetch_sub(1, Ordering::SeqCst);
            }
            Job::Mark(done) => {
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;
    use std::sync::Mutex;

    fn queue() -> (FollowQueue, Arc<MirrorCounts>) {
        let counts = Arc::<MirrorCounts>::default();
        (FollowQueue::start(counts.clone()), counts)
    }

    /// A write that waits `ms`, then notes `n` in `made`.
    fn noting(made: &Arc<Mutex<Vec<u32>>>, n: u32, ms: u64) -> FollowWrite {
        let made = made.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            made.lock().unwrap_or_else(|p| p.into_inner()).push(n);
            Ok(())
        }
        .boxed()
    }

    #[tokio::test]
    async fn writes_about_one_thing_are_made_in_the_order_queued_and_settled_waits_for_them() {
        let (queue, counts) = queue();
        let made = Arc::new(Mutex::new(Vec::new()));
        // The first is the slowest: a lane still makes it first.
        queue
            .queue("a URL", "put_url", 0, noting(&made, 1, 60))
            .await;
        queue
            .queue("a URL", "put_url", 0, noting(&made, 2, 0))
            .await;
        queue
            .queue("a URL", "put_url", 0, noting(&made, 3, 10))
            .await;
        assert!(
            queue.queued() > 0,
            "the caller does not wait for the follower"
        );
        queue.settled().await;
        assert_eq!(
            *made.lock().unwrap_or_else(|p| p.into_inner()),
            vec![1, 2, 3]
        );
        assert_eq!(queue.queued(), 0);
        assert_eq!(counts.writes_failed.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_failed_or_hung_write_is_counted_and_its_lane_goes_on() {
        let (queue, counts) = queue();
        let made = Arc::new(Mutex::new(Vec::new()));
        queue
            .queue(
                7u8,
                "put_url",
                0,
                async { Err("refused".to_string()) }.boxed(),
            )
            .await;
        // A write larger than the whole queue's room is still taken (alone).
        queue
            .queue(7u8, "put_original", 1 << 40, noting(&made, 1, 0))
            .await;
        queue.settled().await;
        assert_eq!(counts.writes_failed.load(Ordering::SeqCst), 1);
        assert_eq!(*made.lock().unwrap_or_else(|p| p.into_inner()), vec![1]);
        tokio::time::pause();
        queue
            .queue(7u8, "put_url", 0, futures_util::future::pending().boxed())
            .await;
        queue.settled().await; // the paused clock runs to the write's time limit
        assert_eq!(counts.writes_failed.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn closed_holds_off_mirrored_writes_until_the_queue_is_empty_and_the_guard_dropped() {
        let queue = Arc::new(queue().0);
        let made = Arc::new(Mutex::new(Vec::new()));
        queue.queue(1u8, "put_url", 0, noting(&made, 1, 80)).await;
        let closed = queue.closed().await;
        assert_eq!(
            *made.lock().unwrap_or_else(|p| p.into_inner()),
            vec![1],
            "closed returns once what was queued is made"
        );
        let writer = {
            let queue = queue.clone();
            tokio::spawn(async move {
                let _turn = queue.write_turn().await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !writer.is_finished(),
            "a write waits while the queue is closed"
        );
        drop(closed);
        tokio::time::timeout(Duration::from_secs(5), writer)
            .await
            .expect("the write goes on once the guard is dropped")
            .expect("the writer task");
    }
}
