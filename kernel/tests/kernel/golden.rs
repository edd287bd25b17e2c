//! Golden roots: a fixed scenario's state roots and final checkpoint, so any behaviour or format
//! change shows in review.
//! Set `MIGRATORY_BLESS=1` to rewrite the file after an intended change.

use migratory_kernel::hex;
use migratory_kernel::{save_checkpoint, Script, ScriptConfig, TickInputs, World, WorldConfig};

/// Compares `actual` with the golden file `name`, or rewrites it under `MIGRATORY_BLESS=1`.
pub fn check(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("MIGRATORY_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with MIGRATORY_BLESS=1 to create it)",
            path.display()
        )
    });
    if expected != actual {
        panic!(
            "golden file {} differs (rerun with MIGRATORY_BLESS=1 if the change is intended)\n--- expected\n{expected}\n--- actual\n{actual}",
            path.display()
        );
    }
}

#[test]
fn golden_roots_of_the_default_world_with_scripted_players() {
    let config = WorldConfig {
        boid_count: 2_000,
        ..WorldConfig::default()
    };
    let mut world = World::new(config, 2).unwrap();
    let mut script = Script::new(ScriptConfig {
        clients: 12,
        churn_per_mille_per_s: 100,
        spectator_per_mille: 250,
        ..ScriptConfig::default()
    });
    let mut inputs = TickInputs::default();
    let mut last = world.output().clone();
    let mut text = String::new();
    for _ in 0..600 {
        script.next_inputs(&world, &last, &mut inputs);
        last.clone_from(world.step(&inputs));
        if [1, 100, 600].contains(&last.tick) {
            text += &format!(
                "tick {} state {} frames {}\n",
                last.tick,
                hex(&last.state_root),
                hex(&last.snapshots_root)
            );
        }
    }
    // The checkpoint's bytes are a format: saving them faster must not change them.
    let checkpoint = save_checkpoint(&world);
    text += &format!(
        "checkpoint at tick {} bytes {} blake3 {}\n",
        world.tick(),
        checkpoint.len(),
        hex(blake3::hash(&checkpoint).as_bytes())
    );
    check("roots.txt", &text);
}
