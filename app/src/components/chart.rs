//! Charts drawn as SVG by the app itself (BEY-1), so they render on the server and read without
//! JavaScript. Every mark is named (`aria-label`, and a `<title>` the browser shows on hover).
//! A chart is one stop of the Tab key, on its latest mark; once hydrated, the arrow keys (and Home
//! and End) move among its marks, and the mark under the pointer or focus has its values spelled
//! out beside the chart. The numbers are in the page's table as well.

use leptos::prelude::*;

/// Drawing size in SVG units; the SVG scales to its container's width.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
/// Room for the value axis on the left and the day labels below.
const LEFT: f64 = 56.0;
const BOTTOM: f64 = 24.0;
const TOP: f64 = 8.0;

/// One part of a stacked bar (a series), with its fill.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: &'static str,
    /// Tailwind fill class, e.g. `fill-slate-700`.
    pub fill: &'static str,
}

/// One bar: its axis label, its parts' values (in the order of the series) and its full
/// description, for screen readers and the hover text.
#[derive(Clone, Debug)]
pub struct Bar {
    pub label: String,
    pub values: Vec<f64>,
    pub describe: String,
}

/// The smallest "nice" number (1, 2 or 5 times a power of ten) at or above `v`.
pub fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * power).find(|n| *n >= v).unwrap_or(10.0 * power)
}

/// Compact counts for axis labels: 950, 1.2k, 3.4M.
pub fn compact(v: f64) -> String {
    match v.abs() {
        a if a >= 1e9 => format!("{:.1}G", v / 1e9),
        a if a >= 1e6 => format!("{:.1}M", v / 1e6),
        a if a >= 1e3 => format!("{:.1}k", v / 1e3),
        _ => format!("{v:.0}"),
    }
    .replace(".0", "")
}

/// Which labels of `n` to print under the axis so they do not collide (about 10 at most).
fn label_every(n: usize) -> usize {
    n.div_ceil(10).max(1)
}

/// The caption under a chart: the values of the mark in focus, or `hint`.
#[component]
fn Readout(active: RwSignal<Option<String>>, hint: String) -> impl IntoView {
    view! {
        <p class="mt-1 min-h-5 text-xs text-slate-600" aria-live="polite">
            {move || active.get().unwrap_or_else(|| hint.clone())}
        </p>
    }
}

/// Grid lines and value labels at 0, half and the top of the scale.
fn value_axis(top: f64, format: fn(f64) -> String) -> impl IntoView {
    let plot = HEIGHT - BOTTOM - TOP;
    [0.0, 0.5, 1.0]
        .into_iter()
        .map(|f| {
            let y = TOP + plot * (1.0 - f);
            view! {
                <line x1=LEFT x2=WIDTH y1=y y2=y class="stroke-slate-200" stroke-width="1" />
                <text x=LEFT - 6.0 y=y + 4.0 text-anchor="end" class="fill-slate-500 text-[11px]">{format(top * f)}</text>
            }
        })
        .collect_view()
}

/// A chart's frame: its caption (the accessible name), its legend, the SVG with its one-line
/// summary (the accessible description), and the readout of the mark in focus.
#[component]
fn Figure(
    id: &'static str,
    title: &'static str,
    summary: String,
    /// Height of the drawing in SVG units (the width is [`WIDTH`]).
    height: f64,
    legend: Vec<Series>,
    hint: &'static str,
    active: RwSignal<Option<String>>,
    children: Children,
) -> impl IntoView {
    let title_id = format!("{id}-title");
    let desc_id = format!("{id}-desc");
    let described_by = desc_id.clone();
    let legend = (!legend.is_empty()).then(|| {
        let keys = legend
            .into_iter()
            .map(|s| {
                view! {
                    <span class="inline-flex items-center gap-1">
                        <svg width="10" height="10" aria-hidden="true"><rect width="10" height="10" class=s.fill /></svg>
                        {s.name}
                    </span>
                }
            })
            .collect_view();
        view! { <p class="mt-1 flex flex-wrap gap-3 text-xs text-slate-600">{keys}</p> }
    });
    view! {
        <figure class="rounded-lg border border-slate-200 bg-white p-4" data-chart=id>
            <figcaption id=title_id.clone() class="text-sm font-medium text-slate-800">{title}</figcaption>
            {legend}
            <svg role="group" aria-labelledby=title_id aria-describedby=described_by viewBox=format!("0 0 {WIDTH} {height}")
                class="mt-2 h-auto w-full" preserveAspectRatio="xMidYMid meet">
                <desc id=desc_id>{summary}</desc>
                {children()}
            </svg>
            <Readout active hint=hint.to_owned() />
        </figure>
    }
}

