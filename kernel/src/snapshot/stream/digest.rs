//! A client stream's digest: what the state root's `Streams` leaves take each stream in by.

use super::{interest_bytes, view_bytes, ClientStream, BASELINE_RING_LEN, NO_TICK};
use xxhash_rust::xxh3::xxh3_128;

/// Bytes of a stream's digest: xxh3-128, little-endian, of its state laid out as
///
/// | bytes | field                                                                    |
/// |-------|--------------------------------------------------------------------------|
/// | 4     | `"MGSS"`                                                                 |
/// | 4     | `tokens_bytes`, u32 LE                                                   |
/// | 4     | live ring slots `n`, u32 LE                                              |
/// | 22 n  | per live slot in slot order: its tick u32 LE, its view's length u16 LE, and xxh3-128 LE of the view (`ViewEntry`'s 12 bytes an entry) |
/// | 4     | interest entries, u32 LE                                                 |
/// | 16    | xxh3-128 LE of the interest list, ascending by id: id u32 LE, priority u32 LE an entry |
///
/// A build hashes some 5 KB of views and interest in a crowd (a view is 1.5 KB, two or
/// three are live, and the interest list is 1 KB): blake3 took about 5.8k cycles a build
/// for that (3.3k for a digest of the new view, 2.5k for one over the ring's digests and
/// the interest list), a sixth of the build, where xxh3 takes about 1.8k (both counted
/// per build on 1,000-client `synth`). The state root stays blake3 over the leaves; xxh3 only condenses each
/// stream into the `Streams` leaves, against accidental divergence, which is what the
/// root is for.
pub const STREAM_DIGEST_BYTES: usize = 16;
/// The longest top-level record a stream digest hashes: every ring slot live.
const STREAM_DIGEST_TOP_BYTES_MAX: usize = 12 + 22 * BASELINE_RING_LEN + 20;

impl ClientStream {
    /// Recomputes `digest` from the state fields (layout in [`STREAM_DIGEST_BYTES`]'s
    /// doc). The interest list is hashed where it lies, and each view's hash is the one
    /// taken when it was written (`ring_view_digest`; checked against a fresh one in debug
    /// builds): no copy, and nothing allocated (a client's join computes one).
    pub fn refresh_digest(&mut self) {
        let mut top = [0u8; STREAM_DIGEST_TOP_BYTES_MAX];
        top[..4].copy_from_slice(b"MGSS");
        top[4..8].copy_from_slice(&self.tokens_bytes.to_le_bytes());
        let mut n = 12;
        let mut live = 0u32;
        for k in (0..BASELINE_RING_LEN).filter(|&k| self.ring_tick[k] != NO_TICK) {
            top[n..n + 4].copy_from_slice(&self.ring_tick[k].to_le_bytes());
            top[n + 4..n + 6].copy_from_slice(&self.ring_len[k].to_le_bytes());
            debug_assert_eq!(
                self.ring_view_digest[k],
                xxh3_128(view_bytes(self.slot_view(k))),
                "ring slot {k}'s view changed without its digest"
            );
            top[n + 6..n + 22].copy_from_slice(&self.ring_view_digest[k].to_le_bytes());
            n += 22;
            live += 1;
        }
        top[8..12].copy_from_slice(&live.to_le_bytes());
        top[n..n + 4].copy_from_slice(&(self.interest.len() as u32).to_le_bytes());
        top[n + 4..n + 20].copy_from_slice(&xxh3_128(interest_bytes(&self.interest)).to_le_bytes());
        self.digest = xxh3_128(&top[..n + 20]).to_le_bytes();
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::view;
    use super::super::{ring_slot, Interest};
    use super::*;

    /// The digest covers every state field: a change of any one (a view's entry, tick or
    /// length, the bucket, an interest id or priority) changes it, and the same state
    /// restored view by view into another ring layout digests the same.
    #[test]
    fn the_digest_covers_every_state_field() {
        let interval = 3;
        let state = || {
            let mut s = ClientStream::new(1_600);
            assert!(s.remember(6, interval, &view(100, 60)));
            assert!(s.remember(9, interval, &view(120, 70)));
            s.interest = (120..190).map(|id| Interest { id, priority: id % 7 }).collect();
            s.refresh_digest();
            s
        };
        let base = state().digest;
        type Change = (&'static str, fn(&mut ClientStream));
        let changes: [Change; 8] = [
            ("tokens", |s| s.tokens_bytes -= 1),
            ("entry field", |s| {
                let mut v = view(120, 70);
                v[5].qvy ^= 1;
                assert!(s.remember(9, 3, &v));
            }),
            ("view tick", |s| s.ring_tick[ring_slot(9, 3)] = 12),
            ("view length", |s| assert!(s.remember(6, 3, &view(100, 59)))),
            ("forgotten view", |s| s.forget(ring_slot(6, 3))),
            ("interest priority", |s| s.interest[3].priority += 1),
            ("interest id", |s| s.interest[69].id += 1),
            ("interest length", |s| {
                s.interest.pop();
            }),
        ];
        for (what, change) in changes {
            let mut s = state();
            change(&mut s);
            s.refresh_digest();
            assert_ne!(s.digest, base, "{what} left the digest unchanged");
        }
        // The arena regions are storage: remembered in the other order, the views take
        // other regions, and the digest is the same.
        let mut s = ClientStream::new(1_600);
        assert!(s.remember(9, interval, &view(120, 70)));
        assert!(s.remember(6, interval, &view(100, 60)));
        s.interest = state().interest;
        s.refresh_digest();
        assert_ne!(s.ring_region, state().ring_region);
        assert_eq!(s.digest, base);
    }
}
