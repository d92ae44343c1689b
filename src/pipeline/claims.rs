//! Claims on jobs across nodes that share the maps: the rules of `shared/design/leases.md`
//! as the pipeline applies them to downloads (`url:<url>`) and processing runs
//! (`variant:<key digest>`).
//!
//! Inside one node the single-flight maps already run each job once; a claim extends that to
//! the cluster. The node that wins a claim does the job while a task renews the claim at a
//! third of its time to live (with jitter); the others poll for the result with backoff and
//! take the claim over once it expires (its owner died). Before publishing, the owner stops
//! renewing and proves the claim is still its own: its last renewal, on this node's monotonic
//! clock, is younger than the time to live less a margin; the variant row is then written on
//! the condition that the claim's token is unchanged, by a write that also gives the claim
//! up ([`Lease::given_up`]: shared maps leave it as a tombstone for a moment, so a node that
//! just missed the result is refused and reads it, see [`Turn::Published`]). A lease dropped
//! without being released (an error, a cancelled request) is released in the background.
//!
//! On maps no other process shares, every claim is granted at once with no write at all.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use super::Pipeline;
use crate::error::Error;
use crate::maps::{Claim, ClaimOutcome, MapStore};

/// What a try for a claim gave.
pub(super) enum Turn {
    /// This node does the job.
    Ours(Lease),
    /// Another node does it (named): wait for its result.
    Theirs(String),
    /// A node published the result a moment ago: read it, and if it is gone already (taken
    /// down, evicted), claim again past the published mark.
    Published,
}

/// The polling schedule of a node waiting for another's result: short at first (most jobs
/// take tens of milliseconds), then capped.
pub(super) struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(20);
    const CAP: Duration = Duration::from_millis(250);

    pub(super) fn new() -> Backoff {
        Backoff { next: Self::FIRST }
    }

    pub(super) async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 3 / 2).min(Self::CAP);
    }
}

/// A claim this node holds: renewed in the background until settled, released when done.
pub(super) struct Lease {
    shared: Option<Held>,
}

struct Held {
    maps: Arc<dyn MapStore>,
    ttl: Duration,
    claim: Arc<Mutex<Claim>>,
    /// When the last successful renewal (or the acquiring write) was sent.
    renewed_at: Arc<Mutex<Instant>>,
    lost: Arc<AtomicBool>,
    /// Where a claim lost to another node is counted (`imgcas_claim_takeovers_total`).
    metrics: crate::metrics::Metrics,
    renewer: Option<tokio::task::JoinHandle<()>>,
    /// Tells the renewer to stop between renewals (never mid-request: a renewal the
    /// database applied but whose answer was cut off would leave this lease a stale token).
    stop: tokio::sync::watch::Sender<bool>,
    released: bool,
}

impl Held {
    /// Stops the renewer and waits for it, so the claim's token is final.
    async fn stop_renewing(&mut self) {
        let _ = self.stop.send(true);
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.await;
        }
    }
}

