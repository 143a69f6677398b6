//! `make bench` (memory): resident memory of the real `sublane` binary after 100,000 model calls
//! whose session ids are all fresh and whose model names are random 200-byte strings, against
//! the same number of ordinary calls, in the same run. Without bounds, every fresh session id
//! would leave a binding and every junk model a counter; with them, both runs end at about the
//! same size.
//!
//! The mock upstream runs in this process, so its memory is not counted; SubLane is a process
//! of its own, measured through `/proc/<pid>/status`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::{process::Stdio, sync::Arc, time::Instant};

use serde_json::json;
use sublane::mock_upstream::MockUpstream;
use tokio::io::{AsyncBufReadExt, BufReader};

const CALLS: usize = 100_000;
const CONCURRENCY: usize = 32;
/// RSS is read after each fifth of the calls, to show whether it levels off.
const STEPS: usize = 5;
const ACCOUNT_KEY: &str = "sk-proj-memory";

#[tokio::main]
async fn main() {
    let mock = MockUpstream::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let http = reqwest::Client::builder().pool_max_idle_per_host(CONCURRENCY * 2).build().unwrap();
    http.put(format!("{}/__mock/accounts/{ACCOUNT_KEY}", mock.url()))
        .json(&json!({"deltas": 1, "delta_text": "ok"}))
        .send()
        .await
        .unwrap();
    println!(
        "SubLane resident memory after {CALLS} calls ({CONCURRENCY} at a time, real binary, mock upstream)"
    );
    let ordinary = run(&http, &mock, Kind::Ordinary).await;
    let hostile = run(&http, &mock, Kind::FreshSessionsAndJunkModels).await;
    println!(
        "  fresh session ids + random 200-byte models use {:.2}x the memory of ordinary calls (RSS after the run)",
        hostile.after_kib as f64 / ordinary.after_kib as f64
    );
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
}

async fn run(http: &reqwest::Client, mock: &MockUpstream, kind: Kind) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sublane"))
        .env("SUBLANE_ADDR", "127.0.0.1:0")
        .env("SUBLANE_DATA_DIR", dir.path())
        .env("SUBLANE_ADMIN_PASSWORD", "memory-bench-password")
        .env("SUBLANE_OPENAI_BASE_URL", format!("{}/v1", mock.url()))
        .env("RUST_LOG", "error")
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
    let key = setup(http, &base).await;
    // Warm up (allocator arenas, connection pools) before the baseline.
    calls(http, &base, &key, Kind::Ordinary, 2_000).await;
    let before = rss_kib(pid);
    let started = Instant::now();
    let mut steps = Vec::new();
    for _ in 0..STEPS {
        calls(http, &base, &key, kind, CALLS / STEPS).await;
        steps.push(format!("{:.0}", rss_kib(pid) as f64 / 1024.0));
    }
    let took = started.elapsed();
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let after = rss_kib(pid);
    let db: u64 = ["sublane.db", "sublane.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "  {kind:?}: RSS {:.1} MiB -> {:.1} MiB (+{:.1} MiB), peak {:.1} MiB; database {:.1} MiB; {:.0} calls/s",
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        after.saturating_sub(before) as f64 / 1024.0,
        status_kib(pid, "VmHWM:") as f64 / 1024.0,
        db as f64 / 1_048_576.0,
        CALLS as f64 / took.as_secs_f64()
    );
    println!("    RSS (MiB) after each {}: {}", CALLS / STEPS, steps.join(", "));
    let _ = child.kill().await;
    Figures { after_kib: after }
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

/// An OpenAI-key account, an unlimited member, a key.
async fn setup(http: &reqwest::Client, base: &str) -> String {
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
    let r = send(
        reqwest::Method::POST,
        "/api/accounts",
        json!({"provider": "openai_api", "name": "memory", "pool_ids": [1], "max_concurrency": 1000,
               "credentials": {"kind": "api_key", "api_key": ACCOUNT_KEY}}),
    )
    .await
    .unwrap();
    assert!(r.status().is_success());
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
