//! Kernel tests: determinism across shard counts, checkpoints, hash coverage, game rules,
//! snapshot budgets and decoding, and golden roots.

// Test helpers may time and measure with floats; the determinism rules bind the step.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

mod behaviour;
mod determinism;
mod golden;
mod snapshots;
mod spectators;

use migratory_kernel::{Input, Script, ScriptConfig, TickInputs, TickOutput, World, WorldConfig};

/// The shared small world with 600 boids.
pub fn small_config(seed: u64) -> WorldConfig {
    migratory_kernel::testkit::small_config(seed, 600)
}

/// One step with these inputs; its output, owned.
pub fn step(world: &mut World, inputs: Vec<Input>) -> TickOutput {
    world.step(&TickInputs { inputs }).clone()
}

/// A player's join, named after its client id.
pub fn join(client: u32) -> Input {
    Input::Join {
        client,
        name: format!("p{client}"),
    }
}

/// The inputs scripted bots send over `ticks` ticks of a world of `config` (on one shard),
/// tick by tick, each bot reacting to the snapshots it was sent.
pub fn scripted(config: WorldConfig, script: ScriptConfig, ticks: usize) -> Vec<Vec<Input>> {
    let mut world = World::new(config, 1).unwrap();
    let mut script = Script::new(script);
    let mut inputs = TickInputs::default();
    let mut last = world.output().clone();
    let mut stream = Vec::with_capacity(ticks);
    for _ in 0..ticks {
        script.next_inputs(&world, &last, &mut inputs);
        stream.push(inputs.inputs.clone());
        last.clone_from(world.step(&inputs));
    }
    stream
}

/// Steps `world` through `stream` (inputs per tick), returning every tick's
/// (state root, frames root, frames as (client, bytes)).
pub type TickRecord = ([u8; 32], [u8; 32], Vec<(u32, Vec<u8>)>);

pub fn run(world: &mut World, stream: &[Vec<Input>]) -> Vec<TickRecord> {
    let mut records = Vec::with_capacity(stream.len());
    for inputs in stream {
        let out = world.step(&TickInputs {
            inputs: inputs.clone(),
        });
        records.push((
            out.state_root,
            out.snapshots_root,
            out.snapshots().map(|f| (f.client, f.bytes.to_vec())).collect(),
        ));
    }
    records
}

/// Panics naming the seed and first divergent tick when two runs differ.
pub fn assert_same_run(seed: u64, label: &str, expected: &[TickRecord], actual: &[TickRecord]) {
    assert_eq!(expected.len(), actual.len());
    for (i, (e, a)) in expected.iter().zip(actual).enumerate() {
        if e != a {
            let what = if e.0 != a.0 {
                "state root"
            } else if e.1 != a.1 {
                "frames root"
            } else {
                "frames"
            };
            panic!(
                "seed {seed}: {label} diverged at tick {} ({what}): expected {}, actual {}",
                i + 1,
                migratory_kernel::hex(&e.0),
                migratory_kernel::hex(&a.0)
            );
        }
    }
}