/// Mark `index` of `count`: named for screen readers, with a `<title>` the browser shows on hover,
/// and spelled out in the readout while pointed at or focused. Only the chart's current mark
/// (`current`, the latest at first) takes Tab focus; the arrow keys move it. `focus` is the
/// Tailwind class that outlines its shape when focused.
#[component]
fn Mark(
    describe: String,
    index: usize,
    count: usize,
    current: RwSignal<usize>,
    active: RwSignal<Option<String>>,
    focus: &'static str,
    children: Children,
) -> impl IntoView {
    let (hovered, focused, named) = (describe.clone(), describe.clone(), describe.clone());
    let keys = move |ev: leptos::ev::KeyboardEvent| {
        let to = match ev.key().as_str() {
            "ArrowRight" | "ArrowDown" => (index + 1).min(count.saturating_sub(1)),
            "ArrowLeft" | "ArrowUp" => index.saturating_sub(1),
            "Home" => 0,
            "End" => count.saturating_sub(1),
            _ => return,
        };
        ev.prevent_default();
        current.set(to);
        focus_mark(&ev, to);
    };
    view! {
        <g role="img" tabindex=move || if current.get() == index { "0" } else { "-1" } data-mark=index
            aria-label=named class=format!("outline-none {focus}")
            on:mouseenter=move |_| active.set(Some(hovered.clone()))
            on:focus=move |_| {
                current.set(index);
                active.set(Some(focused.clone()));
            }
            on:keydown=keys
            on:mouseleave=move |_| active.set(None)
            on:blur=move |_| active.set(None)>
            <title>{describe}</title>
            {children()}
        </g>
    }
}

/// Moves the keyboard focus to the chart's mark `index` (a sibling of the event's mark).
#[allow(unused_variables)]
fn focus_mark(ev: &leptos::ev::KeyboardEvent, index: usize) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let sibling = ev
            .current_target()
            .and_then(|t| t.dyn_into::<web_sys::Element>().ok())
            .and_then(|mark| mark.parent_element())
            .and_then(|chart| chart.query_selector(&format!("[data-mark=\"{index}\"]")).ok().flatten())
            .and_then(|m| m.dyn_into::<web_sys::SvgElement>().ok());
        if let Some(mark) = sibling {
            let _ = mark.focus();
        }
    }
}

/// A bar per day (or any label), each stacked from its series' values.
#[component]
pub fn StackedBars(
    /// Unique on the page: names the chart's title for `aria-labelledby`.
    id: &'static str,
    title: &'static str,
    /// One sentence of what the chart shows, read by screen readers.
    summary: String,
    series: Vec<Series>,
    bars: Vec<Bar>,
    /// Formats the value axis.
    format: fn(f64) -> String,
) -> impl IntoView {
    let active = RwSignal::new(None::<String>);
    let current = RwSignal::new(bars.len().saturating_sub(1));
    let top = nice_ceiling(bars.iter().map(|b| b.values.iter().sum::<f64>()).fold(0.0, f64::max));
    let plot = HEIGHT - BOTTOM - TOP;
    let slot = (WIDTH - LEFT) / bars.len().max(1) as f64;
    let every = label_every(bars.len());
    let n = bars.len();
    let marks = bars
        .into_iter()
        .enumerate()
        .map(|(i, bar)| {
            let x = LEFT + slot * i as f64 + slot * 0.15;
            let w = slot * 0.7;
            let mut base = TOP + plot;
            let parts = bar
                .values
                .iter()
                .zip(&series)
                .map(|(v, s)| {
                    let h = plot * v / top;
                    base -= h;
                    view! { <rect x=x y=base width=w height=h class=s.fill /> }
                })
                .collect_view();
            let label = (i % every == 0 || i + 1 == n).then(|| {
                view! {
                    <text x=x + w / 2.0 y=HEIGHT - 6.0 text-anchor="middle" class="fill-slate-500 text-[11px]">{bar.label.clone()}</text>
                }
            });
            view! {
                <Mark describe=bar.describe index=i count=n current active focus="focus:[&>rect.hit]:stroke-slate-900">
                    <rect class="hit fill-transparent" stroke-width="2" x=LEFT + slot * i as f64 y=TOP width=slot height=plot />
                    {parts}
                </Mark>
                {label}
            }
        })
        .collect_view();
    view! {
        <Figure id title summary height=HEIGHT legend=series hint="Hover over or focus a bar for its values." active>
            {value_axis(top, format)}
            {marks}
        </Figure>
    }
}

