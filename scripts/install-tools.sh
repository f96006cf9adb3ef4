#!/usr/bin/env bash
# Installs hiregate's project-local tools, pinned by tools/package-lock.json:
#   - anvil (npm @foundry-rs/anvil-linux-amd64), the local EVM of the devnet,
#   - solc (npm), which compiles the devnet token,
#   - the official x402 SDK (@x402/core, @x402/evm, @x402/fetch, @x402/extensions: its sign-in-with-x
#     client) and viem for the interop scripts,
#   - the official MCP TypeScript SDK (@modelcontextprotocol/sdk), which tools/interop/mcp-hire.mjs
#     hires over the gateway's /mcp with,
#   - @apidevtools/swagger-parser, the independent OpenAPI validator of the OpenAPI test,
#   - playwright-core, which drives the web console's browser tests, and Chromium from the
#     distribution's packages (Debian `chromium`) for it to drive; no browser is downloaded by npm,
#   - the official A2A Python SDK (PyPI `a2a-sdk`, pinned in tools/a2a/requirements.txt) in
#     .tools/a2a-venv, whose AgentCard definition and card signature verifier the agent-card
#     tests check the gateway's cards with,
#   - the Python SDK (sdks/python, editable) with its dependencies pinned by
#     sdks/python/requirements.lock (hashes; the official `x402` client and its `x402.mcp` wrapper
#     with the official MCP client `mcp`, which tools/interop/mcp-hire.py drives, among them) in
#     .tools/sdk-venv, and the TypeScript SDK's packages (sdks/typescript/package-lock.json,
#     the official @x402/* among them) in sdks/typescript/node_modules, for the SDK suites
#     (integration-tests/tests/sdks.rs), with the `x402` SIWX client's message builder
#     (signinwithethereum, pinned in tools/siwx/requirements.txt) in .tools/siwx-lib,
#   - Schemathesis (PyPI, pinned in tools/conformance/requirements.txt) in .tools/schemathesis-venv,
#     which runs the OpenAPI conformance test against a live gateway.
# npm packages land in tools/node_modules; the anvil binary is exposed as .tools/bin/anvil, where
# the Rust devnet helper looks for it. Idempotent: when the lockfile has not changed since the last
# install and anvil runs, it does nothing. Needs node >= 20 and npm (Debian: apt-get install nodejs npm).
set -euo pipefail
cd "$(dirname "$0")/.."
repo_root="$(pwd)"
tools_dir="$repo_root/tools"
bin_dir="$repo_root/.tools/bin"
# Inside node_modules, so deleting node_modules also forces a reinstall.
stamp="$tools_dir/node_modules/.hiregate-lock.sha256"
anvil_in_package="$tools_dir/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil"

say() { printf 'install-tools: %s\n' "$*" >&2; }
# Another apt run (unattended upgrades, a user's own install) holds dpkg's lock for a while:
# wait for it instead of failing the whole install.
apt_wait=(-o DPkg::Lock::Timeout=600)

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        say "node/npm missing; installing Debian's nodejs and npm"
        apt-get "${apt_wait[@]}" update -qq \
            && DEBIAN_FRONTEND=noninteractive apt-get "${apt_wait[@]}" install -y -qq nodejs npm >/dev/null
    else
        say "node >= 20 and npm are required (e.g. 'apt-get install nodejs npm'), then rerun $0"
        exit 1
    fi
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
    say "node $(node --version) is too old: the x402 SDK needs node >= 20"
    exit 1
fi
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) ;;
    *) say "the pinned anvil package is for Linux x86_64; on $(uname -s)-$(uname -m) set HIREGATE_ANVIL to an anvil binary" ;;
esac

