//! Every ethereum-tests TransactionTests vector through `decode_and_validate(.., Some(1))`,
//! the path `stave tx inspect --chain-id 1` runs. A valid vector must give the expected
//! hash, sender and intrinsic gas; an invalid one must be refused.
//!
//! The vectors' `intrinsicGas` is the pre-Prague figure, so it is compared with
//! `IntrinsicGas::initial`; the EIP-7623 floor is checked against the gas limit all the same.

use std::path::{Path, PathBuf};

use stave_primitives::decode_and_validate;

/// Forks from newest to oldest; a vector is judged by the newest one it lists.
const FORKS: &[&str] = &[
    "Prague",
    "Cancun",
    "Shanghai",
    "Paris",
    "London",
    "Berlin",
    "Istanbul",
    "ConstantinopleFix",
    "Constantinople",
    "Byzantium",
    "EIP158",
    "EIP150",
    "Homestead",
    "Frontier",
];

/// Vectors where Stave knowingly refuses what Ethereum accepts, with the reason and the
/// error text it must give instead.
const DEVIATIONS: &[(&str, &str, &str)] = &[(
    "GasLimitPriceProductOverflowtMinusOne",
    "fee fields are u128 in alloy (and reth): a gas price of 2^128 wei or more is refused",
    "overflow",
)];

fn vector_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("vector dir readable") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            vector_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
}

fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    hex::decode(s.trim_start_matches("0x")).ok()
}

#[test]
fn all_transaction_vectors_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/ethereum-tests/TransactionTests");
    let mut files = Vec::new();
    vector_files(&root, &mut files);
    files.sort();
    let (mut valid, mut invalid, mut deviations, mut failures) = (0, 0, 0, Vec::new());
    for file in &files {
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(file).expect("readable"))
                .expect("vector is JSON");
        for (name, case) in json.as_object().expect("object of cases") {
            let results = &case["result"];
            let fork = FORKS
                .iter()
                .find(|f| results.get(**f).is_some())
                .expect("has a fork");
            let expected = &results[*fork];
            let bytes = case["txbytes"].as_str().and_then(hex_bytes);
            let outcome = bytes.as_deref().map(|b| decode_and_validate(b, Some(1)));
            match (expected.get("hash"), outcome) {
                (Some(hash), Some(Ok(tx))) => {
                    valid += 1;
                    let hash = hash.as_str().expect("hash string");
                    let sender = expected["sender"].as_str().expect("sender string");
                    let gas = expected["intrinsicGas"].as_str().expect("gas string");
                    let gas = u64::from_str_radix(gas.trim_start_matches("0x"), 16).expect("hex");
                    if format!("{:#x}", tx.tx.hash()) != hash
                        || format!("{:#x}", tx.sender) != sender.to_lowercase()
                        || tx.tx.intrinsic_gas().initial != gas
                    {
                        failures.push(format!("{name}: wrong hash, sender or gas"));
                    }
                }
                (Some(_), Some(Err(e))) => match DEVIATIONS.iter().find(|d| d.0 == name) {
                    Some((_, _, text)) if e.to_string().contains(text) => deviations += 1,
                    _ => failures.push(format!("{name}: valid, refused: {e}")),
                },
                (Some(_), None) => failures.push(format!("{name}: valid but bad hex")),
                (None, Some(Ok(_))) => failures.push(format!(
                    "{name}: accepted, expected {}",
                    expected["exception"]
                )),
                (None, _) => invalid += 1,
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The checked-in vectors hold 32 valid and 108 invalid cases; fewer means files went missing.
    assert_eq!((valid + deviations, invalid), (32, 108));
    assert_eq!(
        deviations,
        DEVIATIONS.len(),
        "every listed deviation still occurs"
    );
}
