//! `make bench` (memory): resident memory of the real `sublane` binary after 100,000 model calls
//! whose session ids are all fresh and whose model names are random 200-byte strings, against
//! the same number of ordinary calls, in the same run. Without bounds, every fresh session id
//! would leave a binding and every junk model a counter; with them, both runs end at about the
//! same size.
//!
//! Then open streams (performance issue, goal 3): N concurrent SSE streams through SubLane (one
//! delta a second each, 30 s long), SubLane's resident memory per open stream (read each second for
//! 8 s while all of them are open and nothing else runs: the median, with the series to show it
//! levels off), the largest gap between a stream's chunks beyond the upstream's own second, and the
//! added time to first byte at concurrency 1 while they are open, against calling the mock directly
//! in the same run (from a thread of its own, as a client in a process of its own would). N is
//! `SUBLANE_BENCH_STREAMS` (default 10,000, the goal's). SubLane's CPU time per stream, over the
//! streams' whole life (the first-byte calls left out), shows what relaying costs. SubLane holds
//! two sockets per stream and so does this process (the client's and the mock's): the bench
//! raises its open-file limit to what N needs, which takes the privilege to raise a hard limit;
//! without it, N is cut to what the hard limit allows, and the bench says so.
//! `SUBLANE_BENCH_ONLY_STREAMS=1` measures only the streams.
//!
//! Before them, what a large request body (2 MiB) leaves in an open stream and a large answer in
//! a pooled upstream connection, each against a small one in the same run: hyper keeps a
//! connection's read buffer as large as its largest reads grew it, for the connection's life,
//! and SubLane bounds it (see [`large_bodies`]).
//!
//! What `SUBLANE_HUGE_PAGES=true` trades, both sides in the same run: SubLane's CPU time per
//! ordinary call (alternating rounds, best of each), and its memory per open stream.
//!
//! `SUBLANE_BENCH_BINARY=<path>` runs another build of `sublane` instead, to compare two builds in
//! runs back to back. The mock upstream runs in this process, so its memory is not counted;
//! SubLane is a process of its own, measured through `/proc/<pid>/status`.
//!
//! Where an open stream's memory goes (heaptrack on a build without mimalloc, 2,000 streams,
//! December 2026; `SUBLANE_BENCH_BINARY` can point at a script that runs the binary under it).
//! Most of it is per connection, in hyper and tokio, with sizes SubLane cannot set:
//! - each of the stream's two HTTP/1 connections (the client's, the upstream's) has an 8 KiB read
//!   buffer and an 8 KiB buffer for message heads (hyper's `INIT_BUFFER_SIZE`; its
//!   `max_buf_size` may not go below it);
//! - the upstream connection's request queue (hyper's dispatch channel, a tokio mpsc) allocates a
//!   block of 32 request slots of 280 bytes with its header after them (8,992 bytes): the first
//!   request and the header touch two pages of it.
//!
//! Only touched pages count towards RSS, so a buffer mostly unused still costs a page or two.
//! SubLane's own allocations that live as long as a stream are mostly its two tasks, sized in a
//! release build: the relay's (a 1,400-byte future, in mimalloc's 1,536-byte class; with a span
//! it carried for nothing, the 1,792 one) and the client connection's (760 bytes; 1,792 as an
//! `async fn`), then the body's queue. Those two cuts took 33.9 to 32.7 KiB per stream at 9,900
//! streams. Much less than 32 KiB per stream would take fewer upstream connections (HTTP/2) or
//! other buffer sizes in hyper, not changes to SubLane's own code.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

#[path = "support/cpu.rs"]
mod cpu;

use std::{
    process::Stdio,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Instant,
};

use serde_json::json;
use sublane::mock_upstream::MockUpstream;
use tokio::io::{AsyncBufReadExt, BufReader};

const CALLS: usize = 100_000;
const CONCURRENCY: usize = 32;
/// RSS is read after each fifth of the calls, to show whether it levels off.
const STEPS: usize = 5;
const ACCOUNT_KEY: &str = "sk-proj-memory";
/// RSS readings, one a second, while every stream is open and nothing else runs.
const RSS_READINGS: usize = 8;

