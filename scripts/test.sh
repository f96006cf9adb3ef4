#!/usr/bin/env bash
# The test command: installs the project-local tools (anvil, solc, x402 npm packages) if they are
# missing, then runs every test in the workspace. PostgreSQL tests use HIREGATE_TEST_DATABASE_URL
# (default postgres://postgres@127.0.0.1:5432/postgres); without a reachable server they skip,
# except under CI=true where they fail.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-tools.sh
cargo test --workspace --all-features --locked "$@"