/// A line over days of a share (0..=1), with a focusable point per day. A day without a share
/// (no calls) breaks the line and has no point, rather than reading as 0 %.
#[component]
pub fn RateLine(
    id: &'static str,
    title: &'static str,
    summary: String,
    /// Label, share (none on a day without calls), description.
    points: Vec<(String, Option<f64>, String)>,
) -> impl IntoView {
    let active = RwSignal::new(None::<String>);
    let current = RwSignal::new(points.len().saturating_sub(1));
    let top = nice_ceiling(points.iter().filter_map(|p| p.1).fold(0.05, f64::max)).min(1.0);
    let plot = HEIGHT - BOTTOM - TOP;
    let n = points.len();
    let step = (WIDTH - LEFT) / n.max(1) as f64;
    let at = move |i: usize, v: f64| (LEFT + step * (i as f64 + 0.5), TOP + plot * (1.0 - v / top));
    // One polyline per run of days with calls.
    let mut runs: Vec<Vec<String>> = vec![Vec::new()];
    for (i, p) in points.iter().enumerate() {
        match p.1 {
            Some(v) => {
                let (x, y) = at(i, v);
                if let Some(run) = runs.last_mut() {
                    run.push(format!("{x:.1},{y:.1}"));
                }
            }
            None => runs.push(Vec::new()),
        }
    }
    let lines = runs
        .into_iter()
        .filter(|r| r.len() > 1)
        .map(|r| view! { <polyline points=r.join(" ") fill="none" class="stroke-rose-600" stroke-width="2" /> })
        .collect_view();
    let every = label_every(n);
    let marks = points
        .into_iter()
        .enumerate()
        .map(|(i, (label, v, describe))| {
            let (x, y) = at(i, v.unwrap_or(0.0));
            let day = (i % every == 0 || i + 1 == n).then(|| {
                view! { <text x=x y=HEIGHT - 6.0 text-anchor="middle" class="fill-slate-500 text-[11px]">{label}</text> }
            });
            let point = v.is_some().then(|| view! { <circle cx=x cy=y r="3.5" class="fill-rose-600" stroke-width="2" /> });
            view! {
                <Mark describe index=i count=n current active focus="focus:[&>circle]:stroke-slate-900">
                    <rect class="fill-transparent" x=x - step / 2.0 y=TOP width=step height=plot />
                    {point}
                </Mark>
                {day}
            }
        })
        .collect_view();
    view! {
        <Figure id title summary height=HEIGHT legend=Vec::new() hint="Hover over or focus a day for its values." active>
            {value_axis(top, |v| format!("{:.0} %", v * 100.0))}
            {lines}
            {marks}
        </Figure>
    }
}

/// A horizontal bar per item (models), longest first, with the value written after each bar.
#[component]
pub fn RankedBars(
    id: &'static str,
    title: &'static str,
    summary: String,
    /// Label, value, value as written, description.
    rows: Vec<(String, f64, String, String)>,
) -> impl IntoView {
    let active = RwSignal::new(None::<String>);
    let current = RwSignal::new(0);
    let count = rows.len();
    let top = rows.iter().map(|r| r.1).fold(0.0, f64::max).max(1.0);
    let row_h = 26.0;
    let label_w = 210.0;
    let value_w = 90.0;
    let height = row_h * rows.len().max(1) as f64;
    let marks = rows
        .into_iter()
        .enumerate()
        .map(|(i, (label, v, written, describe))| {
            let y = row_h * i as f64;
            let w = (WIDTH - label_w - value_w) * v / top;
            view! {
                <Mark describe index=i count current active focus="focus:[&>rect.bar]:stroke-slate-900">
                    <text x=label_w - 8.0 y=y + 17.0 text-anchor="end" class="fill-slate-700 text-[12px]">{label}</text>
                    <rect class="bar fill-slate-700" stroke-width="2" x=label_w y=y + 5.0 width=w.max(1.0) height=row_h - 10.0 />
                    <text x=label_w + w + 6.0 y=y + 17.0 class="fill-slate-600 text-[12px]">{written}</text>
                </Mark>
            }
        })
        .collect_view();
    view! {
        <Figure id title summary height legend=Vec::new() hint="Hover over or focus a model for its values." active>
            {marks}
        </Figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_round_up_to_readable_numbers() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(12.0), 20.0);
        assert_eq!(nice_ceiling(41.0), 50.0);
        assert_eq!(nice_ceiling(0.031), 0.05);
        assert_eq!(compact(1_240.0), "1.2k");
        assert_eq!(compact(3_000_000.0), "3M");
        assert_eq!(compact(950.0), "950");
        assert_eq!(label_every(7), 1);
        assert_eq!(label_every(30), 3);
        assert_eq!(label_every(90), 9);
    }
}
