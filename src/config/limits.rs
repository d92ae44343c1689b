//! The processing limits (`limits.*`): what one source, one run and this node's runs
//! together may take (pixels, frames, cost, memory, a budget's longest wait), and the caches'
//! budgets. Kept apart from `mod.rs` as `fetch.rs` is: each is one key of the configuration
//! page, and nothing else reads them together.

use std::time::Duration;

use serde::Deserialize;

use super::de_duration;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    pub max_pixels: u64,
    /// Extension: most frames an animation is processed with, `animated=1` (`IMGCAS_MAX_FRAMES`); its
    /// frames × width × height are held to `max_pixels` too. Over either: 422
    /// `too_many_pixels` (`animated=0` still serves the first frame).
    pub max_frames: u32,
    /// Extension: how many processing runs may use the CPU at once (`IMGCAS_PROCESS_CONCURRENCY`).
    /// Defaults to the number of cores.
    pub process_concurrency: usize,
    /// Extension: the longest a processing run may wait for the CPU (`IMGCAS_QUEUE_TARGET`).
    /// Work that would wait longer is refused with 503 `overloaded` instead of queued.
    #[serde(deserialize_with = "de_duration")]
    pub queue_target: Duration,
    /// Extension: bytes of recent variants kept in memory in front of the variants map
    /// (`IMGCAS_HOT_CACHE_BYTES`; 0 turns the hot cache off).
    pub hot_cache_bytes: u64,
    /// Bytes the stored variants (results and cached errors) may hold
    /// (`IMGCAS_VARIANTS_MAX_BYTES`); the least recently served are evicted beyond it, and
    /// rebuilt if asked for again.
    pub variants_max_bytes: u64,
    /// Bytes the URL map may count (`IMGCAS_URLS_MAX_BYTES`): each entry its URL twice, its
    /// validators and 160 bytes; the least recently used entries are dropped beyond it (they
    /// download again if asked for: their originals and variants stay).
    pub urls_max_bytes: u64,
    /// Extension: bytes of decoded sources kept for seconds, so that runs needing the same
    /// decode of one original (a `srcset` burst, a mezzanine's build) share it
    /// (`IMGCAS_DECODE_CACHE_BYTES`; 0 turns the sharing off).
    pub decode_cache_bytes: u64,
    /// Extension: work left to run after a request (an original's facts and fingerprint)
    /// waiting at once at most (`IMGCAS_BACKGROUND_QUEUE`); beyond it such work is left to
    /// the request that needs it or to the next start's backfill, so a bulk migration of
    /// millions of originals holds no task per original.
    pub background_queue: usize,
    /// Extension: the most arenas the allocator (glibc's) keeps free memory in
    /// (`IMGCAS_ALLOCATOR_ARENAS`; 0: the allocator's own bound, eight per core). Every
    /// thread that allocates at a busy moment may get an arena of its own, and what it frees
    /// stays there, split into pieces that are not given back: under a flood of uploads a
    /// node's memory crept by about 200 bytes per original with glibc's bound, and stayed
    /// flat with two arenas (`bench/memory_uploads.py`). Defaults to the number of cores.
    pub allocator_arenas: usize,
    /// Extension: large originals get a mezzanine, a derivative a power of two smaller that
    /// most outputs are made from (`IMGCAS_MEZZANINE`, default on). Which outputs use it
    /// follows from the spec and the source's header alone; turning it off changes the bytes
    /// of those outputs made from then on (stored ones stay), so a deployment keeps one value.
    pub mezzanine: bool,
    /// Extension: the longest request target (path and query, as sent) and source URL
    /// accepted, in bytes (`IMGCAS_MAX_URL_BYTES`). Longer ones answer 414 `url_too_long`
    /// before any lookup, so no cache ever keys on them (issue 28); nginx's default header
    /// buffer is the same 8 KiB.
    pub max_url_bytes: usize,
    /// Extension: the most work one run may imply, in pixel-equivalents (`IMGCAS_MAX_COST`):
    /// the decoded pixels, plus the output's pixels once more per pass its encoder, blur and
    /// sharpen imply (see "Admission control"). A spec over it answers 422 `too_costly`
    /// before any decode. The default, 10^9, is about 15 s of one core here: a 14 MP GIF is
    /// admitted, an 8192×6000 one is not.
    pub max_cost: u64,
    /// Extension: the longest a tenant's budget makes anyone wait (`IMGCAS_MAX_BUDGET_WAIT`):
    /// a `429 over_budget`'s `Retry-After` is never longer, since a run is admitted only
    /// while its budget can refill what it takes within this time, and a run costing more
    /// than the budget refills in it is refused outright (`too_costly`).
    #[serde(deserialize_with = "de_duration")]
    pub max_budget_wait: Duration,
    /// Extension: bytes the processing runs of this node may hold at once
    /// (`IMGCAS_MAX_MEMORY`), by each run's estimate (its decode, resize, encode and `q=auto`
    /// attempts): a run starts once its share is free, and one that needs more than all of it
    /// is refused (`too_costly`). Defaults to half of the machine's memory (or of the
    /// control group's limit, when that is lower).
    pub max_memory: u64,
}

impl LimitsConfig {
    /// The limits the processing core enforces.
    pub fn processing(&self) -> imgcas_processors::Limits {
        imgcas_processors::Limits {
            max_pixels: self.max_pixels,
            max_frames: self.max_frames,
            max_cost: self.max_cost,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_pixels: 50_000_000,
            max_frames: 500,
            process_concurrency: std::thread::available_parallelism().map_or(2, |n| n.get()),
            allocator_arenas: std::thread::available_parallelism().map_or(2, |n| n.get()),
            queue_target: Duration::from_millis(500),
            hot_cache_bytes: 256 << 20,
            variants_max_bytes: 10 << 30,
            urls_max_bytes: 1 << 30,
            decode_cache_bytes: 256 << 20,
            background_queue: 1024,
            mezzanine: true,
            max_url_bytes: 8 << 10,
            max_cost: 1_000_000_000,
            max_budget_wait: Duration::from_secs(60),
            max_memory: machine_memory() / 2,
        }
    }
}

/// The machine's memory in bytes: `MemTotal`, or the control group's limit when lower (a
/// container's); 4 GiB where neither can be read.
pub fn machine_memory() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib.saturating_mul(1024))
        });
    let group = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok());
    match (total, group) {
        (Some(t), Some(g)) => t.min(g),
        (Some(t), None) => t,
        (None, Some(g)) => g,
        (None, None) => 4 << 30,
    }
}
