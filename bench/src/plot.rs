//! Figures like the seeds': latency and bandwidth against message size, availability against
//! polling factor, double-buffering rate against buffer size, EMP throughput against CPU
//! fraction. Each is written as SVG and PNG (plotters); text needs a TTF font (DejaVu Sans,
//! Debian's fonts-dejavu-core, or $TIGON_PLOT_FONT).

use crate::mpi::{MpiReport, Transport, TransportResult};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

/// Registers the font plotters draws text with (once per process).
fn font() -> Result<(), String> {
    static FONT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    FONT.get_or_init(|| {
        let paths: Vec<PathBuf> = std::env::var_os("TIGON_PLOT_FONT")
            .map(PathBuf::from)
            .into_iter()
            .chain(FONT_PATHS.iter().map(PathBuf::from))
            .collect();
        let path = paths.iter().find(|p| p.exists()).ok_or(
            "no font for plot text (install fonts-dejavu-core: `make setup`, or set TIGON_PLOT_FONT to a .ttf)",
        )?;
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        // plotters keeps a &'static reference to the font: it lives for the process.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| format!("{}: not a usable font", path.display()))
    })
    .clone()
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ticks {
    Plain,
    Bytes,
    Percent,
}

#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    pub log: bool,
    pub ticks: Ticks,
    /// Fixed range (otherwise from the data).
    pub range: Option<(f64, f64)>,
}

impl Axis {
    pub fn log(label: &str, ticks: Ticks) -> Axis {
        Axis {
            label: label.into(),
            log: true,
            ticks,
            range: None,
        }
    }
    pub fn lin(label: &str, ticks: Ticks) -> Axis {
        Axis {
            label: label.into(),
            log: false,
            ticks,
            range: None,
        }
    }
    pub fn range(mut self, lo: f64, hi: f64) -> Axis {
        self.range = Some((lo, hi));
        self
    }
}

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub color: RGBColor,
    pub points: Vec<(f64, f64)>,
    pub dashed: bool,
}

#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
}

fn color(t: Transport) -> RGBColor {
    match t {
        Transport::Tigon => RGBColor(214, 39, 40),
        Transport::Tcp => RGBColor(31, 119, 180),
        Transport::Vader => RGBColor(44, 160, 44),
    }
}

fn fmt_tick(t: Ticks, v: f64) -> String {
    match t {
        Ticks::Bytes if v >= (1 << 20) as f64 => format!("{}M", trim(v / (1 << 20) as f64)),
        Ticks::Bytes if v >= 1024.0 => format!("{}K", trim(v / 1024.0)),
        Ticks::Percent => format!("{}%", trim(v)),
        _ => trim(v),
    }
}

fn trim(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 || (v.fract() == 0.0 && v.abs() >= 1.0) {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The axis range: fixed, or the data's with a margin (positive values only on log axes).
fn data_range(a: &Axis, vals: impl Iterator<Item = f64>) -> (f64, f64) {
    if let Some(r) = a.range {
        return r;
    }
    let v: Vec<f64> = vals
        .filter(|v| v.is_finite() && (!a.log || *v > 0.0))
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return if a.log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if a.log {
        (lo / 1.5, if hi > lo { hi * 1.5 } else { lo * 10.0 })
    } else {
        (lo.min(0.0), if hi > 0.0 { hi * 1.1 } else { 1.0 })
    }
}

fn draw_panel<DB, X, Y>(area: &DrawingArea<DB, Shift>, p: &Panel, x: X, y: Y) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(&p.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x, y)
        .map_err(e)?;
    let (xt, yt) = (p.x.ticks, p.y.ticks);
    let xf = move |v: &f64| fmt_tick(xt, *v);
    let yf = move |v: &f64| fmt_tick(yt, *v);
    chart
        .configure_mesh()
        .x_desc(p.x.label.as_str())
        .y_desc(p.y.label.as_str())
        .x_label_formatter(&xf)
        .y_label_formatter(&yf)
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    let keep = |(x, y): &(f64, f64)| {
        x.is_finite() && y.is_finite() && (!p.x.log || *x > 0.0) && (!p.y.log || *y > 0.0)
    };
    let mut any = false;
    for s in &p.series {
        // Lines join points left to right (a measured x such as a CPU fraction can come out
        // of order).
        let mut pts: Vec<(f64, f64)> = s.points.iter().copied().filter(keep).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if pts.is_empty() {
            continue;
        }
        any = true;
        let c = s.color;
        let style = c.stroke_width(2);
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, c.stroke_width(1)))
                .map_err(e)?
                .label(s.name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(1))
                });
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(e)?
                .label(s.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            chart
                .draw_series(pts.iter().map(|&pt| Circle::new(pt, 3, c.filled())))
                .map_err(e)?;
        }
    }
    if any {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

fn draw_figure<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    cols: usize,
    panels: &[Panel],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(e)?;
    let rows = panels.len().div_ceil(cols);
    for (area, p) in root.split_evenly((rows, cols)).iter().zip(panels) {
        let all = || p.series.iter().flat_map(|s| s.points.iter());
        let (x0, x1) = data_range(&p.x, all().map(|q| q.0));
        let (y0, y1) = data_range(&p.y, all().map(|q| q.1));
        // Sizes get ticks at powers of 4 (1K, 4K, 16K, ...), the rest at powers of 10.
        let base = |a: &Axis| if a.ticks == Ticks::Bytes { 4.0 } else { 10.0 };
        let (xl, yl) = (
            (x0..x1).log_scale().base(base(&p.x)),
            (y0..y1).log_scale().base(base(&p.y)),
        );
        match (p.x.log, p.y.log) {
            (true, true) => draw_panel(area, p, xl, yl)?,
            (true, false) => draw_panel(area, p, xl, y0..y1)?,
            (false, true) => draw_panel(area, p, x0..x1, yl)?,
            (false, false) => draw_panel(area, p, x0..x1, y0..y1)?,
        }
    }
    root.present().map_err(e)
}

