#!/usr/bin/env bash
# The main job: build the release binary, run `stave bench pipeline` (100,000 transfers in
# 2,500-tx blocks imported with every stage serial, then parallel, on the embedded LMDB
# default), then the single-stage benches, SDK signing and the node's import path over
# 1,000,000 accounts on disk, cold. Extra arguments (say `--json`) go to each.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/stave-target}"
cargo build --release --locked -p stave
stave="$CARGO_TARGET_DIR/release/stave"
"$stave" bench pipeline "$@"
"$stave" bench codec "$@"
"$stave" bench checkqueue "$@"
"$stave" bench verify "$@"
"$stave" bench exec "$@"
"$stave" bench commit "$@"
"$stave" bench sign "$@"
"$stave" bench node "$@"
