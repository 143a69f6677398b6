//! `mock-upstream`: every provider's wire protocol on one 127.0.0.1 port, for tests, benchmarks
//! and the demo. See `sublane::mock_upstream` for the paths and the `/__mock` control API.

use std::{net::SocketAddr, process::ExitCode};

use clap::Parser;

#[derive(Parser)]
#[command(name = "mock-upstream", about = "Simulated upstream providers for SubLane tests and demos")]
struct Args {
    /// Address to listen on (port 0 picks a free port). It prints the `SUBLANE_*` settings that
    /// point SubLane at it, then `mock upstream listening on <url>`.
    #[arg(long, default_value = "127.0.0.1:4000")]
    addr: SocketAddr,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match sublane::mock_upstream::MockUpstream::start(args.addr).await {
        Ok(mock) => {
            #[allow(clippy::print_stdout)]
            {
                // The settings that point SubLane at this mock, one `NAME=value` a line, then the
                // line scripts wait for.
                for (name, value) in mock.env() {
                    println!("{name}={value}");
                }
                println!("mock upstream listening on {}", mock.url());
            }
            mock.wait().await;
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("mock-upstream: cannot listen on {}: {e}", args.addr);
            ExitCode::FAILURE
        }
    }
}
