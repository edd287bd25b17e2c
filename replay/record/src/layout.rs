//! The `.mrec` byte layouts in one place (the tables are in `format`'s module doc): named
//! offsets, compile-time checks that the fields tile each header, and the one encoder and
//! decoder of each header. The writer and the reader go through these and nothing else.

use super::MAGIC;

pub(super) const FILE_MAGIC_OFFSET: usize = 0;
pub(super) const FILE_VERSION_OFFSET: usize = 8;
pub(super) const FILE_RULES_VERSION_OFFSET: usize = 12;
pub(super) const FILE_SHARD_COUNT_OFFSET: usize = 16;
pub(super) const FILE_BODY_LEN_OFFSET: usize = 20;
pub(super) const FILE_CHECKSUM_OFFSET: usize = 24;
/// Bytes of the fixed file header (the body follows).
pub(super) const FILE_HEADER_BYTES: usize = 56;
const _: () = assert!(FILE_MAGIC_OFFSET + MAGIC.len() == FILE_VERSION_OFFSET);
const _: () = assert!(FILE_VERSION_OFFSET + 4 == FILE_RULES_VERSION_OFFSET);
const _: () = assert!(FILE_RULES_VERSION_OFFSET + 4 == FILE_SHARD_COUNT_OFFSET);
const _: () = assert!(FILE_SHARD_COUNT_OFFSET + 4 == FILE_BODY_LEN_OFFSET);
const _: () = assert!(FILE_BODY_LEN_OFFSET + 4 == FILE_CHECKSUM_OFFSET);
const _: () = assert!(FILE_CHECKSUM_OFFSET + 32 == FILE_HEADER_BYTES);

pub(super) const RECORD_KIND_OFFSET: usize = 0;
pub(super) const RECORD_RESERVED_OFFSET: usize = 1;
pub(super) const RECORD_FIRST_TICK_OFFSET: usize = 4;
pub(super) const RECORD_TICK_COUNT_OFFSET: usize = 8;
pub(super) const RECORD_PAYLOAD_LEN_OFFSET: usize = 12;
pub(super) const RECORD_PAYLOAD_SUM_OFFSET: usize = 16;
pub(super) const RECORD_HEADER_SUM_OFFSET: usize = 28;
/// Bytes of a record header (the payload follows).
pub(super) const RECORD_HEADER_BYTES: usize = 32;
const RECORD_PAYLOAD_SUM_BYTES: usize = 12;
const RECORD_HEADER_SUM_BYTES: usize = 4;
const _: () = assert!(RECORD_RESERVED_OFFSET + 3 == RECORD_FIRST_TICK_OFFSET);
const _: () = assert!(RECORD_FIRST_TICK_OFFSET + 4 == RECORD_TICK_COUNT_OFFSET);
const _: () = assert!(RECORD_TICK_COUNT_OFFSET + 4 == RECORD_PAYLOAD_LEN_OFFSET);
const _: () = assert!(RECORD_PAYLOAD_LEN_OFFSET + 4 == RECORD_PAYLOAD_SUM_OFFSET);
const _: () = assert!(RECORD_PAYLOAD_SUM_OFFSET + RECORD_PAYLOAD_SUM_BYTES == RECORD_HEADER_SUM_OFFSET);
const _: () = assert!(RECORD_HEADER_SUM_OFFSET + RECORD_HEADER_SUM_BYTES == RECORD_HEADER_BYTES);

/// The end record's payload: ticks recorded, final state root, chain hash.
pub(super) const END_TICKS_OFFSET: usize = 0;
pub(super) const END_ROOT_OFFSET: usize = 4;
pub(super) const END_CHAIN_OFFSET: usize = 36;
pub(super) const END_PAYLOAD_BYTES: usize = 68;
const _: () = assert!(END_ROOT_OFFSET + 32 == END_CHAIN_OFFSET);
const _: () = assert!(END_CHAIN_OFFSET + 32 == END_PAYLOAD_BYTES);

/// The bookmark record's payload: its own version, the client, the note's length, the
/// note (UTF-8).
pub(super) const BOOKMARK_VERSION_OFFSET: usize = 0;
pub(super) const BOOKMARK_CLIENT_OFFSET: usize = 4;
pub(super) const BOOKMARK_NOTE_LEN_OFFSET: usize = 8;
pub(super) const BOOKMARK_NOTE_OFFSET: usize = 12;
const _: () = assert!(BOOKMARK_VERSION_OFFSET + 4 == BOOKMARK_CLIENT_OFFSET);
const _: () = assert!(BOOKMARK_CLIENT_OFFSET + 4 == BOOKMARK_NOTE_LEN_OFFSET);
const _: () = assert!(BOOKMARK_NOTE_LEN_OFFSET + 4 == BOOKMARK_NOTE_OFFSET);

