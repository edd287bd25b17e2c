//! `migratory-bots figures DIR...`: the figures the soak notes quote, recomputed from the
//! `metrics.json` a soak wrote (so a committed table can always be checked against its
//! raw data): the hold medians of the server's per-second figures, the 99th-percentile
//! second, RTT, RSS before and with the bots, and drift.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The parts of `metrics.json` the figures need (older soaks lack some series).
#[derive(Debug, Deserialize)]
struct Soak {
    series: Vec<Second>,
    rtt_ms_hold: Hold,
    verdicts: Vec<Verdict>,
}

#[derive(Debug, Deserialize)]
struct Second {
    phase: String,
    joined_bots: u32,
    loop_p50_ms: Option<f64>,
    loop_p99_ms: Option<f64>,
    overruns_total: Option<f64>,
    skipped_ticks_total: Option<f64>,
    rss_bytes: Option<u64>,
    cpu_ms_per_tick: Option<f64>,
    #[serde(default)]
    cpu_system_ms_per_tick: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct Hold {
    p99: f64,
}

#[derive(Debug, Deserialize)]
struct Verdict {
    name: String,
    value: f64,
}

/// Why a soak folder could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FiguresError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a soak's metrics.json: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path} has no hold seconds")]
    NoHold { path: PathBuf },
}

/// The middle of the sorted values (the upper one of two), as the soak defines it.
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[((v.len() - 1) as f64 * 0.5).round() as usize])
}

/// The header of the table `row` writes.
pub const HEADER: &str = "| soak | loop p50 | loop p99 | 99th-pct second | CPU / tick (system) | RTT p99 | RSS first second | RSS hold | KiB per bot | drift | overruns, skipped (hold) |\n\
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|";

/// One row of figures for the soak in `dir`.
pub fn row(dir: &Path) -> Result<String, FiguresError> {
    let path = dir.join("metrics.json");
    let text = std::fs::read_to_string(&path).map_err(|source| FiguresError::Read {
        path: path.clone(),
        source,
    })?;
    let soak: Soak = serde_json::from_str(&text).map_err(|source| FiguresError::Parse {
        path: path.clone(),
        source,
    })?;
    let hold: Vec<&Second> = soak.series.iter().filter(|s| s.phase == "hold").collect();
    let (Some(first), Some(last)) = (hold.first(), hold.last()) else {
        return Err(FiguresError::NoHold { path });
    };
    let med = |f: fn(&Second) -> Option<f64>| median(hold.iter().filter_map(|s| f(s)).collect());
    let verdict = |name: &str| soak.verdicts.iter().find(|v| v.name == name).map(|v| v.value);
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} ms"));
    let mb = |b: Option<f64>| b.map_or("-".to_string(), |b| format!("{:.2} MB", b / 1e6));
    let rss_start = soak.series.first().and_then(|s| s.rss_bytes).map(|b| b as f64);
    let rss_hold = med(|s| s.rss_bytes.map(|b| b as f64));
    let bots = last.joined_bots.max(1);
    let per_bot = match (rss_start, rss_hold) {
        (Some(a), Some(b)) => format!("{:.1}", (b - a) / f64::from(bots) / 1024.0),
        _ => "-".into(),
    };
    let cpu = match (med(|s| s.cpu_ms_per_tick), med(|s| s.cpu_system_ms_per_tick)) {
        (Some(c), Some(sys)) => format!("{c:.2} ms ({sys:.2})"),
        (Some(c), None) => format!("{c:.2} ms"),
        _ => "-".into(),
    };
    let counted = |f: fn(&Second) -> Option<f64>| match (f(last), f(first)) {
        (Some(b), Some(a)) => format!("{}", b - a),
        _ => "-".into(),
    };
    let name = dir
        .file_name()
        .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    Ok(format!(
        "| `{name}` | {} | {} | {} | {cpu} | {} | {} | {} | {per_bot} ({bots} bots) | {} | {}, {} |",
        ms(med(|s| s.loop_p50_ms)),
        ms(med(|s| s.loop_p99_ms)),
        ms(verdict("loop_p99_ms")),
        ms(Some(soak.rtt_ms_hold.p99)),
        mb(rss_start),
        mb(rss_hold),
        verdict("memory_drift_percent").map_or("-".into(), |d| format!("{d:.3} %")),
        counted(|s| s.overruns_total),
        counted(|s| s.skipped_ticks_total),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_take_the_upper_middle() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(3.0));
    }

    #[test]
    fn a_row_comes_from_the_json() {
        let dir = std::env::temp_dir().join(format!("figures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let second = |phase: &str, rss: u64, p99: f64, overruns: f64| {
            serde_json::json!({"phase": phase, "joined_bots": 2, "loop_p50_ms": 1.0, "loop_p99_ms": p99,
                "overruns_total": overruns, "skipped_ticks_total": 0.0, "rss_bytes": rss, "cpu_ms_per_tick": 4.0})
        };
        let json = serde_json::json!({
            "series": [second("ramp", 1_000_000, 9.0, 0.0), second("hold", 1_002_048, 5.0, 1.0),
                       second("hold", 1_004_096, 7.0, 3.0), second("hold", 1_004_096, 6.0, 4.0)],
            "rtt_ms_hold": {"p99": 2.5},
            "verdicts": [{"name": "loop_p99_ms", "value": 6.9}, {"name": "memory_drift_percent", "value": 0.2}],
        });
        std::fs::write(dir.join("metrics.json"), json.to_string()).expect("write");
        let row = row(&dir).expect("a row");
        let _ = std::fs::remove_dir_all(&dir);
        // Hold medians: p99 of 5, 7, 6 is 6; RSS 1,004,096 - 1,000,000 over 2 bots is 2.0 KiB.
        let want = "| 1.00 ms | 6.00 ms | 6.90 ms | 4.00 ms | 2.50 ms | 1.00 MB | 1.00 MB | 2.0 (2 bots) | 0.200 % | 3, 0 |";
        assert!(row.ends_with(want), "{row}");
    }
}
