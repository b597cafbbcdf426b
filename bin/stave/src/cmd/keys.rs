//! `stave keys`: secp256k1 keys and addresses.

use std::{io::Write, path::PathBuf};

use alloy_signer_local::{MnemonicBuilder, PrivateKeySigner};
use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use stave_primitives::{B256, dev::dev_account};

/// The mnemonic of Hardhat and Anvil, whose first accounts a dev chain funds.
pub const DEV_MNEMONIC: &str = "test test test test test test test test test test test junk";

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
                    write_private(&path, &format!("{:#x}\n", signer.to_bytes()))?;
                    println!("{}", serde_json::json!({ "address": signer.address() }));
                }
                None => print_account(None, &signer),
            }
            Ok(())
        }
        KeysCommand::Show(args) => show(args),
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

/// Writes a secret to a new file that only its owner can read.
fn write_private(path: &PathBuf, contents: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .with_context(|| format!("creating {} (it must not exist yet)", path.display()))?;
    file.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}
