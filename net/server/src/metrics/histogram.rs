//! The server's latency histograms: log-linear buckets of microseconds in relaxed
//! atomics (the tick thread records without a lock), and a pair of them that keeps the
//! last complete window of ticks.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

/// Sub-buckets per power of two: values are kept to within about 3%.
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Enough buckets for any u64 value.
const BUCKETS: usize = (SUB as usize) * (64 - SUB_BITS as usize + 1);

/// A log-linear histogram of microsecond values (exact below 32 µs, ~3% above),
/// recorded with relaxed atomics so the tick thread never takes a lock.
pub struct Histogram {
    counts: Box<[AtomicU64]>,
    count: AtomicU64,
    sum: AtomicU64,
    max: AtomicU64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count())
            .field("max", &self.max())
            .finish_non_exhaustive()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum: AtomicU64::new(0),
            max: AtomicU64::new(0),
        }
    }
}

fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let shift = e - SUB_BITS;
    let sub = (v >> shift) & (SUB - 1);
    (SUB + shift as u64 * SUB + sub) as usize
}

/// The smallest value bucket `i` holds and how many values it spans: one each below
/// `SUB`, then `SUB` buckets per power of two.
fn span_of(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < SUB {
        return (i, 1);
    }
    let shift = (i - SUB) / SUB;
    let sub = (i - SUB) % SUB;
    ((SUB + sub) << shift, 1 << shift)
}

/// The largest value bucket `i` holds.
fn upper_of(i: usize) -> u64 {
    let (low, width) = span_of(i);
    low + (width - 1)
}

/// A representative value of bucket `i` (its midpoint).
fn value_of(i: usize) -> u64 {
    let (low, width) = span_of(i);
    low + width / 2
}

impl Histogram {
    pub fn record(&self, v: u64) {
        self.counts[bucket_of(v)].fetch_add(1, Relaxed);
        self.count.fetch_add(1, Relaxed);
        self.sum.fetch_add(v, Relaxed);
        self.max.fetch_max(v, Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    pub fn sum(&self) -> u64 {
        self.sum.load(Relaxed)
    }

    pub fn max(&self) -> u64 {
        self.max.load(Relaxed)
    }

    /// Forgets every sample (the tick thread, at the start of a window).
    pub fn clear(&self) {
        for c in self.counts.iter() {
            c.store(0, Relaxed);
        }
        self.count.store(0, Relaxed);
        self.sum.store(0, Relaxed);
        self.max.store(0, Relaxed);
    }

    /// Samples at or below `le` (exact below 32, to the bucket's ~3% above: a sample
    /// counts when its whole bucket is at or below `le`).
    pub fn count_at_or_below(&self, le: u64) -> u64 {
        self.counts
            .iter()
            .enumerate()
            .take_while(|(i, _)| upper_of(*i) <= le)
            .map(|(_, c)| c.load(Relaxed))
            .sum()
    }

    /// The value at quantile `q` (0..=1), or 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let n = self.count();
        if n == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Relaxed);
            if seen >= rank {
                return value_of(i).min(self.max());
            }
        }
        self.max()
    }
}

/// The last complete window of ticks (one second of them) as a histogram, for per-second
/// series (the soak scrapes it every second): the tick thread records into one of two
/// histograms and, at the start of each window, clears the other and switches; a reader
/// reads the one not being written, which holds the previous window.
#[derive(Debug, Default)]
pub struct WindowHistogram {
    windows: [Histogram; 2],
    /// Index of the window being written.
    current: AtomicU32,
}

impl WindowHistogram {
    /// Records `v` for tick `tick`, where a window is `window_ticks` ticks.
    pub fn record(&self, tick: u64, window_ticks: u64, v: u64) {
        let window = (tick / window_ticks.max(1)) % 2;
        if u64::from(self.current.load(Relaxed)) != window {
            self.windows[window as usize].clear();
            self.current.store(window as u32, Relaxed);
        }
        self.windows[window as usize].record(v);
    }

    /// The previous complete window.
    pub fn last(&self) -> &Histogram {
        &self.windows[1 - self.current.load(Relaxed) as usize % 2]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_close() {
        let mut last = 0;
        for v in (0..100_000u64).chain([1 << 40, u64::MAX / 2, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last && b < BUCKETS, "{v}");
            last = b;
            let r = value_of(b);
            let err = r.abs_diff(v) as f64 / (v.max(1)) as f64;
            assert!(err <= 1.0 / SUB as f64, "{v} -> {r}");
        }
    }

    #[test]
    fn a_bucket_holds_up_to_its_upper_bound_and_no_further() {
        for v in (0..100_000u64).chain([1 << 40, u64::MAX / 2]) {
            let b = bucket_of(v);
            assert!(upper_of(b) >= v, "{v}");
            assert_eq!(bucket_of(upper_of(b)), b, "{v}");
            assert_eq!(bucket_of(upper_of(b) + 1), b + 1, "{v}");
        }
    }

    #[test]
    fn quantiles() {
        let h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for v in 1..=1000 {
            h.record(v);
        }
        let p50 = h.quantile(0.5);
        assert!((480..=520).contains(&p50), "{p50}");
        let p99 = h.quantile(0.99);
        assert!((960..=1000).contains(&p99), "{p99}");
        assert_eq!(h.max(), 1000);
    }

    /// The window histogram reports the previous complete window, not the one being written.
    #[test]
    fn the_recent_window_is_the_last_complete_one() {
        let w = WindowHistogram::default();
        for tick in 0..60 {
            w.record(tick, 60, 1000);
        }
        for tick in 60..90 {
            w.record(tick, 60, 5000);
        }
        assert_eq!((w.last().count(), w.last().max()), (60, 1000));
        for tick in 120..130 {
            w.record(tick, 60, 7);
        }
        // Window 1 (ticks 60..120) is now the last complete one; window 0 was cleared.
        assert_eq!((w.last().count(), w.last().max()), (30, 5000));
    }
}
