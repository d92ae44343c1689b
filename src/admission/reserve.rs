//! Memory a run reserves against `limits.max_memory` (audit #4: admission counted pixels,
//! and two 49 MP runs of 1.5 and 1.8 GB were admitted on two slots): a semaphore of MiB
//! permits beside the CPU slots, a run's estimate (`imgcas_processors::plan::memory`) taken
//! from it before its slot and given back with it (`Ticket::start`, `Running::memory`).

use std::sync::Arc;

use super::Admission;

/// The memory bound before one is set ([`Admission::with_memory`]): none to speak of (the
/// semaphore's largest count is far above this).
pub(super) const UNBOUNDED_MIB: u32 = 1 << 30;

/// A run's memory in MiB permits, rounded up.
pub(super) fn mib_of(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1 << 20)).unwrap_or(u32::MAX)
}

impl Admission {
    /// Holds runs' memory to `bytes` at once (rounded down to MiB, at least one).
    pub fn with_memory(mut self, bytes: u64) -> Admission {
        let mib = u32::try_from((bytes >> 20).max(1)).unwrap_or(UNBOUNDED_MIB);
        self.memory_mib = mib.min(UNBOUNDED_MIB);
        self.memory = Arc::new(tokio::sync::Semaphore::new(self.memory_mib as usize));
        self
    }

    /// Bytes runs may hold at once.
    pub fn memory_limit(&self) -> u64 {
        u64::from(self.memory_mib) << 20
    }

    /// Bytes admitted runs hold now (their estimates), and how many runs have waited for
    /// memory (metrics).
    pub fn memory_held(&self) -> (u64, u64) {
        let free = self.memory.available_permits() as u64;
        let held = u64::from(self.memory_mib).saturating_sub(free) << 20;
        (
            held,
            self.memory_waits.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Whether a run estimated at `bytes` could ever be admitted.
    pub fn memory_fits(&self, bytes: u64) -> bool {
        mib_of(bytes) <= self.memory_mib
    }
}
