//! `net/server/CONFIG.md`, every numeric config key with its default and the values the
//! server accepts, generated from the validation code itself: each key is probed (the
//! defaults with that one key changed, through `ServerConfig::from_toml`) to find the
//! smallest and largest value accepted. A test fails when the committed file differs from
//! what the code accepts now (`MIGRATORY_BLESS=1` rewrites it), so the table cannot drift
//! from the checks.

use crate::config::{ServerConfig, DEFAULT_CONFIG_TOML};

/// Whether the defaults with `path` set to `value` are a valid config.
fn accepts(defaults: &toml::Table, path: &[String], value: toml::Value) -> bool {
    let mut doc = defaults.clone();
    let mut table = &mut doc;
    for key in &path[..path.len() - 1] {
        match table.get_mut(key).and_then(toml::Value::as_table_mut) {
            Some(t) => table = t,
            None => return false,
        }
    }
    table.insert(path[path.len() - 1].clone(), value);
    let text = toml::to_string(&doc).unwrap_or_default();
    ServerConfig::from_toml(&text, "probe").is_ok()
}

/// The accepted integers around `default`: (smallest, largest).
fn integer_range(defaults: &toml::Table, path: &[String], default: i64) -> (i64, i64) {
    let ok = |v: i64| accepts(defaults, path, toml::Value::Integer(v));
    // Invariant: `good` is accepted, `bad` is not (or beyond the type).
    let search = |mut good: i64, mut bad: i128| {
        while (i128::from(good) - bad).abs() > 1 {
            let mid = ((i128::from(good) + bad) / 2) as i64;
            if ok(mid) {
                good = mid;
            } else {
                bad = i128::from(mid);
            }
        }
        good
    };
    let max = if ok(i64::MAX) {
        i64::MAX
    } else {
        search(default, i128::from(i64::MAX))
    };
    let min = if ok(i64::MIN) {
        i64::MIN
    } else {
        search(default, i128::from(i64::MIN))
    };
    (min, max)
}

/// The accepted floats around `default`, each bound with whether it is itself accepted.
fn float_range(defaults: &toml::Table, path: &[String], default: f64) -> ((f64, bool), (f64, bool)) {
    let ok = |v: f64| accepts(defaults, path, toml::Value::Float(v));
    let search = |mut good: f64, mut bad: f64| {
        for _ in 0..200 {
            let mid = good + (bad - good) / 2.0;
            if mid == good || mid == bad {
                break;
            }
            if ok(mid) {
                good = mid;
            } else {
                bad = mid;
            }
        }
        // The boundary lies between `good` and `bad`, adjacent floats by now. Shown to 9
        // significant digits, it is either accepted itself (an inclusive bound, e.g. 3600)
        // or not, with accepted values right next to it (an exclusive bound, e.g. 0 < v).
        // (Snapped to a billionth first: the search from far away ends a few 1e-43 from 0.)
        let snap = |v: f64| {
            let v: f64 = format!("{v:.8e}").parse().unwrap_or(v);
            (v * 1e9).round() / 1e9 + 0.0
        };
        let b = snap(bad);
        if ok(b) {
            (b, true)
        } else if (good - b).abs() <= 1e-9 * b.abs().max(1.0) {
            (b, false)
        } else {
            (snap(good), true)
        }
    };
    (search(default, -1e18), search(default, 1e18))
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        group(v as i64)
    } else {
        format!("{v}")
    }
}

/// `1234567` as `1,234,567`.
fn group(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 {
        out.insert(0, '-');
    }
    out
}

/// One row per numeric key of `table` (at `prefix` in the defaults), in the order of
/// `default.toml` (the table keeps it: toml's `preserve_order`).
fn rows(defaults: &toml::Table, table: &toml::Table, prefix: &mut Vec<String>, out: &mut Vec<String>) {
    for (key, value) in table {
        prefix.push(key.clone());
        let name = prefix.join(".");
        match value {
            toml::Value::Table(inner) => rows(defaults, inner, prefix, out),
            toml::Value::Integer(d) => {
                let (min, max) = integer_range(defaults, prefix, *d);
                let allowed = if min == max {
                    format!("only {} at the defaults (set by other keys)", group(min))
                } else {
                    format!("{} ..= {}", bound(min), bound(max))
                };
                out.push(format!("| `{name}` | {} | {allowed} |", group(*d)));
            }
            toml::Value::Float(d) => {
                let ((lo, lo_in), (hi, hi_in)) = float_range(defaults, prefix, *d);
                let allowed = format!(
                    "{} {} v {} {}",
                    number(lo),
                    if lo_in { "≤" } else { "<" },
                    if hi_in { "≤" } else { "<" },
                    number(hi)
                );
                out.push(format!("| `{name}` | {} | {allowed} |", number(*d)));
            }
            _ => {}
        }
        prefix.pop();
    }
}

fn bound(v: i64) -> String {
    match v {
        i64::MAX => "no limit".into(),
        v if v == i64::from(u32::MAX) => format!("{} (u32)", group(v)),
        v => group(v),
    }
}

/// The text of `CONFIG.md`.
pub(crate) fn config_reference() -> String {
    let defaults: toml::Table = toml::from_str(DEFAULT_CONFIG_TOML).unwrap_or_default();
    let mut out = Vec::new();
    rows(&defaults, &defaults, &mut Vec::new(), &mut out);
    format!(
        "# migratory-server: what each numeric config key accepts\n\n\
         Generated from the validation code by `net/server/src/config_reference.rs` (each key\n\
         probed with every other key at its default); do not edit. After a check changes,\n\
         `MIGRATORY_BLESS=1 cargo test -p migratory-server config_reference` rewrites it.\n\
         What each key means, and the keys that are not numbers, are in\n\
         [`config/default.toml`](config/default.toml).\n\n\
         Some bounds depend on other keys, and the table gives them at the defaults: a\n\
         world's `world_size_mm` must equal `terrain_grid_cells` x `terrain_cell_size_mm`,\n\
         `view_radius_mm` and the zone and cast radii are bounded by the world's size,\n\
         `snapshot_interval_ticks` by `tick_rate_hz`, `connections_per_ip_max` by\n\
         `connections_max`. An invalid value stops the server with an error naming the key\n\
         and the rule.\n\n\
         | key | default | accepted |\n|---|---:|---|\n{}\n",
        out.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_reference_is_what_the_validation_accepts() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("CONFIG.md");
        let generated = config_reference();
        if std::env::var("MIGRATORY_BLESS").is_ok_and(|v| v == "1") {
            std::fs::write(&path, &generated).expect("write CONFIG.md");
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is not what the validation accepts now; rerun with MIGRATORY_BLESS=1 and review:\n{generated}",
            path.display()
        );
    }

    #[test]
    fn probing_finds_the_documented_bounds_of_known_keys() {
        let defaults: toml::Table = toml::from_str(DEFAULT_CONFIG_TOML).expect("defaults");
        let path = |p: &str| p.split('.').map(str::to_string).collect::<Vec<_>>();
        assert_eq!(
            integer_range(&defaults, &path("world.hunting_field_count"), 4),
            (0, 16)
        );
        assert_eq!(
            integer_range(&defaults, &path("world.flocking.speed_max_mm_per_tick"), 110).1,
            254
        );
        assert_eq!(integer_range(&defaults, &path("server.shards"), 0), (0, 64));
        let ((lo, lo_in), (hi, hi_in)) = float_range(&defaults, &path("server.hello_timeout_seconds"), 5.0);
        assert_eq!((lo, lo_in, hi, hi_in), (0.0, false, 3600.0, true));
    }
}