# Chromium for the console's browser tests. Only installed when missing, as root (or through sudo
# when it does not ask for a password); otherwise the tests that need it say why they skip.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
    && [ -z "${HIREGATE_CHROMIUM:-}" ]; then
    if command -v apt-get >/dev/null 2>&1; then
        as_root=""
        if [ "$(id -u)" != "0" ]; then
            if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
                as_root="sudo"
            fi
        fi
        if [ "$(id -u)" = "0" ] || [ -n "$as_root" ]; then
            say "chromium missing; installing Debian's chromium (console browser tests)"
            $as_root apt-get "${apt_wait[@]}" update -qq
            DEBIAN_FRONTEND=noninteractive $as_root apt-get "${apt_wait[@]}" install -y -qq chromium >/dev/null
        else
            say "chromium missing and no root: 'sudo apt-get install chromium' for the console browser tests"
        fi
    else
        say "chromium missing: install it (or set HIREGATE_CHROMIUM) for the console browser tests"
    fi
fi

# The official A2A Python SDK's AgentCard definition and card signature verifier, which
# tools/a2a/validate_card.py and tools/a2a/verify_card_signature.py check the gateway's agent cards
# with, and the pins its JSON-RPC client needs beyond the SDK venv (tools/a2a/hire.py);
# installed into its own venv, pinned by tools/a2a/requirements.txt.
a2a_venv="$repo_root/.tools/a2a-venv"
a2a_requirements="$tools_dir/a2a/requirements.txt"
a2a_stamp="$a2a_venv/.hiregate-requirements.sha256"
a2a_hash="$(sha256sum "$a2a_requirements" | cut -d' ' -f1)"
if [ ! -f "$a2a_stamp" ] || [ "$(cat "$a2a_stamp")" != "$a2a_hash" ]; then
    if command -v python3 >/dev/null 2>&1 && python3 -m venv "$a2a_venv" >/dev/null 2>&1; then
        say "pip install tools/a2a/requirements.txt into .tools/a2a-venv (A2A agent-card validator)"
        # --no-deps: the requirements are the complete pinned closure of what the scripts import
        # (the AgentCard types, the signature verifier and its PyJWT/cryptography), so pip
        # resolves nothing unpinned and skips the SDK's server stack, which they never import.
        "$a2a_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
            -r "$a2a_requirements"
        # Every module the scripts import must load, else a pin is missing: fail here, not in a test.
        "$a2a_venv/bin/python" -c 'import a2a.types.a2a_pb2, a2a.utils.signing, google.api.field_behavior_pb2, jwt.algorithms, jsonrpc.jsonrpc2, culsans; assert jwt.algorithms.has_crypto'
        printf '%s\n' "$a2a_hash" >"$a2a_stamp"
    else
        say "python3 with venv is missing (Debian: apt-get install python3-venv): the A2A card validation test will say why it skips"
    fi
fi

# The SDK suites: a venv for the Python SDK (stamped with its lock and pyproject) and the
# TypeScript SDK's node_modules (stamped with its lockfile).
sdk_venv="$repo_root/.tools/sdk-venv"
sdk_stamp="$sdk_venv/.hiregate-requirements.sha256"
sdk_hash="$(cat "$repo_root/sdks/python/requirements.lock" "$repo_root/sdks/python/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$sdk_stamp" ] || [ "$(cat "$sdk_stamp")" != "$sdk_hash" ]; then
    if command -v python3 >/dev/null 2>&1 && python3 -m venv "$sdk_venv" >/dev/null 2>&1; then
        say "pip install sdks/python/requirements.lock into .tools/sdk-venv (Python SDK suites)"
        "$sdk_venv/bin/pip" install --quiet --disable-pip-version-check --require-hashes \
            -r "$repo_root/sdks/python/requirements.lock"
        # The SDK itself, from the work tree; its dependencies are the locked ones above.
        "$sdk_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
            -e "$repo_root/sdks/python"
        printf '%s\n' "$sdk_hash" >"$sdk_stamp"
    else
        say "python3 with venv is missing (Debian: apt-get install python3-venv): the SDK suites will say why they skip"
    fi