/// A bookmark's payload bytes.
pub(super) fn encode_bookmark(client: u32, note: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(BOOKMARK_NOTE_OFFSET + note.len());
    out.extend_from_slice(&super::BOOKMARK_VERSION.to_le_bytes());
    out.extend_from_slice(&client.to_le_bytes());
    out.extend_from_slice(&(note.len() as u32).to_le_bytes());
    out.extend_from_slice(note.as_bytes());
    out
}

/// Why a bookmark's payload is malformed (its record is then `Corrupted` with this reason).
#[derive(Debug, thiserror::Error)]
pub(super) enum BookmarkError {
    #[error("bookmark payload of {0} bytes")]
    Short(usize),
    #[error("bookmark version {found}, this build reads {}", super::BOOKMARK_VERSION)]
    Version { found: u32 },
    #[error("bookmark note of {note_bytes} bytes in a payload of {payload_bytes}")]
    NoteLength { note_bytes: usize, payload_bytes: usize },
    #[error("bookmark note is not UTF-8: {0}")]
    NotUtf8(#[from] std::str::Utf8Error),
}

/// A bookmark's (client, note) from its payload, or why it is malformed.
pub(super) fn decode_bookmark(payload: &[u8]) -> Result<(u32, String), BookmarkError> {
    if payload.len() < BOOKMARK_NOTE_OFFSET {
        return Err(BookmarkError::Short(payload.len()));
    }
    let version = le_u32(payload, BOOKMARK_VERSION_OFFSET);
    if version != super::BOOKMARK_VERSION {
        return Err(BookmarkError::Version { found: version });
    }
    let len = le_u32(payload, BOOKMARK_NOTE_LEN_OFFSET) as usize;
    if len > super::BOOKMARK_NOTE_BYTES_MAX || BOOKMARK_NOTE_OFFSET + len != payload.len() {
        return Err(BookmarkError::NoteLength {
            note_bytes: len,
            payload_bytes: payload.len(),
        });
    }
    let note = std::str::from_utf8(&payload[BOOKMARK_NOTE_OFFSET..])?;
    Ok((le_u32(payload, BOOKMARK_CLIENT_OFFSET), note.to_string()))
}

/// The first `N` bytes of blake3 over `parts`, in order.
pub(super) fn check<const N: usize>(parts: &[&[u8]]) -> [u8; N] {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
    }
    let mut out = [0u8; N];
    out.copy_from_slice(&h.finalize().as_bytes()[..N]);
    out
}

pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The fixed fields of the file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FileHeader {
    pub version: u32,
    pub rules_version: u32,
    pub shard_count: u32,
    pub body_len: u32,
}

impl FileHeader {
    /// The 56 header bytes for this header followed by `body` (whose length it must give).
    pub fn encode(&self, body: &[u8]) -> [u8; FILE_HEADER_BYTES] {
        debug_assert_eq!(self.body_len as usize, body.len());
        let mut h = [0u8; FILE_HEADER_BYTES];
        h[FILE_MAGIC_OFFSET..FILE_VERSION_OFFSET].copy_from_slice(MAGIC);
        h[FILE_VERSION_OFFSET..][..4].copy_from_slice(&self.version.to_le_bytes());
        h[FILE_RULES_VERSION_OFFSET..][..4].copy_from_slice(&self.rules_version.to_le_bytes());
        h[FILE_SHARD_COUNT_OFFSET..][..4].copy_from_slice(&self.shard_count.to_le_bytes());
        h[FILE_BODY_LEN_OFFSET..][..4].copy_from_slice(&self.body_len.to_le_bytes());
        let sum = check::<32>(&[&h[..FILE_CHECKSUM_OFFSET], body]);
        h[FILE_CHECKSUM_OFFSET..FILE_HEADER_BYTES].copy_from_slice(&sum);
        h
    }

    /// The fixed fields, unchecked (the caller checks the magic first and the checksum
    /// once it has the body).
    pub fn decode(h: &[u8; FILE_HEADER_BYTES]) -> FileHeader {
        FileHeader {
            version: le_u32(h, FILE_VERSION_OFFSET),
            rules_version: le_u32(h, FILE_RULES_VERSION_OFFSET),
            shard_count: le_u32(h, FILE_SHARD_COUNT_OFFSET),
            body_len: le_u32(h, FILE_BODY_LEN_OFFSET),
        }
    }

    /// Whether the header's checksum covers its fixed fields and `body`.
    pub fn checksum_matches(h: &[u8; FILE_HEADER_BYTES], body: &[u8]) -> bool {
        check::<32>(&[&h[..FILE_CHECKSUM_OFFSET], body])[..] == h[FILE_CHECKSUM_OFFSET..FILE_HEADER_BYTES]
    }
}

