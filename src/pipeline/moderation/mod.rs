//! Moderation: what content may be served or stored. This role owns the takedown list and
//! the blocklist as this node holds them, and the validation hook; the other roles ask it at
//! the gate's three points (`gate.rs`) and never read its lists themselves.
//!
//! - `gate.rs`: the one gate of takedowns and the blocklist;
//! - `removal.rs`: removals an administrator asks for, and following other nodes' ones;
//! - `blocklist.rs`: content refused on the way in, by bytes or as the same picture;
//! - `validation.rs`: the operator's own service asked about every new original.

use crate::config::Config;
use crate::maps::MapStore;

mod blocklist;
mod gate;
mod removal;
mod validation;

pub use blocklist::Listed;
pub use removal::{taken_down, Lifted, TakenDown};

/// Moderation's own state, composed into the pipeline.
pub(super) struct Moderation {
    /// The takedown list as this node holds it (`removal.rs`).
    takedowns: removal::Takedowns,
    /// The moderation blocklist as this node holds it (`blocklist.rs`).
    blocked: blocklist::Blocked,
    /// The validation hook, when one is configured (`validation.rs`).
    validation: Option<validation::Validation>,
}

impl Moderation {
    /// Reads the lists from the maps and sets up the hook the configuration names.
    pub(super) async fn load(config: &Config, maps: &dyn MapStore) -> Result<Moderation, String> {
        let takedowns = removal::Takedowns::load(maps)
            .await
            .map_err(|e| format!("cannot read the takedown list: {e}"))?;
        let blocked = blocklist::Blocked::load(maps)
            .await
            .map_err(|e| format!("cannot read the blocklist: {e}"))?;
        let validation = validation::Validation::new(&config.moderation)?;
        Ok(Moderation {
            takedowns,
            blocked,
            validation,
        })
    }

    /// Originals taken down, as this node holds the list (for `/metrics`).
    pub(super) fn takedowns(&self) -> usize {
        self.takedowns.len()
    }

    /// The blocklist's entries by kind (for `/metrics`).
    pub(super) fn blocklist(&self) -> (usize, usize) {
        self.blocked.counts()
    }
}