#[tokio::main]
async fn main() {
    let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let http = reqwest::Client::builder().pool_max_idle_per_host(CONCURRENCY * 2).build().unwrap();
    script(&http, &mock, json!({"deltas": 1, "delta_text": "ok"})).await;
    if std::env::var_os("SUBLANE_BENCH_ONLY_STREAMS").is_none() {
        println!(
            "SubLane resident memory after {CALLS} calls ({CONCURRENCY} at a time, real binary, mock upstream)"
        );
        let ordinary = run(&http, &mock, Kind::Ordinary, &[]).await;
        let hostile = run(&http, &mock, Kind::FreshSessionsAndJunkModels, &[]).await;
        println!(
            "  fresh session ids + random 200-byte models use {:.2}x the memory of ordinary calls (RSS after the run)",
            hostile.after_kib as f64 / ordinary.after_kib as f64
        );
        // What the huge-page setting trades: CPU per call here, memory per stream below.
        // Alternating rounds, the best of each.
        let (mut off, mut on) = (ordinary.cpu_us_per_call, f64::INFINITY);
        for _ in 0..2 {
            on = on.min(run(&http, &mock, Kind::Ordinary, HUGE_PAGES).await.cpu_us_per_call);
            off = off.min(run(&http, &mock, Kind::Ordinary, &[]).await.cpu_us_per_call);
        }
        println!(
            "  CPU per ordinary call: {off:.1} us by default, {on:.1} us with SUBLANE_HUGE_PAGES=true (the default uses {:.2}x)",
            off / on
        );
    }
    let wanted: usize =
        std::env::var("SUBLANE_BENCH_STREAMS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let n = streams_the_file_limit_allows(wanted);
    if n == 0 {
        println!("open streams: not measured (the open-file limit leaves no room for them)");
        return;
    }
    if n >= LARGE_RUNS_OF {
        large_bodies(&mock).await;
    }
    let default = streams(&mock, n, &[]).await;
    let huge = streams(&mock, n, HUGE_PAGES).await;
    println!(
        "  per open stream: {default:.1} KiB by default, {huge:.1} KiB with SUBLANE_HUGE_PAGES=true (the default holds {:.2}x)",
        default / huge
    );
}

/// The setting that lets the kernel back SubLane's memory with transparent huge pages.
const HUGE_PAGES: &[(&str, &str)] = &[("SUBLANE_HUGE_PAGES", "true")];

/// A running `sublane` binary pointed at the mock, with its data directory.
struct Launched {
    child: tokio::process::Child,
    base: String,
    pid: u32,
    dir: tempfile::TempDir,
}

async fn launch(mock: &MockUpstream, env: &[(&str, &str)]) -> Launched {
    let dir = tempfile::tempdir().unwrap();
    // Another build to compare with this one (two runs back to back), else the one cargo built.
    let binary =
        std::env::var_os("SUBLANE_BENCH_BINARY").unwrap_or_else(|| env!("CARGO_BIN_EXE_sublane").into());
    let mut child = tokio::process::Command::new(binary)
        .env("SUBLANE_ADDR", "127.0.0.1:0")
        .env("SUBLANE_DATA_DIR", dir.path())
        .env("SUBLANE_ADMIN_PASSWORD", "memory-bench-password")
        .env("SUBLANE_OPENAI_BASE_URL", format!("{}/v1", mock.url()))
        .env("RUST_LOG", "error")
        // The runs name their setting; one in the shell would make "by default" untrue.
        .env_remove("SUBLANE_HUGE_PAGES")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let base = loop {
        let line = lines.next_line().await.unwrap().expect("the binary announces its address");
        if let Some(url) = line.strip_prefix("SubLane is serving on ") {
            break url.trim().to_owned();
        }
    };
    let pid = child.id().unwrap();
    Launched { child, base, pid, dir }
}

/// A client for streams, with the mock's account scripted to answer each with one delta a second
/// for 30 s.
async fn slow_streams(mock: &MockUpstream) -> reqwest::Client {
    let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    script(&http, mock, json!({"deltas": 30, "delta_text": "Hi", "delta_delay_ms": 1000})).await;
    http
}

/// Scripts how the mock answers the bench's account.
async fn script(http: &reqwest::Client, mock: &MockUpstream, answers: serde_json::Value) {
    http.put(format!("{}/__mock/accounts/{ACCOUNT_KEY}", mock.url())).json(&answers).send().await.unwrap();
}

/// Goal 3 of the performance issue: many open SSE streams through SubLane, launched with `env`;
/// its resident memory per open stream, KiB.
async fn streams(mock: &MockUpstream, n: usize, env: &[(&str, &str)]) -> f64 {
    let http = slow_streams(mock).await;
    let capacity = (n + 1_000).to_string();
    let mut vars = vec![("SUBLANE_WORKSPACE_CAPACITY", capacity.as_str())];
    vars.extend_from_slice(env);
    let mut s = launch(mock, &vars).await;
    let key = setup(&http, &s.base, n / 1_000 + 1).await;
    let sublane = format!("{}/v1/responses", s.base);
    let direct = format!("{}/v1/responses", mock.url());
    // warm up: a few streams opened and left, so pools and arenas exist before the baseline
    for _ in 0..50 {
        first_byte(&http, &sublane, &key).await;
    }
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let before = rss_kib(s.pid);
    let cpu_before = cpu_ticks(s.pid);
    let opened = Arc::new(tokio::sync::Semaphore::new(0));
    let one_ended = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (http, url, key, opened) = (http.clone(), sublane.clone(), key.clone(), Arc::clone(&opened));
            let one_ended = Arc::clone(&one_ended);
            tokio::spawn(async move {
                let mut body = open_stream(&http, &url, &key).await;
                let (mut last, mut worst, mut first) = (Instant::now(), std::time::Duration::ZERO, true);
                while let Some(chunk) = futures_util::StreamExt::next(&mut body).await {
                    chunk.unwrap();
                    if first {
                        opened.add_permits(1);
                        first = false;
                    }
                    worst = worst.max(last.elapsed());
                    last = Instant::now();
                }
                one_ended.store(true, Ordering::Relaxed);
                worst
            })
        })
        .collect();
    let all = u32::try_from(n).unwrap();
    let _ = tokio::time::timeout(std::time::Duration::from_secs(120), opened.acquire_many(all))
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let open = rss_kib(s.pid);
    // Then each second while every stream is still open (and nothing else runs), to show whether
    // it levels off or grows as the streams run. The reading above may still hold what the
    // opening burst freed (mimalloc gives pages back after its purge delay, when the thread that
    // freed them comes by again); the figure is the median of these.
    let mut samples = Vec::new();
    while samples.len() < RSS_READINGS {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let rss = rss_kib(s.pid);
        if one_ended.load(Ordering::Relaxed) {
            break;
        }
        samples.push(rss);
    }
    // time to first byte at c=1 with every stream open, against the mock directly, interleaved;
    // SubLane's CPU time for these calls is left out of the streams' below
    let (probe_ticks, probe_started) = (cpu_ticks(s.pid), Instant::now());
    let (mut d, mut t) = probe_first_bytes(direct, sublane, key).await;
    let (probe_ticks, probe_took) = (cpu_ticks(s.pid) - probe_ticks, probe_started.elapsed());
    let open_throughout = !one_ended.load(Ordering::Relaxed);
    let mut worst = std::time::Duration::ZERO;
    for task in tasks {
        worst = worst.max(task.await.unwrap());
    }
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    let settled = sorted.get(sorted.len() / 2).copied().unwrap_or(open);
    // Every stream's whole life: opened, 30 deltas relayed, recorded; without the first-byte
    // calls above (though the streams' deltas relayed while they ran are left out with them).
    let ticks = cpu_ticks(s.pid) - cpu_before - probe_ticks;
    let cpu_us_per_stream = ticks as f64 * 1e6 / cpu::USER_HZ / n as f64;
    d.sort_by(f64::total_cmp);
    t.sort_by(f64::total_cmp);
    let at = |v: &[f64], percent: usize| v[v.len() * percent / 100];
    let (dp50, tp50, dp99, tp99) = (at(&d, 50), at(&t, 50), at(&d, 99), at(&t, 99));
    let per = |rss: u64| rss.saturating_sub(before) as f64 / n as f64;
    let per_stream = per(settled);
    println!("{n} concurrent SSE streams through SubLane (one delta a second each, 30 s){}:", setting(env));
    println!(
        "  RSS {:.1} MiB before, {:.1} MiB at the first reading with all open ({:.1} KiB per open stream)",
        before as f64 / 1024.0,
        open as f64 / 1024.0,
        per(open),
    );
    match (sorted.first(), sorted.last()) {
        (Some(low), Some(high)) => {
            let mib: Vec<_> = samples.iter().map(|k| format!("{:.0}", *k as f64 / 1024.0)).collect();
            println!("    then each second while all stay open (MiB): {}", mib.join(", "));
            println!(
                "  median {:.1} MiB of {} readings (low {:.1}, high {:.1}): {per_stream:.1} KiB per open stream (target <= 32 KiB)",
                settled as f64 / 1024.0,
                samples.len(),
                *low as f64 / 1024.0,
                *high as f64 / 1024.0,
            );
        }
        _ => println!(
            "  a stream ended before a second reading (opening them took too long): {per_stream:.1} KiB per open stream from the first reading (target <= 32 KiB)"
        ),
    }
    println!(
        "  largest gap between a stream's chunks: {:.2} s (the upstream's own: 1 s; target: no stall over 1 s beyond it)",
        worst.as_secs_f64()
    );
    println!(
        "  SubLane CPU per stream over its life (opened, 30 deltas relayed, recorded): {cpu_us_per_stream:.0} us"
    );
    println!(
        "  c=1 time to first byte with them open{} ({PROBES} calls each way, {:.1} s): direct p50 {dp50:.0} us, p99 {dp99:.0} us; sublane p50 {tp50:.0} us, p99 {tp99:.0} us; added p50 {:.0} us, p99 {:.0} us (target <= 300 us)",
        if open_throughout { "" } else { " (NOT all: some had ended before these calls did)" },
        probe_took.as_secs_f64(),
        tp50 - dp50,
        tp99 - dp99
    );
    let _ = s.child.kill().await;
    drop(s.dir);
    per_stream
}

