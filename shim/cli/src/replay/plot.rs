//! `--plot`: live and reserved bytes over each trace's time, one panel per trace, one line per
//! policy, as a self-contained SVG (or the same SVG in an HTML page). Hand-written: a few
//! polylines and labels do not need a plotting library.

use std::fmt::Write as _;

use rocmguard_core::format_size;

use super::policy::Timeline;

/// One policy's line in a panel.
pub struct Line {
    pub name: String,
    pub timeline: Timeline,
    pub peak_live: u64,
    pub peak_reserved: u64,
    pub ooms: u64,
}

/// One trace.
pub struct Panel {
    pub title: String,
    /// What the program asked for, drawn as a grey area under the policies' lines.
    pub demand: Timeline,
    pub peak_live: u64,
    pub lines: Vec<Line>,
    /// The simulated device's capacity, when limited.
    pub capacity: Option<u64>,
}

const WIDTH: f64 = 1200.0;
const PANEL_HEIGHT: f64 = 360.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 330.0;
const TOP: f64 = 46.0;
const BOTTOM: f64 = 48.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// The panels as one SVG document.
pub fn svg(panels: &[Panel]) -> String {
    let height = PANEL_HEIGHT * panels.len().max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">"#,
        w = WIDTH,
        h = height
    );
    let _ = writeln!(
        out,
        r#"<rect width="{}" height="{}" fill="white"/>"#,
        WIDTH, height
    );
    for (i, p) in panels.iter().enumerate() {
        panel(&mut out, p, i as f64 * PANEL_HEIGHT);
    }
    out.push_str("</svg>\n");
    out
}

/// The SVG in a page of its own, for browsers that open `.html` more readily.
pub fn html(panels: &[Panel]) -> String {
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rocmguard replay</title></head>\n<body style=\"margin:0\">\n{}</body></html>\n",
        svg(panels)
    )
}

