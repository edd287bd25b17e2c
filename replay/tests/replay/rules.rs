//! Crossing a rules change, with the kernel's synthetic next rules standing for the next
//! build (`follow_synthetic_rules`, feature `synthetic-rules`): a trace made under this
//! build's rules reads back exactly and refuses damage; `rules_diff` finds nothing under
//! the same rules and, under the next rules, the first tick, entity and field that moved
//! and how far it spread; `rerecord` writes a recording the next rules verify, also from
//! a segment that starts at a checkpoint of the old rules.

use migratory_kernel::{follow_synthetic_rules, KERNEL_RULES_VERSION};
use migratory_replay::format::trace::{TraceError, TraceFrame, TraceReader};
use migratory_replay::format::WriterOptions;
use migratory_replay::tools;

use super::*;

/// Runs `f` on a thread of its own following the synthetic next rules (the thread-local
/// switch then cannot leak into other tests).
fn under_next_rules<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            follow_synthetic_rules(true);
            f()
        })
        .join()
        .expect("the next-rules thread")
    })
}

/// A recording (120 ticks, 3 clients, 200 boids, checkpoints every 40) and its trace.
fn recording_and_trace(dir: &TempDir) -> (std::path::PathBuf, std::path::PathBuf) {
    let rec = dir.path().join("old.mrec");
    std::fs::write(&rec, synth_bytes(&synth_options(21, 120, 3, 200, 20, 40))).unwrap();
    let trace = dir.path().join("old.mtrc");
    let r = tools::trace(&rec, &trace, 1, &mut |_, _| {}).expect("trace");
    assert!(r.roots_match);
    assert_eq!((r.header.first_tick, r.header.tick_count), (1, 120));
    assert_eq!(r.header.rules_version, KERNEL_RULES_VERSION);
    (rec, trace)
}

#[test]
fn a_trace_holds_every_ticks_entities_and_refuses_damage() {
    let dir = TempDir::new("trace");
    let (rec_path, trace_path) = recording_and_trace(&dir);
    let rec = Recording::open(&rec_path).unwrap();
    let mut world = rec.start_world(1).unwrap();
    let mut reader = TraceReader::open(&trace_path).unwrap();
    let mut frame = TraceFrame::default();
    for t in recorded_ticks(&rec) {
        world.step(&t.inputs);
        assert!(reader.next_into(&mut frame).unwrap());
        assert_eq!(frame.tick, t.tick);
        assert_eq!(frame.boids, *world.boids());
        assert_eq!(frame.players, world.players());
    }
    assert!(
        !reader.next_into(&mut frame).unwrap(),
        "then the end, checksum held"
    );

    let bytes = std::fs::read(&trace_path).unwrap();
    let damaged = dir.path().join("damaged.mtrc");
    let mut read_all = |b: &[u8]| -> Result<u32, TraceError> {
        std::fs::write(&damaged, b).unwrap();
        let mut r = TraceReader::open(&damaged)?;
        let mut n = 0;
        while r.next_into(&mut frame)? {
            n += 1;
        }
        Ok(n)
    };
    assert_eq!(read_all(&bytes).unwrap(), 120);
    let mut b = bytes.clone();
    b[..4].fill(0);
    assert!(
        matches!(read_all(&b), Err(TraceError::NotATrace { .. })),
        "a trace cut short by a crash"
    );
    let mut b = bytes.clone();
    b[4] = 2;
    assert!(matches!(
        read_all(&b),
        Err(TraceError::UnsupportedVersion { found: 2, .. })
    ));
    let mut b = bytes.clone();
    b[4] = 0;
    assert!(matches!(
        read_all(&b),
        Err(TraceError::UpgradeRequired { found: 0, .. })
    ));
    let mut b = bytes.clone();
    b[70] ^= 1;
    assert!(
        matches!(read_all(&b), Err(TraceError::Corrupted { .. })),
        "the checksum"
    );
    assert!(
        matches!(
            read_all(&bytes[..bytes.len() - 10]),
            Err(TraceError::Corrupted { .. })
        ),
        "cut short"
    );
}

#[test]
fn rules_diff_finds_nothing_under_the_same_rules_and_the_change_under_the_next() {
    let dir = TempDir::new("rules-diff");
    let (rec, trace) = recording_and_trace(&dir);
    let same = tools::rules_diff(&trace, &rec, 2, &mut |_, _| {}).unwrap();
    assert_eq!(same.first_difference_tick, None, "{same:?}");
    assert_eq!(same.ticks_compared, 120);

    let next = under_next_rules(|| tools::rules_diff(&trace, &rec, 1, &mut |_, _| {}).unwrap());
    assert_eq!(
        (next.trace_rules_version, next.rules_version),
        (KERNEL_RULES_VERSION, KERNEL_RULES_VERSION + 1)
    );
    let t = next
        .first_difference_tick
        .expect("the heavier cohesion moves some boid");
    // The first fields name a boid (cohesion moves boids first) and both values.
    let f = &next.first_fields[0];
    assert!(f.entity.starts_with("boid "), "{f:?}");
    assert!(["vx", "vy", "x_mm", "y_mm"].contains(&f.field.as_str()), "{f:?}");
    assert_ne!(f.a, f.b);
    // It spreads: more boids differ later than at first, and the samples run to the end.
    assert!(
        next.boids_ever_differing > 1 && next.at_end.boids > next.spread[0].boids,
        "it spreads: {next:?}"
    );
    assert_eq!(next.spread.first().map(|s| s.tick), Some(t));
    assert_eq!(next.spread.last().map(|s| s.tick), Some(120));
    assert_eq!(
        next.ticks_differing,
        120 - t + 1,
        "once moved, never back: {next:?}"
    );

    // A damaged trace is an error, never a comparison: a flipped byte in its stream, a
    // trace cut short, a trace of other ticks of the same world.
    let bytes = std::fs::read(&trace).unwrap();
    let damaged = dir.path().join("damaged.mtrc");
    for (what, b) in [
        ("flipped", {
            let mut b = bytes.clone();
            let at = b.len() - 20;
            b[at] ^= 0x40;
            b
        }),
        ("cut", bytes[..bytes.len() * 2 / 3].to_vec()),
    ] {
        std::fs::write(&damaged, &b).unwrap();
        let e = tools::rules_diff(&damaged, &rec, 1, &mut |_, _| {});
        assert!(e.is_err(), "{what}: {e:?}");
    }
    let part = dir.path().join("part.mrec");
    tools::extract(&rec, 0, 60, &part).unwrap();
    let err = tools::rules_diff(&trace, &part, 1, &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("trace the same recording"), "{err}");
    // trace never writes over what it reads.
    let err = tools::trace(&rec, &rec, 1, &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("overwrite"), "{err}");
    assert!(Recording::open(&rec).is_ok());

    // A trace of another world is refused by name.
    let other = dir.path().join("other.mrec");
    std::fs::write(&other, synth_bytes(&synth_options(22, 30, 1, 100, 10, 0))).unwrap();
    let err = tools::rules_diff(&trace, &other, 1, &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("another world"), "{err}");
}

