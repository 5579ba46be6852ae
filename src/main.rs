use std::process::ExitCode;

use clap::Parser;
use joulecast::cli::Cli;

/// mimalloc rather than the system allocator: a prediction answer makes a
/// dozen short-lived allocations, and with glibc's malloc they cost about a
/// tenth of the service's CPU under load (see docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(error) = joulecast::telemetry::init_logging(&cli.global.log, cli.global.log_format) {
        eprintln!("joulecast: {error:#}");
        return ExitCode::FAILURE;
    }
    match joulecast::cli::run(cli).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("joulecast: {error:#}");
            ExitCode::FAILURE
        }
    }
}
