//! The stack floor as a process of its own, for side-by-side runs with wrk against nginx (see
//! `benches/support/floor.rs` for what it is):
//!
//! `FLOOR_ADDR=127.0.0.1:8099 FLOOR_UPSTREAM=http://127.0.0.1:8080/v1/responses target/release/examples/floor`
//!
//! (`cargo build --release -p server --example floor`). It serves on one thread per CPU, without
//! transparent huge pages, as SubLane does by default; it sends the upstream the key
//! `sk-proj-bench`.

#[path = "../benches/support/floor.rs"]
mod floor;

/// The same allocator as the `sublane` binary.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr = std::env::var("FLOOR_ADDR").unwrap_or_else(|_| "127.0.0.1:8099".into());
    let upstream = std::env::var("FLOOR_UPSTREAM").map_err(|_| "FLOOR_UPSTREAM is not set")?.parse()?;
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    // SubLane's default, before any thread or buffer exists, as its binary does.
    sublane::huge_pages::apply(false)?;
    sublane::file_limit::raise()?;
    if let Err(e) = sublane::file_limit::reserve_table() {
        eprintln!("floor: cannot grow the file table at start: {e}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        floor::serve(listener, threads, upstream).await?;
        Ok(())
    })
}
