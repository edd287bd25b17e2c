//! Snapshots: budgets, priorities, baselines, and decoding against the server's view.

use super::small_config;
use migratory_kernel::decode_snapshot_header;
use migratory_kernel::ClientDecoder;
use migratory_kernel::{Input, TickInputs, World, WorldConfig};
use proptest::prelude::*;

fn dense(seed: u64) -> WorldConfig {
    WorldConfig {
        boid_count: 5_000,
        view_radius_mm: 40_000,
        ..small_config(seed)
    }
}

fn joins(n: u32) -> Vec<Input> {
    (1..=n)
        .map(|client| Input::Join {
            client,
            name: format!("c{client}"),
        })
        .collect()
}

#[test]
fn the_hard_cap_is_never_exceeded_and_the_average_holds() {
    let config = dense(8);
    let cap = config.snapshot_budget_cap_bytes() as usize;
    let per_s = (config.tick_rate_hz / config.snapshot_interval_ticks) as usize;
    let mut world = World::new(config.clone(), 2).unwrap();
    let mut sizes: Vec<Vec<usize>> = vec![Vec::new(); 9];
    let mut inputs = joins(8);
    for tick in 1..=1_200u32 {
        let out = world.step(&TickInputs {
            inputs: std::mem::take(&mut inputs),
        });
        for f in out.snapshots() {
            assert!(
                f.bytes.len() <= cap,
                "frame of {} bytes over the cap {cap}",
                f.bytes.len()
            );
            sizes[f.client as usize].push(f.bytes.len());
            // Ack at once: small deltas, so the budget is the limit only at first.
            inputs.push(Input::Ack {
                client: f.client,
                tick,
            });
        }
    }
    for (client, s) in sizes.iter().enumerate().skip(1) {
        for window in s.windows(per_s) {
            let total: usize = window.iter().sum();
            assert!(
                total <= config.downstream_cap_bytes_per_s as usize,
                "client {client}: {total} B in one second"
            );
        }
        let mean_bps = s.iter().sum::<usize>() * per_s / s.len();
        assert!(
            mean_bps <= config.downstream_avg_bytes_per_s as usize + 100,
            "client {client}: mean {mean_bps} B/s"
        );
    }
}

#[test]
fn entities_left_out_are_sent_later_not_never() {
    // A budget so small that only part of the view fits each snapshot.
    let config = WorldConfig {
        downstream_avg_bytes_per_s: 2_000,
        downstream_cap_bytes_per_s: 2_000,
        ..dense(9)
    };
    let mut world = World::new(config, 1).unwrap();
    let mut decoder = ClientDecoder::new();
    let mut inputs = joins(1);
    let mut last_sent: std::collections::BTreeMap<u32, u32> = Default::default();
    let mut seen = std::collections::BTreeSet::new();
    let mut worst_gap = 0;
    let mut snapshots = 0;
    for tick in 1..=900u32 {
        let out = world.step(&TickInputs {
            inputs: std::mem::take(&mut inputs),
        });
        let Some(bytes) = out.snapshot_for(1).map(<[u8]>::to_vec) else {
            continue;
        };
        snapshots += 1;
        let before: Vec<_> = decoder
            .newest_tick()
            .and_then(|t| decoder.view(t))
            .map(<[_]>::to_vec)
            .unwrap_or_default();
        let (_, view) = decoder.decode(&bytes).unwrap();
        // Only entities that stay in view count: one that left and came back starts afresh.
        last_sent.retain(|id, _| view.binary_search_by_key(id, |e| e.id).is_ok());
        for e in view {
            let changed = before.iter().find(|b| b.id == e.id) != Some(e);
            seen.insert(e.id);
            let since = last_sent.entry(e.id).or_insert(tick);
            if changed {
                worst_gap = worst_gap.max(tick - *since);
                *since = tick;
            }
        }
        inputs.push(Input::Ack { client: 1, tick });
    }
    assert!(snapshots > 250);
    assert!(seen.len() > 40, "view too small to test: {}", seen.len());
    // Boids move every tick, so an entity that stayed unsent for long was starved.
    assert!(worst_gap > 3, "budget was not tight ({worst_gap})");
    // Far entities gain priority slower than near ones (1 vs 16 a snapshot), so they wait
    // longer, but they do get their turn: without accumulation they would wait forever.
    assert!(
        worst_gap <= 150,
        "an entity waited {worst_gap} ticks for an update"
    );
}

#[test]
fn a_long_ack_gap_gets_a_full_snapshot() {
    let config = dense(10);
    let interval = config.snapshot_interval_ticks;
    let mut world = World::new(config, 1).unwrap();
    world.step(&TickInputs { inputs: joins(1) });
    let mut acked = 0;
    let mut last_baseline = None;
    for _ in 0..30 {
        let out = world.step(&TickInputs {
            inputs: if acked > 0 {
                vec![Input::Ack {
                    client: 1,
                    tick: acked,
                }]
            } else {
                vec![]
            },
        });
        if let Some(f) = out.snapshot_for(1) {
            last_baseline = decode_snapshot_header(f).unwrap().baseline_tick;
            acked = out.tick;
        }
    }
    assert!(last_baseline.is_some(), "a prompt acker gets deltas");
    let stale = acked;
    // 40 snapshots without an ack, then an ack of the old tick: older than the ring.
    for _ in 0..40 * interval {
        world.step(&TickInputs::default());
    }
    let mut full = None;
    for _ in 0..interval {
        let out = world.step(&TickInputs {
            inputs: vec![Input::Ack {
                client: 1,
                tick: stale,
            }],
        });
        if let Some(f) = out.snapshot_for(1) {
            full = Some(decode_snapshot_header(f).unwrap());
        }
    }
    assert_eq!(full.unwrap().baseline_tick, None, "expected a full snapshot");
}

