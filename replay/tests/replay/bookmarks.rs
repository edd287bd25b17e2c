//! Bookmarks (format 2): written after the block that holds their tick, read back in
//! order, kept by extract, refused when they name a tick not recorded or carry too long a
//! note; and recordings of format 1, which have none, still read and carry forward.

use migratory_replay::format::{Bookmark, RecordKind, BOOKMARK_NOTE_BYTES_MAX, FORMAT_VERSION};
use migratory_replay::{Recording, RecordingWriter};

use crate::{
    assert_replays, inputs_of, raw_frames, recorded_ticks, small_recording, writer_options, TempDir,
};

fn mark(tick: u32, client: u32, note: &str) -> Bookmark {
    Bookmark {
        tick,
        client,
        note: note.into(),
    }
}

/// Re-records the small recording's 120 ticks (blocks of 20, a checkpoint every 60) with
/// bookmarks made as the ticks go: `at[k]` is made right after tick `at[k].0` is recorded.
fn recorded_with(at: &[(u32, Bookmark)]) -> Vec<u8> {
    let src = Recording::from_bytes(small_recording().to_vec()).expect("small recording");
    let mut world = src.start_world(1).expect("start");
    let mut writer = RecordingWriter::new(Vec::new(), &world, 1, writer_options(20, 60)).expect("writer");
    for inputs in inputs_of(&src) {
        let out = world.step(&inputs).clone();
        writer.record_tick(&inputs, &out, &world).expect("record");
        for (_, b) in at.iter().filter(|(after, _)| *after == out.tick) {
            writer.bookmark(b.tick, b.client, &b.note).expect("bookmark");
        }
    }
    writer.finish().expect("finish")
}

#[test]
fn bookmarks_read_back_after_the_block_holding_their_tick() {
    let made = [
        // In a block already written; in the block being filled; at a checkpoint's tick
        // (its block flushed with the checkpoint); in the last, partial block.
        (45, mark(12, 3, "boids stuck in the lake")),
        (45, mark(44, 1, "")),
        (60, mark(60, 2, "ünïcode ✓")),
        (119, mark(110, 1, &"x".repeat(BOOKMARK_NOTE_BYTES_MAX))),
    ];
    let bytes = recorded_with(&made);
    let rec = Recording::from_bytes(bytes.clone()).expect("open");
    assert_eq!(rec.format_version, FORMAT_VERSION);
    let mut got = rec.bookmarks().expect("bookmarks");
    got.sort_by_key(|b| b.tick);
    let expected: Vec<Bookmark> = made.iter().map(|(_, b)| b.clone()).collect();
    assert_eq!(got, expected);
    // Each bookmark record follows the block holding its tick (this test's own walk).
    let frames = raw_frames(&bytes);
    for (k, f) in frames
        .iter()
        .enumerate()
        .filter(|(_, f)| f.kind == RecordKind::Bookmark as u8)
    {
        let block = frames[..k]
            .iter()
            .rfind(|b| b.kind == RecordKind::Block as u8)
            .expect("a block before");
        assert!(
            block.first_tick + block.tick_count > f.first_tick,
            "bookmark of tick {} after {block:?}",
            f.first_tick
        );
    }
    // The kernel never sees them: the replay is the recording's.
    assert_replays(&rec, &recorded_ticks(&rec), 2);
}

#[test]
fn a_bookmark_of_a_tick_not_recorded_or_with_too_long_a_note_is_refused() {
    let src = Recording::from_bytes(small_recording().to_vec()).expect("small recording");
    let mut world = src.start_world(1).expect("start");
    let mut writer = RecordingWriter::new(Vec::new(), &world, 1, writer_options(20, 60)).expect("writer");
    let refused =
        |r: std::io::Result<()>| matches!(r, Err(e) if e.kind() == std::io::ErrorKind::InvalidInput);
    assert!(refused(writer.bookmark(0, 1, "before any tick")));
    for inputs in inputs_of(&src).iter().take(5) {
        let out = world.step(inputs).clone();
        writer.record_tick(inputs, &out, &world).expect("record");
    }
    assert!(refused(writer.bookmark(6, 1, "the future")));
    assert!(refused(writer.bookmark(
        0,
        1,
        "the start state is not a recorded tick"
    )));
    assert!(refused(writer.bookmark(
        3,
        1,
        &"y".repeat(BOOKMARK_NOTE_BYTES_MAX + 1)
    )));
    writer.bookmark(5, 1, "fine").expect("a recorded tick");
    let rec = Recording::from_bytes(writer.finish().expect("finish")).expect("open");
    assert_eq!(rec.bookmarks().expect("bookmarks"), vec![mark(5, 1, "fine")]);
}