/// Streams opened with this large a request body, and answers this large, for [`large_bodies`].
const LARGE: usize = 2 * 1024 * 1024;
/// Streams, and then concurrent calls, in each of [`large_bodies`]' runs.
const LARGE_RUNS_OF: usize = 300;

/// What a large request body leaves in an open stream, and a large answer in a pooled upstream
/// connection, beyond what a small one leaves, each in runs back to back: hyper keeps a
/// connection's read buffer at the size its largest reads grew it to, for the connection's life
/// (SubLane bounds it: `serve::CONNECTION_BUFFER`, `proxy::client::CONNECTION_BUFFER`). Each run
/// starts SubLane afresh and first opens as many streams (or makes as many calls) with small
/// bodies, so what the measured ones add is their own, not the allocator's first growth. The
/// figures are SubLane's RSS growth: for the streams, that includes the pages the allocator keeps
/// from the bodies' copies, freed but not yet given back while the streams are open.
async fn large_bodies(mock: &MockUpstream) {
    let big = "x".repeat(LARGE);
    let mut per_stream = Vec::new();
    for input in ["hi", big.as_str()] {
        per_stream.push(held_by_streams(mock, input).await);
    }
    println!(
        "{LARGE_RUNS_OF} streams opened with a {} MiB request body grow SubLane's RSS by {:.1} KiB each more than with a small one ({:.1} against {:.1} KiB per stream, opened after as many small ones)",
        LARGE / 1024 / 1024,
        per_stream[1] - per_stream[0],
        per_stream[1],
        per_stream[0],
    );
    let mut per_connection = Vec::new();
    for (deltas, text) in [(1, "ok".to_owned()), (LARGE / 1024, "y".repeat(1024))] {
        per_connection.push(held_by_pooled_connections(mock, deltas, &text).await);
    }
    println!(
        "{LARGE_RUNS_OF} upstream connections pooled after a {} MiB answer each hold {:.1} KiB each more than after a small one ({:.1} against {:.1} KiB of RSS per connection)",
        LARGE / 1024 / 1024,
        per_connection[1] - per_connection[0],
        per_connection[1],
        per_connection[0],
    );
}

