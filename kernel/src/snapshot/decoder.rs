//! Client-side snapshot decoder that keeps its recently decoded views, so a snapshot can be
//! applied to whichever of them the server chose as its baseline.
//!
//! The server deltas against a view the client acknowledged, and acknowledgements lag
//! behind the snapshots in flight, so the baseline is usually a few ticks old rather than
//! the latest view. Keeping a ring of the last views covers that lag.

use crate::snapshot::codec::{apply_snapshot_marking, decode_snapshot_header, DecodeError, SnapshotHeader};
use crate::snapshot::ViewEntry;

/// How many decoded views a [`ClientDecoder`] keeps.
pub const DECODER_RING_LEN: usize = 32;

/// One decoded view and, for each of its entries, the tick of the snapshot that last sent
/// the entry's values (older than the view's tick when they were carried over).
#[derive(Clone, Debug, Default)]
struct Slot {
    tick: u32,
    view: Vec<ViewEntry>,
    sent_ticks: Vec<u32>,
}

/// Decodes snapshots against the views it decoded before. A clone is an independent
/// decoder holding the same views (a test tries a snapshot on one without touching the other).
#[derive(Clone, Debug)]
pub struct ClientDecoder {
    /// Decoded views in no particular order, at most `DECODER_RING_LEN`.
    slots: Vec<Slot>,
    /// Decode target. A snapshot is applied here first and swapped into a slot only on
    /// success, so a bad snapshot leaves the stored views untouched; the swap hands the
    /// evicted view's buffers back as the next target, so steady-state decoding does not
    /// allocate.
    scratch: Slot,
    /// Which entries of `scratch` the snapshot sent.
    sent: Vec<bool>,
}

impl Default for ClientDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientDecoder {
    /// A decoder holding no views; its first snapshot must be a full snapshot.
    pub fn new() -> Self {
        Self {
            slots: Vec::with_capacity(DECODER_RING_LEN),
            scratch: Slot::default(),
            sent: Vec::new(),
        }
    }

