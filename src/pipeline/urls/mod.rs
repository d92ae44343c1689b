//! URLs and downloads: the role that turns a source URL into the hash of its bytes. It owns
//! what only that needs — the guarded origin client, the failures held per URL, the
//! politeness kept per origin, and one download per URL at a time — and nothing else reads
//! those fields: the other roles ask through its methods (a removal forgets a URL's held
//! failure with [`Pipeline::forget_origin_failure`]).
//!
//! - `resolve.rs`: steps 1–3 of the flow, the URL map and conditional requests;
//! - `download.rs`: a download's bytes taken in, step by step;
//! - `origins.rs`: politeness to merchants' origins, held for the whole cluster.

use std::time::Duration;

use crate::coalesce::SingleFlight;
use crate::fetch::Fetcher;
use crate::negative::{OriginFailures, UrlFailure};
use crate::pipeline::{Failure, Pipeline};

mod download;
mod origins;
mod resolve;

pub use origins::OriginTally;
pub use resolve::{Resolved, UrlState};

/// The downloads' own state, composed into the pipeline.
pub(super) struct Urls {
    /// The guarded origin client, with its download slots per origin.
    fetcher: Fetcher,
    /// Origin failures per URL, held for their class's lifetime (with backoff).
    origin_failures: OriginFailures,
    /// Connection failures in a row per origin, and the origins metrics name (`origins.rs`).
    origins: origins::Origins,
    /// One origin request per URL at a time; latecomers share its answer.
    url_flights: SingleFlight<String, Result<Resolved, Failure>>,
}

impl Urls {
    pub(super) fn new(fetcher: Fetcher) -> Urls {
        Urls {
            fetcher,
            origin_failures: OriginFailures::default(),
            origins: Default::default(),
            url_flights: SingleFlight::default(),
        }
    }

    /// Requests waiting on another's download, and downloads under way (for `/metrics`).
    pub(super) fn flights(&self) -> (usize, usize) {
        (self.url_flights.waiters(), self.url_flights.in_flight())
    }
}

impl Pipeline {
    /// This node's downloads by origin (the named origins and `other`).
    pub fn origin_tallies(&self) -> Vec<(String, OriginTally)> {
        self.shared.urls.origins.tallies()
    }

    /// The failure a URL is held with now, and for how much longer.
    pub fn origin_failure(&self, url: &str) -> Option<(UrlFailure, Duration)> {
        self.shared.urls.origin_failures.active(url)
    }

    /// Forgets the failure held for `url`, so that its next request asks the origin again.
    pub(in crate::pipeline) fn forget_origin_failure(&self, url: &str) {
        self.shared.urls.origin_failures.clear(url);
    }
}
