#!/usr/bin/env bash
# The benchmarks anyone can rerun on loopback (release builds): the unpaid execute's 402 against
# a raw axum handler under wrk (ratio printed); the facilitator's verify and settle; the paid
# hire's latency and throughput with its store round trips and node RPC calls; memory with many
# pending contracts and open SSE streams, and 1 vs 3 instances on PostgreSQL; the official @x402/fetch
# client paying hiregate against the same client paying a null endpoint (ratio printed).
# Installs wrk from the distribution's packages when missing (Debian/Ubuntu).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-tools.sh
if ! command -v wrk >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y wrk
  else
    echo "bench: install wrk first" >&2
    exit 1
  fi
fi
cargo bench -p hiregate-integration-tests --bench unpaid -- "$@"
cargo bench -p hiregate-payments --features devnet,server --bench facilitator
cargo bench -p hiregate-integration-tests --bench gateway
cargo bench -p hiregate-integration-tests --bench scale
cargo bench -p hiregate-integration-tests --bench official_client
