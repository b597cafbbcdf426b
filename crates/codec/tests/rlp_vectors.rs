//! Every ethereum-tests RLPTests vector through alloy-rlp's strict decoder, the one the
//! block codec uses: valid vectors round-trip byte for byte, invalid ones are refused.

use std::path::Path;

use alloy_rlp::{Encodable, Header};

/// A decoded RLP item: a byte string or a list of items.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Bytes(Vec<u8>),
    List(Vec<Item>),
}

fn decode_item(buf: &mut &[u8]) -> alloy_rlp::Result<Item> {
    let header = Header::decode(buf)?;
    if header.payload_length > buf.len() {
        return Err(alloy_rlp::Error::InputTooShort);
    }
    let (payload, rest) = buf.split_at(header.payload_length);
    *buf = rest;
    if !header.list {
        return Ok(Item::Bytes(payload.to_vec()));
    }
    let mut inner = payload;
    let mut items = Vec::new();
    while !inner.is_empty() {
        items.push(decode_item(&mut inner)?);
    }
    Ok(Item::List(items))
}

/// Decodes exactly one item spanning all of `bytes`.
fn decode_exact(mut bytes: &[u8]) -> alloy_rlp::Result<Item> {
    let item = decode_item(&mut bytes)?;
    if bytes.is_empty() {
        Ok(item)
    } else {
        Err(alloy_rlp::Error::UnexpectedLength)
    }
}

fn encode_item(item: &Item, out: &mut Vec<u8>) {
    match item {
        Item::Bytes(bytes) => bytes.as_slice().encode(out),
        Item::List(items) => {
            let mut payload = Vec::new();
            items.iter().for_each(|i| encode_item(i, &mut payload));
            Header {
                list: true,
                payload_length: payload.len(),
            }
            .encode(out);
            out.extend_from_slice(&payload);
        }
    }
}

/// Minimal big-endian bytes of a decimal number of any size (`#123…` in the vectors).
fn big_decimal_bytes(digits: &str) -> Vec<u8> {
    let mut bytes: Vec<u8> = Vec::new();
    for d in digits.bytes() {
        let mut carry = u32::from(d - b'0');
        for b in bytes.iter_mut().rev() {
            let v = u32::from(*b) * 10 + carry;
            *b = (v & 0xff) as u8;
            carry = v >> 8;
        }
        while carry > 0 {
            bytes.insert(0, (carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    bytes
}

fn item_from_json(value: &serde_json::Value) -> Item {
    match value {
        serde_json::Value::String(s) => match s.strip_prefix('#') {
            Some(digits) => Item::Bytes(big_decimal_bytes(digits)),
            None => Item::Bytes(s.as_bytes().to_vec()),
        },
        serde_json::Value::Number(n) => {
            let n = n
                .as_u64()
                .expect("vector integers fit u64 unless written as #");
            let bytes = n.to_be_bytes();
            let first = bytes.iter().position(|b| *b != 0).unwrap_or(8);
            Item::Bytes(bytes[first..].to_vec())
        }
        serde_json::Value::Array(items) => Item::List(items.iter().map(item_from_json).collect()),
        other => panic!("unexpected vector input {other}"),
    }
}

#[test]
fn all_rlp_vectors_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/ethereum-tests/RLPTests");
    let files = [
        "rlptest.json",
        "invalidRLPTest.json",
        "RandomRLPTests/example.json",
    ];
    let (mut checked, mut failures) = (0, Vec::new());
    for file in files {
        let text = std::fs::read_to_string(root.join(file)).expect("vector file");
        let json: serde_json::Value = serde_json::from_str(&text).expect("json");
        for (name, case) in json.as_object().expect("cases") {
            checked += 1;
            let out = case["out"].as_str().expect("out hex");
            let bytes = hex::decode(out.trim_start_matches("0x")).expect("hex");
            let decoded = decode_exact(&bytes);
            match &case["in"] {
                serde_json::Value::String(s) if s == "INVALID" => {
                    if decoded.is_ok() {
                        failures.push(format!("{name}: invalid RLP accepted"));
                    }
                }
                serde_json::Value::String(s) if s == "VALID" => match decoded {
                    Ok(item) => {
                        let mut again = Vec::new();
                        encode_item(&item, &mut again);
                        if again != bytes {
                            failures.push(format!("{name}: re-encoding differs"));
                        }
                    }
                    Err(e) => failures.push(format!("{name}: valid RLP refused: {e}")),
                },
                input => {
                    let expected = item_from_json(input);
                    let mut encoded = Vec::new();
                    encode_item(&expected, &mut encoded);
                    if encoded != bytes {
                        failures.push(format!("{name}: encodes to {}", hex::encode(&encoded)));
                    }
                    if decoded.as_ref() != Ok(&expected) {
                        failures.push(format!("{name}: decodes to {decoded:?}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(checked, 55, "every vector in the three files was checked");
}
