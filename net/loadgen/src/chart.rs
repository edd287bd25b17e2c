//! The soak's chart: seven panels over the run's per-second series (joined bots, tick
//! loop against its target, downstream per bot against the average target and the hard
//! cap, RTT, server RSS, CPU per tick, and the TCP segments per tick that drive its system
//! part), drawn with plotters into a PNG.
//!
//! Text needs a TrueType font (`migratory_charts::load_font`: `MIGRATORY_FONT`, else
//! DejaVu Sans where Debian's `fonts-dejavu-core` puts it).

use std::path::Path;

use plotters::prelude::*;

use crate::series::{Sample, Thresholds};

/// Chart size in pixels.
pub const CHART_WIDTH_PX: u32 = 1600;
pub const CHART_HEIGHT_PX: u32 = 1600;

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error(transparent)]
    Font(#[from] migratory_charts::NoFont),
    #[error("drawing the chart: {0}")]
    Draw(String),
}

fn draw_err(e: impl std::fmt::Display) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// The font text needs, shared with `migratory-replay probe --png`.
fn load_font() -> Result<(), ChartError> {
    Ok(migratory_charts::load_font()?)
}

/// One line of a panel: its legend, colour and values.
struct Line<'a> {
    name: &'a str,
    color: RGBColor,
    values: Vec<(f64, f64)>,
}

fn line(name: &str, color: RGBColor, values: Vec<(f64, f64)>) -> Line<'_> {
    Line { name, color, values }
}

/// One panel: its title, the unit of its y axis, its lines.
struct Panel<'a> {
    title: &'a str,
    unit: &'a str,
    lines: Vec<Line<'a>>,
}

const RED: RGBColor = RGBColor(200, 30, 30);
const ORANGE: RGBColor = RGBColor(230, 130, 0);
const BLUE: RGBColor = RGBColor(30, 90, 200);
const GREEN: RGBColor = RGBColor(20, 140, 60);
const GREY: RGBColor = RGBColor(120, 120, 120);
const PURPLE: RGBColor = RGBColor(130, 50, 170);

/// The parts of a soak's `metrics.json` its chart is drawn from.
#[derive(Debug, serde::Deserialize)]
struct Drawn {
    thresholds: Thresholds,
    series: Vec<Sample>,
    /// A move's second (soaks with `--move-every`).
    #[serde(default)]
    moves: Vec<MoveMark>,
}

#[derive(Debug, serde::Deserialize)]
struct MoveMark {
    t_s: f64,
}

