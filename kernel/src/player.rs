//! One client slot's hashed state (`Player`) and its canonical 80-byte record.
//!
//! The record is what the state root hashes for a slot (see `hash`). Its layout, all
//! little-endian, with the named offsets below:
//!
//! | offset | size | field                                            |
//! |--------|------|--------------------------------------------------|
//! | 0      | 1    | `active` (0 or 1)                                |
//! | 1      | 1    | `name_len`                                       |
//! | 2      | 1    | `spectator` (0 or 1; rules 5)                    |
//! | 3      | 1    | reserved, zero                                   |
//! | 4      | 4    | `client` (u32)                                   |
//! | 8      | 32   | `name` (UTF-8, zero-padded)                      |
//! | 40     | 4    | `x_mm` (i32; a spectator's camera)               |
//! | 44     | 4    | `y_mm` (i32; a spectator's camera)               |
//! | 48     | 4    | `vx` (i32, mm per tick)                          |
//! | 52     | 4    | `vy` (i32, mm per tick)                          |
//! | 56     | 2    | `dir_x` (i16)                                    |
//! | 58     | 2    | `dir_y` (i16)                                    |
//! | 60     | 1    | `throttle` (0..=100)                             |
//! | 61     | 3    | reserved, zero                                   |
//! | 64     | 4    | `score` (u32)                                    |
//! | 68     | 4    | `last_seq` (u32)                                 |
//! | 72     | 4    | `acked_tick` (u32, `u32::MAX`: none)             |
//! | 76     | 4    | `cast_ready_tick` (u32)                          |
//!
//! A free slot is all zeros, so it hashes the same however it was freed.

use crate::input::NAME_BYTES_MAX;

/// Bytes of one player record.
pub const PLAYER_RECORD_BYTES: usize = 80;

const ACTIVE_OFFSET: usize = 0;
const NAME_LEN_OFFSET: usize = 1;
const SPECTATOR_OFFSET: usize = 2;
const CLIENT_OFFSET: usize = 4;
const NAME_OFFSET: usize = 8;
const X_OFFSET: usize = 40;
const Y_OFFSET: usize = 44;
const VX_OFFSET: usize = 48;
const VY_OFFSET: usize = 52;
const DIR_X_OFFSET: usize = 56;
const DIR_Y_OFFSET: usize = 58;
const THROTTLE_OFFSET: usize = 60;
const SCORE_OFFSET: usize = 64;
const LAST_SEQ_OFFSET: usize = 68;
const ACKED_TICK_OFFSET: usize = 72;
const CAST_READY_TICK_OFFSET: usize = 76;

// The table above, checked: fields do not overlap and the last one ends the record.
const _: () = assert!(NAME_OFFSET + NAME_BYTES_MAX == X_OFFSET);
const _: () = assert!(CLIENT_OFFSET + 4 == NAME_OFFSET);
const _: () = assert!(SPECTATOR_OFFSET < CLIENT_OFFSET && NAME_LEN_OFFSET < SPECTATOR_OFFSET);
const _: () = assert!(THROTTLE_OFFSET < SCORE_OFFSET);
const _: () = assert!(CAST_READY_TICK_OFFSET + 4 == PLAYER_RECORD_BYTES);

/// One client slot. A free slot is `Player::default()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub struct Player {
    pub active: bool,
    /// Joined with `Spectate`: no avatar; `x_mm`, `y_mm` are the camera, `vx`, `vy` stay 0.
    pub spectator: bool,
    pub client: u32,
    pub name_len: u8,
    pub name: [u8; NAME_BYTES_MAX],
    pub x_mm: i32,
    pub y_mm: i32,
    pub vx: i32,
    pub vy: i32,
    pub dir_x: i16,
    pub dir_y: i16,
    pub throttle: u8,
    pub score: u32,
    /// The highest steer/cast sequence number applied.
    pub last_seq: u32,
    /// The newest snapshot tick the client acked (`u32::MAX`: none yet).
    pub acked_tick: u32,
    /// The first tick at which the next cast may happen.
    pub cast_ready_tick: u32,
}

impl Player {
    /// The player's name.
    pub fn name(&self) -> &str {
        std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("")
    }

    /// The canonical record hashed for this slot (layout in the module doc).
    pub fn to_le_bytes(&self) -> [u8; PLAYER_RECORD_BYTES] {
        let mut b = [0u8; PLAYER_RECORD_BYTES];
        let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
        put(ACTIVE_OFFSET, &[self.active as u8]);
        put(NAME_LEN_OFFSET, &[self.name_len]);
        put(SPECTATOR_OFFSET, &[self.spectator as u8]);
        put(CLIENT_OFFSET, &self.client.to_le_bytes());
        put(NAME_OFFSET, &self.name);
        put(X_OFFSET, &self.x_mm.to_le_bytes());
        put(Y_OFFSET, &self.y_mm.to_le_bytes());
        put(VX_OFFSET, &self.vx.to_le_bytes());
        put(VY_OFFSET, &self.vy.to_le_bytes());
        put(DIR_X_OFFSET, &self.dir_x.to_le_bytes());
        put(DIR_Y_OFFSET, &self.dir_y.to_le_bytes());
        put(THROTTLE_OFFSET, &[self.throttle]);
        put(SCORE_OFFSET, &self.score.to_le_bytes());
        put(LAST_SEQ_OFFSET, &self.last_seq.to_le_bytes());
        put(ACKED_TICK_OFFSET, &self.acked_tick.to_le_bytes());
        put(CAST_READY_TICK_OFFSET, &self.cast_ready_tick.to_le_bytes());
        b
    }

