#!/usr/bin/env bash
# Recompiles the contracts (StaveToken, StaveGovernance) with the pinned compiler (solc-js 0.8.28 from npm, optimizer on,
# 200 runs, EVM version cancun) and writes the creation and runtime bytecode beside them.
# `crates/exec` embeds the .bin files; CI reruns this and fails if they differ.
set -euo pipefail
cd "$(dirname "$0")"
SOLC_VERSION=0.8.28
tools="${STAVE_TOOLS_DIR:-$HOME/.cache/stave-tools}/solc-$SOLC_VERSION"
if [ ! -x "$tools/node_modules/.bin/solcjs" ]; then
    mkdir -p "$tools"
    npm install --silent --prefix "$tools" "solc@$SOLC_VERSION" >/dev/null
fi
node - "$tools/node_modules/solc" <<'JS'
const solc = require(process.argv[2]);
const fs = require('fs');
const names = ['StaveToken', 'StaveGovernance'];
const sources = {};
for (const name of names) sources[name + '.sol'] = { content: fs.readFileSync(name + '.sol', 'utf8') };
const input = {
  language: 'Solidity',
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'cancun',
    outputSelection: { '*': { '*': ['evm.bytecode.object', 'evm.deployedBytecode.object'] } },
  },
};
const out = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (out.errors || []).filter((e) => e.severity === 'error');
if (errors.length) { console.error(errors.map((e) => e.formattedMessage).join('\n')); process.exit(1); }
for (const name of names) {
  const c = out.contracts[name + '.sol'][name];
  fs.writeFileSync(name + '.bin', c.evm.bytecode.object + '\n');
  fs.writeFileSync(name + '.runtime.bin', c.evm.deployedBytecode.object + '\n');
  console.log('solc ' + solc.version() + ': ' + name + '.bin, ' + name + '.runtime.bin');
}
JS
