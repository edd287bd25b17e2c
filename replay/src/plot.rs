//! PNG plots with plotters: `probe --png`'s plot of one field over ticks. Text needs a
//! TrueType font, loaded by `migratory-charts` (shared with the soak's chart in
//! `migratory-bots`): `MIGRATORY_FONT`, else DejaVu Sans where Debian's
//! `fonts-dejavu-core` puts it.

use std::path::Path;

use plotters::prelude::*;

/// `probe --png`'s size in pixels.
pub const PROBE_PLOT_WIDTH_PX: u32 = 1200;
pub const PROBE_PLOT_HEIGHT_PX: u32 = 480;

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("no TrueType font for the plot: set MIGRATORY_FONT, or install Debian's fonts-dejavu-core")]
    NoFont,
    #[error("drawing {path}: {reason}")]
    Draw { path: String, reason: String },
    #[error("nothing to plot: {0}")]
    Empty(String),
}

/// Registers the font as "sans-serif", once per process (`migratory-charts`).
pub fn load_font() -> Result<(), PlotError> {
    migratory_charts::load_font().map_err(|_| PlotError::NoFont)
}

/// Plots `series` (`(tick, value)`, None where absent: the line breaks there) into a PNG
/// at `out`, titled `title`, with `y_label` on the value axis.
pub fn plot_series(
    out: &Path,
    title: &str,
    y_label: &str,
    series: &[(u32, Option<i64>)],
) -> Result<(), PlotError> {
    let present: Vec<(u32, i64)> = series.iter().filter_map(|&(t, v)| v.map(|v| (t, v))).collect();
    let (Some(first), Some(last)) = (series.first(), series.last()) else {
        return Err(PlotError::Empty("no ticks".into()));
    };
    if present.is_empty() {
        return Err(PlotError::Empty(format!(
            "absent at every tick of {}..={}",
            first.0, last.0
        )));
    }
    load_font()?;
    let draw = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: out.display().to_string(),
        reason: e.to_string(),
    };
    let lo = present.iter().map(|p| p.1).min().unwrap_or(0);
    let hi = present.iter().map(|p| p.1).max().unwrap_or(0);
    // A flat series still gets a visible band around it.
    let pad = ((hi - lo) / 20).max(1);
    let root = BitMapBackend::new(out, (PROBE_PLOT_WIDTH_PX, PROBE_PLOT_HEIGHT_PX)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(first.0..last.0.max(first.0 + 1), (lo - pad)..(hi + pad))
        .map_err(|e| draw(&e))?;
    chart
        .configure_mesh()
        .x_desc("tick")
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| draw(&e))?;
    // One line per run of ticks where the value is present.
    let mut runs: Vec<Vec<(u32, i64)>> = vec![Vec::new()];
    for &(t, v) in series {
        match v {
            Some(v) => runs.last_mut().map(|r| r.push((t, v))).unwrap_or(()),
            None if runs.last().is_some_and(|r| !r.is_empty()) => runs.push(Vec::new()),
            None => {}
        }
    }
    for run in runs.into_iter().filter(|r| !r.is_empty()) {
        chart
            .draw_series(LineSeries::new(run, BLUE.stroke_width(2)))
            .map_err(|e| draw(&e))?;
    }
    root.present().map_err(|e| draw(&e))?;
    Ok(())
}
