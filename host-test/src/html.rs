//! The self-contained HTML timeline page of a [`Report`] (inline SVG, no scripts,
//! no external assets).

use std::fmt::Write as _;

use crate::report::{Class, Report};

const W: f64 = 960.0;
const PAD_L: f64 = 56.0;
const PAD_R: f64 = 16.0;

fn color(c: Class) -> &'static str {
    match c {
        Class::UpstreamOk => "#2e9d5b",
        Class::UpstreamFailed => "#d64541",
        Class::RejectedLocally => "#f0a030",
        Class::FallbackServed => "#3a7bd5",
        Class::FailClosed => "#8e44ad",
        Class::ClientReset => "#7f8c8d",
        Class::ClosedByFilter => "#34495e",
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn nice_max(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= v {
            return m * mag;
        }
    }
    10.0 * mag
}

/// Frame: phase bands, axes and gridlines; returns (svg-so-far, x-of-second fn params).
fn frame(out: &mut String, r: &Report, h: f64, ymax: f64, unit: &str) {
    let n = r.duration_s.max(1) as f64;
    let pw = W - PAD_L - PAD_R;
    let _ = write!(
        out,
        r#"<svg viewBox="0 0 {W} {}" width="100%" role="img">"#,
        h + 34.0
    );
    for (i, p) in r.phases.iter().enumerate() {
        let (from, label) = (&p.from_s, &p.label);
        let to = r.phases.get(i + 1).map(|p| p.from_s).unwrap_or(n).min(n);
        let x0 = PAD_L + pw * from / n;
        let x1 = PAD_L + pw * to / n;
        let fill = if !p.degraded {
            "#f4faf6"
        } else if i % 2 == 0 {
            "#fdf1f0"
        } else {
            "#fbeee3"
        };
        let _ = write!(
            out,
            r##"<rect x="{x0:.1}" y="14" width="{:.1}" height="{h:.1}" fill="{fill}"/><text x="{:.1}" y="11" font-size="11" fill="#555">{}</text>"##,
            (x1 - x0).max(0.0),
            x0 + 3.0,
            esc(label)
        );
    }
    for i in 0..=4 {
        let v = ymax * i as f64 / 4.0;
        let y = 14.0 + h - h * i as f64 / 4.0;
        let _ = write!(
            out,
            r##"<line x1="{PAD_L}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#555">{}</text>"##,
            W - PAD_R,
            PAD_L - 4.0,
            y + 4.0,
            if v >= 100.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        );
    }
    let step = ((n / 12.0).ceil() as u64).max(1);
    let mut s = 0;
    while s as f64 <= n {
        let x = PAD_L + pw * s as f64 / n;
        let _ = write!(
            out,
            r##"<text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#555">{s}s</text>"##,
            h + 28.0
        );
        s += step;
    }
    let _ = write!(
        out,
        r##"<text x="4" y="{:.1}" font-size="11" fill="#555">{unit}</text>"##,
        26.0
    );
}

fn outcome_chart(out: &mut String, r: &Report) {
    let h = 220.0;
    let ymax = nice_max(
        r.timeline
            .iter()
            .map(|s| s.requests as f64)
            .fold(0.0, f64::max),
    );
    frame(out, r, h, ymax, "req/s");
    let n = r.duration_s.max(1) as f64;
    let bw = (W - PAD_L - PAD_R) / n;
    for s in &r.timeline {
        let mut y = 14.0 + h;
        for c in Class::ALL {
            let v = *s.outcomes.get(c.name()).unwrap_or(&0) as f64;
            if v == 0.0 {
                continue;
            }
            let bh = h * v / ymax;
            y -= bh;
            let _ = write!(
                out,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{bh:.1}" fill="{}"><title>{}s {}: {v}</title></rect>"#,
                PAD_L + bw * s.t as f64 + 0.5,
                (bw - 1.0).max(0.5),
                color(c),
                s.t,
                c.name()
            );
        }
    }
    out.push_str("</svg>");
}

fn line(out: &mut String, r: &Report, pts: &[f64], ymax: f64, h: f64, color: &str, label: &str) {
    let n = r.duration_s.max(1) as f64;
    let pw = W - PAD_L - PAD_R;
    let mut d = String::new();
    for (i, v) in pts.iter().enumerate() {
        let x = PAD_L + pw * (i as f64 + 0.5) / n;
        let y = 14.0 + h - h * (v / ymax).min(1.0);
        let _ = write!(d, "{}{x:.1},{y:.1} ", if i == 0 { "M" } else { "L" });
    }
    let _ = write!(
        out,
        r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="2"><title>{}</title></path>"#,
        esc(label)
    );
}

fn latency_chart(out: &mut String, r: &Report) {
    let h = 160.0;
    let p99: Vec<f64> = r.timeline.iter().map(|s| s.p99_ms).collect();
    let p50: Vec<f64> = r.timeline.iter().map(|s| s.p50_ms).collect();
    let ymax = nice_max(p99.iter().copied().fold(0.0, f64::max));
    frame(out, r, h, ymax, "ms");
    line(out, r, &p99, ymax, h, "#d64541", "p99");
    line(out, r, &p50, ymax, h, "#3a7bd5", "p50");
    out.push_str("</svg>");
}

