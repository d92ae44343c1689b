//! Single flight: concurrent callers with one key share one run of the work.
//!
//! The flight owns its work: the first caller spawns it as a task, and every caller, the first
//! included, only waits for that task's result. A client that hangs up therefore cancels
//! nothing — not the download or processing run others wait for, whose result is stored for
//! the next caller — and a caller that comes later joins the same run instead of starting a
//! second one. The task removes its own entry when it ends, so an entry never outlives its
//! run, whether or not anyone still waits.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// A run's outcome as its waiters see it: the value, or why the task ended without one.
type Landing<V> = Option<Result<V, String>>;

pub struct SingleFlight<K, V> {
    inflight: Arc<Mutex<HashMap<K, watch::Receiver<Landing<V>>>>>,
    /// Callers inside `run` now (those that started a run and those that joined one).
    callers: AtomicUsize,
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        SingleFlight {
            inflight: Arc::new(Mutex::new(HashMap::new())),
            callers: AtomicUsize::new(0),
        }
    }
}

/// Counts a caller for as long as it waits, even when its request is dropped mid-wait.
struct Caller<'a>(&'a AtomicUsize);

impl Drop for Caller<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<K, V> SingleFlight<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// Runs `work` unless a run for `key` is under way, in which case its result is shared.
    /// `on_panic` stands in for the value of a run whose task panicked.
    pub async fn run<F>(&self, key: K, work: F, on_panic: impl FnOnce(String) -> V) -> V
    where
        F: Future<Output = V> + Send + 'static,
    {
        self.run_led(key, work, on_panic).await.0
    }

    /// Like [`run`](Self::run), and says whether this caller started the run (`false`: it
    /// shared another caller's).
    pub async fn run_led<F>(&self, key: K, work: F, on_panic: impl FnOnce(String) -> V) -> (V, bool)
    where
        F: Future<Output = V> + Send + 'static,
    {
        self.callers.fetch_add(1, Ordering::Relaxed);
        let _caller = Caller(&self.callers);
        let (mut landing, led) = {
            let mut map = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(&key) {
                Some(receiver) => (receiver.clone(), false),
                None => {
                    let (sender, receiver) = watch::channel(None);
                    map.insert(key.clone(), receiver.clone());
                    // Spawned while the map is locked, so the task's removal of its entry
                    // cannot come before the insertion.
                    tokio::spawn(fly(self.inflight.clone(), key, work, sender));
                    (receiver, true)
                }
            }
        };
        let outcome = match landing.wait_for(Option::is_some).await {
            Ok(landed) => landed.clone(),
            // The task was dropped before it finished: only a runtime shutting down does that.
            Err(_) => None,
        };
        let value = match outcome {
            Some(Ok(value)) => value,
            Some(Err(message)) => on_panic(message),
            None => on_panic("the task was cancelled".into()),
        };
        (value, led)
    }

    /// How many keys have a run under way.
    pub fn in_flight(&self) -> usize {
        self.inflight.lock().map_or(0, |m| m.len())
    }

    /// Callers waiting on a run another caller started.
    pub fn waiters(&self) -> usize {
        self.callers
            .load(Ordering::Relaxed)
            .saturating_sub(self.in_flight())
    }
}

/// The flight's task: runs the work (in a task of its own, so a panic is caught as a
/// `JoinError`), then removes the entry and publishes the result under one lock, so a
/// caller either joins this run and gets its result or finds no entry and starts anew.
async fn fly<K, V, F>(
    inflight: Arc<Mutex<HashMap<K, watch::Receiver<Landing<V>>>>>,
    key: K,
    work: F,
    sender: watch::Sender<Landing<V>>,
) where
    K: Hash + Eq,
    F: Future<Output = V> + Send + 'static,
    V: Send + 'static,
{
    let outcome = tokio::spawn(work).await.map_err(|e| e.to_string());
    let mut map = inflight.lock().unwrap_or_else(|p| p.into_inner());
    map.remove(&key);
    sender.send_replace(Some(outcome));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn concurrent_callers_share_one_run() {
        let flight = Arc::new(SingleFlight::<&str, usize>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let mut handles = Vec::new();
        for _ in 0..20 {
            let (flight, runs) = (flight.clone(), runs.clone());
            handles.push(tokio::spawn(async move {
                flight
                    .run(
                        "k",
                        async move {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            runs.fetch_add(1, Ordering::SeqCst) + 1
                        },
                        |_| 0,
                    )
                    .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(flight.waiters(), 19, "one leader, nineteen waiting on it");
        for h in handles {
            assert_eq!(h.await.unwrap(), 1);
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(flight.in_flight(), 0);
        assert_eq!(flight.waiters(), 0);
        // After the flight lands, a new call runs again.
        let again = flight.run("k", async { 7 }, |_| 0).await;
        assert_eq!(again, 7);
    }

    #[tokio::test]
    async fn a_panicking_run_yields_the_stand_in() {
        let flight = SingleFlight::<u8, Result<u8, String>>::default();
        let v = flight.run(1, async { panic!("boom") }, Err).await;
        assert!(v.is_err());
        assert_eq!(flight.in_flight(), 0);
    }

    /// The caller that started a run hangs up: the run goes on, a later caller joins it
    /// instead of starting another, and the entry is gone once it lands — also when nobody
    /// waited for it at all.
    #[tokio::test]
    async fn a_run_outlives_the_caller_that_started_it() {
        let flight = Arc::new(SingleFlight::<&str, usize>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let work = |runs: Arc<AtomicUsize>| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            runs.fetch_add(1, Ordering::SeqCst) + 1
        };
        let first = tokio::spawn({
            let (flight, runs) = (flight.clone(), runs.clone());
            async move { flight.run("k", work(runs), |_| 0).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        first.abort();
        let _ = first.await;
        assert_eq!(
            flight.in_flight(),
            1,
            "the run goes on without its first caller"
        );
        let (value, led) = flight.run_led("k", work(runs.clone()), |_| 0).await;
        assert_eq!(
            (value, led),
            (1, false),
            "a later caller joins the same run"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(flight.in_flight(), 0);

        // Nobody waits: the task still lands and removes its entry.
        let lonely = tokio::spawn({
            let (flight, runs) = (flight.clone(), runs.clone());
            async move { flight.run("alone", work(runs), |_| 0).await }
        });
        tokio::time::sleep(Duration::from_millis(30)).await;
        lonely.abort();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(flight.in_flight(), 0, "no entry leaks");
        assert_eq!(flight.waiters(), 0);
    }
}