/// Why a chart could not be redrawn from a soak's folder.
#[derive(Debug, thiserror::Error)]
pub enum RedrawError {
    #[error("reading {path}: {source}")]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a soak's metrics.json: {source}")]
    Parse {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Chart(#[from] ChartError),
}

/// Draws `dir/chart.png` again from `dir/metrics.json`, as the soak drew it: the chart is
/// a function of the figures, so a soak's folder needs to keep only those.
pub fn redraw(dir: &Path) -> Result<(), RedrawError> {
    let path = dir.join("metrics.json");
    let text = std::fs::read(&path).map_err(|source| RedrawError::Read {
        path: path.clone(),
        source,
    })?;
    let d: Drawn = serde_json::from_slice(&text).map_err(|source| RedrawError::Parse { path, source })?;
    let marks: Vec<f64> = d.moves.iter().map(|m| m.t_s).collect();
    draw(&dir.join("chart.png"), &d.series, &d.thresholds, &marks)?;
    Ok(())
}

/// Draws the panels of `series` into a PNG at `path`.
pub fn draw(
    path: &Path,
    series: &[Sample],
    thresholds: &Thresholds,
    moves: &[f64],
) -> Result<(), ChartError> {
    load_font()?;
    let root = BitMapBackend::new(path, (CHART_WIDTH_PX, CHART_HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_err)?;
    let t_max = series.last().map_or(1.0, |s| s.t_s).max(1.0);
    for (area, panel) in root
        .split_evenly((4, 2))
        .iter()
        .zip(panels(series, thresholds, t_max))
    {
        draw_panel(area, panel, t_max, moves)?;
    }
    root.present().map_err(draw_err)?;
    Ok(())
}

/// What the panels show: bots, the tick loop, downstream, round trips, RSS, CPU, segments.
fn panels<'a>(series: &[Sample], thresholds: &Thresholds, t_max: f64) -> [Panel<'a>; 7] {
    let pick = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
        series.iter().filter_map(|s| f(s).map(|v| (s.t_s, v))).collect()
    };
    let flat = |v: f64| vec![(0.0, v), (t_max, v)];
    let panel = |title, unit, lines| Panel { title, unit, lines };
    [
        panel(
            "Joined bots",
            "bots",
            vec![
                line("target", GREY, pick(&|s| Some(f64::from(s.target_bots)))),
                line("joined", BLUE, pick(&|s| Some(f64::from(s.joined_bots)))),
            ],
        ),
        panel(
            "Tick loop (last second)",
            "ms",
            vec![
                line("p50", BLUE, pick(&|s| s.loop_p50_ms)),
                line("p99", ORANGE, pick(&|s| s.loop_p99_ms)),
                line("p99 target", RED, flat(thresholds.loop_p99_ms)),
            ],
        ),
        panel(
            "Downstream per bot",
            "B/s",
            vec![
                line("mean", BLUE, pick(&|s| s.down_mean_bytes_per_s)),
                line("p95", ORANGE, pick(&|s| s.down_p95_bytes_per_s)),
                line("avg target", GREEN, flat(thresholds.avg_downstream_bytes_per_s)),
                line("hard cap", RED, flat(thresholds.hard_cap_bytes_per_s)),
            ],
        ),
        panel(
            "PING round trip",
            "ms",
            vec![
                line("p50", BLUE, pick(&|s| s.rtt_p50_ms)),
                line("p99", ORANGE, pick(&|s| s.rtt_p99_ms)),
            ],
        ),
        panel(
            "Server RSS",
            "MiB",
            vec![line(
                "rss",
                BLUE,
                pick(&|s| s.rss_bytes.map(|b| b as f64 / 1_048_576.0)),
            )],
        ),
        panel(
            "Server CPU per tick",
            "ms",
            vec![
                line("total", BLUE, pick(&|s| s.cpu_ms_per_tick)),
                line("system", ORANGE, pick(&|s| s.cpu_system_ms_per_tick)),
            ],
        ),
        panel(
            "Server TCP segments per tick",
            "segments",
            vec![
                line("sent", BLUE, pick(&|s| s.segments_out_per_tick)),
                line(
                    "sent without data (pure ACK)",
                    ORANGE,
                    pick(&|s| s.pure_acks_out_per_tick),
                ),
                line("received", GREEN, pick(&|s| s.segments_in_per_tick)),
            ],
        ),
    ]
}

/// One panel: axes from 0 to the largest value (plus a tenth), its lines, a legend.
fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    panel: Panel<'_>,
    t_max: f64,
    moves: &[f64],
) -> Result<(), ChartError> {
    let y_max = panel
        .lines
        .iter()
        .flat_map(|l| l.values.iter().map(|&(_, v)| v))
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(32)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..t_max, 0.0..y_max)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(panel.unit)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(draw_err)?;
    for line in panel.lines {
        let color = line.color;
        chart
            .draw_series(LineSeries::new(line.values, color.stroke_width(2)))
            .map_err(draw_err)?
            .label(line.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    // A move of the world (`--move-every`): a vertical mark at its second, one legend.
    for (i, &t) in moves.iter().enumerate() {
        let s = chart
            .draw_series(LineSeries::new(
                vec![(t, 0.0), (t, y_max)],
                PURPLE.stroke_width(1),
            ))
            .map_err(draw_err)?;
        if i == 0 {
            s.label("move")
                .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], PURPLE.stroke_width(1)));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(draw_err)?;
    Ok(())
}