/// Writes `dir/name.svg` and `dir/name.png`.
pub fn figure(
    dir: &Path,
    name: &str,
    title: &str,
    cols: usize,
    panels: &[Panel],
) -> Result<Vec<PathBuf>, String> {
    font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let rows = panels.len().div_ceil(cols) as u32;
    let size = (560 * cols as u32, 60 + 400 * rows);
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    draw_figure(
        SVGBackend::new(&svg, size).into_drawing_area(),
        title,
        cols,
        panels,
    )?;
    draw_figure(
        BitMapBackend::new(&png, size).into_drawing_area(),
        title,
        cols,
        panels,
    )?;
    Ok(vec![svg, png])
}

fn series(r: &TransportResult, suffix: &str, dashed: bool, points: Vec<(f64, f64)>) -> Series {
    Series {
        name: format!("{}{suffix}", r.label),
        color: color(r.transport),
        points,
        dashed,
    }
}

/// All figures of `tigon bench mpi` into `dir`; returns the files written.
pub fn mpi_figures(rep: &MpiReport, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let ts = &rep.transports;
    let mut out = Vec::new();
    let bytes = || Axis::log("message size (bytes)", Ticks::Bytes);
    let us = |l: &str| Axis::log(l, Ticks::Plain);

    if ts.iter().any(|r| !r.logp.is_empty()) {
        type Get = fn(&crate::mpi::LogpRow) -> f64;
        let quantities: [(&str, Get, Option<Get>); 5] = [
            (
                "RTT/2 (p50, p99 dashed)",
                |x| x.rtt_half.p50_us,
                Some(|x| x.rtt_half.p99_us),
            ),
            ("send overhead o_s (p50)", |x| x.o_s.p50_us, None),
            ("receive overhead o_r (p50)", |x| x.o_r.p50_us, None),
            ("gap g", |x| x.g_us, None),
            ("latency L = RTT/2 - o_s - o_r", |x| x.l_us, None),
        ];
        let panels: Vec<Panel> = quantities
            .iter()
            .map(|(title, get, p99)| {
                let mut s: Vec<Series> = ts
                    .iter()
                    .map(|r| {
                        series(
                            r,
                            "",
                            false,
                            r.logp.iter().map(|x| (x.size as f64, get(x))).collect(),
                        )
                    })
                    .collect();
                if let Some(p99) = p99 {
                    s.extend(ts.iter().map(|r| {
                        series(
                            r,
                            " p99",
                            true,
                            r.logp.iter().map(|x| (x.size as f64, p99(x))).collect(),
                        )
                    }));
                }
                Panel {
                    title: (*title).into(),
                    x: bytes(),
                    y: us("us"),
                    series: s,
                }
            })
            .collect();
        out.extend(figure(
            dir,
            "mpi_latency",
            "LogP against message size (seed 002, Fig. 3-8)",
            2,
            &panels,
        )?);
    }

    if ts.iter().any(|r| !r.bandwidth.is_empty()) {
        type Get = fn(&crate::mpi::BwRow) -> Option<f64>;
        let kinds: [(&str, Get); 3] = [
            ("unidirectional", |b| b.uni_mb_s),
            ("ping-pong", |b| b.pingpong_mb_s),
            ("simultaneous bidirectional (sum)", |b| b.bidir_mb_s),
        ];
        let panels: Vec<Panel> = kinds
            .iter()
            .map(|(title, get)| Panel {
                title: (*title).into(),
                x: bytes(),
                y: Axis::lin("MB/s", Ticks::Plain),
                series: ts
                    .iter()
                    .map(|r| {
                        series(
                            r,
                            "",
                            false,
                            r.bandwidth
                                .iter()
                                .filter_map(|b| Some((b.size as f64, get(b)?)))
                                .collect(),
                        )
                    })
                    .collect(),
            })
            .collect();
        out.extend(figure(
            dir,
            "mpi_bandwidth",
            "bandwidth against message size (seed 002, Fig. 9-12)",
            3,
            &panels,
        )?);
    }

    if ts.iter().any(|r| !r.availability.is_empty()) {
        let mut panels = Vec::new();
        for size in [32 << 10, 1 << 20] {
            let label = crate::mpi::human_size(size);
            let poll = || Axis::log("polling factor (work units between MPI_Test)", Ticks::Plain);
            panels.push(Panel {
                title: format!("availability, {label} messages"),
                x: poll(),
                y: Axis::lin("availability", Ticks::Percent).range(0.0, 110.0),
                series: ts
                    .iter()
                    .map(|r| {
                        series(
                            r,
                            "",
                            false,
                            r.availability
                                .iter()
                                .filter(|a| a.size == size)
                                .map(|a| (a.poll as f64, a.availability * 100.0))
                                .collect(),
                        )
                    })
                    .collect(),
            });
            panels.push(Panel {
                title: format!("bandwidth (dashed) and effective bandwidth, {label}"),
                x: poll(),
                y: Axis::lin("MB/s", Ticks::Plain),
                series: ts
                    .iter()
                    .flat_map(|r| {
                        let pts = |f: fn(&crate::mpi::AvailRow) -> f64| {
                            r.availability
                                .iter()
                                .filter(|a| a.size == size)
                                .map(|a| (a.poll as f64, f(a)))
                                .collect()
                        };
                        [
                            series(r, " effective", false, pts(|a| a.effective_mb_s)),
                            series(r, "", true, pts(|a| a.bandwidth_mb_s)),
                        ]
                    })
                    .collect(),
            });
        }
        out.extend(figure(
            dir,
            "mpi_availability",
            "processor availability against polling factor (seed 001, Fig. 10-11)",
            2,
            &panels,
        )?);
    }

    if ts.iter().any(|r| !r.double_buffering.is_empty()) {
        let panels: Vec<Panel> = ["producer", "consumer"]
            .iter()
            .map(|regime| Panel {
                title: format!("{regime}-bound (dashed: min(producer, consumer))"),
                x: Axis::log("buffer size (bytes)", Ticks::Bytes),
                y: Axis::lin("MB/s", Ticks::Plain),
                series: ts
                    .iter()
                    .flat_map(|r| {
                        let rows: Vec<&crate::mpi::DbufRow> = r
                            .double_buffering
                            .iter()
                            .filter(|d| d.regime == *regime)
                            .collect();
                        [
                            series(
                                r,
                                "",
                                false,
                                rows.iter().map(|d| (d.bsize as f64, d.rate_mb_s)).collect(),
                            ),
                            series(
                                r,
                                " bound",
                                true,
                                rows.iter()
                                    .map(|d| (d.bsize as f64, d.producer_mb_s.min(d.consumer_mb_s)))
                                    .collect(),
                            ),
                        ]
                    })
                    .collect(),
            })
            .collect();
        out.extend(figure(
            dir,
            "mpi_double_buffering",
            "double buffering: rate against buffer size (seed 000, Fig. 8, 11)",
            2,
            &panels,
        )?);
    }

    if ts.iter().any(|r| !r.emp.is_empty()) {
        let panels = vec![
            Panel {
                title: "throughput against CPU fraction computing".into(),
                x: Axis::lin("CPU fraction used by the compute step", Ticks::Percent)
                    .range(0.0, 100.0),
                y: Axis::lin("Mbit/s (sent + received)", Ticks::Plain),
                series: ts
                    .iter()
                    .map(|r| {
                        series(
                            r,
                            "",
                            false,
                            r.emp
                                .iter()
                                .map(|e| (e.cpu_fraction * 100.0, e.throughput_mbit_s))
                                .collect(),
                        )
                    })
                    .collect(),
            },
            Panel {
                title: "MPI_Waitall per 10 kB message (p50)".into(),
                x: Axis::log("compute per batch (us)", Ticks::Plain),
                y: us("us"),
                series: ts
                    .iter()
                    .map(|r| {
                        series(
                            r,
                            "",
                            false,
                            r.emp
                                .iter()
                                .map(|e| (e.compute_us, e.waitall_per_msg_us))
                                .collect(),
                        )
                    })
                    .collect(),
            },
        ];
        out.extend(figure(
            dir,
            "mpi_emp",
            "EMP's loop: 5 Irecv, 5 Isend of 10 kB, compute, Waitall (seed 003, Fig. 6)",
            2,
            &panels,
        )?);
    }
    Ok(out)
}
