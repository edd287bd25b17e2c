//! Player inputs for one tick, their canonical order, and the counts of rejected ones.

/// Longest player name, in bytes of UTF-8.
pub const NAME_BYTES_MAX: usize = 32;
/// Steering throttle is a percentage.
pub const THROTTLE_MAX: u8 = 100;

/// One thing a client asked for, already stamped with the tick it applies to.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize,
)]
pub enum Input {
    /// Take a slot and spawn an avatar in town.
    Join { client: u32, name: String },
    /// Set the avatar's steering: a direction (any non-zero length) and a throttle in percent.
    Steer {
        client: u32,
        seq: u32,
        dir_x: i16,
        dir_y: i16,
        throttle: u8,
    },
    /// Catch the boids around the avatar (only inside a hunting field).
    Cast { client: u32, seq: u32 },
    /// The newest snapshot tick the client has received.
    Ack { client: u32, tick: u32 },
    /// Free the slot.
    Leave { client: u32 },
    /// Take a slot as a spectator: no avatar (nothing flees from it, it cannot cast or be
    /// seen), a camera that starts at the town's centre and receives snapshots like a player.
    Spectate { client: u32, name: String },
    /// Move a spectator's camera (its interest centre) to a point, clamped to the world.
    Camera {
        client: u32,
        seq: u32,
        x_mm: i32,
        y_mm: i32,
    },
}

impl Input {
    /// The client the input belongs to.
    pub fn client(&self) -> u32 {
        match *self {
            Input::Join { client, .. }
            | Input::Steer { client, .. }
            | Input::Cast { client, .. }
            | Input::Ack { client, .. }
            | Input::Leave { client }
            | Input::Spectate { client, .. }
            | Input::Camera { client, .. } => client,
        }
    }

    /// Rank within a client's inputs of one tick: join first, leave last. A spectator's
    /// join and camera rank with a player's join and steer.
    fn rank(&self) -> u8 {
        match self {
            Input::Join { .. } | Input::Spectate { .. } => 0,
            Input::Steer { .. } | Input::Camera { .. } => 1,
            Input::Cast { .. } => 2,
            Input::Ack { .. } => 3,
            Input::Leave { .. } => 4,
        }
    }

    fn seq(&self) -> u32 {
        match *self {
            Input::Steer { seq, .. } | Input::Cast { seq, .. } | Input::Camera { seq, .. } => seq,
            Input::Ack { tick, .. } => tick,
            _ => 0,
        }
    }

    /// The canonical order of a tick's inputs: by client, then kind (join or spectate,
    /// steer or camera, cast, ack, leave), then sequence number, then the full value, so that any delivery
    /// order of the same inputs gives the same result.
    pub fn canonical_cmp(&self, other: &Input) -> std::cmp::Ordering {
        (self.client(), self.rank(), self.seq())
            .cmp(&(other.client(), other.rank(), other.seq()))
            .then_with(|| self.cmp(other))
    }
}

/// Everything that enters the world at one tick.
#[derive(Clone, Debug, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct TickInputs {
    pub inputs: Vec<Input>,
}

/// Why inputs were turned down this tick. Counted, never panicked on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rejections {
    /// Steer, cast, ack or leave from a client that has not joined.
    pub unknown_client: u32,
    /// Join or spectate from a client that is already joined.
    pub duplicate_join: u32,
    /// Join or spectate when every slot is taken.
    pub slots_full: u32,
    /// Join with an empty name, one over 32 bytes, or one with control characters.
    pub name_invalid: u32,
    /// Steer with throttle over 100, or a zero direction with a non-zero throttle.
    pub out_of_range: u32,
    /// Steer, camera or cast whose sequence number is not above the last one applied.
    pub stale_seq: u32,
    /// Ack of a tick the world has not produced yet.
    pub ack_from_future: u32,
    /// Steer or cast from a spectator, camera from a player.
    pub wrong_role: u32,
}

impl Rejections {
    /// All rejections together.
    pub fn total(&self) -> u32 {
        self.unknown_client
            + self.duplicate_join
            + self.slots_full
            + self.name_invalid
            + self.out_of_range
            + self.stale_seq
            + self.ack_from_future
            + self.wrong_role
    }
}

/// True for names the kernel accepts: 1..=32 bytes of UTF-8 without control characters.
pub fn name_is_valid(name: &str) -> bool {
    !name.is_empty() && name.len() <= NAME_BYTES_MAX && !name.chars().any(char::is_control)
}
