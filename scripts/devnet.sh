#!/usr/bin/env bash
# A local hiregate deployment for the SDK quick starts (sdks/python, sdks/typescript): anvil with
# the devnet token, `hiregate facilitator`, `hiregate serve` (the real binary) and the Rust echo
# worker listed for `summarize`, a seeker API key and funded seeker wallets. It prints the
# deployment as KEY=value lines (also written to .tools/devnet.env: `set -a; . .tools/devnet.env`)
# and runs until Ctrl-C. The keys are for this throwaway local chain only.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-tools.sh
cargo build --quiet -p hiregate-integration-tests --bin hiregate-devnet --bin hiregate-cli --bin example-worker
mkdir -p .tools
exec target/debug/hiregate-devnet --env-file .tools/devnet.env "$@"
