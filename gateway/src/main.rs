//! `hiregate`: parses the command line and hands over to the library.

use std::process::ExitCode;

use clap::Parser as _;

#[tokio::main]
async fn main() -> ExitCode {
    hiregate_gateway::cli::run(hiregate_gateway::cli::Cli::parse()).await
}
