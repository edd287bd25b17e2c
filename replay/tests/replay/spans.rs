//! Verify on every core: spans between checkpoints side by side agree with the lockstep
//! replay, fall back to it to explain a divergence, and catch a checkpoint it never reads.

use migratory_kernel::{save_checkpoint, TickInputs, World};
use migratory_replay::divergence::{RootKind, Side};
use migratory_replay::format::{RecordingWriter, TickRoots};
use migratory_replay::tools;
use migratory_replay::Recording;

use crate::{inputs_of, no_progress, record_with, synth_bytes, synth_options, writer_options, TempDir};

/// 150 ticks, 3 clients, checkpoints every 40 ticks: four spans.
fn session(dir: &TempDir) -> (std::path::PathBuf, Vec<TickInputs>, migratory_kernel::WorldConfig) {
    let opts = synth_options(21, 150, 3, 300, 20, 40);
    let path = dir.write("session.mrec", &synth_bytes(&opts));
    let rec = Recording::open(&path).unwrap();
    (path.clone(), inputs_of(&rec), opts.config)
}

#[test]
fn spans_side_by_side_agree_with_the_lockstep_replay() {
    let dir = TempDir::new("spans-agree");
    let (path, _, _) = session(&dir);
    let lockstep = tools::verify_lockstep(&path, &[1, 2], None, &mut no_progress()).unwrap();
    let mut seen = Vec::new();
    let parallel = tools::verify_with(&path, &[1, 2], None, 2, &mut |done, total| {
        seen.push((done, total))
    })
    .unwrap();
    assert!(lockstep.ok() && parallel.ok(), "{lockstep:?}\n{parallel:?}");
    assert_eq!((lockstep.spans, parallel.spans), (1, 4));
    assert_eq!(parallel.ticks, lockstep.ticks);
    assert_eq!(parallel.ticks, 150);
    assert_eq!(parallel.end_record_matches, Some(true));
    assert_eq!(
        seen.last(),
        Some(&(150, 150)),
        "progress ends at the whole recording"
    );
}

#[test]
fn a_divergence_in_a_later_span_is_explained_as_the_lockstep_replay_explains_it() {
    const X: u32 = 97;
    let dir = TempDir::new("spans-diverge");
    let (_, inputs, config) = session(&dir);
    let (doctored, _) = record_with(
        World::new(config, 1).unwrap(),
        &inputs,
        writer_options(20, 40),
        |out| {
            if out.tick >= X {
                out.state_root[3] ^= 0x11;
            }
        },
    );
    let path = dir.write("doctored.mrec", &doctored);
    let lockstep = tools::verify_lockstep(&path, &[1, 2], None, &mut no_progress()).unwrap();
    let parallel = tools::verify_with(&path, &[1, 2], None, 2, &mut no_progress()).unwrap();
    assert!(!parallel.ok());
    let (l, p) = (lockstep.divergence.unwrap(), parallel.divergence.unwrap());
    assert_eq!((p.tick, p.root, &p.a), (X, RootKind::State, &Side::Recording));
    assert_eq!((p.tick, &p.a_root, &p.b_root), (l.tick, &l.a_root, &l.b_root));
    assert_eq!(p.explained_at_tick, l.explained_at_tick);
    assert_eq!(
        parallel.bad_checkpoint, None,
        "the roots are wrong, not a checkpoint"
    );
}

#[test]
fn a_checkpoint_that_restores_another_state_is_reported() {
    // The checkpoint at tick 80 is taken from a world that missed tick 1's joins; the
    // recorded roots are the true ones, so a replay from the start matches throughout.
    let dir = TempDir::new("spans-bad-checkpoint");
    let (_, inputs, config) = session(&dir);
    let mut world = World::new(config.clone(), 1).unwrap();
    let mut shadow = World::new(config, 1).unwrap();
    let mut writer = RecordingWriter::new(Vec::new(), &world, 1, writer_options(20, 40)).unwrap();
    let nothing = TickInputs::default();
    for (i, tick_inputs) in inputs.iter().enumerate() {
        let roots = TickRoots::of(world.step(tick_inputs));
        shadow.step(if i == 0 { &nothing } else { tick_inputs });
        let checkpoint = match roots.tick {
            80 => Some(save_checkpoint(&shadow)),
            t if writer.options().checkpoint_due(t) => Some(save_checkpoint(&world)),
            _ => None,
        };
        writer
            .record_tick_parts(tick_inputs.clone(), &roots, checkpoint.as_deref())
            .unwrap();
    }
    assert_ne!(
        shadow.state_root(),
        world.state_root(),
        "the shadow world differs"
    );
    let path = dir.write("bad-checkpoint.mrec", &writer.finish().unwrap());

    let lockstep = tools::verify_lockstep(&path, &[1, 2], None, &mut no_progress()).unwrap();
    assert!(
        lockstep.ok(),
        "a replay from the start never reads the checkpoint: {lockstep:?}"
    );
    let parallel = tools::verify_with(&path, &[1, 2], None, 2, &mut no_progress()).unwrap();
    assert!(!parallel.ok());
    assert!(parallel.divergence.is_none(), "{parallel:?}");
    let bad = parallel.bad_checkpoint.expect("the checkpoint is reported");
    assert_eq!(bad.tick, 80, "{bad:?}");
    assert!(bad.reason.contains("tick 80"), "{}", bad.reason);
}
