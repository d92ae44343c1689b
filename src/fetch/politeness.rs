//! Download slots: a bound on concurrent downloads per origin (scheme, host and port) and in
//! all. A merchant host that answers slowly fills its own few slots and waits there, while
//! downloads from every other origin keep going: an origin's slots are never more than its
//! share of the whole (`fetch.origin_share`), whatever `fetch.per_host_concurrency` says.
//! A wait for a slot ends at the deadline its caller gives (the request's, issue 67).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use url::Url;

pub struct OriginSlots {
    per_origin: usize,
    total: Arc<Semaphore>,
    /// One semaphore per origin with downloads under way; an entry is dropped with its last
    /// holder. Clones are made under this lock, so the holder count read under it is exact.
    origins: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Held for the length of one download.
pub struct Slot<'a> {
    slots: &'a OriginSlots,
    origin: String,
    semaphore: Option<Arc<Semaphore>>,
    // Released first in `drop`: each permit holds a clone of its semaphore's `Arc`.
    origin_permit: Option<OwnedSemaphorePermit>,
    total_permit: Option<OwnedSemaphorePermit>,
}

/// The slots one origin may hold on this node: `fetch.per_host_concurrency`, but never more
/// than its `share` of `total` (at least one).
pub fn origin_limit(per_host: usize, total: usize, share: f64) -> usize {
    let part = (total as f64 * share.clamp(0.0, 1.0)).floor() as usize;
    per_host.min(part).max(1)
}

/// The origin a URL's download counts against.
pub fn origin_of(url: &Url) -> String {
    format!(
        "{}://{}:{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port_or_known_default().unwrap_or(0)
    )
}

impl OriginSlots {
    pub fn new(per_origin: usize, total: usize) -> OriginSlots {
        OriginSlots {
            per_origin: per_origin.max(1),
            total: Arc::new(Semaphore::new(total.max(1))),
            origins: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a slot of `url`'s origin, then for one of the shared slots (in that order,
    /// so a waiter for a busy origin never holds a shared slot); `None` when `deadline`
    /// passes first (nothing is held then).
    pub async fn acquire(&self, url: &Url, deadline: Option<Instant>) -> Option<Slot<'_>> {
        let origin = origin_of(url);
        let semaphore = {
            let mut map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
            map.entry(origin.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_origin)))
                .clone()
        };
        let mut slot = Slot {
            slots: self,
            origin,
            semaphore: Some(semaphore.clone()),
            origin_permit: None,
            total_permit: None,
        };
        // The semaphores are never closed, so acquiring fails only by the deadline; a wait
        // given up drops its clone of the semaphore before `slot` is dropped, so the drop
        // sees the holders that remain and forgets an origin nobody else waits for.
        slot.origin_permit = Some(until(deadline, semaphore.acquire_owned()).await?.ok()?);
        slot.total_permit = Some(
            until(deadline, self.total.clone().acquire_owned())
                .await?
                .ok()?,
        );
        Some(slot)
    }

    /// Downloads under way for an origin.
    pub fn busy(&self, url: &Url) -> usize {
        let map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&origin_of(url))
            .map_or(0, |s| self.per_origin - s.available_permits())
    }

    /// Origins with a download under way or waiting.
    pub fn tracked_origins(&self) -> usize {
        self.origins.lock().map_or(0, |m| m.len())
    }
}

/// `wait` to its end, or `None` once `deadline` passes.
async fn until<F: std::future::Future>(deadline: Option<Instant>, wait: F) -> Option<F::Output> {
    match deadline {
        Some(at) => tokio::time::timeout_at(at, wait).await.ok(),
        None => Some(wait.await),
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.origin_permit = None;
        self.total_permit = None;
        let Some(semaphore) = self.semaphore.take() else {
            return;
        };
        let mut map = self.slots.origins.lock().unwrap_or_else(|p| p.into_inner());
        // Two holders left: the map and this slot. Nobody else waits or downloads.
        if Arc::strong_count(&semaphore) == 2 {
            map.remove(&self.origin);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[tokio::test]
    async fn a_busy_origin_waits_while_others_go_on() {
        let slots = Arc::new(OriginSlots::new(2, 10));
        let slow = url("http://slow.example/a.jpg");
        let a = slots.acquire(&slow, None).await.unwrap();
        let b = slots.acquire(&slow, None).await.unwrap();
        assert_eq!(slots.busy(&slow), 2);
        // A third download from the same origin waits...
        let s = slots.clone();
        let third = tokio::spawn(async move {
            let _slot = s.acquire(&url("http://slow.example/b.jpg"), None).await;
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!third.is_finished());
        // ...while another origin, and another port of the same host, get slots at once.
        for other in [
            "http://fast.example/a.jpg",
            "http://slow.example:8080/a.jpg",
        ] {
            let slot =
                tokio::time::timeout(Duration::from_millis(100), slots.acquire(&url(other), None))
                    .await;
            assert!(slot.is_ok(), "{other}");
        }
        drop(a);
        third.await.unwrap();
        drop(b);
        assert_eq!(slots.tracked_origins(), 0, "idle origins are forgotten");
    }

    #[tokio::test]
    async fn the_total_bounds_all_origins() {
        let slots = OriginSlots::new(4, 2);
        let _a = slots.acquire(&url("http://a.example/"), None).await;
        let _b = slots.acquire(&url("http://b.example/"), None).await;
        let c = tokio::time::timeout(
            Duration::from_millis(50),
            slots.acquire(&url("http://c.example/"), None),
        )
        .await;
        assert!(c.is_err(), "no third slot while two are held");
    }

    #[test]
    fn an_origin_holds_at_most_its_share() {
        assert_eq!(origin_limit(8, 64, 0.5), 8);
        assert_eq!(origin_limit(8, 4, 0.5), 2);
        assert_eq!(origin_limit(8, 1, 0.5), 1, "at least one");
        assert_eq!(origin_limit(8, 4, 1.0), 4);
    }

    #[tokio::test]
    async fn a_wait_past_its_deadline_gives_up_and_holds_nothing() {
        let slots = OriginSlots::new(1, 4);
        let a = url("http://a.example/");
        let held = slots.acquire(&a, None).await.unwrap();
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(slots.acquire(&a, Some(soon)).await.is_none());
        // Another origin, with room in the pool, is given its slot by the same deadline.
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(slots
            .acquire(&url("http://b.example/"), Some(soon))
            .await
            .is_some());
        drop(held);
        assert_eq!(
            slots.tracked_origins(),
            0,
            "the given-up wait is forgotten too"
        );
    }
}
