//! `hiregate`: the global allocator, then the library.

use std::process::ExitCode;

use hiregate_gateway::allocator::Allocator;

#[global_allocator]
static GLOBAL: Allocator = Allocator;

fn main() -> ExitCode {
    hiregate_gateway::cli::main()
}
