#!/usr/bin/env bash
# SDK signing speed, side by side: stave-sdk, web3j, ethers v6 and eth-account (with
# coincurve) each sign the same EIP-155 legacy transfers on ONE thread, and all must
# produce byte-identical signed transactions.
#
# The transactions: the dev mnemonic's first key (Hardhat/Anvil account 0, 0xf39F…2266)
# signs nonces 0..TXS, each sending 1 wei to account 1 (0x7099…79C8) with 21,000 gas at
# 1 gwei on chain 1337: the fields `stave bench sign --tx-type legacy` uses. RFC 6979
# signatures are deterministic, so equal fields must give equal bytes.
#
# Each SDK runs one untimed warm-up pass (JIT), then RUNS timed passes; the median tx/s
# is reported. Timed: building, encoding and signing each transaction into its SDK's
# usual output (bytes, or a hex string for ethers); writing the files is not timed.
# Each writes its last pass as one 0x-hex line per tx; the files are compared by sha256,
# and the first differing line is printed if they differ (exit 1).
#
# Pinned: web3j 4.13.0 (Maven Central, run on Java 17), ethers 6.15.0 (npm),
# eth-account 0.14.0 + coincurve 21.0.0 (PyPI, in a venv). Installed once under
# ${STAVE_TOOLS_DIR:-~/.cache/stave-tools}. Needs java/javac 17, mvn, node, python3.
#
# Usage: bench/sdk-compare/run.sh [path to the stave binary]
#   (default: builds `cargo build --profile bench-fast -p stave`)
#   SDK_COMPARE_TXS (20000) and SDK_COMPARE_RUNS (3) override the sizes.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
WEB3J_VERSION=4.13.0
ETHERS_VERSION=6.15.0
ETH_ACCOUNT_VERSION=0.14.0
COINCURVE_VERSION=21.0.0
TXS="${SDK_COMPARE_TXS:-20000}"
RUNS="${SDK_COMPARE_RUNS:-3}"
KEY=0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80
TO=0x70997970C51812dc3A010C7d01b50e0d17dc79C8
VALUE=1
GAS=21000
GAS_PRICE=1000000000
CHAIN_ID=1337
fields=("$KEY" "$TO" "$VALUE" "$GAS" "$GAS_PRICE" "$CHAIN_ID" "$TXS" "$RUNS")
tools="${STAVE_TOOLS_DIR:-$HOME/.cache/stave-tools}"

if [ $# -ge 1 ]; then
    stave="$1"
else
    (cd "$root" && cargo build --quiet --profile bench-fast -p stave)
    stave="${CARGO_TARGET_DIR:-$root/target}/bench-fast/stave"
fi

# web3j: its jars from Maven Central, and the signing program compiled against them.
web3j="$tools/web3j-$WEB3J_VERSION"
if [ ! -f "$web3j/lib/crypto-$WEB3J_VERSION.jar" ]; then
    mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies \
        -Dweb3j.version="$WEB3J_VERSION" -DoutputDirectory="$web3j/lib"
fi
mkdir -p "$web3j/classes"
javac -nowarn -cp "$web3j/lib/*" -d "$web3j/classes" "$here/Web3jSign.java"
# ethers: the same install as interop/run.sh.
ethers="$tools/ethers-$ETHERS_VERSION"
if [ ! -d "$ethers/node_modules/ethers" ]; then
    mkdir -p "$ethers"
    npm install --silent --prefix "$ethers" "ethers@$ETHERS_VERSION" >/dev/null
fi
# eth-account with coincurve, in its own venv.
venv="$tools/eth-account-$ETH_ACCOUNT_VERSION"
if ! "$venv/bin/python" -c 'import eth_account, coincurve' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "eth-account==$ETH_ACCOUNT_VERSION" \
        "coincurve==$COINCURVE_VERSION"
fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "signing $TXS EIP-155 transfers on one thread, median of $RUNS passes each..." >&2
ours="$("$stave" bench sign --tx-type legacy --threads 1 --txs "$TXS" --runs "$RUNS" \
    --dump "$out/stave.txt" --json | tail -n 1 |
    python3 -c 'import json, sys; print(round(json.load(sys.stdin)["tps"]))')"
web3j_tps="$(java -cp "$web3j/lib/*:$web3j/classes" Web3jSign "${fields[@]}" "$out/web3j.txt")"
ethers_tps="$(node "$here/ethers_sign.mjs" "$ethers/node_modules" "${fields[@]}" "$out/ethers.txt")"
eth_account_tps="$("$venv/bin/python" "$here/eth_account_sign.py" "${fields[@]}" "$out/eth-account.txt")"

reference="$(sha256sum <"$out/stave.txt" | cut -c1-64)"
status=0
printf '%-34s %9s %11s  %-16s %s\n' sdk "tx/s" "stave/sdk" "sha256" identical
row() { # name file tps
    local sha
    sha="$(sha256sum <"$2" | cut -c1-64)"
    local same=yes
    if [ "$sha" != "$reference" ]; then
        same=NO
        status=1
    fi
    printf '%-34s %9d %11s  %-16s %s\n' "$1" "$3" \
        "$(python3 -c "print(f'{$ours / $3:.2f}x')")" "${sha:0:16}" "$same"
}
row "stave-sdk (libsecp256k1)" "$out/stave.txt" "$ours"
row "web3j $WEB3J_VERSION" "$out/web3j.txt" "$web3j_tps"
row "ethers $ETHERS_VERSION" "$out/ethers.txt" "$ethers_tps"
row "eth-account $ETH_ACCOUNT_VERSION + coincurve" "$out/eth-account.txt" "$eth_account_tps"
for sdk in web3j ethers eth-account; do
    if ! cmp -s "$out/stave.txt" "$out/$sdk.txt"; then
        line="$(cmp "$out/stave.txt" "$out/$sdk.txt" | sed -n 's/.* line \([0-9]*\).*/\1/p')"
        echo "first mismatch, $sdk, tx ${line:-?} (nonce $(( ${line:-1} - 1 ))):"
        echo "  stave: $(sed -n "${line:-1}p" "$out/stave.txt")"
        echo "  $sdk: $(sed -n "${line:-1}p" "$out/$sdk.txt")"
    fi
done
exit $status
