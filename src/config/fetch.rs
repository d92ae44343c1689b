//! The origin client's settings (`fetch.*`): what a source may be, how long and how large a
//! download may be, how often a URL is asked again, and the limits that keep imgcas polite
//! to an origin (per node and, on shared maps, for the cluster). Kept apart from `mod.rs`
//! because each is one key of the configuration page and nothing else reads them together.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::{de_duration, SourceBucket};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchConfig {
    pub allow_private_networks: bool,
    pub allowed_hosts: Vec<String>,
    pub max_bytes: u64,
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    #[serde(deserialize_with = "de_duration")]
    pub revalidate_after: Duration,
    /// Extension: downloads in flight per origin host:port (`IMGCAS_FETCH_PER_HOST`), so one
    /// slow host cannot hold every download slot.
    pub per_host_concurrency: usize,
    /// Extension: downloads in flight in all (`IMGCAS_FETCH_CONCURRENCY`).
    pub concurrency: usize,
    /// The part of `concurrency` one origin may hold (`IMGCAS_FETCH_ORIGIN_SHARE`, above 0,
    /// at most 1; at least one slot): with `per_host_concurrency` at or above `concurrency`,
    /// one slow origin would otherwise hold every slot of the node.
    pub origin_share: f64,
    /// Bytes a second a body must keep arriving at after its first second, over the last
    /// two (`IMGCAS_FETCH_MIN_RATE`; 0: off): an origin that drips its body holds a slot
    /// for `timeout` otherwise.
    pub min_rate: u64,
    /// Extension: requests a second to one origin at most, the whole cluster's
    /// (`IMGCAS_FETCH_PER_HOST_RATE`; a burst of one second's worth).
    pub per_host_rate: f64,
    /// URL entries no request used for this long are dropped (`IMGCAS_FORGET_AFTER`): the
    /// URL is downloaded afresh if it comes back (its bytes stay stored, so a duplicate
    /// costs the download only).
    #[serde(deserialize_with = "de_duration")]
    pub forget_after: Duration,
    /// Buckets `url=s3://<bucket>/<key>` may name (`IMGCAS_SOURCE_BUCKETS`), read with
    /// `storage.s3`'s endpoint and region; empty: no `s3://` source is read.
    pub source_buckets: Vec<String>,
    /// Source buckets with an endpoint and credentials of their own (`[fetch.buckets.<name>]`,
    /// the configuration file only); each is a source bucket too.
    pub buckets: BTreeMap<String, SourceBucket>,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            allow_private_networks: false,
            allowed_hosts: Vec::new(),
            max_bytes: 32 << 20,
            timeout: Duration::from_secs(10),
            revalidate_after: Duration::from_secs(300),
            per_host_concurrency: 8,
            concurrency: 64,
            origin_share: 0.5,
            min_rate: 16 << 10,
            per_host_rate: 100.0,
            forget_after: Duration::from_secs(30 * 24 * 3600),
            source_buckets: Vec::new(),
            buckets: BTreeMap::new(),
        }
    }
}
