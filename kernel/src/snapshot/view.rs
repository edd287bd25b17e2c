//! The quantized per-client view of one entity, shared by the server-side builder and the decoder.

/// Position quantization: wire positions are millimetres shifted right by this (64 mm units).
pub const POS_QUANT_SHIFT: u32 = 6;
/// Velocity quantization: wire velocities are mm/tick shifted right by this, then clamped to i8.
pub const VEL_QUANT_SHIFT: u32 = 1;

/// Entity kinds as they appear on the wire (2 bits).
pub const KIND_BOID: u8 = 0;
/// A player's avatar.
pub const KIND_AVATAR: u8 = 1;

/// One entity as a client sees it: quantized, ordered by `id` inside a view.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    rkyv::Archive,
    rkyv::Serialize,
    rkyv::Deserialize,
)]
#[repr(C)]
pub struct ViewEntry {
    /// Entity id: boids are `0..boid_count`, avatars `boid_count + slot`.
    pub id: u32,
    /// x position >> 6 (64 mm units).
    pub qx: u16,
    /// y position >> 6 (64 mm units).
    pub qy: u16,
    /// x velocity (mm/tick) >> 1, clamped to i8.
    pub qvx: i8,
    /// y velocity (mm/tick) >> 1, clamped to i8.
    pub qvy: i8,
    /// `KIND_BOID` or `KIND_AVATAR`.
    pub kind: u8,
    /// Always 0; keeps the struct free of uninitialised padding so it can be hashed as bytes.
    pub pad: u8,
}

impl ViewEntry {
    /// Quantizes an entity's state for the wire. Positions are non-negative and below 2^22 mm
    /// (checked by `WorldConfig`), so they fit 16 bits after the shift.
    pub fn quantize(id: u32, kind: u8, x_mm: i32, y_mm: i32, vx: i32, vy: i32) -> ViewEntry {
        debug_assert!((0..(1 << 22)).contains(&x_mm) && (0..(1 << 22)).contains(&y_mm));
        let q = |v: i32| (v >> VEL_QUANT_SHIFT).clamp(i8::MIN as i32, i8::MAX as i32) as i8;
        ViewEntry {
            id,
            qx: (x_mm >> POS_QUANT_SHIFT) as u16,
            qy: (y_mm >> POS_QUANT_SHIFT) as u16,
            qvx: q(vx),
            qvy: q(vy),
            kind,
            pad: 0,
        }
    }

    /// The entry as 12 little-endian bytes, for hashing.
    pub fn to_le_bytes(&self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[0..4].copy_from_slice(&self.id.to_le_bytes());
        b[4..6].copy_from_slice(&self.qx.to_le_bytes());
        b[6..8].copy_from_slice(&self.qy.to_le_bytes());
        b[8] = self.qvx as u8;
        b[9] = self.qvy as u8;
        b[10] = self.kind;
        b[11] = self.pad;
        b
    }
}