/// RSS per stream (KiB) of [`LARGE_RUNS_OF`] streams opened with `input`, on a fresh SubLane that
/// first opened and closed as many with a small input.
async fn held_by_streams(mock: &MockUpstream, input: &str) -> f64 {
    let http = slow_streams(mock).await;
    let mut s = launch(mock, &[("SUBLANE_WORKSPACE_CAPACITY", "2000")]).await;
    let key = setup(&http, &s.base, 1).await;
    let url = format!("{}/v1/responses", s.base);
    let open = |input: String| {
        let tasks: Vec<_> = (0..LARGE_RUNS_OF)
            .map(|_| {
                let (http, url, key, input) = (http.clone(), url.clone(), key.clone(), input.clone());
                tokio::spawn(async move {
                    let mut body = open_stream_with(&http, &url, &key, &input).await;
                    let _ = futures_util::StreamExt::next(&mut body).await;
                    body
                })
            })
            .collect();
        futures_util::future::join_all(tasks)
    };
    // as many small ones first, then closed
    for opened in open("hi".to_owned()).await {
        drop(opened.unwrap());
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let before = rss_kib(s.pid);
    let streams: Vec<_> = open(input.to_owned()).await.into_iter().map(Result::unwrap).collect();
    let mut readings = Vec::new();
    for _ in 0..3 {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        readings.push(rss_kib(s.pid));
    }
    readings.sort_unstable();
    drop(streams);
    let _ = s.child.kill().await;
    readings[1].saturating_sub(before) as f64 / LARGE_RUNS_OF as f64
}

/// RSS per pooled upstream connection (KiB) after [`LARGE_RUNS_OF`] concurrent calls answered
/// with `deltas` times `text`, on a fresh SubLane that first made as many with small answers
/// (so the connections exist, pooled, before).
async fn held_by_pooled_connections(mock: &MockUpstream, deltas: usize, text: &str) -> f64 {
    let http = reqwest::Client::builder().pool_max_idle_per_host(LARGE_RUNS_OF).build().unwrap();
    let mut s = launch(mock, &[("SUBLANE_WORKSPACE_CAPACITY", "2000")]).await;
    let key = setup(&http, &s.base, 1).await;
    let url = format!("{}/v1/responses", s.base);
    let calls = || {
        futures_util::future::join_all((0..LARGE_RUNS_OF).map(|_| async {
            let resp = http
                .post(&url)
                .bearer_auth(&key)
                .json(&json!({"model": "gpt-5.1", "input": "hi"}))
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success(), "{}", resp.status());
            resp.bytes().await.unwrap().len()
        }))
    };
    script(&http, mock, json!({"deltas": 1, "delta_text": "ok"})).await;
    calls().await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let before = rss_kib(s.pid);
    script(&http, mock, json!({"deltas": deltas, "delta_text": text})).await;
    let sizes = calls().await;
    assert!(sizes.iter().all(|&n| n >= deltas * text.len()), "every answer came whole");
    // (the answers themselves are gone: as many small calls on the same connections let the
    // threads that freed them give their pages back before the reading)
    script(&http, mock, json!({"deltas": 1, "delta_text": "ok"})).await;
    calls().await;
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let after = rss_kib(s.pid);
    let _ = s.child.kill().await;
    after.saturating_sub(before) as f64 / LARGE_RUNS_OF as f64
}

