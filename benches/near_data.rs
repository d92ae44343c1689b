//! The hashes the near-neighbour benchmarks search (`benches/near_index.rs` for the embedded
//! index, `tests/it/near_index_pg.rs` for PostgreSQL): the DCT hashes of the shared photographs
//! and their transforms, replicated with small perturbations.

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `seed` with `bits` distinct random bits flipped.
    pub fn flip(&mut self, seed: u64, bits: u32) -> u64 {
        let mut mask = 0u64;
        while mask.count_ones() < bits {
            mask |= 1 << self.below(64);
        }
        seed ^ mask
    }

    /// A replica: mostly another picture, sometimes a near-duplicate.
    pub fn replica(&mut self, seeds: &[u64]) -> u64 {
        let seed = seeds[self.below(seeds.len() as u64) as usize];
        let bits = if self.below(10) == 0 {
            self.below(5) as u32
        } else {
            10 + self.below(5) as u32
        };
        self.flip(seed, bits)
    }
}

pub fn seeds() -> Vec<u64> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/results/near-dup.json");
    let text = std::fs::read_to_string(path).expect("bench/results/near-dup.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let mut out = Vec::new();
    for photo in json["phashes"].as_array().expect("phashes") {
        let hashes = std::iter::once(&photo["original"])
            .chain(photo["transforms"].as_array().expect("transforms"));
        for h in hashes {
            out.push(u64::from_str_radix(h.as_str().expect("hex"), 16).expect("hex"));
        }
    }
    assert!(out.len() > 4000, "the seeds: 255 photos × 16");
    out
}

/// The `p` quantile of sorted durations, in milliseconds.
pub fn percentile(sorted: &[std::time::Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e3
}