    /// Decodes `snapshot` against its baseline (the empty view for a full snapshot, else
    /// the stored view of its baseline tick), stores the result under the snapshot's tick
    /// and returns it. A view already stored under that tick is replaced; otherwise,
    /// when the ring is full, the view with the lowest tick is evicted. On error nothing
    /// changes.
    pub fn decode(&mut self, snapshot: &[u8]) -> Result<(SnapshotHeader, &[ViewEntry]), DecodeError> {
        let header = decode_snapshot_header(snapshot)?;
        let baseline: Option<&Slot> = match header.baseline_tick {
            None => None,
            Some(baseline_tick) => Some(
                self.slots
                    .iter()
                    .find(|s| s.tick == baseline_tick)
                    .ok_or(DecodeError::BaselineMissing { baseline_tick })?,
            ),
        };
        let base_view = baseline.map_or(&[][..], |s| s.view.as_slice());
        apply_snapshot_marking(snapshot, base_view, &mut self.scratch.view, &mut self.sent)?;
        // A carried entry keeps the tick its baseline entry was sent at. Both views ascend
        // by id, so one merge pass finds each carried entry's baseline entry.
        let target = &mut self.scratch;
        target.tick = header.tick;
        target.sent_ticks.clear();
        let mut b = 0;
        for (entry, &sent) in target.view.iter().zip(&self.sent) {
            let tick = match (sent, baseline) {
                (true, _) | (false, None) => header.tick,
                (false, Some(base)) => {
                    while base.view[b].id < entry.id {
                        b += 1;
                    }
                    base.sent_ticks[b]
                }
            };
            target.sent_ticks.push(tick);
        }

        let index = match self.slots.iter().position(|s| s.tick == header.tick) {
            Some(index) => index,
            None if self.slots.len() < DECODER_RING_LEN => {
                self.slots.push(Slot::default());
                self.slots.len() - 1
            }
            None => self
                .slots
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.tick)
                .map_or(0, |(index, _)| index),
        };
        // `index` came from a search of, or a push onto, this non-empty Vec, so indexing
        // cannot fail.
        let slot = &mut self.slots[index];
        std::mem::swap(slot, &mut self.scratch);
        Ok((header, slot.view.as_slice()))
    }

    /// The stored view decoded for `tick`, if still kept.
    pub fn view(&self, tick: u32) -> Option<&[ViewEntry]> {
        self.slots
            .iter()
            .find(|s| s.tick == tick)
            .map(|s| s.view.as_slice())
    }

    /// For each entry of the stored view of `tick`, the tick of the snapshot that last sent
    /// its values. It equals `tick` for the entries that snapshot sent; an entry carried
    /// over from the baseline keeps an older tick, and its position is as of that tick (a
    /// client extrapolates it with its velocity, as `SNAPSHOT_FORMAT.md` section 4.2 does,
    /// instead of showing it as current).
    pub fn sent_ticks(&self, tick: u32) -> Option<&[u32]> {
        self.slots
            .iter()
            .find(|s| s.tick == tick)
            .map(|s| s.sent_ticks.as_slice())
    }

    /// The highest tick among the stored views.
    pub fn newest_tick(&self) -> Option<u32> {
        self.slots.iter().map(|s| s.tick).max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::codec::encode_snapshot;

    fn entry(id: u32, qx: u16) -> ViewEntry {
        ViewEntry {
            id,
            qx,
            qy: 7,
            qvx: 1,
            qvy: -1,
            kind: 0,
            pad: 0,
        }
    }

    fn snapshot(
        tick: u32,
        baseline_tick: Option<u32>,
        removed: &[u32],
        updates: &[(Option<ViewEntry>, ViewEntry)],
    ) -> Vec<u8> {
        let header = SnapshotHeader {
            tick,
            baseline_tick,
            avatar_id: 1,
            score: tick,
        };
        let mut out = Vec::new();
        encode_snapshot(&mut out, &header, removed, updates);
        out
    }

    #[test]
    fn decodes_against_any_stored_baseline() {
        let mut dec = ClientDecoder::new();
        assert_eq!(dec.newest_tick(), None);
        let full = snapshot(1, None, &[], &[(None, entry(2, 10)), (None, entry(5, 20))]);
        let (header, view) = dec.decode(&full).unwrap();
        assert_eq!(header.tick, 1);
        assert_eq!(view, [entry(2, 10), entry(5, 20)]);

        let delta = snapshot(2, Some(1), &[2], &[(Some(entry(5, 20)), entry(5, 21))]);
        assert_eq!(dec.decode(&delta).unwrap().1, [entry(5, 21)]);

        // Tick 3 against the older baseline 1, as when tick 2's ack has not arrived.
        let older = snapshot(
            3,
            Some(1),
            &[],
            &[(Some(entry(2, 10)), entry(2, 9)), (None, entry(8, 0))],
        );
        assert_eq!(
            dec.decode(&older).unwrap().1,
            [entry(2, 9), entry(5, 20), entry(8, 0)]
        );

        assert_eq!(dec.view(1), Some(&[entry(2, 10), entry(5, 20)][..]));
        assert_eq!(dec.view(2), Some(&[entry(5, 21)][..]));
        assert_eq!(dec.view(4), None);
        assert_eq!(dec.newest_tick(), Some(3));
    }

    /// An entry the snapshot sent is marked with the snapshot's tick, even when its values
    /// did not change; an entry carried over keeps the tick it was last sent at, through
    /// any number of deltas.
    #[test]
    fn sent_ticks_tell_sent_entries_from_carried_ones() {
        let mut dec = ClientDecoder::new();
        let full = snapshot(
            10,
            None,
            &[],
            &[(None, entry(1, 5)), (None, entry(2, 6)), (None, entry(3, 7))],
        );
        dec.decode(&full).unwrap();
        assert_eq!(dec.sent_ticks(10), Some(&[10, 10, 10][..]));
        // Entity 2 is sent with the very values it had: still "sent", not "carried".
        let delta = snapshot(13, Some(10), &[], &[(Some(entry(2, 6)), entry(2, 6))]);
        assert_eq!(
            dec.decode(&delta).unwrap().1,
            [entry(1, 5), entry(2, 6), entry(3, 7)]
        );
        assert_eq!(dec.sent_ticks(13), Some(&[10, 13, 10][..]));
        // Against 13: 1 is sent, 3 removed, 4 new, 2 carried from 13.
        let next = snapshot(
            16,
            Some(13),
            &[3],
            &[(Some(entry(1, 5)), entry(1, 9)), (None, entry(4, 1))],
        );
        dec.decode(&next).unwrap();
        assert_eq!(dec.sent_ticks(16), Some(&[16, 13, 16][..]));
        assert_eq!(dec.view(16).map(<[ViewEntry]>::len), Some(3));
        assert_eq!(dec.sent_ticks(99), None);
    }

    #[test]
    fn errors_change_nothing() {
        let mut dec = ClientDecoder::new();
        let delta = snapshot(2, Some(1), &[], &[]);
        assert_eq!(
            dec.decode(&delta),
            Err(DecodeError::BaselineMissing { baseline_tick: 1 })
        );
        assert_eq!(dec.newest_tick(), None);

        dec.decode(&snapshot(1, None, &[], &[(None, entry(2, 10))]))
            .unwrap();
        // A valid snapshot whose removal names an id the baseline lacks.
        let bad = snapshot(1, Some(1), &[3], &[]);
        assert_eq!(dec.decode(&bad), Err(DecodeError::RemovedUnknown { id: 3 }));
        let mut truncated = snapshot(2, Some(1), &[], &[(None, entry(4, 0))]);
        truncated.pop();
        assert!(matches!(
            dec.decode(&truncated),
            Err(DecodeError::Truncated { .. })
        ));
        assert_eq!(dec.view(1), Some(&[entry(2, 10)][..]));
        assert_eq!(dec.view(2), None);
        assert_eq!(dec.newest_tick(), Some(1));
    }

    #[test]
    fn ring_evicts_lowest_tick() {
        let mut dec = ClientDecoder::new();
        dec.decode(&snapshot(100, None, &[], &[(None, entry(0, 0))]))
            .unwrap();
        for tick in 101..100 + DECODER_RING_LEN as u32 + 1 {
            let prev = entry(0, (tick - 101) as u16);
            let next = entry(0, (tick - 100) as u16);
            let (_, view) = dec
                .decode(&snapshot(tick, Some(tick - 1), &[], &[(Some(prev), next)]))
                .unwrap();
            assert_eq!(view, [next]);
        }
        let newest = 100 + DECODER_RING_LEN as u32;
        assert_eq!(dec.newest_tick(), Some(newest));
        assert_eq!(dec.view(100), None, "the oldest view is evicted");
        assert!(dec.view(101).is_some());
        assert_eq!(
            dec.decode(&snapshot(newest + 1, Some(100), &[], &[])),
            Err(DecodeError::BaselineMissing { baseline_tick: 100 })
        );
        // Re-decoding a stored tick replaces it in place rather than evicting another.
        let again = snapshot(newest, Some(101), &[], &[]);
        assert_eq!(dec.decode(&again).unwrap().1, [entry(0, 1)]);
        assert!(dec.view(101).is_some());
        assert_eq!(dec.view(newest), Some(&[entry(0, 1)][..]));
    }
}
