//! The drip detector (issue 67): an origin that sends its body a byte at a time holds a
//! download slot until `fetch.timeout`, and a few such origins hold the whole pool. After a
//! body's first second, the bytes of its last two seconds must average `fetch.min_rate`, or
//! the download is cut off. Two seconds rather than one, so that a healthy link's brief
//! stall (a lost packet's retransmission) is not taken for a drip.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// No verdict before the body has been arriving this long (its first bytes may wait for a
/// TCP window to open).
pub const GRACE: Duration = Duration::from_secs(1);
/// The sliding window the rate is measured over.
pub const WINDOW: Duration = Duration::from_secs(2);
/// How often the reader looks, whether bytes came or not (a stalled body sends none).
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// A body's arrival: samples of the bytes received so far, the oldest at or just before the
/// window's start.
pub struct DripMeter {
    min_rate: u64,
    started: Instant,
    samples: VecDeque<(Instant, u64)>,
}

impl DripMeter {
    /// A body that started arriving at `started`, held to `min_rate` bytes a second (0:
    /// never cut off).
    pub fn new(min_rate: u64, started: Instant) -> DripMeter {
        DripMeter {
            min_rate,
            started,
            samples: VecDeque::from([(started, 0)]),
        }
    }

    /// Notes `total` bytes received by `now`; `Some(rate)` (bytes a second over the window)
    /// when the body is too slow and should be cut off.
    pub fn too_slow(&mut self, now: Instant, total: u64) -> Option<u64> {
        if self.min_rate == 0 {
            return None;
        }
        self.samples.push_back((now, total));
        // Keep one sample at or before the window's start, so the window is whole.
        let start = now.checked_sub(WINDOW).unwrap_or(self.started);
        while self.samples.len() > 2 && self.samples[1].0 <= start {
            self.samples.pop_front();
        }
        if now.duration_since(self.started) < GRACE {
            return None;
        }
        let (since, before) = self.samples.front().copied().unwrap_or((self.started, 0));
        let span = now.duration_since(since).as_secs_f64();
        if span <= 0.0 {
            return None;
        }
        let rate = total.saturating_sub(before) as f64 / span;
        (rate < self.min_rate as f64).then_some(rate as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_drip_is_cut_after_the_first_second() {
        let t0 = Instant::now();
        let mut meter = DripMeter::new(16 << 10, t0);
        // One byte every 250 ms: nothing said during the grace, cut at its end.
        for i in 1..4u64 {
            assert_eq!(meter.too_slow(t0 + ms(250 * i), i), None, "{i}");
        }
        assert_eq!(meter.too_slow(t0 + ms(1000), 4), Some(4));
    }

    #[test]
    fn a_steady_body_and_a_short_stall_pass() {
        let t0 = Instant::now();
        let mut meter = DripMeter::new(16 << 10, t0);
        // 64 KiB a second for three seconds, then nothing for half a second: the last two
        // seconds still average 48 KiB a second.
        let mut total = 0;
        for i in 1..=12u64 {
            total += 16 << 10;
            assert_eq!(meter.too_slow(t0 + ms(250 * i), total), None, "{i}");
        }
        assert_eq!(meter.too_slow(t0 + ms(3250), total), None);
        assert_eq!(meter.too_slow(t0 + ms(3500), total), None);
        // A stall of more than two seconds is a drip.
        assert!(meter.too_slow(t0 + ms(5250), total).is_some());
    }

    #[test]
    fn zero_is_off() {
        let t0 = Instant::now();
        let mut meter = DripMeter::new(0, t0);
        assert_eq!(meter.too_slow(t0 + ms(5000), 1), None);
    }
}
