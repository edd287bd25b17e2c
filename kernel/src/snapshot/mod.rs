//! Per-client snapshots: interest management, delta encoding against acked baselines,
//! a byte budget with a priority accumulator, and the client-side decoder.
//!
//! The wire format is specified in `kernel/SNAPSHOT_FORMAT.md`.

pub(crate) mod codec;
mod decoder;
mod near;
pub(crate) mod stream;
pub(crate) mod view;

pub use codec::{
    decode_snapshot_header, header_layout, snapshot_is_full, DecodeError, SnapshotHeader, NO_BASELINE,
    SNAPSHOT_FORMAT_VERSION,
};
pub use decoder::ClientDecoder;
pub(crate) use near::Entities;
pub use stream::{BASELINE_RING_LEN, STREAM_DIGEST_BYTES, VIEW_ENTITIES_MAX};
pub use view::{ViewEntry, POS_QUANT_SHIFT, VEL_QUANT_SHIFT};
