//! Shrinking a failing case: fewer ticks, players, boids and invalid inputs, as long as it
//! still fails the same oracle, so what is left to read is the least that fails. Greedy
//! delta debugging over the case's own knobs: cut the run at the failing tick, then halve
//! each knob in turn and keep any cut that still fails, until no cut does (or the budget
//! of runs is spent).

use super::case::Case;
use super::oracles::Failure;

/// Most runs a shrink may make.
pub const SHRINK_RUNS_MAX: u32 = 40;

/// The smallest case found that still fails `failure`'s oracle, and its failure.
/// `fails` runs a case and returns its failure, if any.
pub fn shrink(
    case: &Case,
    failure: &Failure,
    fails: &mut dyn FnMut(&Case) -> Option<Failure>,
) -> (Case, Failure) {
    let mut best = (case.clone(), failure.clone());
    let mut runs = 0;
    // Runs `candidate`; keeps it when it still fails the same oracle (a divergence at
    // another tick is the same failure, smaller).
    let mut attempt = |candidate: Case, best: &mut (Case, Failure), runs: &mut u32| -> bool {
        if *runs >= SHRINK_RUNS_MAX {
            return false;
        }
        *runs += 1;
        match fails(&candidate) {
            Some(f) if f.oracle == best.1.oracle => {
                *best = (candidate, f);
                true
            }
            _ => false,
        }
    };
    // The ticks after the failure cannot matter to it.
    if let Some(t) = failure.tick.filter(|&t| t >= 2 && t < case.ticks) {
        let _ = attempt(with_ticks(case, t), &mut best, &mut runs);
    }
    loop {
        let mut shrunk = false;
        for cut in [cut_ticks, cut_clients, cut_boids, cut_invalid, cut_churn] {
            if let Some(candidate) = cut(&best.0) {
                shrunk |= attempt(candidate, &mut best, &mut runs);
            }
        }
        if !shrunk || runs >= SHRINK_RUNS_MAX {
            return best;
        }
    }
}

fn with_ticks(case: &Case, ticks: u32) -> Case {
    let mut c = case.clone();
    c.ticks = ticks;
    c.checkpoint_tick = c.checkpoint_tick.min(ticks - 1).max(1);
    c
}

fn cut_ticks(c: &Case) -> Option<Case> {
    (c.ticks >= 4).then(|| with_ticks(c, c.ticks / 2))
}

fn cut_clients(c: &Case) -> Option<Case> {
    (c.script.clients > 0).then(|| {
        let mut s = c.clone();
        s.script.clients /= 2;
        s
    })
}

fn cut_boids(c: &Case) -> Option<Case> {
    (c.config.boid_count > 0).then(|| {
        let mut s = c.clone();
        s.config.boid_count /= 2;
        s
    })
}

fn cut_invalid(c: &Case) -> Option<Case> {
    (c.invalid_per_mille > 0).then(|| {
        let mut s = c.clone();
        s.invalid_per_mille = 0;
        s
    })
}

fn cut_churn(c: &Case) -> Option<Case> {
    (c.script.churn_per_mille_per_s > 0).then(|| {
        let mut s = c.clone();
        s.script.churn_per_mille_per_s = 0;
        s
    })
}