fn panel(out: &mut String, p: &Panel, y0: f64) {
    let (x, w) = (LEFT, WIDTH - LEFT - RIGHT);
    let (top, h) = (y0 + TOP, PANEL_HEIGHT - TOP - BOTTOM);
    let data_max = p
        .lines
        .iter()
        .flat_map(|l| l.timeline.reserved.iter().chain(&l.timeline.live))
        .chain(&p.demand.live)
        .copied()
        .max()
        .unwrap_or(0);
    // The capacity line is drawn only when it does not squash the data into a sliver.
    let capacity = p.capacity.filter(|&c| c <= data_max.saturating_mul(2));
    let (unit, unit_name) = unit_for(data_max.max(capacity.unwrap_or(0)));
    let top_value = data_max.max(capacity.unwrap_or(0)).max(1) as f64 / unit;
    let y_step = nice_step(top_value / 5.0);
    let y_max = (top_value / y_step).ceil().max(1.0) * y_step;
    let y_of = |v: u64| top + h - (v as f64 / unit / y_max) * h;

    let _ = writeln!(
        out,
        r#"<text x="{}" y="{:.1}" font-size="15" font-weight="bold">{}</text>"#,
        x,
        y0 + 24.0,
        escape(&p.title)
    );
    // Grid and y labels.
    let mut v = 0.0;
    while v <= y_max + y_step / 2.0 {
        let y = top + h - v / y_max * h;
        let _ = writeln!(
            out,
            r##"<line x1="{x}" y1="{y:.1}" x2="{x2}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{tx}" y="{ty:.1}" text-anchor="end">{label}</text>"##,
            x = x,
            x2 = x + w,
            y = y,
            tx = x - 6.0,
            ty = y + 4.0,
            label = trim_number(v)
        );
        v += y_step;
    }
    let _ = writeln!(
        out,
        r#"<text transform="translate({:.1},{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        x - 52.0,
        top + h / 2.0,
        unit_name
    );
    // X axis: seconds (or milliseconds) of the trace, or event numbers when it has no times.
    let t = &p.demand;
    let (x_unit, x_name) = if t.by_index {
        (1.0, "event")
    } else if t.span >= 2_000_000 {
        (1e6, "time (s)")
    } else {
        (1e3, "time (ms)")
    };
    let x_span = (t.span.max(1) as f64) / x_unit;
    let x_step = nice_step(x_span / 8.0);
    let mut s = 0.0;
    while s <= x_span {
        let px = x + s / x_span * w;
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{y1:.1}" x2="{px:.1}" y2="{y2:.1}" stroke="#999"/><text x="{px:.1}" y="{ty:.1}" text-anchor="middle">{label}</text>"##,
            px = px,
            y1 = top + h,
            y2 = top + h + 5.0,
            ty = top + h + 18.0,
            label = trim_number(s)
        );
        s += x_step;
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        x + w / 2.0,
        top + h + 36.0,
        x_name
    );
    let _ = writeln!(
        out,
        r##"<rect x="{}" y="{:.1}" width="{}" height="{:.1}" fill="none" stroke="#999"/>"##,
        x, top, w, h
    );

    // The demand as an area, then each policy's reserved bytes (and its live bytes where OOMs
    // made them differ from the demand).
    let n = t.live.len();
    let x_of = |b: usize| x + (b as f64 + 0.5) / n as f64 * w;
    let mut area = format!("M{:.1},{:.1}", x_of(0), top + h);
    for (b, &v) in t.live.iter().enumerate() {
        let _ = write!(area, " L{:.1},{:.1}", x_of(b), y_of(v));
    }
    let _ = write!(area, " L{:.1},{:.1} Z", x_of(n - 1), top + h);
    let _ = writeln!(out, r##"<path d="{}" fill="#cfcfcf"/>"##, area);
    // The first policy (rocmguard, by default) is drawn last, on top of the others.
    for (i, line) in p.lines.iter().enumerate().rev() {
        let color = COLORS[i % COLORS.len()];
        polyline(
            out,
            &line.timeline.reserved,
            &x_of,
            &y_of,
            color,
            "1.6",
            None,
        );
        if line.timeline.live != t.live {
            polyline(
                out,
                &line.timeline.live,
                &x_of,
                &y_of,
                color,
                "1",
                Some("4 3"),
            );
        }
    }
    if let Some(c) = capacity {
        let y = y_of(c);
        let _ = writeln!(
            out,
            r##"<line x1="{x}" y1="{y:.1}" x2="{x2}" y2="{y:.1}" stroke="#7a0000" stroke-dasharray="8 4"/><text x="{x2}" y="{ty:.1}" text-anchor="end" fill="#7a0000">capacity {label}</text>"##,
            x = x,
            x2 = x + w,
            y = y,
            ty = y - 4.0,
            label = format_size(c)
        );
    }

    // Legend: what each line is and its peak, so the plot reads without the table.
    let lx = x + w + 18.0;
    let mut ly = top + 6.0;
    let _ = writeln!(
        out,
        r##"<rect x="{lx}" y="{y:.1}" width="22" height="10" fill="#cfcfcf"/><text x="{tx}" y="{ty:.1}">live (what the program asked for)</text><text x="{tx}" y="{ty2:.1}" fill="#555">peak {peak}</text>"##,
        lx = lx,
        y = ly,
        tx = lx + 28.0,
        ty = ly + 9.0,
        ty2 = ly + 24.0,
        peak = format_size(p.peak_live)
    );
    ly += 42.0;
    for (i, line) in p.lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{y:.1}" x2="{lx2}" y2="{y:.1}" stroke="{color}" stroke-width="2.5"/><text x="{tx}" y="{ty:.1}">{name}</text>"#,
            lx = lx,
            lx2 = lx + 22.0,
            y = ly + 5.0,
            color = color,
            tx = lx + 28.0,
            ty = ly + 9.0,
            name = escape(&shorten(&line.name, 38)),
        );
        let mut notes = vec![format!("reserved peak {}", format_size(line.peak_reserved))];
        if line.peak_live > 0 {
            notes[0].push_str(&format!(
                " = {:.3}x live",
                line.peak_reserved as f64 / line.peak_live as f64
            ));
        }
        if line.timeline.live != p.demand.live {
            notes.push(format!("{} OOMs (dashed: its live bytes)", line.ooms));
        } else if line.ooms > 0 {
            notes.push(format!("{} OOMs", line.ooms));
        }
        for note in &notes {
            ly += 15.0;
            let _ = writeln!(
                out,
                r#"<text x="{tx}" y="{ty:.1}" fill="{color}">{note}</text>"#,
                tx = lx + 28.0,
                ty = ly + 9.0,
                color = color,
                note = escape(note)
            );
        }
        ly += 25.0;
    }
}

/// At most `max` characters, with an ellipsis where cut.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('\u{2026}');
    out
}

fn polyline(
    out: &mut String,
    values: &[u64],
    x_of: &dyn Fn(usize) -> f64,
    y_of: &dyn Fn(u64) -> f64,
    color: &str,
    width: &str,
    dash: Option<&str>,
) {
    let _ = write!(
        out,
        r#"<polyline fill="none" stroke="{}" stroke-width="{}" stroke-linejoin="round""#,
        color, width
    );
    if let Some(d) = dash {
        let _ = write!(out, r#" stroke-dasharray="{}""#, d);
    }
    out.push_str(r#" points=""#);
    for (b, &v) in values.iter().enumerate() {
        let _ = write!(out, "{:.1},{:.1} ", x_of(b), y_of(v));
    }
    out.push_str("\"/>\n");
}

/// Bytes per unit and the axis label for values up to `max` bytes.
fn unit_for(max: u64) -> (f64, &'static str) {
    if max >= 1 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else if max >= 1 << 20 {
        ((1u64 << 20) as f64, "MiB")
    } else if max >= 1 << 10 {
        (1024.0, "KiB")
    } else {
        (1.0, "bytes")
    }
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

fn trim_number(v: f64) -> String {
    let s = format!("{:.3}", v);
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_labels() {
        assert_eq!(nice_step(0.3), 0.5);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(11.0), 20.0);
        assert_eq!(trim_number(2.5), "2.5");
        assert_eq!(trim_number(10.0), "10");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