#[test]
fn the_view_arena_follows_the_ack_lag() {
    // Client 1 acks each snapshot at once, client 2 four snapshots late, client 3 never.
    let config = dense(11);
    let interval = config.snapshot_interval_ticks;
    let mut world = World::new(config, 1).unwrap();
    world.step(&TickInputs { inputs: joins(3) });
    let mut sent: Vec<(u32, u32)> = Vec::new(); // (client, tick)
    let mut most = [0usize; 3];
    for _ in 0..60 * interval {
        let due = |&(client, tick): &(u32, u32)| match client {
            1 => true,
            2 => world.tick() >= tick + 4 * interval,
            _ => false,
        };
        let inputs = sent
            .iter()
            .filter(|s| due(s))
            .map(|&(client, tick)| Input::Ack { client, tick })
            .collect();
        sent.retain(|s| !due(s));
        let out = world.step(&TickInputs { inputs });
        sent.extend(out.snapshots().map(|f| (f.client, out.tick)));
        for (slot, most) in most.iter_mut().enumerate() {
            *most = (*most).max(world.view_arena_regions(slot as u32).unwrap());
        }
    }
    // A prompt acker holds its acked view and the one being built; a view per snapshot in
    // flight is added, rounded up to a power of two; the ring bounds it.
    assert_eq!(most, [2, 8, migratory_kernel::BASELINE_RING_LEN]);
}

#[test]
fn the_view_arena_shrinks_once_the_lag_has_passed() {
    // Client 1 acks four snapshots late for its first 40 snapshots, then at once. Every
    // snapshot decodes to the view the server remembers, through the moves a shrink makes.
    let config = dense(12);
    let interval = config.snapshot_interval_ticks;
    let mut world = World::new(config, 1).unwrap();
    world.step(&TickInputs { inputs: joins(1) });
    let mut decoder = ClientDecoder::new();
    let mut sent: Vec<u32> = Vec::new();
    let mut regions: Vec<usize> = Vec::new(); // after each snapshot
    while regions.len() < 40 + 3 * 64 {
        let lag = if regions.len() < 40 { 4 * interval } else { 0 };
        let now = world.tick();
        let inputs = sent
            .iter()
            .filter(|&&t| now >= t + lag)
            .map(|&tick| Input::Ack { client: 1, tick })
            .collect();
        sent.retain(|&t| now < t + lag);
        let out = world.step(&TickInputs { inputs });
        let tick = out.tick;
        if let Some(f) = out.snapshot_for(1) {
            decoder.decode(f).unwrap();
            assert_eq!(
                decoder.view(tick).unwrap(),
                world.client_view(1, tick).unwrap(),
                "tick {tick}"
            );
            sent.push(tick);
            regions.push(world.view_arena_regions(0).unwrap());
        }
    }
    assert_eq!(regions[..40].iter().max(), Some(&8), "four snapshots in flight");
    assert_eq!(regions.last(), Some(&2), "a prompt acker again: {regions:?}");
    // It shrank within two windows of the lag passing and never grew again.
    let shrunk_at = regions[40..].iter().position(|&r| r < 8).unwrap() + 40;
    assert!(shrunk_at <= 40 + 2 * 64, "shrank only after snapshot {shrunk_at}");
    assert!(
        regions[shrunk_at..].windows(2).all(|w| w[1] <= w[0]),
        "{regions:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// Clients with random lags and drop rates decode every frame they receive into exactly
    /// the view the server remembers sending.
    #[test]
    fn decoded_views_equal_the_servers_view(seed in any::<u64>(), lags in proptest::collection::vec((0u32..40, 0u32..500), 3), shards in 1usize..4) {
        let mut world = World::new(dense(seed), shards).unwrap();
        let n = lags.len() as u32;
        let mut decoders: Vec<ClientDecoder> = (0..n).map(|_| ClientDecoder::new()).collect();
        let mut pending: Vec<(u32, u32, u32)> = Vec::new(); // (due, client, tick)
        let mut inputs = joins(n);
        let mut decoded = 0;
        for tick in 1..=400u32 {
            let out = world.step(&TickInputs { inputs: std::mem::take(&mut inputs) }).clone();
            for f in out.snapshots() {
                let (lag, drop) = lags[f.client as usize - 1];
                if per_mille(seed, tick, f.client) < u64::from(drop) {
                    continue;
                }
                let decoder = &mut decoders[f.client as usize - 1];
                let (header, view) = decoder.decode(f.bytes).unwrap();
                prop_assert_eq!(header.tick, tick);
                let view_len = view.len();
                let sent = decoder.sent_ticks(tick).unwrap();
                prop_assert_eq!(sent.len(), view_len);
                prop_assert!(sent.iter().all(|&t| t <= tick), "a value sent after its view");
                let view = decoder.view(tick).unwrap();
                let server = world.client_view(f.client, tick).unwrap();
                prop_assert_eq!(view, server, "client {} tick {}", f.client, tick);
                decoded += 1;
                pending.push((tick + lag, f.client, tick));
            }
            pending.retain(|&(due, client, t)| {
                if due <= tick {
                    inputs.push(Input::Ack { client, tick: t });
                    false
                } else {
                    true
                }
            });
        }
        prop_assert!(decoded > 0);
    }
}

/// A number in 0..1000 that is a pure function of (seed, tick, client): which snapshots
/// the decoder test drops.
fn per_mille(seed: u64, tick: u32, client: u32) -> u64 {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..12].copy_from_slice(&tick.to_le_bytes());
    key[12..].copy_from_slice(&client.to_le_bytes());
    let h = blake3::hash(&key);
    u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap()) % 1000
}
