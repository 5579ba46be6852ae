use std::process::ExitCode;

use clap::Parser;
use joulecast::config::Cli;

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
