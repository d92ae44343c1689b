//! Removals an administrator asks for: what the service must stop serving or knowing on
//! request, rather than by its own bounded-growth rules (`upkeep.rs`). Every removal also ends
//! the remembered requests (`recall.rs`), so no answer from memory outlives it on this node.

use url::Url;

use super::Pipeline;
use crate::error::Error;

impl Pipeline {
    /// Forgets the URL map's entry of `url` (and any origin failure held for it): its next
    /// request downloads it again, without validators. Returns the hash it mapped to, or
    /// `None` when it had no entry. The original and its variants stay: other URLs may share
    /// them.
    pub async fn forget_url(&self, url: &Url) -> Result<Option<String>, Error> {
        let s = &self.shared;
        let entry = s.maps.url_now(url.as_str()).await?;
        if entry.is_some() {
            s.maps.remove_url(url.as_str()).await?;
        }
        s.origin_failures.clear(url.as_str());
        self.forget_requests();
        Ok(entry.map(|e| e.hash.to_hex()))
    }
}