#[test]
fn extract_keeps_the_bookmarks_of_the_ticks_it_keeps() {
    let dir = TempDir::new("bookmarks-extract");
    let (src, out) = (dir.path().join("a.mrec"), dir.path().join("b.mrec"));
    let made = [
        (30, mark(25, 1, "before")),
        (50, mark(41, 2, "inside")),
        (90, mark(88, 1, "after")),
    ];
    std::fs::write(&src, recorded_with(&made)).expect("write");
    migratory_replay::tools::extract(&src, 30, 80, &out).expect("extract");
    let rec = Recording::open(&out).expect("open");
    assert_eq!(rec.bookmarks().expect("bookmarks"), vec![mark(41, 2, "inside")]);
}

#[test]
fn rerecord_carries_every_segments_bookmarks() {
    let dir = TempDir::new("bookmarks-rerecord");
    let (a, b, out) = (
        dir.path().join("a.mrec"),
        dir.path().join("b.mrec"),
        dir.path().join("all.mrec"),
    );
    std::fs::write(
        &a,
        recorded_with(&[(30, mark(25, 1, "first half")), (90, mark(88, 2, "second"))]),
    )
    .expect("write");
    // The second segment: ticks 61..=120 of the same session, from its checkpoint at 60.
    migratory_replay::tools::extract(&a, 60, 120, &b).expect("extract");
    migratory_replay::tools::extract(&a, 0, 60, &dir.path().join("head.mrec")).expect("extract");
    let paths = [dir.path().join("head.mrec"), b.clone()];
    let paths: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    migratory_replay::tools::rerecord_chain(&paths, &out, 1, crate::writer_options(20, 60), &mut |_, _| {})
        .expect("rerecord");
    let rec = Recording::open(&out).expect("open");
    assert_eq!(
        rec.bookmarks().expect("bookmarks"),
        vec![mark(25, 1, "first half"), mark(88, 2, "second")]
    );
}

#[test]
fn recordings_of_format_1_still_read_and_carry_forward() {
    let path = crate::old_format_fixture();
    let rec = Recording::open(&path).expect("the format 1 fixture");
    assert_eq!(rec.format_version, 1, "written before bookmarks");
    assert_eq!(rec.rules_version, 5, "written under rules 5");
    assert!(rec.bookmarks().expect("bookmarks").is_empty());
    let old = recorded_ticks(&rec);
    assert_eq!(old.len(), 3_000);
    // Under other rules it carries forward by `rerecord`, into a recording of this build
    // that replays to its own roots. Rules 6 changed only how a stream is digested, so
    // every snapshot is the same as under rules 5.
    let dir = TempDir::new("format1");
    let out = dir.path().join("small.mrec");
    migratory_replay::tools::rerecord(&path, &out, 1, writer_options(600, 600), &mut |_, _| {})
        .expect("rerecord");
    let new = Recording::open(&out).expect("rerecorded");
    assert_eq!(new.format_version, FORMAT_VERSION);
    let ticks = recorded_ticks(&new);
    assert_eq!(ticks.len(), old.len());
    for (a, b) in old.iter().zip(&ticks) {
        assert_eq!((a.tick, &a.inputs), (b.tick, &b.inputs));
        assert_eq!(a.snapshots_root, b.snapshots_root, "snapshots of tick {}", a.tick);
    }
    assert_replays(&new, &ticks, 1);
}
