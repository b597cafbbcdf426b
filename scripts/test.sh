#!/usr/bin/env bash
# Every check a change must pass: formatting, contract bytecode up to date, lints, all
# tests (unit, integration, ethereum-tests vectors, differential serial/parallel, CLI, doc
# tests, fuzz-corpus replay), and the loom model checks of the check queue. CI runs
# exactly this. Needs Rust (pinned by rust-toolchain.toml), Node.js with npm, Python 3 with
# venv, curl, and apt-get (for faketime and Chromium) unless they are installed.
set -euo pipefail
cd "$(dirname "$0")/.."
# Build artefacts live outside the clone, so a rebuild on the same machine is quick.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}"
cargo fmt --all --check
# The checked-in contract bytecode must be what the pinned compiler makes of the source.
./contracts/build.sh
git diff --exit-code -- contracts/
cargo clippy --workspace --all-targets --locked -- -D warnings
# The clock-skew tests (bin/stave/tests/consensus.rs) run a validator under libfaketime;
# the browser test (interop/browser.mjs) drives Debian's Chromium.
missing=()
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || missing+=(faketime)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cargo test --workspace --locked
# Real clients (ethers v6, viem, web3.py; pinned, installed on first use) against a dev node.
./interop/run.sh "$CARGO_TARGET_DIR/debug/stave"
# loom needs its own cfg, so its build lives in its own target dir.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR="$CARGO_TARGET_DIR/loom" \
    cargo test -p stave-checkqueue --test loom --release --locked
