//! The packed inputs of a format-3 block: each input as a tag byte and varints, against
//! what the same client sent before in the block, so a bot's steady steering and its acks
//! cost a few bits where an rkyv archive spent 12 to 24 bytes.
//!
//! Varints are LEB128 (7 bits a byte, least significant first, at most 5 bytes for a u32);
//! `s` marks a zigzag-mapped signed value (0, -1, 1, -2, ... as 0, 1, 2, 3, ...). Memory
//! starts empty in every block, so a block decodes on its own.
//!
//! | per tick  | field                                                                 |
//! |-----------|-----------------------------------------------------------------------|
//! | varint    | n, the tick's inputs, then n inputs in the order recorded            |
//!
//! | per input | field                                                                 |
//! |-----------|-----------------------------------------------------------------------|
//! | u8        | tag: bits 0..3 kind (`KIND_*`), bits 3..8 the kind's flags (`FLAG_*`) |
//! | s varint  | client minus the client of the input before in this tick (0 first)   |
//! | ...       | the kind's fields below                                               |
//!
//! | kind            | fields                                                          |
//! |-----------------|-----------------------------------------------------------------|
//! | Join, Spectate  | varint length, then the name's UTF-8 bytes                      |
//! | Steer           | seq (below); unless `FLAG_SAME_DIR`: s varint dir_x, s varint dir_y; unless `FLAG_SAME_THROTTLE`: u8 throttle |
//! | Cast            | seq (below)                                                     |
//! | Ack             | s varint: the recorded tick minus the acked tick                |
//! | Leave           | nothing                                                         |
//! | Camera          | seq (below); s varint x_mm and y_mm minus the client's last camera (0, 0 first) |
//!
//! A seq (Steer, Cast and Camera share one per client, as the protocol does) is nothing
//! with `FLAG_NEXT_SEQ` (the client's last seq in the block plus one), else an s varint of
//! seq minus that last seq (wrapping, as i32). The first seq of a client in a block is
//! against 0. A client's last dir and throttle start as (0, 0) and 0.

use std::collections::HashMap;

use migratory_kernel::{Input, TickInputs};

const KIND_JOIN: u8 = 0;
const KIND_STEER: u8 = 1;
const KIND_CAST: u8 = 2;
const KIND_ACK: u8 = 3;
const KIND_LEAVE: u8 = 4;
const KIND_SPECTATE: u8 = 5;
const KIND_CAMERA: u8 = 6;
const KIND_MASK: u8 = 0b111;
/// Steer, Cast, Camera: the seq is the client's last plus one.
const FLAG_NEXT_SEQ: u8 = 1 << 3;
/// Steer: the direction is the client's last.
const FLAG_SAME_DIR: u8 = 1 << 4;
/// Steer: the throttle is the client's last.
const FLAG_SAME_THROTTLE: u8 = 1 << 5;
/// The flags each kind may carry; any other bit set is corruption.
const fn flags_allowed(kind: u8) -> u8 {
    match kind {
        KIND_STEER => FLAG_NEXT_SEQ | FLAG_SAME_DIR | FLAG_SAME_THROTTLE,
        KIND_CAST | KIND_CAMERA => FLAG_NEXT_SEQ,
        _ => 0,
    }
}

/// What a block remembers of one client.
#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    seq: u32,
    dir: (i16, i16),
    throttle: u8,
    camera: (i32, i32),
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_signed(out: &mut Vec<u8>, v: i64) {
    put_varint(out, zigzag(v));
}

/// Writes `seq` against the client's last one; returns the tag flag that says "last + 1".
fn put_seq(out: &mut Vec<u8>, m: &mut Memory, seq: u32) -> u8 {
    let next = seq == m.seq.wrapping_add(1);
    if !next {
        put_signed(out, i64::from(seq.wrapping_sub(m.seq) as i32));
    }
    m.seq = seq;
    if next {
        FLAG_NEXT_SEQ
    } else {
        0
    }
}

