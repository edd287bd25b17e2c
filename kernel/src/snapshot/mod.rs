//! Per-client snapshots: interest management, delta encoding against acked baselines,
//! a byte budget with a priority accumulator, and the client-side decoder.
//!
//! The wire format is specified in `kernel/SNAPSHOT_FORMAT.md`.

pub mod codec;
pub mod decoder;
pub(crate) mod stream;
pub mod view;

pub use codec::{DecodeError, FrameHeader};
pub use decoder::ClientDecoder;
pub use stream::{BASELINE_RING_LEN, VIEW_ENTITIES_MAX};
pub use view::ViewEntry;
