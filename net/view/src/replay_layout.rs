//! The byte layouts and codes the page reads from the replay viewer (which lives in
//! `migratory-replay`'s `viewer`): `/replay/state`'s binary layout and the timeline's
//! marker kinds. Defined here, beside the page, so `layout.js` is generated from them
//! without the assets linking the replay tools.

/// `/replay/state`'s layout (the table in `migratory_replay::viewer`'s doc): a header, then one
/// record per entity. The page's `layout.js` is generated from these.
pub mod state_layout {
    /// u32: the tick shown.
    pub const TICK: usize = 0;
    /// u32: how many entity records follow.
    pub const COUNT: usize = 4;
    pub const HEADER_BYTES: usize = 8;
    /// Offsets inside one entity record: id u32, x_mm i32, y_mm i32, vx i16, vy i16.
    pub const ID: usize = 0;
    pub const X_MM: usize = 4;
    pub const Y_MM: usize = 8;
    pub const VX: usize = 12;
    pub const VY: usize = 14;
    pub const ENTITY_BYTES: usize = 16;
    const _: () = assert!(TICK + 4 == COUNT && COUNT + 4 == HEADER_BYTES);
    const _: () = assert!(ID + 4 == X_MM && X_MM + 4 == Y_MM && Y_MM + 4 == VX);
    const _: () = assert!(VX + 2 == VY && VY + 2 == ENTITY_BYTES);
}

/// Bytes of one entity record in `/replay/state`.
pub const REPLAY_ENTITY_BYTES: usize = state_layout::ENTITY_BYTES;

/// Marker kinds, as the page's timeline draws them (the codes are the JSON's).
pub mod marker {
    pub const JOIN: u32 = 0;
    pub const LEAVE: u32 = 1;
    /// A cast that worked (inside a hunting field, off cooldown).
    pub const CAST: u32 = 2;
    /// Boids caught by a cast (`n` of them).
    pub const CATCH: u32 = 3;
    /// A snapshot the client never acknowledged, though it acknowledged a later one: lost
    /// on the way (dropped by backpressure, or by the client), or acknowledged in the same
    /// tick as a newer one (the server keeps the newest ack of a tick).
    pub const UNACKED: u32 = 4;
    /// A spectator joined.
    pub const SPECTATE: u32 = 5;
}