/// How many of `wanted` streams fit under this process's open-file limit (SubLane, started
/// from here, inherits it), after raising it as far as it may go.
fn streams_the_file_limit_allows(wanted: usize) -> usize {
    // Each side holds two sockets per stream; the rest is listeners, the database and slack.
    const SPARE: u64 = 200;
    let per = sublane::file_limit::FILES_PER_STREAM;
    let need = per.saturating_mul(wanted as u64).saturating_add(SPARE);
    let have = open_file_limit(need);
    if have >= need {
        return wanted;
    }
    let fits = usize::try_from(have.saturating_sub(SPARE) / per / 100 * 100).unwrap_or(0).min(wanted);
    println!(
        "(the open-file limit is {have}, below the {need} that {wanted} streams need, and this process may not raise it: {fits} streams instead)"
    );
    fits
}

/// Raises this process's soft open-file limit to `need`, and its hard limit too where that is
/// lower (which takes privilege; without it, the soft limit goes as far as the hard one). The
/// soft limit it has then; `u64::MAX` for none.
fn open_file_limit(need: u64) -> u64 {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
        if current.is_some_and(|c| c < need) {
            let raised = Rlimit { current: Some(need), maximum: maximum.map(|h| h.max(need)) };
            if setrlimit(Resource::Nofile, raised).is_err() {
                let _ = sublane::file_limit::raise();
            }
        }
        getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = need;
        u64::MAX
    }
}

