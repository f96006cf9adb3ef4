//! `hiregate`: hands over to the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    hiregate_gateway::cli::main()
}
