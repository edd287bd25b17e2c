//! Every recording in `corpora/` replays, at 1 and 4 shards, to exactly the roots it stores.

use std::path::Path;

use migratory_replay::tools;

#[test]
fn every_corpus_recording_replays_to_its_roots_at_1_and_4_shards() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpora");
    let entries = tools::check(&dir, 4, false, None).expect("the corpus folder is readable");
    assert!(
        entries.len() >= 3,
        "expected at least three recordings, found {}",
        entries.len()
    );
    let failures: Vec<String> = entries
        .iter()
        .filter(|e| !e.ok)
        .map(|e| format!("{}: {:?} {:?}", e.file, e.error, e.divergence))
        .collect();
    assert!(
        failures.is_empty(),
        "corpus replay failed (if the behaviour change is intended, run \
         `cargo run --release -p migratory-replay -- check corpora --bless` and commit):\n{}",
        failures.join("\n")
    );
    for e in &entries {
        assert!(e.ticks >= 1_000, "{} replayed only {} ticks", e.file, e.ticks);
    }
}