/// How a run's launch differs from the default, for its heading.
fn setting(env: &[(&str, &str)]) -> String {
    env.iter().map(|(k, v)| format!(", {k}={v}")).collect()
}

/// Calls made at c=1 to time the first byte, each way. The goal's figure is the difference of
/// two 99th percentiles, each taken where the VM's own stalls reach one or two milliseconds: with
/// 1,000 calls each way it swung from 181 to 1,081 us between runs of the same build (December
/// 2026), so three times as many, which still end well within the streams' 30 s.
const PROBES: usize = 3_000;

/// Times the first byte of [`PROBES`] streaming calls each way at c=1, the mock directly and
/// SubLane interleaved, on a thread and runtime of their own: a client is a process of its own,
/// and on this process's runtime a probe's connection would wait in the queue behind the
/// thousands of streams it reads, which is this bench's delay, not SubLane's. Microseconds,
/// (direct, SubLane).
async fn probe_first_bytes(direct: String, sublane: String, key: String) -> (Vec<f64>, Vec<f64>) {
    let probe = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
            let (mut d, mut t) = (Vec::with_capacity(PROBES), Vec::with_capacity(PROBES));
            for _ in 0..PROBES {
                d.push(first_byte(&http, &direct, ACCOUNT_KEY).await);
                t.push(first_byte(&http, &sublane, &key).await);
            }
            (d, t)
        })
    });
    tokio::task::spawn_blocking(move || probe.join().unwrap()).await.unwrap()
}

/// Opens a stream, waits for its first body byte, and leaves; microseconds.
async fn first_byte(http: &reqwest::Client, url: &str, key: &str) -> f64 {
    let start = Instant::now();
    let mut body = open_stream(http, url, key).await;
    let _ = futures_util::StreamExt::next(&mut body).await;
    start.elapsed().as_secs_f64() * 1e6
}

/// A streaming Responses call; its body.
async fn open_stream(
    http: &reqwest::Client,
    url: &str,
    key: &str,
) -> impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + use<> {
    open_stream_with(http, url, key, "hi").await
}

/// A streaming Responses call whose input is `input`; its body.
async fn open_stream_with(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    input: &str,
) -> impl futures_util::Stream<Item = reqwest::Result<axum::body::Bytes>> + use<> {
    let resp = http
        .post(url)
        .bearer_auth(key)
        .json(&json!({"model": "gpt-5.1", "stream": true, "input": input}))
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.status());
    resp.bytes_stream()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// One model, a handful of conversations (what a team's clients send).
    Ordinary,
    /// A fresh session id and a random 200-byte model name on every call.
    FreshSessionsAndJunkModels,
}

struct Figures {
    after_kib: u64,
    /// SubLane's user and system time over the calls, per call.
    cpu_us_per_call: f64,
}

