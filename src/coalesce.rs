//! Single flight: concurrent callers with one key share one run of the work.
//!
//! The work is spawned as its own task, so a client that hangs up does not cancel a download
//! or a processing run that others wait for (and whose result is stored for the next caller).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

pub struct SingleFlight<K, V> {
    inflight: Mutex<HashMap<K, Arc<OnceCell<V>>>>,
    /// Callers inside `run` now (leaders and followers).
    callers: AtomicUsize,
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        SingleFlight {
            inflight: Mutex::new(HashMap::new()),
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
    K: Hash + Eq + Clone,
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
        let cell = {
            let mut map = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(key.clone()).or_default().clone()
        };
        let mut led = false;
        let value = cell
            .get_or_init(|| async {
                led = true;
                match tokio::spawn(work).await {
                    Ok(v) => v,
                    Err(e) => on_panic(e.to_string()),
                }
            })
            .await
            .clone();
        let mut map = self.inflight.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            map.remove(&key);
        }
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
    }
}