#[test]
fn rerecord_carries_a_recording_and_a_segment_across_the_change() {
    let dir = TempDir::new("rerecord");
    let (rec, trace) = recording_and_trace(&dir);
    let new = dir.path().join("new.mrec");
    let options = WriterOptions {
        block_ticks: 30,
        checkpoint_interval_ticks: 60,
        fsync_every_blocks: 0,
    };
    let (r, diff) = under_next_rules(|| {
        let r = tools::rerecord(&rec, &new, 2, options.clone(), &mut |_, _| {}).unwrap();
        (r, tools::rules_diff(&trace, &rec, 1, &mut |_, _| {}).unwrap())
    });
    assert_eq!(
        (r.old_rules_version, r.rules_version),
        (KERNEL_RULES_VERSION, KERNEL_RULES_VERSION + 1)
    );
    assert_eq!((r.first_tick, r.last_tick), (1, 120));
    // Every root changes from the first tick (the rules version is in the root).
    assert_eq!(r.first_changed_root_tick, Some(1));
    assert!(diff.first_difference_tick.is_some());
    // The next rules verify the new recording at 1 and 2 shards; this build's see other rules.
    let verified = under_next_rules(|| tools::verify(&new, &[1, 2], None, &mut |_, _| {}).unwrap());
    assert!(verified.ok() && !verified.rules_version_differs, "{verified:?}");
    let here = tools::verify(&new, &[1], None, &mut |_, _| {}).unwrap();
    assert!(here.rules_version_differs);
    assert_eq!(
        Recording::open(&new).unwrap().rules_version,
        KERNEL_RULES_VERSION + 1
    );

    // A segment that starts at a checkpoint of the old rules: the next rules cannot
    // restore it as it is, but rerecord carries its state across.
    let segment = dir.path().join("segment.mrec");
    tools::extract(&rec, 40, 100, &segment).unwrap();
    let moved = dir.path().join("segment-next.mrec");
    let (refused, r) = under_next_rules(|| {
        let refused = Recording::open(&segment).unwrap().start_world(1).is_err();
        (
            refused,
            tools::rerecord(&segment, &moved, 1, options.clone(), &mut |_, _| {}).unwrap(),
        )
    });
    assert!(refused, "an old-rules checkpoint is refused by a plain restore");
    assert_eq!((r.first_tick, r.last_tick), (41, 100));
    let verified = under_next_rules(|| tools::verify(&moved, &[1, 2], None, &mut |_, _| {}).unwrap());
    assert!(verified.ok(), "{verified:?}");

    // It never overwrites what it reads.
    let err = tools::rerecord(&rec, &rec, 1, options, &mut |_, _| {}).unwrap_err();
    assert!(err.to_string().contains("overwrite"), "{err}");
}

#[test]
fn rerecord_chain_replays_a_worlds_segments_into_one() {
    let dir = TempDir::new("rerecord-chain");
    let (rec, _) = recording_and_trace(&dir);
    let (a, b) = (dir.path().join("a.mrec"), dir.path().join("b.mrec"));
    tools::extract(&rec, 0, 70, &a).unwrap();
    tools::extract(&rec, 70, 120, &b).unwrap();
    let (whole, chained) = (dir.path().join("whole.mrec"), dir.path().join("chained.mrec"));
    let options = WriterOptions::default();
    let (w, c, refused) = under_next_rules(|| {
        let w = tools::rerecord(&rec, &whole, 1, options.clone(), &mut |_, _| {}).unwrap();
        let c = tools::rerecord_chain(&[&a, &b], &chained, 2, options.clone(), &mut |_, _| {}).unwrap();
        let refused = tools::rerecord_chain(
            &[&b, &a],
            &dir.path().join("x.mrec"),
            1,
            options.clone(),
            &mut |_, _| {},
        )
        .unwrap_err();
        (w, c, refused)
    });
    assert_eq!((c.first_tick, c.last_tick), (1, 120));
    assert_eq!(c.final_root, w.final_root, "the chain is the whole history");
    assert!(refused.to_string().contains("not a chain"), "{refused}");
    assert!(!dir.path().join("x.mrec").exists() && !dir.path().join("x.mrec.partial").exists());
}
