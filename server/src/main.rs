//! The `sublane` binary.

use std::{process::ExitCode, sync::Arc};

use clap::Parser;
use sublane::{
    clock::SystemClock,
    config::{Cli, Config},
    members::Bootstrap,
    serve, telemetry,
};
use tracing_subscriber::EnvFilter;

/// mimalloc: the proxy allocates per request (headers, JSON, buffers); on the measured path
/// glibc malloc/free took about 15 % of CPU.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let config = match Config::load(Cli::parse(), |k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sublane: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    // Before the runtime's threads and the first buffers exist, so none of them is backed by a
    // huge page the setting forbids.
    let huge_pages = sublane::huge_pages::apply(config.huge_pages);
    let file_limit = sublane::file_limit::raise();
    // After the limit is raised (it caps the table), while this is the only thread.
    let file_table = sublane::file_limit::reserve_table();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("sublane: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
        let telemetry = match telemetry::subscriber(&config.observability, filter, std::io::stderr) {
            Ok((subscriber, telemetry)) => {
                if tracing::subscriber::set_global_default(subscriber).is_err() {
                    eprintln!("sublane: a log subscriber was already installed");
                }
                telemetry
            }
            Err(e) => {
                eprintln!("sublane: configuration error: {e}");
                return ExitCode::from(2);
            }
        };
        if let Err(e) = huge_pages {
            tracing::warn!(error = %e, "cannot forbid transparent huge pages; memory per open stream will be higher");
        }
        report_file_limit(file_limit);
        if let Err(e) = file_table {
            tracing::warn!(error = %e, "cannot grow the table of open files at start; the first surge of connections may stall");
        }
        let code = run(config).await;
        // Spans still buffered go to the collector before the process ends.
        let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        code
    })
}

/// Says what the open-file limit allows, and warns when it is below what a busy team needs (the
/// hard limit is the administrator's to raise).
fn report_file_limit(limit: std::io::Result<Option<sublane::file_limit::Limit>>) {
    /// Fewer open streams than this is worth a warning.
    const ENOUGH_STREAMS: u64 = 10_000;
    match limit {
        Ok(Some(limit)) => {
            if limit.now > limit.was {
                tracing::info!(
                    from = limit.was,
                    to = limit.now,
                    "raised the open-file limit to its hard limit"
                );
            }
            if limit.streams() < ENOUGH_STREAMS {
                tracing::warn!(
                    files = limit.now,
                    streams = limit.streams(),
                    "the open-file limit allows only about this many open streams (two files each); \
                     raise the hard limit (systemd: LimitNOFILE=, shell: ulimit -Hn) for more"
                );
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

async fn run(config: Config) -> ExitCode {
    let server = match serve::start(config, Arc::new(SystemClock)).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sublane: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    announce(&server);

    // OPS-3: the first signal starts the graceful shutdown (the server runs it, grace period
    // included); a second one ends open streams at once.
    let (stop, hard_stop) = (server.shutdown_token(), server.hard_stop_token());
    tokio::spawn(async move {
        wait_for_signal().await;
        stop.cancel();
        wait_for_signal().await;
        tracing::warn!("second signal: ending open streams now");
        hard_stop.cancel();
    });
    match server.wait().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sublane: server error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The operator's first-start message; the only place that prints to stdout.
#[allow(clippy::print_stdout)]
fn announce(server: &serve::Server) {
    let url = format!("http://{}", server.addr);
    match &server.bootstrap {
        Bootstrap::CreatedWithGeneratedPassword(password) => {
            println!("\nSubLane first start: created the admin account.");
            println!("  Sign in at {url}/login as `admin` with password: {password}");
            println!("  This password is shown only once. Change it with PATCH /api/members/1.\n");
        }
        Bootstrap::CreatedWithConfiguredPassword => {
            println!(
                "\nSubLane first start: created `admin` with the password from SUBLANE_ADMIN_PASSWORD.\n"
            );
        }
        Bootstrap::Existing => {}
    }
    println!("SubLane is serving on {url}");
}

async fn wait_for_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
