//! `stave keys`: secp256k1 keys and addresses, and the P2P chain CA and node certificates.

use std::path::PathBuf;

use alloy_signer_local::{MnemonicBuilder, PrivateKeySigner};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use stave_launch::files::{issue_node, write_ca, write_new};
use stave_primitives::{
    B256,
    dev::{DEV_MNEMONIC, dev_account},
};

/// Key subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Make a new random key and print its address (and the key, unless `--out` is given).
    New {
        /// Write the private key (hex) to this file, readable by its owner only.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Show the address of a key, or derive accounts from a mnemonic or the dev key set.
    Show(ShowArgs),
    /// Make a chain CA for P2P TLS: `OUT/ca.pem` (its certificate, which every node
    /// trusts) and `OUT/ca.key` (its key, owner-readable only: it admits nodes).
    Ca {
        /// Directory to write to (created if missing; existing files are not overwritten).
        #[arg(long)]
        out: PathBuf,
        /// The CA's name.
        #[arg(long, default_value = "stave chain")]
        name: String,
    },
    /// Issue a node's P2P certificate from a CA made by `stave keys ca`: writes
    /// `OUT/node.pem`, `OUT/node.key` and a copy of `ca.pem`, and prints the node id that
    /// other nodes' `allowed` lists name.
    Node {
        /// The CA's directory.
        #[arg(long)]
        ca: PathBuf,
        /// The node's name: the DNS name peers dial it by (`[[p2p.peers]] name`).
        #[arg(long)]
        name: String,
        /// Directory to write to (created if missing; existing files are not overwritten).
        #[arg(long)]
        out: PathBuf,
    },
}

/// Where `stave keys show` takes its key(s) from: exactly one source.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct KeySource {
    /// A private key in hex.
    #[arg(long)]
    key: Option<String>,
    /// A file holding a private key in hex (as `stave keys new --out` writes).
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// A BIP-39 mnemonic, derived at m/44'/60'/0'/0/i; without a value, the Hardhat/Anvil
    /// dev mnemonic.
    #[arg(long, num_args = 0..=1, default_missing_value = DEV_MNEMONIC)]
    mnemonic: Option<String>,
    /// Stave's deterministic dev account set, as `stave genesis new` funds it.
    #[arg(long)]
    dev: bool,
}

/// Arguments of `stave keys show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    source: KeySource,
    /// First account index (with `--mnemonic` or `--dev`).
    #[arg(long, default_value_t = 0)]
    index: u32,
    /// How many consecutive accounts (with `--mnemonic` or `--dev`).
    #[arg(long, default_value_t = 1)]
    count: u32,
}

/// Runs a `stave keys` subcommand.
pub fn run(cmd: KeysCommand) -> anyhow::Result<()> {
    match cmd {
        KeysCommand::New { out } => {
            let signer = PrivateKeySigner::random();
            match out {
                Some(path) => {
                    write_new(&path, &format!("{:#x}\n", signer.to_bytes()), true)?;
                    println!("{}", serde_json::json!({ "address": signer.address() }));
                }
                None => print_account(None, &signer),
            }
            Ok(())
        }
        KeysCommand::Show(args) => show(args),
        KeysCommand::Ca { out, name } => {
            write_ca(&out, &name)?;
            println!(
                "{}",
                serde_json::json!({ "ca": out.join("ca.pem"), "key": out.join("ca.key") })
            );
            Ok(())
        }
        KeysCommand::Node { ca, name, out } => {
            let issued = issue_node(&ca, &name, &out)?;
            let node_id = format!("0x{}", hex::encode(issued.node_id));
            println!(
                "{}",
                serde_json::json!({ "name": name, "node_id": node_id, "cert": issued.cert, "key": issued.key })
            );
            Ok(())
        }
    }
}

fn show(args: ShowArgs) -> anyhow::Result<()> {
    let ShowArgs {
        source,
        index,
        count,
    } = args;
    let indices = index
        ..index
            .checked_add(count)
            .context("--index + --count overflows")?;
    if let Some(hex) = source.key {
        let signer = parse_key(&hex)?;
        println!("{}", serde_json::json!({ "address": signer.address() }));
    } else if let Some(path) = source.key_file {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let signer = parse_key(text.trim()).with_context(|| format!("in {}", path.display()))?;
        println!("{}", serde_json::json!({ "address": signer.address() }));
    } else if let Some(phrase) = source.mnemonic {
        for i in indices {
            let signer = MnemonicBuilder::from_phrase(phrase.as_str())
                .index(i)
                .and_then(|builder| builder.build())
                .context("invalid mnemonic")?;
            print_account(Some(i), &signer);
        }
    } else {
        for i in indices {
            let signer = PrivateKeySigner::from_bytes(&dev_account(u64::from(i)).secret)
                .context("dev key is valid")?;
            print_account(Some(i), &signer);
        }
    }
    Ok(())
}

fn parse_key(hex: &str) -> anyhow::Result<PrivateKeySigner> {
    let bytes = hex::decode(hex.strip_prefix("0x").unwrap_or(hex)).context("key is not hex")?;
    if bytes.len() != 32 {
        bail!("key is {} bytes, expected 32", bytes.len());
    }
    PrivateKeySigner::from_bytes(&B256::from_slice(&bytes))
        .context("key is not a valid secp256k1 secret (zero or above the curve order)")
}

fn print_account(index: Option<u32>, signer: &PrivateKeySigner) {
    let key = format!("{:#x}", signer.to_bytes());
    let line = match index {
        Some(i) => {
            serde_json::json!({ "index": i, "address": signer.address(), "private_key": key })
        }
        None => serde_json::json!({ "address": signer.address(), "private_key": key }),
    };
    println!("{line}");
}
