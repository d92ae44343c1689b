//! Near-neighbour search over 64-bit perceptual hashes by Hamming radius: multi-index hashing.
//!
//! The hash is cut into four 16-bit bands. If two hashes differ in at most `r` bits, then by
//! pigeonhole some band differs in at most `r / 4` of them; so a search looks up, in each
//! band, every value within `r / 4` bits of the query's band (1 value at radius 0–3, 17 at
//! 4–7, 137 at 8–11), and verifies the full distance of the candidates found. The probe lists
//! are shared by both backends ([`probes`]), which keep the bands on disk: the embedded one
//! in a table of its file (`redb/fingerprints.rs`), PostgreSQL in one B-tree per band, so a
//! node's memory does not grow with the originals stored. [`NearIndex`] is the same search in
//! memory, for what reads every fingerprint once anyway (`imgcas stats`' clusters).
//!
//! [`NearIndex`] stores per original its hash in each band's bucket (4 × 8 bytes), its row
//! beside band 0's copy (4 bytes) and an 8-byte prefix of its SHA-256 (the fingerprints table
//! resolves the rest): 44 bytes, plus the buckets' spare room (at most a quarter) and a fixed
//! 7.5 MiB of bucket headers.

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

/// Band `band` of a hash: every fourth bit, from bit `band` up. Interleaved rather than
/// contiguous, because neighbouring bits of a DCT hash are neighbouring frequencies, which
/// photographs set alike: contiguous bands of real hashes crowd into few values (measured:
/// the lookup then visits most of the index).
pub fn band_of(phash: u64, band: usize) -> u16 {
    let mut out = 0u16;
    for i in 0..16 {
        out |= (((phash >> (band + 4 * i)) & 1) as u16) << i;
    }
    out
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
/// rebuilt at the next open). A replaced fingerprint is removed by its old hash, then added
/// anew.
const DEAD: u64 = u64::MAX;

/// The in-memory index of the embedded backend.
///
/// Buckets hold the hashes themselves, not row numbers: a lookup verifies its candidates
/// reading each bucket front to back, instead of one cache miss per candidate (measured at
/// 10 M: 8 ms of a 9 ms lookup went to those misses). Band 0's buckets also hold each hash's
/// row, which is how a match found in another band is named.
pub struct NearIndex {
    /// Per row: the original's SHA-256 prefix, or [`DEAD`].
    prefix: Vec<u64>,
    /// Per band, per band value: the hashes whose band has that value.
    buckets: [Vec<Vec<u64>>; BANDS],
    /// Band 0's rows, beside its hashes.
    rows0: Vec<Vec<u32>>,
    live: usize,
}

impl Default for NearIndex {
    fn default() -> Self {
        NearIndex {
            prefix: Vec::new(),
            buckets: std::array::from_fn(|_| vec![Vec::new(); 1 << 16]),
            rows0: vec![Vec::new(); 1 << 16],
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

/// Pushes, growing by a quarter (not doubling): buckets are many and small, and their spare
/// room is most of what an index costs beyond its entries.
fn push_small<T>(v: &mut Vec<T>, x: T) {
    if v.len() == v.capacity() {
        v.reserve_exact((v.len() / 4).max(4));
    }
    v.push(x);
}

impl NearIndex {
    /// Adds an original known not to be indexed (a bulk load).
    pub fn insert_new(&mut self, prefix: u64, phash: u64) {
        let row = self.prefix.len() as u32;
        self.prefix.push(prefix);
        for (band, buckets) in self.buckets.iter_mut().enumerate() {
            push_small(&mut buckets[usize::from(band_of(phash, band))], phash);
        }
        push_small(&mut self.rows0[usize::from(band_of(phash, 0))], row);
        self.live += 1;
    }

    /// Forgets an original whose hash is known: one bucket scan, not the whole index.
    pub fn remove_known(&mut self, prefix: u64, phash: u64) {
        let value = usize::from(band_of(phash, 0));
        let found = self.buckets[0][value]
            .iter()
            .zip(&self.rows0[value])
            .find(|(h, row)| **h == phash && self.prefix[**row as usize] == prefix)
            .map(|(_, row)| *row as usize);
        if let Some(row) = found {
            self.prefix[row] = DEAD;
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

    /// The rows whose hash is `phash` (from band 0's bucket of it).
    fn rows_of(&self, phash: u64, out: &mut Vec<(u32, u32)>, distance: u32) {
        let value = usize::from(band_of(phash, 0));
        for (h, row) in self.buckets[0][value].iter().zip(&self.rows0[value]) {
            if *h == phash {
                out.push((*row, distance));
            }
        }
    }

    /// `(prefix, distance)` of every original within `radius` of `phash`, closest first.
    pub fn search(&self, phash: u64, radius: u32) -> Vec<(u64, u32)> {
        self.search_closest(phash, radius, usize::MAX)
    }

    /// [`NearIndex::search`], the `limit` closest only (by distance, then prefix), in memory
    /// bounded by `limit`: the hits are cut back to it whenever they pass four times it.
    pub fn search_closest(&self, phash: u64, radius: u32, limit: usize) -> Vec<(u64, u32)> {
        let mut hits: Vec<(u32, u32)> = Vec::new();
        let compact_at = limit.saturating_mul(4).max(1024);
        let keep_closest = |hits: &mut Vec<(u32, u32)>| {
            hits.sort_unstable_by_key(|&(row, d)| (d, self.prefix[row as usize], row));
            hits.dedup();
            hits.retain(|&(row, _)| self.prefix[row as usize] != DEAD);
            hits.truncate(limit);
        };
        let probes = probes(phash, radius);
        let flips = radius / BANDS as u32;
        let visits: usize = probes.iter().map(Vec::len).sum();
        // Past about one probe per 64 originals, a straight scan touches less memory: band 0
        // holds every hash once.
        let scan = visits > self.prefix.len() / 64 + 64;
        for (band, values) in probes.iter().enumerate() {
            let all: Vec<u16>;
            let values = if scan {
                if band > 0 {
                    break;
                }
                all = (0..=u16::MAX).collect();
                &all
            } else {
                values
            };
            for value in values {
                let value = usize::from(*value);
                for (k, h) in self.buckets[band][value].iter().enumerate() {
                    let d = (h ^ phash).count_ones();
                    if d > radius {
                        continue;
                    }
                    if band == 0 {
                        hits.push((self.rows0[value][k], d));
                    } else if (band_of(*h, 0) ^ band_of(phash, 0)).count_ones() > flips {
                        // (Otherwise band 0's probes found it already.)
                        self.rows_of(*h, &mut hits, d);
                    }
                    if hits.len() > compact_at {
                        keep_closest(&mut hits);
                    }
                }
            }
        }
        hits.sort_unstable();
        hits.dedup();
        let mut found: Vec<(u64, u32)> = hits
            .into_iter()
            .filter_map(|(row, d)| {
                let p = self.prefix[row as usize];
                (p != DEAD).then_some((p, d))
            })
            .collect();
        found.sort_by_key(|&(p, d)| (d, p));
        found.truncate(limit);
        found
    }

    /// Heap bytes held, counted from capacities: what the index costs in memory.
    pub fn heap_bytes(&self) -> usize {
        let header = std::mem::size_of::<Vec<u64>>();
        let buckets: usize = self
            .buckets
            .iter()
            .map(|b| b.capacity() * header + b.iter().map(|v| v.capacity() * 8).sum::<usize>())
            .sum();
        let rows0 = self.rows0.capacity() * header
            + self.rows0.iter().map(|v| v.capacity() * 4).sum::<usize>();
        self.prefix.capacity() * 8 + buckets + rows0
    }

    /// Gives spare capacity back (after a bulk load).
    pub fn shrink(&mut self) {
        self.prefix.shrink_to_fit();
        for buckets in &mut self.buckets {
            buckets.iter_mut().for_each(Vec::shrink_to_fit);
        }
        self.rows0.iter_mut().for_each(Vec::shrink_to_fit);
    }
}

/// Hashes for the tests of both backends' searches.
#[cfg(test)]
pub(crate) mod sample {
    /// A small deterministic generator (xorshift).
    pub struct XorShift(pub u64);

    impl XorShift {
        pub fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// `count` hashes of which a third lie a few bits from an earlier one (so that searches
    /// find several), the rest anywhere.
    pub fn hashes(rng: &mut XorShift, count: usize) -> Vec<u64> {
        let mut all: Vec<u64> = Vec::with_capacity(count);
        for i in 0..count {
            let h = if i % 3 == 2 {
                let base = all[(rng.next() % all.len() as u64) as usize];
                (0..rng.next() % 7).fold(base, |h, _| h ^ (1 << (rng.next() % 64)))
            } else {
                rng.next()
            };
            all.push(h);
        }
        all
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

    /// Thousands of alike originals: the closest few come back, the same as the whole
    /// search's first few, and the hits held stay bounded.
    #[test]
    fn the_closest_few_of_many_alike_are_the_whole_searchs_first() {
        let mut index = NearIndex::default();
        let base = 0x0123_4567_89ab_cdefu64;
        for prefix in 0..10_000u64 {
            // Most identical, some a bit or two away, in no order.
            let phash = match prefix % 7 {
                0 => base ^ 1,
                3 => base ^ 0b11,
                _ => base,
            };
            index.insert_new(prefix.wrapping_mul(0x9e37_79b9_7f4a_7c15), phash);
        }
        let all = index.search(base, 8);
        assert_eq!(all.len(), 10_000);
        for limit in [1, 64, 5000] {
            assert_eq!(
                index.search_closest(base, 8, limit),
                all[..limit],
                "{limit}"
            );
        }
        index.remove_known(all[0].0, base);
        assert_eq!(index.search_closest(base, 8, 3), all[1..4]);
    }

    #[test]
    fn finds_everything_within_the_radius_and_nothing_beyond() {
        let mut index = NearIndex::default();
        let base = 0x0123_4567_89ab_cdefu64;
        // Every band changed by 2 bits (bits 0–7: two of each band): 8 in all, the worst
        // case for radius 8.
        let spread = base ^ 0xff;
        let far = base ^ 0x1ff;
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

    #[test]
    fn bucket_lookups_agree_with_a_scan() {
        let mut rng = sample::XorShift(0x1234_5678_9abc_def0);
        // Large enough for the buckets to be used (not the scan); a third are near others.
        let all = sample::hashes(&mut rng, 60_000);
        let mut next = move || rng.next();
        let mut index = NearIndex::default();
        for (i, h) in all.iter().enumerate() {
            index.insert_new(i as u64, *h);
        }
        for (i, h) in all.iter().enumerate().step_by(7) {
            index.remove_known(i as u64, *h);
        }
        for q in 0..300 {
            let query = all[(next() % all.len() as u64) as usize] ^ (1 << (q % 64));
            let mut expected: Vec<(u64, u32)> = all
                .iter()
                .enumerate()
                .filter(|(i, _)| i % 7 != 0)
                .map(|(i, h)| (i as u64, (h ^ query).count_ones()))
                .filter(|(_, d)| *d <= 8)
                .collect();
            expected.sort_by_key(|&(p, d)| (d, p));
            assert_eq!(index.search(query, 8), expected);
        }
    }
}