async fn run(http: &reqwest::Client, mock: &MockUpstream, kind: Kind, env: &[(&str, &str)]) -> Figures {
    let Launched { mut child, base, pid, dir } = launch(mock, env).await;
    let key = setup(http, &base, 1).await;
    // Warm up (allocator arenas, connection pools) before the baseline.
    calls(http, &base, &key, Kind::Ordinary, 2_000).await;
    let before = rss_kib(pid);
    let cpu_before = cpu_ticks(pid);
    let started = Instant::now();
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        calls(http, &base, &key, kind, CALLS / STEPS).await;
        steps.push(format!("{:.0}", rss_kib(pid) as f64 / 1024.0));
    }
    let took = started.elapsed();
    let cpu_us_per_call = (cpu_ticks(pid) - cpu_before) as f64 * 1e6 / cpu::USER_HZ / CALLS as f64;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let after = rss_kib(pid);
    let db: u64 = ["sublane.db", "sublane.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "  {kind:?}{}: RSS {:.1} MiB -> {:.1} MiB (+{:.1} MiB), peak {:.1} MiB; database {:.1} MiB; {:.0} calls/s, {cpu_us_per_call:.1} us CPU per call",
        setting(env),
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        after.saturating_sub(before) as f64 / 1024.0,
        status_kib(pid, "VmHWM:") as f64 / 1024.0,
        db as f64 / 1_048_576.0,
        CALLS as f64 / took.as_secs_f64()
    );
    println!("    RSS (MiB) after each {}: {}", CALLS / STEPS, steps.join(", "));
    let _ = child.kill().await;
    Figures { after_kib: after, cpu_us_per_call }
}

/// User plus system time of the whole process (all its threads), in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    cpu::stat_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap()).1
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

async fn calls(http: &reqwest::Client, base: &str, key: &str, kind: Kind, n: usize) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (http, next) = (http.clone(), Arc::clone(&next));
            let (url, key) = (format!("{base}/v1/responses"), key.to_owned());
            tokio::spawn(async move {
                while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                    let (model, session) = match kind {
                        Kind::Ordinary => {
                            ("gpt-5.1".to_owned(), format!("session-{}", rand::random::<u8>() % 8))
                        }
                        Kind::FreshSessionsAndJunkModels => {
                            let model: String =
                                (0..200).map(|_| (b'a' + rand::random::<u8>() % 26) as char).collect();
                            (model, format!("{:032x}", rand::random::<u128>()))
                        }
                    };
                    let resp = http
                        .post(&url)
                        .bearer_auth(&key)
                        .header("session-id", session)
                        .json(&json!({"model": model, "stream": false, "input": "hi"}))
                        .send()
                        .await
                        .unwrap();
                    assert!(resp.status().is_success(), "{}", resp.status());
                    let _ = resp.bytes().await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

/// `accounts` OpenAI-key accounts (1,000 calls at once each), an unlimited member, a key.
async fn setup(http: &reqwest::Client, base: &str, accounts: usize) -> String {
    let login = http
        .post(format!("{base}/api/session"))
        .header("origin", base)
        .json(&json!({"username": "admin", "password": "memory-bench-password"}))
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    let send = |method: reqwest::Method, path: &str, body: serde_json::Value| {
        http.request(method, format!("{base}{path}"))
            .header("origin", base)
            .header("cookie", &cookie)
            .json(&body)
            .send()
    };
    for i in 0..accounts {
        let r = send(
            reqwest::Method::POST,
            "/api/accounts",
            json!({"provider": "openai_api", "name": format!("memory-{i}"), "pool_ids": [1], "max_concurrency": 1000,
                   "credentials": {"kind": "api_key", "api_key": ACCOUNT_KEY}}),
        )
        .await
        .unwrap();
        assert!(r.status().is_success());
    }
    let r = send(reqwest::Method::PATCH, "/api/members/1", json!({"concurrency_limit": 0})).await.unwrap();
    assert!(r.status().is_success());
    let key: serde_json::Value = send(reqwest::Method::POST, "/api/me/keys", json!({"name": "memory"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    key["secret"].as_str().unwrap().to_owned()
}