/// Packs a block's inputs; `first_tick` is the tick of `ticks[0]`.
pub(super) fn encode_inputs(first_tick: u32, ticks: &[TickInputs]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ticks.len() * 16);
    let mut memory: HashMap<u32, Memory> = HashMap::new();
    for (i, t) in ticks.iter().enumerate() {
        let tick = first_tick.wrapping_add(i as u32);
        put_varint(&mut out, t.inputs.len() as u64);
        let mut prev_client = 0u32;
        for input in &t.inputs {
            let client = input.client();
            let m = memory.entry(client).or_default();
            let tag_at = out.len();
            out.push(0);
            put_signed(&mut out, i64::from(client) - i64::from(prev_client));
            prev_client = client;
            let tag = match input {
                Input::Join { name, .. } | Input::Spectate { name, .. } => {
                    put_varint(&mut out, name.len() as u64);
                    out.extend_from_slice(name.as_bytes());
                    if matches!(input, Input::Join { .. }) {
                        KIND_JOIN
                    } else {
                        KIND_SPECTATE
                    }
                }
                &Input::Steer {
                    seq: s,
                    dir_x,
                    dir_y,
                    throttle,
                    ..
                } => {
                    let mut tag = KIND_STEER | put_seq(&mut out, m, s);
                    if (dir_x, dir_y) == m.dir {
                        tag |= FLAG_SAME_DIR;
                    } else {
                        put_signed(&mut out, dir_x.into());
                        put_signed(&mut out, dir_y.into());
                        m.dir = (dir_x, dir_y);
                    }
                    if throttle == m.throttle {
                        tag |= FLAG_SAME_THROTTLE;
                    } else {
                        out.push(throttle);
                        m.throttle = throttle;
                    }
                    tag
                }
                &Input::Cast { seq: s, .. } => KIND_CAST | put_seq(&mut out, m, s),
                &Input::Ack { tick: acked, .. } => {
                    put_signed(&mut out, i64::from(tick) - i64::from(acked));
                    KIND_ACK
                }
                Input::Leave { .. } => KIND_LEAVE,
                &Input::Camera {
                    seq: s, x_mm, y_mm, ..
                } => {
                    let tag = KIND_CAMERA | put_seq(&mut out, m, s);
                    put_signed(&mut out, i64::from(x_mm) - i64::from(m.camera.0));
                    put_signed(&mut out, i64::from(y_mm) - i64::from(m.camera.1));
                    m.camera = (x_mm, y_mm);
                    tag
                }
            };
            out[tag_at] = tag;
        }
    }
    out
}

/// Why packed inputs could not be read; each says where (a byte offset into the block's
/// decompressed inputs, or the tick).
#[derive(Debug, thiserror::Error)]
pub(super) enum PackedError {
    #[error("packed inputs end early at byte {at}")]
    EndsEarly { at: usize },
    #[error("varint at byte {at} runs past 64 bits")]
    VarintTooLong { at: usize },
    #[error("{what} {value} at byte {at} is out of range")]
    OutOfRange {
        what: &'static str,
        value: i64,
        at: usize,
    },
    #[error("a name of {len} bytes at byte {at} runs past the end")]
    NamePastEnd { len: u64, at: usize },
    #[error("the name at byte {at} is not UTF-8")]
    NameNotUtf8 { at: usize },
    #[error("tick {tick} claims {count} inputs, more than its bytes hold")]
    TooManyInputs { tick: u32, count: u64 },
    #[error("input tag {tag:#04x} at byte {at} is not a known kind and flags")]
    UnknownTag { tag: u8, at: usize },
    #[error("client delta {delta} at byte {at} leaves the u32 range")]
    ClientOutOfRange { delta: i64, at: usize },
    #[error("an ack {back} ticks before tick {tick} leaves the u32 range")]
    AckOutOfRange { back: i64, tick: u32 },
    #[error("camera {axis} out of range at byte {at}")]
    CameraOutOfRange { axis: &'static str, at: usize },
    #[error("{0} bytes after the last tick's inputs")]
    Trailing(usize),
}

/// Reads packed inputs without trusting them: every read is bounds-checked and every
/// value range-checked, and a failure says where.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, PackedError> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or(PackedError::EndsEarly { at: self.at })?;
        self.at += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, PackedError> {
        let start = self.at;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(PackedError::VarintTooLong { at: start })
    }

