#!/usr/bin/env bash
# The demo: a real hire with real settlement on a local chain (anvil + the devnet token), on the
# embedded defaults (SQLite in a temp folder, bundled facilitator). Installs the project-local
# tools first if they are missing. Exits 0 only if every step behaved.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-tools.sh
cargo run --quiet --locked -p hiregate-gateway --bin hiregate -- demo "$@"