/// A token no other write of any node uses: a digest of the node, a counter and the time.
pub(super) fn new_token(node: &str) -> i64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = Sha256::new();
    h.update(node.as_bytes());
    h.update(COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    h.update(crate::maps::now_ms().to_le_bytes());
    h.update(format!("{:?}", Instant::now()).as_bytes());
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Lease {
    /// Whether this lease is a claim other nodes see (not a grant of unshared maps).
    pub(super) fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Whether the claim is provably still ours while it is being renewed (not lost, and
    /// renewed within the time to live less a margin): a long job asks between its steps.
    pub(super) fn still_ours(&self) -> bool {
        let Some(held) = &self.shared else {
            return true;
        };
        let age = lock(&held.renewed_at).elapsed();
        !held.lost.load(Ordering::Acquire) && age + held.ttl / 5 < held.ttl
    }

    /// Stops renewing and says whether the result may be published: `Ok(None)` on unshared
    /// maps, `Ok(Some(claim))` with the claim as it stands when it is provably still ours,
    /// `Err` when it is not (lost, or too old to be sure).
    pub(super) async fn settle(&mut self) -> Result<Option<Claim>, String> {
        let Some(held) = &mut self.shared else {
            return Ok(None);
        };
        held.stop_renewing().await;
        let claim = lock(&held.claim).clone();
        let age = lock(&held.renewed_at).elapsed();
        let margin = held.ttl / 5;
        let lost = held.lost.load(Ordering::Acquire);
        if lost {
            held.metrics
                .with(|| metrics::counter!("imgcas_claim_takeovers_total").increment(1));
        }
        if lost || age + margin >= held.ttl {
            return Err(format!(
                "claim {} lost or unconfirmed for {age:?} (time to live {:?})",
                claim.key, held.ttl
            ));
        }
        Ok(Some(claim))
    }

    /// Notes that a write gave the claim up with what it published (the maps' writes that
    /// take a claim do), so [`Lease::release`] has nothing left to do.
    pub(super) fn given_up(&mut self) {
        if let Some(held) = &mut self.shared {
            held.released = true;
        }
    }

    /// Gives the claim up now, so a waiting node takes it at once.
    pub(super) async fn release(mut self) {
        if let Some(held) = &mut self.shared {
            held.stop_renewing().await;
            if held.released {
                return;
            }
            held.released = true;
            let claim = lock(&held.claim).clone();
            if let Err(e) = held.maps.release_claim(&claim).await {
                tracing::warn!(claim = %claim.key, error = %e, "claim not released; it expires");
            }
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(held) = &mut self.shared else {
            return;
        };
        let _ = held.stop.send(true);
        let renewer = held.renewer.take();
        if held.released {
            return;
        }
        // Dropped on an error path or with its request: release in the background, once the
        // renewer is done (so with the claim's final token), without making anyone wait.
        let (maps, claim) = (held.maps.clone(), held.claim.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Some(renewer) = renewer {
                    let _ = renewer.await;
                }
                let claim = lock(&claim).clone();
                let _ = maps.release_claim(&claim).await;
            });
        } else if let Some(renewer) = renewer {
            renewer.abort();
        }
    }
}

/// Renews a claim at about a third of its time to live until told to stop, or lost.
async fn renew(
    maps: Arc<dyn MapStore>,
    node: String,
    ttl: Duration,
    claim: Arc<Mutex<Claim>>,
    renewed_at: Arc<Mutex<Instant>>,
    lost: Arc<AtomicBool>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        let current = lock(&claim).clone();
        // ±10 % around a third, from the token's bits: nodes do not renew in step.
        let jitter = 0.9 + (current.token.rem_euclid(1000) as f64) / 5000.0;
        tokio::select! {
            _ = tokio::time::sleep(ttl.mul_f64(jitter / 3.0)) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let sent = Instant::now();
        let next = new_token(&node);
        match maps.renew_claim(&current, next, ttl).await {
            Ok(true) => {
                lock(&claim).token = next;
                *lock(&renewed_at) = sent;
            }
            Ok(false) => {
                tracing::warn!(claim = %current.key, node = %node, "claim lost to another node; stopping");
                lost.store(true, Ordering::Release);
                return;
            }
            // Not renewed (the database unreachable, or the answer lost): the lease ages,
            // and if the write did land, the next renewal finds the token changed.
            Err(e) => {
                tracing::warn!(claim = %current.key, node = %node, error = %e, "claim renewal failed")
            }
        }
    }
}

impl Pipeline {
    /// Tries once to claim `key` for this node. A grant means no result under this key was
    /// published in the last seconds (its claim stands as a tombstone for a while), unless
    /// `past_published` asks to take such a tombstone over: work to be done again however
    /// fresh the result.
    pub(super) async fn claim(&self, key: String, past_published: bool) -> Result<Turn, Error> {
        let s = &self.shared;
        if !s.maps.shared() {
            return Ok(Turn::Ours(Lease { shared: None }));
        }
        let ttl = s.config.cluster.claim_ttl;
        let token = new_token(&s.node_id);
        let sent = Instant::now();
        let outcome = match past_published {
            true => s
                .maps
                .try_claim_past_published(&key, &s.node_id, token, ttl),
            false => s.maps.try_claim(&key, &s.node_id, token, ttl),
        };
        match outcome.await? {
            ClaimOutcome::HeldBy(owner) => Ok(Turn::Theirs(owner)),
            ClaimOutcome::Published => Ok(Turn::Published),
            ClaimOutcome::Won => {
                let claim = Arc::new(Mutex::new(Claim { key, token }));
                let renewed_at = Arc::new(Mutex::new(sent));
                let lost = Arc::new(AtomicBool::new(false));
                let (stop, stopped) = tokio::sync::watch::channel(false);
                let renewer = tokio::spawn(renew(
                    s.maps.clone(),
                    s.node_id.clone(),
                    ttl,
                    claim.clone(),
                    renewed_at.clone(),
                    lost.clone(),
                    stopped,
                ));
                Ok(Turn::Ours(Lease {
                    shared: Some(Held {
                        maps: s.maps.clone(),
                        ttl,
                        claim,
                        renewed_at,
                        lost,
                        metrics: s.metrics.clone(),
                        renewer: Some(renewer),
                        stop,
                        released: false,
                    }),
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_call_to_call() {
        let tokens: std::collections::HashSet<i64> = (0..1000).map(|_| new_token("n")).collect();
        assert_eq!(tokens.len(), 1000);
    }

    #[tokio::test]
    async fn backoff_grows_to_its_cap() {
        tokio::time::pause();
        let mut b = Backoff::new();
        for _ in 0..20 {
            b.wait().await;
        }
        assert_eq!(b.next, Backoff::CAP);
    }
}
