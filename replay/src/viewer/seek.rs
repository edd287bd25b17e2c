//! The viewer's seek index: checkpoints of the world kept in memory, evenly spaced over
//! the recording, so a seek restores near its tick instead of at the recording's own
//! checkpoints (600 ticks apart by default: up to 250 ms of stepping on this machine).
//!
//! Whoever steps the recording (the background marker scan, and the readers as they
//! step) offers the world at each tick on the grid, and the index keeps it as a compact
//! checkpoint. When the index outgrows `SEEK_INDEX_BYTES_MAX` the grid's spacing doubles
//! and every other checkpoint goes, so a long recording keeps even coverage within the
//! budget.
//!
//! Compact, because a raw checkpoint of 1,000 clients is 6.9 MB: the budget held 37 of
//! them, 37 s of recording at one a second, and a seek into a longer recording stepped
//! hundreds of ticks. Compact, it is 0.57 MB (6.0 ms to save instead of 1.7, 15.3 ms to
//! restore instead of 10.5), and the budget holds 7.6 minutes at one a second. The
//! default world's (32 clients, 1,024 player slots) is 169 KB instead of 231, 0.30 ms to
//! save instead of 0.06: an hour of it, 216,000 ticks, keeps one per 240 ticks either way.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use migratory_kernel::{save_checkpoint_unsealed, World};

/// Most bytes of checkpoints the index keeps.
pub const SEEK_INDEX_BYTES_MAX: usize = 256 << 20;

/// Checkpoints in memory on a grid of ticks.
#[derive(Debug)]
pub struct SeekIndex {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    spacing_ticks: u32,
    bytes: usize,
    bytes_max: usize,
    at: BTreeMap<u32, Arc<Vec<u8>>>,
}

impl SeekIndex {
    /// An empty index whose grid starts `spacing_ticks` apart.
    pub fn new(spacing_ticks: u32, bytes_max: usize) -> SeekIndex {
        assert!(spacing_ticks > 0, "a seek index needs a spacing");
        SeekIndex {
            inner: Mutex::new(Inner {
                spacing_ticks,
                bytes: 0,
                bytes_max,
                at: BTreeMap::new(),
            }),
        }
    }

    /// Keeps `world` if its tick is on the grid and not held yet (called after each step;
    /// off the grid it costs a lock and a division).
    pub fn offer(&self, world: &World) {
        let tick = world.tick();
        let wanted = self
            .inner
            .lock()
            .is_ok_and(|i| tick % i.spacing_ticks == 0 && !i.at.contains_key(&tick));
        if !wanted {
            return;
        }
        // Compacting a world's own checkpoint cannot fail; were it to, the seek would
        // only start farther back.
        let Ok(bytes) = save_checkpoint_unsealed(world).compact() else {
            return;
        };
        if let Ok(mut i) = self.inner.lock() {
            i.insert(tick, bytes);
        }
    }

    /// The held checkpoint nearest at or before `tick`: its tick and bytes.
    pub fn nearest(&self, tick: u32) -> Option<(u32, Arc<Vec<u8>>)> {
        let i = self.inner.lock().ok()?;
        i.at.range(..=tick).next_back().map(|(t, b)| (*t, b.clone()))
    }

    /// (checkpoints held, their bytes, the grid's spacing in ticks).
    pub fn stats(&self) -> (usize, usize, u32) {
        self.inner
            .lock()
            .map(|i| (i.at.len(), i.bytes, i.spacing_ticks))
            .unwrap_or_default()
    }
}

impl Inner {
    fn insert(&mut self, tick: u32, bytes: Vec<u8>) {
        if tick % self.spacing_ticks != 0 || self.at.contains_key(&tick) {
            return;
        }
        self.bytes += bytes.len();
        self.at.insert(tick, Arc::new(bytes));
        while self.bytes > self.bytes_max && self.spacing_ticks < u32::MAX / 2 {
            self.spacing_ticks *= 2;
            let spacing = self.spacing_ticks;
            let mut freed = 0;
            self.at.retain(|t, b| {
                let keep = t % spacing == 0;
                if !keep {
                    freed += b.len();
                }
                keep
            });
            self.bytes -= freed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(
        spacing_ticks: u32,
        bytes_max: usize,
        ticks: std::ops::Range<u32>,
        each_bytes: usize,
    ) -> SeekIndex {
        let index = SeekIndex::new(spacing_ticks, bytes_max);
        for t in ticks {
            index.inner.lock().unwrap().insert(t, vec![0; each_bytes]);
        }
        index
    }

    #[test]
    fn keeps_the_grid_and_answers_the_nearest_at_or_before() {
        let index = filled(60, 1 << 20, 0..1000, 10);
        assert_eq!(index.stats(), (17, 170, 60));
        assert_eq!(index.nearest(59).map(|n| n.0), Some(0));
        assert_eq!(index.nearest(60).map(|n| n.0), Some(60));
        assert_eq!(index.nearest(999).map(|n| n.0), Some(960));
        assert!(filled(60, 1 << 20, 1..59, 10).nearest(1000).is_none());
    }

    #[test]
    fn over_budget_the_spacing_doubles_and_coverage_stays_even() {
        // 100 checkpoints of 100 bytes on a grid of 10 ticks, at most 2,500 bytes held.
        let index = filled(10, 2_500, 0..1000, 100);
        let (count, bytes, spacing) = index.stats();
        assert_eq!((spacing, count, bytes), (40, 25, 2_500));
        let held: Vec<u32> = index.inner.lock().unwrap().at.keys().copied().collect();
        assert!(held.windows(2).all(|w| w[1] - w[0] == 40), "{held:?}");
        assert_eq!((held[0], held[24]), (0, 960));
    }
}
