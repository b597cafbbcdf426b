//! The stage chart of `stave bench pipeline`: time per stage, serial beside parallel, as
//! an SVG (like the FISCO BCOS figure).

use std::path::Path;

use plotters::prelude::*;

use crate::BenchError;

/// One stage's times, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct StageBar {
    /// Stage name.
    pub stage: &'static str,
    /// Serial time.
    pub serial_ms: f64,
    /// Parallel time.
    pub parallel_ms: f64,
}

/// Writes the chart to `path`.
pub fn write_stage_chart(path: &Path, title: &str, bars: &[StageBar]) -> Result<(), BenchError> {
    let root = SVGBackend::new(path, (900, 500)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| BenchError::Chart(format!("drawing {}: {e}", path.display())))?;
    let top = bars
        .iter()
        .map(|b| b.serial_ms.max(b.parallel_ms))
        .fold(1.0, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..bars.len() as f64, 0f64..top)
        .map_err(|e| BenchError::Chart(format!("chart: {e}")))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        // Stages are named above their bars instead of on the axis.
        .x_label_formatter(&|_| String::new())
        .y_desc("ms")
        .draw()
        .map_err(|e| BenchError::Chart(format!("chart mesh: {e}")))?;
    let series = [("serial", RED.mix(0.7)), ("parallel", BLUE.mix(0.7))];
    for (offset, (name, color)) in series.into_iter().enumerate() {
        let rects = bars.iter().enumerate().map(move |(i, bar)| {
            let value = if offset == 0 {
                bar.serial_ms
            } else {
                bar.parallel_ms
            };
            let left = i as f64 + 0.1 + 0.4 * offset as f64;
            Rectangle::new([(left, 0.0), (left + 0.38, value)], color.filled())
        });
        chart
            .draw_series(rects)
            .map_err(|e| BenchError::Chart(format!("chart bars: {e}")))?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .draw_series(bars.iter().enumerate().map(|(i, bar)| {
            // The anchor is the text's top: leave room for its height above the bars.
            let y = bar.serial_ms.max(bar.parallel_ms) + top * 0.07;
            Text::new(bar.stage, (i as f64 + 0.4, y), ("sans-serif", 16))
        }))
        .map_err(|e| BenchError::Chart(format!("chart labels: {e}")))?;
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .draw()
        .map_err(|e| BenchError::Chart(format!("chart legend: {e}")))?;
    root.present()
        .map_err(|e| BenchError::Chart(format!("writing {}: {e}", path.display())))?;
    Ok(())
}