    /// The slot a canonical record describes (the inverse of `to_le_bytes`; the
    /// reserved bytes are ignored).
    pub fn from_le_bytes(b: &[u8; PLAYER_RECORD_BYTES]) -> Player {
        let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let i16_at = |at: usize| i16::from_le_bytes([b[at], b[at + 1]]);
        let mut name = [0u8; NAME_BYTES_MAX];
        name.copy_from_slice(&b[NAME_OFFSET..NAME_OFFSET + NAME_BYTES_MAX]);
        Player {
            active: b[ACTIVE_OFFSET] != 0,
            spectator: b[SPECTATOR_OFFSET] != 0,
            client: u32_at(CLIENT_OFFSET),
            name_len: b[NAME_LEN_OFFSET].min(NAME_BYTES_MAX as u8),
            name,
            x_mm: u32_at(X_OFFSET) as i32,
            y_mm: u32_at(Y_OFFSET) as i32,
            vx: u32_at(VX_OFFSET) as i32,
            vy: u32_at(VY_OFFSET) as i32,
            dir_x: i16_at(DIR_X_OFFSET),
            dir_y: i16_at(DIR_Y_OFFSET),
            throttle: b[THROTTLE_OFFSET],
            score: u32_at(SCORE_OFFSET),
            last_seq: u32_at(LAST_SEQ_OFFSET),
            acked_tick: u32_at(ACKED_TICK_OFFSET),
            cast_ready_tick: u32_at(CAST_READY_TICK_OFFSET),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record decodes back to the slot it was made from, field for field.
    #[test]
    fn a_record_decodes_to_its_player() {
        let mut p = Player {
            active: true,
            spectator: true,
            client: 0x0102_0304,
            name_len: 3,
            x_mm: -7,
            y_mm: 1 << 20,
            vx: -3,
            vy: 250,
            dir_x: -1000,
            dir_y: 999,
            throttle: 100,
            score: 12,
            last_seq: u32::MAX - 1,
            acked_tick: u32::MAX,
            cast_ready_tick: 77,
            ..Player::default()
        };
        p.name[..3].copy_from_slice(b"ann");
        assert_eq!(Player::from_le_bytes(&p.to_le_bytes()), p);
        assert_eq!(
            Player::from_le_bytes(&[0; PLAYER_RECORD_BYTES]),
            Player::default()
        );
    }

    /// Each field lands at its offset in the table and nowhere else; the reserved bytes
    /// stay zero.
    #[test]
    fn every_field_lands_at_its_offset() {
        let zero = Player::default().to_le_bytes();
        assert_eq!(zero, [0u8; PLAYER_RECORD_BYTES]);
        type Case = (fn(&mut Player), usize, &'static [u8]);
        let cases: [Case; 16] = [
            (|p| p.active = true, ACTIVE_OFFSET, &[1]),
            (|p| p.name_len = 3, NAME_LEN_OFFSET, &[3]),
            (|p| p.spectator = true, SPECTATOR_OFFSET, &[1]),
            (|p| p.client = 0x0403_0201, CLIENT_OFFSET, &[1, 2, 3, 4]),
            (|p| p.name[0] = b'a', NAME_OFFSET, b"a"),
            (|p| p.x_mm = -2, X_OFFSET, &[0xfe, 0xff, 0xff, 0xff]),
            (|p| p.y_mm = 5, Y_OFFSET, &[5, 0, 0, 0]),
            (|p| p.vx = 6, VX_OFFSET, &[6, 0, 0, 0]),
            (|p| p.vy = 7, VY_OFFSET, &[7, 0, 0, 0]),
            (|p| p.dir_x = 0x0102, DIR_X_OFFSET, &[2, 1]),
            (|p| p.dir_y = 9, DIR_Y_OFFSET, &[9, 0]),
            (|p| p.throttle = 100, THROTTLE_OFFSET, &[100]),
            (|p| p.score = 11, SCORE_OFFSET, &[11, 0, 0, 0]),
            (|p| p.last_seq = 12, LAST_SEQ_OFFSET, &[12, 0, 0, 0]),
            (|p| p.acked_tick = u32::MAX, ACKED_TICK_OFFSET, &[0xff; 4]),
            (|p| p.cast_ready_tick = 14, CAST_READY_TICK_OFFSET, &[14, 0, 0, 0]),
        ];
        for (set, offset, expected) in cases {
            let mut p = Player::default();
            set(&mut p);
            let b = p.to_le_bytes();
            assert_eq!(&b[offset..offset + expected.len()], expected, "offset {offset}");
            let changed: Vec<usize> = (0..PLAYER_RECORD_BYTES).filter(|&i| b[i] != 0).collect();
            assert!(
                changed
                    .iter()
                    .all(|&i| (offset..offset + expected.len()).contains(&i)),
                "offset {offset}: bytes {changed:?} changed"
            );
        }
    }
}
