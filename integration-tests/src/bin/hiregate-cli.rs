//! The real `hiregate` command line, built inside this package so the end-to-end tests can start
//! it as a child process through `env!("CARGO_BIN_EXE_hiregate-cli")` (Cargo only exposes the
//! binaries of the package under test). Named apart from the gateway's own `hiregate` binary so
//! the two never collide in `target/`.

use std::process::ExitCode;

fn main() -> ExitCode {
    hiregate_gateway::cli::main()
}