fi
# The official Python x402 SDK's sign-in-with-x client needs its `extensions` extra's message
# builder (signinwithethereum); pinned by tools/siwx/requirements.txt, installed beside the SDK
# venv into .tools/siwx-lib (gateway/tests/api/siwx.rs puts it on PYTHONPATH).
siwx_lib="$repo_root/.tools/siwx-lib"
siwx_requirements="$tools_dir/siwx/requirements.txt"
siwx_stamp="$siwx_lib/.hiregate-requirements.sha256"
siwx_hash="$(sha256sum "$siwx_requirements" | cut -d' ' -f1)"
if [ -x "$sdk_venv/bin/pip" ] && { [ ! -f "$siwx_stamp" ] || [ "$(cat "$siwx_stamp")" != "$siwx_hash" ]; }; then
    say "pip install tools/siwx/requirements.txt into .tools/siwx-lib (x402 SIWX client)"
    "$sdk_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --upgrade \
        --target "$siwx_lib" -r "$siwx_requirements"
    PYTHONPATH="$siwx_lib" "$sdk_venv/bin/python" -c 'import x402.extensions.sign_in_with_x, siwe'
    printf '%s\n' "$siwx_hash" >"$siwx_stamp"
fi
ts_sdk="$repo_root/sdks/typescript"
ts_stamp="$ts_sdk/node_modules/.hiregate-lock.sha256"
ts_hash="$(sha256sum "$ts_sdk/package-lock.json" | cut -d' ' -f1)"
if [ ! -f "$ts_stamp" ] || [ "$(cat "$ts_stamp")" != "$ts_hash" ]; then
    say "npm ci in sdks/typescript (TypeScript SDK: jose, hono, @x402/fetch, …)"
    (cd "$ts_sdk" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    printf '%s\n' "$ts_hash" >"$ts_stamp"
fi
# Schemathesis, the property-based conformance run of the OpenAPI document against a live
# gateway (gateway/tests/api/conformance.rs); its own venv, pinned by
# tools/conformance/requirements.txt (the whole dependency closure, so --no-deps installs exactly it).
st_venv="$repo_root/.tools/schemathesis-venv"
st_requirements="$tools_dir/conformance/requirements.txt"
st_stamp="$st_venv/.hiregate-requirements.sha256"
st_hash="$(sha256sum "$st_requirements" | cut -d' ' -f1)"
if [ ! -f "$st_stamp" ] || [ "$(cat "$st_stamp")" != "$st_hash" ]; then
    if command -v python3 >/dev/null 2>&1 && python3 -m venv "$st_venv" >/dev/null 2>&1; then
        say "pip install tools/conformance/requirements.txt into .tools/schemathesis-venv (OpenAPI conformance)"
        "$st_venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
            -r "$st_requirements"
        printf '%s\n' "$st_hash" >"$st_stamp"
    else
        say "python3 with venv is missing (Debian: apt-get install python3-venv): the OpenAPI conformance test will say why it skips"
    fi
fi

lock_hash="$(sha256sum "$tools_dir/package-lock.json" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$lock_hash" ] && [ -x "$bin_dir/anvil" ] \
    && "$bin_dir/anvil" --version >/dev/null 2>&1; then
    exit 0
fi

say "npm ci in tools/ (anvil, solc, @x402/*, viem, swagger-parser, playwright-core)"
# --ignore-scripts: none of the pinned packages needs an install script, and skipping them keeps
# the install to what the lockfile names.
(cd "$tools_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)

if [ ! -x "$anvil_in_package" ]; then
    say "expected the anvil binary at $anvil_in_package, but it is not there"
    exit 1
fi
mkdir -p "$bin_dir"
# Relative, so the checkout can move.
ln -sfn "../../tools/node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil" "$bin_dir/anvil"
"$bin_dir/anvil" --version | head -n 1 >&2
printf '%s\n' "$lock_hash" >"$stamp"
say "done: anvil at .tools/bin/anvil, node packages in tools/node_modules"