fn metric_panels(out: &mut String, r: &Report) {
    out.push_str(r#"<div class="grid">"#);
    for (name, series) in r.metric_series.iter().take(48) {
        let max = series.iter().copied().max().unwrap_or(0) as f64;
        let ymax = nice_max(max);
        let (pw, ph) = (280.0, 60.0);
        let mut d = String::new();
        let n = series.len().max(2) as f64 - 1.0;
        for (i, v) in series.iter().enumerate() {
            let x = pw * i as f64 / n;
            let y = ph - ph * (*v as f64 / ymax);
            let _ = write!(d, "{}{x:.1},{y:.1} ", if i == 0 { "M" } else { "L" });
        }
        let last = series.last().copied().unwrap_or(0);
        let _ = write!(
            out,
            r##"<div class="panel"><div class="mname">{}</div><div class="mval">{last}</div><svg viewBox="-2 -2 {} {}" width="100%"><path d="{d}" fill="none" stroke="#3a7bd5" stroke-width="1.5"/></svg><div class="mmax">max {max:.0}</div></div>"##,
            esc(name),
            pw + 4.0,
            ph + 4.0
        );
    }
    out.push_str("</div>");
}

/// Renders the page.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let t = &r.totals;
    let get = |c: Class| *t.outcomes.get(c.name()).unwrap_or(&0);
    let pct = |v: u64| {
        if t.requests == 0 {
            0.0
        } else {
            100.0 * v as f64 / t.requests as f64
        }
    };
    let _ = write!(
        o,
        r#"<!doctype html><html><head><meta charset="utf-8"><title>{name} — fusewire-host report</title><style>
body{{font:14px/1.4 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#222}}
h1{{font-size:20px;margin:0}} h2{{font-size:15px;margin:22px 0 6px}} .sub{{color:#666}}
.cards{{display:flex;flex-wrap:wrap;gap:8px;margin:14px 0}} .card{{border:1px solid #ddd;border-radius:6px;padding:8px 12px;min-width:110px}}
.card b{{display:block;font-size:20px}} .sw{{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}}
.legend span{{margin-right:14px;font-size:12px}} table{{border-collapse:collapse;font-size:13px}} td,th{{border-bottom:1px solid #eee;padding:3px 10px;text-align:right}}
th:first-child,td:first-child{{text-align:left}} .grid{{display:grid;grid-template-columns:repeat(3,1fr);gap:10px}}
.panel{{border:1px solid #eee;border-radius:6px;padding:6px}} .mname{{font-size:12px;color:#555;overflow-wrap:anywhere}} .mval{{font-size:16px;font-weight:600}} .mmax{{font-size:11px;color:#888}}
pre{{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}}
</style></head><body><h1>{name}</h1><div class="sub">module {module} · seed {seed} · {clock} clock · {workers} workers · {dur} s</div>"#,
        name = esc(&r.scenario),
        module = esc(&r.module),
        seed = r.seed,
        clock = r.clock,
        workers = r.workers,
        dur = r.duration_s
    );
    o.push_str(r#"<div class="cards">"#);
    let all = r.latency.get("all").cloned().unwrap_or_default();
    let _ = write!(
        o,
        r#"<div class="card">requests<b>{}</b></div>"#,
        t.requests
    );
    for c in Class::ALL {
        let v = get(c);
        if v == 0 && !matches!(c, Class::UpstreamOk | Class::UpstreamFailed) {
            continue;
        }
        let _ = write!(
            o,
            r#"<div class="card"><span class="sw" style="background:{}"></span>{}<b>{v}</b>{:.1}%</div>"#,
            color(c),
            c.name().replace('_', " "),
            pct(v)
        );
    }
    let _ = write!(
        o,
        r#"<div class="card">sent upstream<b>{}</b>{:.1}%</div>"#,
        t.sent_upstream,
        pct(t.sent_upstream)
    );
    let _ = write!(
        o,
        r#"<div class="card">latency p50 / p99<b>{:.1} / {:.1}</b>ms</div></div>"#,
        all.p50_ms, all.p99_ms
    );
    o.push_str(r#"<h2>Outcomes per second (by request start; shaded bands = upstream phases)</h2><div class="legend">"#);
    for c in Class::ALL {
        let _ = write!(
            o,
            r#"<span><span class="sw" style="background:{}"></span>{}</span>"#,
            color(c),
            c.name().replace('_', " ")
        );
    }
    o.push_str("</div>");
    outcome_chart(&mut o, r);
    o.push_str(r##"<h2>Latency per second: <span style="color:#3a7bd5">p50</span> and <span style="color:#d64541">p99</span></h2>"##);
    latency_chart(&mut o, r);
    if !r.metric_series.is_empty() {
        o.push_str("<h2>Metrics over time (value at the end of each second)</h2>");
        metric_panels(&mut o, r);
    }
    o.push_str("<h2>Latency percentiles (ms)</h2><table><tr><th>class</th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>");
    for (k, p) in &r.latency {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
            esc(k),
            p.count,
            p.mean_ms,
            p.p50_ms,
            p.p90_ms,
            p.p99_ms,
            p.p999_ms,
            p.max_ms
        );
    }
    o.push_str("</table><h2>Filter local replies</h2><table><tr><th>x-fusewire tag</th><th>count</th></tr>");
    for (k, v) in &t.local_by_tag {
        let _ = write!(o, "<tr><td>{}</td><td>{v}</td></tr>", esc(k));
    }
    o.push_str("</table><br><table><tr><th>status</th><th>count</th></tr>");
    for (k, v) in &t.local_by_status {
        let _ = write!(o, "<tr><td>{}</td><td>{v}</td></tr>", esc(k));
    }
    let _ = write!(
        o,
        "</table><h2>/stats</h2><pre>{}</pre><div class=\"sub\">upstream attempts failed: {} · unfinished at end: {}</div></body></html>",
        esc(&r.stats),
        t.upstream_attempt_failed,
        t.unfinished
    );
    o
}
