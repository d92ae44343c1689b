//! The hot cache: recent variants in memory, in front of the variants map, bounded by bytes.
//! A hot key's bytes then cost a hash lookup and a reference-counted clone: no read from the
//! variants map, no copy. (Locating the variant still reads the small originals-index entry,
//! unless the request cache, `pipeline/recall.rs`, remembers it.) Entries never go stale (a
//! variant key names immutable content), so memory pressure evicts them (TinyLFU admission
//! keeps one-off variants from flushing the hot ones), and only a removal an administrator
//! asks for (`pipeline/removal.rs`) clears them all.
//!
//! Rows are held behind an `Arc`, so that the request cache can keep a weak link to one: a
//! remembered hit then reaches its bytes without a second lookup, and the link lapses when
//! this cache lets the row go (a weak link holds no bytes).

use std::sync::Arc;

use moka::sync::Cache;

use crate::maps::{VariantKey, VariantRow};

pub struct HotVariants {
    cache: Option<Cache<VariantKey, Arc<VariantRow>>>,
}

/// Memory an entry holds: its bytes plus the key and bookkeeping.
fn weight(key: &VariantKey, value: &Arc<VariantRow>) -> u32 {
    u32::try_from(value.body_len() + key.canonical_spec.len() + 128).unwrap_or(u32::MAX)
}

impl HotVariants {
    /// A cache of at most `capacity` bytes; 0 turns it off.
    pub fn new(capacity: u64) -> HotVariants {
        let cache = (capacity > 0).then(|| {
            Cache::builder()
                .max_capacity(capacity)
                .weigher(weight)
                .build()
        });
        HotVariants { cache }
    }

    pub fn get(&self, key: &VariantKey) -> Option<VariantRow> {
        self.get_shared(key).map(|row| VariantRow::clone(&row))
    }

    /// The row itself, as held here.
    pub fn get_shared(&self, key: &VariantKey) -> Option<Arc<VariantRow>> {
        self.cache.as_ref()?.get(key)
    }

    pub fn insert(&self, key: VariantKey, value: VariantRow) {
        if let Some(cache) = &self.cache {
            cache.insert(key, Arc::new(value));
        }
    }

    /// Drops every row (a removal may have made some of them wrong to serve).
    pub fn clear(&self) {
        if let Some(cache) = &self.cache {
            cache.invalidate_all();
        }
    }

    /// Bytes held now (approximate: moka applies writes in batches).
    pub fn weighted_size(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| {
            c.run_pending_tasks();
            c.weighted_size()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::ContentHash;
    use crate::maps::VariantBody;
    use imgcas_processors::OutputFormat;

    fn key(i: u8) -> VariantKey {
        VariantKey {
            hash: ContentHash::of(&[i]),
            canonical_spec: "w=10".into(),
            processor_version: 1,
        }
    }

    fn image(len: usize) -> VariantRow {
        VariantRow::Image {
            format: OutputFormat::Jpeg,
            width: 1,
            height: 1,
            chosen: None,
            body: VariantBody::Inline(bytes::Bytes::from(vec![0u8; len])),
        }
    }

    #[test]
    fn bounded_by_bytes() {
        let hot = HotVariants::new(100_000);
        for i in 0..50 {
            hot.insert(key(i), image(10_000));
        }
        assert!(hot.weighted_size() <= 100_000);
        let hot_key = key(200);
        hot.insert(hot_key.clone(), image(1000));
        assert_eq!(hot.get(&hot_key), Some(image(1000)));
    }

    #[test]
    fn zero_turns_it_off() {
        let hot = HotVariants::new(0);
        hot.insert(key(1), image(10));
        assert_eq!(hot.get(&key(1)), None);
    }
}