/// The fields of a record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RecordHeader {
    pub kind: u8,
    pub first_tick: u32,
    pub tick_count: u32,
    pub payload_len: u32,
    pub payload_sum: [u8; RECORD_PAYLOAD_SUM_BYTES],
}

impl RecordHeader {
    /// The header of a record with `kind` and the ticks given, over `payload` (its parts
    /// in order).
    pub fn for_payload(kind: u8, first_tick: u32, tick_count: u32, payload: &[&[u8]]) -> RecordHeader {
        RecordHeader {
            kind,
            first_tick,
            tick_count,
            payload_len: payload.iter().map(|p| p.len()).sum::<usize>() as u32,
            payload_sum: check::<RECORD_PAYLOAD_SUM_BYTES>(payload),
        }
    }

    /// The 32 header bytes, its own checksum last.
    pub fn encode(&self) -> [u8; RECORD_HEADER_BYTES] {
        let mut h = [0u8; RECORD_HEADER_BYTES];
        h[RECORD_KIND_OFFSET] = self.kind;
        h[RECORD_FIRST_TICK_OFFSET..][..4].copy_from_slice(&self.first_tick.to_le_bytes());
        h[RECORD_TICK_COUNT_OFFSET..][..4].copy_from_slice(&self.tick_count.to_le_bytes());
        h[RECORD_PAYLOAD_LEN_OFFSET..][..4].copy_from_slice(&self.payload_len.to_le_bytes());
        h[RECORD_PAYLOAD_SUM_OFFSET..RECORD_HEADER_SUM_OFFSET].copy_from_slice(&self.payload_sum);
        let sum = check::<RECORD_HEADER_SUM_BYTES>(&[&h[..RECORD_HEADER_SUM_OFFSET]]);
        h[RECORD_HEADER_SUM_OFFSET..RECORD_HEADER_BYTES].copy_from_slice(&sum);
        h
    }

    /// The fields, unchecked.
    pub fn decode(h: &[u8; RECORD_HEADER_BYTES]) -> RecordHeader {
        let mut payload_sum = [0u8; RECORD_PAYLOAD_SUM_BYTES];
        payload_sum.copy_from_slice(&h[RECORD_PAYLOAD_SUM_OFFSET..RECORD_HEADER_SUM_OFFSET]);
        RecordHeader {
            kind: h[RECORD_KIND_OFFSET],
            first_tick: le_u32(h, RECORD_FIRST_TICK_OFFSET),
            tick_count: le_u32(h, RECORD_TICK_COUNT_OFFSET),
            payload_len: le_u32(h, RECORD_PAYLOAD_LEN_OFFSET),
            payload_sum,
        }
    }

    /// Whether the header's own checksum matches its bytes.
    pub fn header_sum_matches(h: &[u8; RECORD_HEADER_BYTES]) -> bool {
        check::<RECORD_HEADER_SUM_BYTES>(&[&h[..RECORD_HEADER_SUM_OFFSET]])[..]
            == h[RECORD_HEADER_SUM_OFFSET..RECORD_HEADER_BYTES]
    }

    /// Whether the reserved bytes are zero.
    pub fn reserved_is_zero(h: &[u8; RECORD_HEADER_BYTES]) -> bool {
        h[RECORD_RESERVED_OFFSET..RECORD_FIRST_TICK_OFFSET] == [0, 0, 0]
    }

    /// Whether `payload` is what the header's payload checksum covers.
    pub fn payload_sum_matches(&self, payload: &[u8]) -> bool {
        check::<RECORD_PAYLOAD_SUM_BYTES>(&[payload]) == self.payload_sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_checksums_cover_every_byte() {
        let body = b"meta";
        let f = FileHeader {
            version: 1,
            rules_version: 4,
            shard_count: 2,
            body_len: 4,
        };
        let h = f.encode(body);
        assert_eq!(&h[..8], MAGIC);
        assert_eq!(FileHeader::decode(&h), f);
        assert!(FileHeader::checksum_matches(&h, body));
        for i in 0..FILE_CHECKSUM_OFFSET {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(!FileHeader::checksum_matches(&bad, body), "file header byte {i}");
        }
        assert!(!FileHeader::checksum_matches(&h, b"metA"));

        let r = RecordHeader::for_payload(2, 7, 0, &[b"ab", b"cd"]);
        assert_eq!(r.payload_len, 4);
        let h = r.encode();
        assert_eq!(RecordHeader::decode(&h), r);
        assert!(RecordHeader::header_sum_matches(&h) && RecordHeader::reserved_is_zero(&h));
        assert!(r.payload_sum_matches(b"abcd") && !r.payload_sum_matches(b"abce"));
        for i in 0..RECORD_HEADER_SUM_OFFSET {
            let mut bad = h;
            bad[i] ^= 1;
            assert!(!RecordHeader::header_sum_matches(&bad), "record header byte {i}");
        }
    }
}
