//! Tests of the `.mrec` format and the `migratory-replay` tools: damage (truncation at every
//! offset, bit flips, forged frames, versions), writer/reader round trips, the tools
//! (verify, check and bless, extract, diff, inspect), fault localisation and the CLI.
//!
//! Every recording here is of a small world, built in memory or in a per-test temporary
//! folder that is removed afterwards.

mod bookmarks;
mod cli;
mod damage;
mod fault;
mod planted;
mod roundtrip;
mod rules;
mod sim;
mod spans;
mod tools;

use std::sync::OnceLock;

use migratory_kernel::ScriptConfig;
use migratory_kernel::{Input, TickInputs, TickOutput, World};
use migratory_replay::format::{RecordedTick, Recording, RecordingWriter, WriterOptions};
use migratory_replay::tools::SynthOptions;

pub use migratory_replay::testkit::{small_config, TempDir};

/// A scripted session of `ticks` ticks on a small world.
pub fn synth_options(
    seed: u64,
    ticks: u32,
    clients: u32,
    boids: u32,
    block_ticks: u32,
    checkpoint_interval_ticks: u32,
) -> SynthOptions {
    let config = small_config(seed, boids);
    SynthOptions {
        script: ScriptConfig {
            seed,
            clients,
            // Everyone joins early so steering and casting show up in short sessions.
            join_spread_ticks: 10,
            tick_rate_hz: config.tick_rate_hz,
            ..ScriptConfig::default()
        },
        config,
        ticks,
        shards: 1,
        writer: WriterOptions {
            block_ticks,
            checkpoint_interval_ticks,
            fsync_every_blocks: 0,
        },
    }
}

/// Synthesises a recording in memory.
pub fn synth_bytes(options: &SynthOptions) -> Vec<u8> {
    let (report, bytes) = migratory_replay::tools::synth_into(options, Vec::new()).expect("synth");
    assert_eq!(report.ticks, options.ticks);
    bytes
}

/// The shared small recording for the damage tests: 120 ticks, 2 clients, 200 boids,
/// blocks of 20 ticks and a checkpoint every 60 (several blocks and checkpoints).
pub fn small_recording() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| synth_bytes(&synth_options(7, 120, 2, 200, 20, 60)))
}

/// `corpora/small.mrec` as it was before rules 6: recording format 1 (checkpoints
/// stored raw, no bookmarks), rules 5. The corpora follow the rules, so the old format's
/// readers are tested on this copy.
pub fn old_format_fixture() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/small-format1-rules5.mrec")
}

/// A frame as found by walking the file with this test's own reading of the layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFrame {
    pub offset: usize,
    pub kind: u8,
    pub first_tick: u32,
    pub tick_count: u32,
    pub payload_len: usize,
}

impl RawFrame {
    /// One past the frame's last byte.
    pub fn end(&self) -> usize {
        self.offset + 32 + self.payload_len
    }
}

pub fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Length of the file header including its body.
pub fn header_len(bytes: &[u8]) -> usize {
    56 + le32(bytes, 20) as usize
}

/// Walks the frames of an undamaged file (independently of the reader under test).
pub fn raw_frames(bytes: &[u8]) -> Vec<RawFrame> {
    let mut at = header_len(bytes);
    let mut frames = Vec::new();
    while at < bytes.len() {
        let f = RawFrame {
            offset: at,
            kind: bytes[at],
            first_tick: le32(bytes, at + 4),
            tick_count: le32(bytes, at + 8),
            payload_len: le32(bytes, at + 12) as usize,
        };
        assert!(f.end() <= bytes.len(), "frame at {at} runs past the end");
        frames.push(f);
        at = f.end();
    }
    assert_eq!(at, bytes.len());
    frames
}

/// Every recorded tick, in order.
pub fn recorded_ticks(rec: &Recording) -> Vec<RecordedTick> {
    rec.ticks_from(rec.first_tick())
        .collect::<Result<Vec<_>, _>>()
        .expect("reading the recorded ticks")
}

/// Replays `ticks` from the recording's start state and asserts that every tick's roots
/// equal the recorded ones.
pub fn assert_replays(rec: &Recording, ticks: &[RecordedTick], shards: usize) {
    let mut world = rec.start_world(shards).expect("start world");
    for t in ticks {
        let out = world.step(&t.inputs);
        assert_eq!(out.tick, t.tick);
        assert_eq!(out.state_root, t.state_root, "state root of tick {}", t.tick);
        assert_eq!(
            out.snapshots_root, t.snapshots_root,
            "frames root of tick {}",
            t.tick
        );
    }
}

/// Records `world` stepped through `inputs` (one entry per tick), letting `doctor` alter
/// the output that is written (not the world).
pub fn record_with(
    mut world: World,
    inputs: &[TickInputs],
    options: WriterOptions,
    mut doctor: impl FnMut(&mut TickOutput),
) -> (Vec<u8>, World) {
    let mut writer = RecordingWriter::new(Vec::new(), &world, 1, options).expect("writer");
    for i in inputs {
        let mut out = world.step(i).clone();
        doctor(&mut out);
        writer.record_tick(i, &out, &world).expect("record");
    }
    (writer.finish().expect("finish"), world)
}

/// The inputs of every tick of a recording.
pub fn inputs_of(rec: &Recording) -> Vec<TickInputs> {
    recorded_ticks(rec).into_iter().map(|t| t.inputs).collect()
}

/// The writer options of `small_recording`-like sessions.
pub fn writer_options(block_ticks: u32, checkpoint_interval_ticks: u32) -> WriterOptions {
    WriterOptions {
        block_ticks,
        checkpoint_interval_ticks,
        fsync_every_blocks: 0,
    }
}

/// True when a tick's inputs include a steer.
pub fn has_steer(inputs: &TickInputs) -> bool {
    inputs.inputs.iter().any(|i| matches!(i, Input::Steer { .. }))
}

/// A progress callback that ignores progress.
pub fn no_progress() -> impl FnMut(u32, u32) {
    |_, _| {}
}