    fn signed<T: TryFrom<i64>>(&mut self, what: &'static str) -> Result<T, PackedError> {
        let at = self.at;
        let value = unzigzag(self.varint()?);
        T::try_from(value).map_err(|_| PackedError::OutOfRange { what, value, at })
    }

    /// A seq against the client's last one (see the module doc); it becomes the last.
    fn seq(&mut self, tag: u8, m: &mut Memory) -> Result<u32, PackedError> {
        let s = if tag & FLAG_NEXT_SEQ != 0 {
            m.seq.wrapping_add(1)
        } else {
            m.seq.wrapping_add(self.signed::<i32>("a seq delta")? as u32)
        };
        m.seq = s;
        Ok(s)
    }

    fn name(&mut self) -> Result<String, PackedError> {
        let len = self.varint()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.at.checked_add(len))
            .filter(|&end| end <= self.bytes.len())
            .ok_or(PackedError::NamePastEnd { len, at: self.at })?;
        let name = std::str::from_utf8(&self.bytes[self.at..end])
            .map_err(|_| PackedError::NameNotUtf8 { at: self.at })?;
        self.at = end;
        Ok(name.to_string())
    }
}

/// Unpacks `tick_count` ticks of inputs starting at `first_tick`; the bytes must end with
/// the last tick.
pub(super) fn decode_inputs(
    bytes: &[u8],
    first_tick: u32,
    tick_count: u32,
) -> Result<Vec<TickInputs>, PackedError> {
    let mut r = Reader { bytes, at: 0 };
    let mut memory: HashMap<u32, Memory> = HashMap::new();
    let mut ticks = Vec::with_capacity(tick_count.min(1 << 16) as usize);
    for i in 0..tick_count {
        let tick = first_tick.wrapping_add(i);
        let n = r.varint()?;
        // Every input takes two bytes at least: a bound before allocating.
        if n > (bytes.len() - r.at) as u64 / 2 {
            return Err(PackedError::TooManyInputs { tick, count: n });
        }
        let mut inputs = Vec::with_capacity(n as usize);
        let mut prev_client = 0u32;
        for _ in 0..n {
            let tag_at = r.at;
            let tag = r.u8()?;
            let kind = tag & KIND_MASK;
            if kind > KIND_CAMERA || tag & !KIND_MASK & !flags_allowed(kind) != 0 {
                return Err(PackedError::UnknownTag { tag, at: tag_at });
            }
            let delta: i64 = r.signed("a client delta")?;
            let client = u32::try_from(i64::from(prev_client) + delta)
                .map_err(|_| PackedError::ClientOutOfRange { delta, at: tag_at })?;
            prev_client = client;
            let m = memory.entry(client).or_default();
            let input = match kind {
                KIND_JOIN => Input::Join {
                    client,
                    name: r.name()?,
                },
                KIND_SPECTATE => Input::Spectate {
                    client,
                    name: r.name()?,
                },
                KIND_STEER => {
                    let seq = r.seq(tag, m)?;
                    if tag & FLAG_SAME_DIR == 0 {
                        m.dir = (r.signed("dir_x")?, r.signed("dir_y")?);
                    }
                    if tag & FLAG_SAME_THROTTLE == 0 {
                        m.throttle = r.u8()?;
                    }
                    Input::Steer {
                        client,
                        seq,
                        dir_x: m.dir.0,
                        dir_y: m.dir.1,
                        throttle: m.throttle,
                    }
                }
                KIND_CAST => Input::Cast {
                    client,
                    seq: r.seq(tag, m)?,
                },
                KIND_ACK => {
                    let back: i64 = r.signed("an ack's distance")?;
                    let acked = u32::try_from(i64::from(tick) - back)
                        .map_err(|_| PackedError::AckOutOfRange { back, tick })?;
                    Input::Ack { client, tick: acked }
                }
                KIND_LEAVE => Input::Leave { client },
                _ => {
                    let seq = r.seq(tag, m)?;
                    let dx: i64 = r.signed("a camera x delta")?;
                    let dy: i64 = r.signed("a camera y delta")?;
                    let moved = |from: i32, d: i64| i32::try_from(i64::from(from) + d);
                    m.camera = (
                        moved(m.camera.0, dx).map_err(|_| PackedError::CameraOutOfRange {
                            axis: "x",
                            at: tag_at,
                        })?,
                        moved(m.camera.1, dy).map_err(|_| PackedError::CameraOutOfRange {
                            axis: "y",
                            at: tag_at,
                        })?,
                    );
                    Input::Camera {
                        client,
                        seq,
                        x_mm: m.camera.0,
                        y_mm: m.camera.1,
                    }
                }
            };
            inputs.push(input);
        }
        ticks.push(TickInputs { inputs });
    }
    if r.at != bytes.len() {
        return Err(PackedError::Trailing(bytes.len() - r.at));
    }
    Ok(ticks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn input() -> impl Strategy<Value = Input> {
        let client = prop_oneof![0u32..6, any::<u32>()];
        let name = prop_oneof![Just(String::new()), "[a-z]{1,8}", "\\PC{0,12}"];
        let seq = prop_oneof![0u32..8, any::<u32>()];
        prop_oneof![
            (client.clone(), name.clone()).prop_map(|(client, name)| Input::Join { client, name }),
            (
                client.clone(),
                seq.clone(),
                prop_oneof![-2i16..2, any::<i16>()],
                any::<i16>(),
                prop_oneof![Just(100u8), any::<u8>()]
            )
                .prop_map(|(client, seq, dir_x, dir_y, throttle)| Input::Steer {
                    client,
                    seq,
                    dir_x,
                    dir_y,
                    throttle
                }),
            (client.clone(), seq.clone()).prop_map(|(client, seq)| Input::Cast { client, seq }),
            (client.clone(), prop_oneof![0u32..200, any::<u32>()])
                .prop_map(|(client, tick)| Input::Ack { client, tick }),
            client.clone().prop_map(|client| Input::Leave { client }),
            (client.clone(), name).prop_map(|(client, name)| Input::Spectate { client, name }),
            (client, seq, any::<i32>(), prop_oneof![0i32..10, any::<i32>()]).prop_map(
                |(client, seq, x_mm, y_mm)| Input::Camera {
                    client,
                    seq,
                    x_mm,
                    y_mm
                }
            ),
        ]
    }

    fn block() -> impl Strategy<Value = (u32, Vec<TickInputs>)> {
        (
            prop_oneof![0u32..100, any::<u32>()],
            prop::collection::vec(
                prop::collection::vec(input(), 0..12).prop_map(|inputs| TickInputs { inputs }),
                1..8,
            ),
        )
    }

    proptest! {
        #[test]
        fn any_block_round_trips((first, ticks) in block()) {
            let packed = encode_inputs(first, &ticks);
            prop_assert_eq!(decode_inputs(&packed, first, ticks.len() as u32).unwrap(), ticks);
        }

        #[test]
        fn damaged_packing_is_an_error_or_other_inputs_never_a_panic(
            (first, ticks) in block(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let mut packed = encode_inputs(first, &ticks);
            let i = at.index(packed.len());
            if cut {
                packed.truncate(i);
                prop_assert!(decode_inputs(&packed, first, ticks.len() as u32).is_err());
            } else {
                packed[i] = byte;
                let _ = decode_inputs(&packed, first, ticks.len() as u32);
            }
        }
    }

    #[test]
    fn steady_steering_and_prompt_acks_take_three_bytes_or_less() {
        let ticks: Vec<TickInputs> = (0..60u32)
            .map(|i| TickInputs {
                inputs: vec![
                    Input::Steer {
                        client: 7,
                        seq: 100 + i,
                        dir_x: -300,
                        dir_y: 12,
                        throttle: 100,
                    },
                    Input::Ack {
                        client: 7,
                        tick: 1_000 + i - 4,
                    },
                ],
            })
            .collect();
        let packed = encode_inputs(1_000, &ticks);
        // The first tick spells out the direction and throttle; the others are a count,
        // two tags, two client deltas and the ack's distance.
        assert!(packed.len() <= 20 + 59 * 6, "{} bytes", packed.len());
        assert_eq!(decode_inputs(&packed, 1_000, 60).unwrap(), ticks);
    }
}
