#!/usr/bin/env bash
# The main job: build the release binary and run the stage benchmarks that exist so far
# (`stave bench pipeline`, the end-to-end one, replaces them as it lands).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}"
cargo build --release --locked -p stave
stave="$CARGO_TARGET_DIR/release/stave"
"$stave" bench codec "$@"
"$stave" bench checkqueue "$@"
"$stave" bench verify "$@"
"$stave" bench exec "$@"
"$stave" bench commit "$@"
