//! Warm ticks allocate nothing but the doubling of a client's view arena when its ack lag
//! reaches a new high, on one shard and on four: a counting global allocator sees every
//! allocation of every thread while the step runs, and each must be one of those doublings.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use migratory_kernel::{Script, ScriptConfig, TickInputs, World, WorldConfig};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Regions of every slot's view arena (0 for a free slot).
fn arena_regions(world: &World) -> Vec<usize> {
    (0..world.config().client_slots_max)
        .map(|slot| world.view_arena_regions(slot).unwrap_or(0))
        .collect()
}

/// (allocations, arena doublings and shrinks, snapshots) in the warm ticks.
fn allocations_in_warm_ticks(shards: usize) -> (u64, u64, usize) {
    let config = WorldConfig {
        boid_count: 3_000,
        ..WorldConfig::default()
    };
    let mut world = World::new(config, shards).unwrap();
    let mut script = Script::new(ScriptConfig {
        clients: 24,
        join_spread_ticks: 30,
        ..ScriptConfig::default()
    });
    let mut inputs = TickInputs::default();
    let mut last = world.output().clone();
    let mut frames = 0;
    let mut doublings = 0;
    let mut regions = arena_regions(&world);
    for tick in 0..400 {
        script.next_inputs(&world, &last, &mut inputs);
        let measured = tick >= 200;
        COUNTING.store(measured, Ordering::SeqCst);
        let out = world.step(&inputs);
        COUNTING.store(false, Ordering::SeqCst);
        if measured {
            frames += out.snapshot_count();
        }
        last.clone_from(out);
        let after = arena_regions(&world);
        for (&before, &now) in regions.iter().zip(&after) {
            if measured && before != 0 && now != before {
                assert!(
                    now == before * 2 || (now < before && now.is_power_of_two()),
                    "an arena grows only by doubling and shrinks to a power of two: {before} -> {now}"
                );
                doublings += 1;
            }
        }
        regions = after;
    }
    (ALLOCATIONS.load(Ordering::SeqCst), doublings, frames)
}

#[test]
fn warm_ticks_allocate_nothing_on_one_and_four_shards() {
    // One test, so the two measurements never overlap.
    for shards in [1, 4] {
        ALLOCATIONS.store(0, Ordering::SeqCst);
        let (allocations, doublings, frames) = allocations_in_warm_ticks(shards);
        assert!(frames > 1_000, "the warm ticks must build frames ({frames})");
        assert_eq!(
            allocations, doublings,
            "{shards} shard(s): {allocations} allocations in 200 warm ticks, \
             of which {doublings} were view arenas doubling or shrinking"
        );
        // The script's bots lag up to 12 ticks and lose 2 % of their snapshots, so a few
        // reach a new lag high late, and an arena shrinks at most once in a 64-build
        // window (192 ticks here): more would mean the arena thrashes.
        assert!(doublings <= 24 + 4, "{doublings} arena resizes in 200 warm ticks");
    }
}
