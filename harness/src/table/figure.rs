//! Figure 1 of the paper as SVG: for each app, one stacked bar per variant of where the
//! processors' time went (User, Protocol, Wait, Message, summed over the processors),
//! normalized to CSM-DMS's total time. Drawn with plotters' SVG backend alone, whose text
//! is left to the SVG viewer, so no font library is needed.

use super::Cell;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const PANEL_PX: (u32, u32) = (560, 300);
const HEADER_PX: u32 = 70;
const COLUMNS: usize = 2;
const FONT: &str = "sans-serif";

/// The four parts of a bar, bottom up, with their colors.
const PARTS: [(&str, RGBColor); 4] = [
    ("User", RGBColor(66, 114, 196)),
    ("Protocol", RGBColor(237, 125, 49)),
    ("Wait", RGBColor(165, 165, 165)),
    ("Message", RGBColor(112, 173, 71)),
];

/// One bar: its variant and its parts as fractions of the app's reference time (`None`
/// for a cell that did not finish); `flagged` for a cell that failed verification.
struct Bar<'a> {
    variant: &'a str,
    parts: Option<[f64; 4]>,
    flagged: bool,
}

/// An app's panel: its bars and what they are normalized to.
struct Panel<'a> {
    title: String,
    bars: Vec<Bar<'a>>,
}

/// Writes Figure 1 for `apps` x `variants` to `path`.
pub fn figure1(
    apps: &[&str],
    variants: &[&str],
    cells: &[Cell],
    path: &Path,
) -> anyhow::Result<()> {
    let panels: Vec<Panel> = apps.iter().map(|app| panel(app, variants, cells)).collect();
    draw(&panels, path).map_err(|e| anyhow::anyhow!("cannot draw {}: {e}", path.display()))
}

fn panel<'a>(app: &str, variants: &[&'a str], cells: &[Cell]) -> Panel<'a> {
    let parts_of = |variant: &str| {
        let cell = cells
            .iter()
            .find(|c| c.config.app == app && c.config.variant == variant)?;
        let b = cell.run.as_ref()?.breakdown;
        Some((
            [b.user_ns, b.protocol_ns, b.wait_ns, b.message_ns].map(|ns| ns as f64),
            !cell.verified,
        ))
    };
    let total = |parts: &[f64; 4]| parts.iter().sum::<f64>();
    let dms = parts_of("CSM-DMS")
        .map(|(p, _)| total(&p))
        .filter(|t| *t > 0.0);
    let slowest = variants
        .iter()
        .filter_map(|v| Some((*v, total(&parts_of(v)?.0))))
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let name = crate::paper::display_name(app);
    let (reference, title) = match (dms, slowest) {
        (Some(t), _) => (t, name.to_string()),
        (None, Some((v, t))) if t > 0.0 => {
            (t, format!("{name} (normalized to {v}: no CSM-DMS result)"))
        }
        _ => (1.0, format!("{name} (no results)")),
    };
    Panel {
        title,
        bars: variants
            .iter()
            .map(|v| {
                let cell = parts_of(v);
                Bar {
                    variant: v,
                    parts: cell.map(|(p, _)| p.map(|x| x / reference)),
                    flagged: cell.is_some_and(|(_, f)| f),
                }
            })
            .collect(),
    }
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

fn draw(panels: &[Panel], path: &Path) -> DrawResult<()> {
    let rows = panels.len().div_ceil(COLUMNS).max(1);
    let size = (
        PANEL_PX.0 * COLUMNS as u32,
        HEADER_PX + PANEL_PX.1 * rows as u32,
    );
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let (header, body) = root.split_vertically(HEADER_PX);
    header.draw(&Text::new(
        "Figure 1: normalized execution time breakdown (total time of CSM-DMS = 1)",
        (12, 10),
        (FONT, 18).into_font(),
    ))?;
    for (i, (label, color)) in PARTS.iter().enumerate() {
        let x = 12 + 130 * i as i32;
        header.draw(&Rectangle::new([(x, 42), (x + 14, 56)], color.filled()))?;
        header.draw(&Text::new(*label, (x + 20, 43), (FONT, 14).into_font()))?;
    }
    header.draw(&Text::new(
        "! failed verification",
        (12 + 130 * 4, 43),
        (FONT, 14).into_font(),
    ))?;
    for (area, panel) in body.split_evenly((rows, COLUMNS)).iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    root.present()?;
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    let tallest = panel
        .bars
        .iter()
        .filter_map(|b| Some(b.parts?.iter().sum::<f64>()))
        .fold(1.0, f64::max);
    let n = panel.bars.len();
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 16))
        .margin(10)
        .x_label_area_size(28)
        .y_label_area_size(44)
        // An integer range includes its end: 0..n - 1 makes n segments.
        .build_cartesian_2d(
            (0..n.saturating_sub(1)).into_segmented(),
            0.0..tallest * 1.15,
        )?;
    let names: Vec<&str> = panel
        .bars
        .iter()
        .map(|b| b.variant.trim_start_matches("CSM-"))
        .collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE)
        .x_labels(n)
        .x_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get(*i).map_or(String::new(), |s| s.to_string()),
            _ => String::new(),
        })
        .y_desc("normalized time")
        .y_label_formatter(&|y| format!("{y:.1}"))
        .draw()?;
    let above = TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (i, bar) in panel.bars.iter().enumerate() {
        let Some(parts) = bar.parts else {
            chart.draw_series(std::iter::once(Text::new(
                "error",
                (SegmentValue::CenterOf(i), 0.0),
                above.clone(),
            )))?;
            continue;
        };
        let mut bottom = 0.0;
        for (value, (_, color)) in parts.iter().zip(PARTS) {
            let top = bottom + value;
            let mut rect = Rectangle::new(
                [
                    (SegmentValue::Exact(i), bottom),
                    (SegmentValue::Exact(i + 1), top),
                ],
                color.filled(),
            );
            rect.set_margin(0, 0, 8, 8);
            chart.draw_series(std::iter::once(rect))?;
            bottom = top;
        }
        let label = format!("{bottom:.2}{}", if bar.flagged { " !" } else { "" });
        chart.draw_series(std::iter::once(Text::new(
            label,
            (SegmentValue::CenterOf(i), bottom),
            above.clone(),
        )))?;
    }
    Ok(())
}
