//! Near-neighbour search over 64-bit perceptual hashes by Hamming radius: multi-index hashing.
//!
//! The hash is cut into four 16-bit bands. If two hashes differ in at most `r` bits, then by
//! pigeonhole some band differs in at most `r / 4` of them; so a search looks up, in each
//! band, every value within `r / 4` bits of the query's band (1 value at radius 0–3, 17 at
//! 4–7, 137 at 8–11), and verifies the full distance of the candidates found. The probe lists
//! are shared by both backends ([`probes`]): the embedded one keeps [`NearIndex`] in memory,
//! rebuilt from its fingerprints table at open; PostgreSQL keeps one B-tree per band.
//!
//! [`NearIndex`] stores per original its hash, an 8-byte prefix of its SHA-256 (the
//! fingerprints table resolves the rest) and its row number in each band's bucket: 32 bytes,
//! plus the buckets' spare capacity and a fixed 6 MiB of bucket headers.

/// Bands a hash is cut into.
pub const BANDS: usize = 4;

/// The band values within `radius / 4` bits of each of `phash`'s bands.
pub fn probes(phash: u64, radius: u32) -> [Vec<u16>; BANDS] {
    let flips = (radius / BANDS as u32).min(16) as usize;
    std::array::from_fn(|band| {
        let mut out = Vec::new();
        within(band_of(phash, band), flips, 0, &mut out);
        out
    })
}

/// Band `band` of a hash (band 0 is the most significant 16 bits).
pub fn band_of(phash: u64, band: usize) -> u16 {
    (phash >> (48 - 16 * band)) as u16
}

/// Every value reachable from `value` by flipping at most `flips` bits at positions ≥ `from`.
fn within(value: u16, flips: usize, from: u32, out: &mut Vec<u16>) {
    out.push(value);
    if flips == 0 {
        return;
    }
    for bit in from..16 {
        within(value ^ (1 << bit), flips - 1, bit + 1, out);
    }
}

/// Tombstone prefix: a row whose original was dropped (rows are never reused; the index is
/// rebuilt at the next open). A
/// replaced fingerprint is removed by its old hash, then added anew.
const DEAD: u64 = u64::MAX;

/// The in-memory index of the embedded backend.
pub struct NearIndex {
    phash: Vec<u64>,
    prefix: Vec<u64>,
    buckets: [Vec<Vec<u32>>; BANDS],
    live: usize,
}

impl Default for NearIndex {
    fn default() -> Self {
        NearIndex {
            phash: Vec::new(),
            prefix: Vec::new(),
            buckets: std::array::from_fn(|_| vec![Vec::new(); 1 << 16]),
            live: 0,
        }
    }
}

/// The first 8 bytes of a SHA-256, as the index keeps it.
pub fn prefix_of(hash: &[u8; 32]) -> u64 {
    let mut head = [0u8; 8];
    head.copy_from_slice(&hash[..8]);
    u64::from_be_bytes(head)
}

impl NearIndex {
    /// Adds an original known not to be indexed (a bulk load).
    pub fn insert_new(&mut self, prefix: u64, phash: u64) {
        let row = self.phash.len() as u32;
        self.phash.push(phash);
        self.prefix.push(prefix);
        for (band, buckets) in self.buckets.iter_mut().enumerate() {
            buckets[usize::from(band_of(phash, band))].push(row);
        }
        self.live += 1;
    }

    /// Forgets an original whose hash is known: one bucket scan, not the whole index.
    pub fn remove_known(&mut self, prefix: u64, phash: u64) {
        let bucket = &self.buckets[0][usize::from(band_of(phash, 0))];
        if let Some(&row) = bucket
            .iter()
            .find(|&&row| self.prefix[row as usize] == prefix)
        {
            self.prefix[row as usize] = DEAD;
            self.live -= 1;
        }
    }

    /// Originals indexed.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// `(prefix, distance)` of every original within `radius` of `phash`, closest first.
    pub fn search(&self, phash: u64, radius: u32) -> Vec<(u64, u32)> {
        let mut rows: Vec<u32> = Vec::new();
        let probes = probes(phash, radius);
        let visits: usize = probes.iter().map(Vec::len).sum();
        // Past about one probe per 64 originals, a straight scan touches less memory.
        if visits > self.phash.len() / 64 + 64 {
            rows.extend(0..self.phash.len() as u32);
        } else {
            for (band, values) in probes.iter().enumerate() {
                for value in values {
                    rows.extend_from_slice(&self.buckets[band][usize::from(*value)]);
                }
            }
            rows.sort_unstable();
            rows.dedup();
        }
        let mut found: Vec<(u64, u32)> = rows
            .into_iter()
            .filter_map(|row| {
                let (p, h) = (self.prefix[row as usize], self.phash[row as usize]);
                let d = (h ^ phash).count_ones();
                (p != DEAD && d <= radius).then_some((p, d))
            })
            .collect();
        found.sort_by_key(|&(p, d)| (d, p));
        found
    }

    /// Heap bytes held, counted from capacities: what the index costs in memory.
    pub fn heap_bytes(&self) -> usize {
        let buckets: usize = self
            .buckets
            .iter()
            .map(|b| {
                b.capacity() * std::mem::size_of::<Vec<u32>>()
                    + b.iter().map(|v| v.capacity() * 4).sum::<usize>()
            })
            .sum();
        self.phash.capacity() * 8 + self.prefix.capacity() * 8 + buckets
    }

    /// Gives spare capacity back (after a bulk load).
    pub fn shrink(&mut self) {
        self.phash.shrink_to_fit();
        self.prefix.shrink_to_fit();
        for buckets in &mut self.buckets {
            buckets.iter_mut().for_each(Vec::shrink_to_fit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_lists_cover_the_pigeonhole_radius() {
        assert_eq!(probes(0, 3)[0].len(), 1);
        assert_eq!(probes(0, 4)[0].len(), 17);
        assert_eq!(probes(0, 8)[0].len(), 137);
        assert_eq!(probes(0, 16)[0].len(), 2517);
    }

    #[test]
    fn finds_everything_within_the_radius_and_nothing_beyond() {
        let mut index = NearIndex::default();
        let base = 0x0123_4567_89ab_cdefu64;
        // Every band changed by 2 bits: 8 in all, the worst case for radius 8.
        let spread = base ^ 0x0003_0003_0003_0003;
        let far = base ^ 0x0007_0003_0003_0003;
        index.insert_new(1, base);
        index.insert_new(2, spread);
        index.insert_new(3, far);
        index.insert_new(4, !base);
        assert_eq!(index.search(base, 8), vec![(1, 0), (2, 8)]);
        index.remove_known(2, spread);
        index.remove_known(1, base);
        assert_eq!(index.search(base, 9), vec![(3, 9)]);
        assert_eq!(index.len(), 2);
    }
}
