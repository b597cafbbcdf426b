//! The repo's compiled contracts (`contracts/`, solc 0.8.28, optimizer 200 runs, EVM
//! cancun; `contracts/build.sh` rebuilds them and CI checks they are current).

use alloy_primitives::{Address, B256, Bytes, U256, keccak256};
use stave_primitives::{GeneratedToken, mapping_slot};

/// Creation code of `StaveToken`, a plain ERC-20; append the ABI-encoded `initialSupply`.
pub fn stave_token_initcode(initial_supply: U256) -> Bytes {
    let mut code = decode_bin(include_str!("../../../contracts/StaveToken.bin"));
    code.extend_from_slice(&initial_supply.to_be_bytes::<32>());
    code.into()
}

/// Runtime code of `StaveToken`, for putting the token into a genesis.
pub fn stave_token_runtime() -> Bytes {
    decode_bin(include_str!("../../../contracts/StaveToken.runtime.bin")).into()
}

/// Storage position of `StaveToken`'s `balanceOf` mapping.
const STAVE_TOKEN_BALANCES_POSITION: u64 = 0;

/// Storage slot of `balanceOf[holder]` in `StaveToken`, so a genesis can fund holders
/// without minting transactions.
pub fn stave_token_balance_slot(holder: Address) -> B256 {
    mapping_slot(holder, STAVE_TOKEN_BALANCES_POSITION)
}

/// Storage position of `StaveToken.totalSupply`.
const STAVE_TOKEN_TOTAL_SUPPLY_POSITION: u8 = 2;

/// Storage slot of `StaveToken.totalSupply`.
pub const STAVE_TOKEN_TOTAL_SUPPLY_SLOT: B256 =
    B256::with_last_byte(STAVE_TOKEN_TOTAL_SUPPLY_POSITION);

/// `StaveToken` in a generated state (`stave state generate --token-holders`), held by
/// the state's first `holders` accounts, and its runtime code. Its address is fixed:
/// `keccak256("stave-generated-token")`'s last 20 bytes.
pub fn generated_stave_token(holders: u64) -> (GeneratedToken, Bytes) {
    let code = stave_token_runtime();
    let token = GeneratedToken {
        address: Address::from_slice(&keccak256(b"stave-generated-token")[12..]),
        code_hash: keccak256(&code),
        holders,
        balances_position: STAVE_TOKEN_BALANCES_POSITION,
        total_supply_slot: STAVE_TOKEN_TOTAL_SUPPLY_POSITION.into(),
    };
    (token, code)
}

/// keccak-256 of `Transfer(address,address,uint256)`: topic 0 of every ERC-20 transfer log.
pub const ERC20_TRANSFER_TOPIC: B256 =
    alloy_primitives::b256!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");

fn decode_bin(text: &str) -> Vec<u8> {
    // The files are checked in and tested; a bad one is a build defect, not input.
    alloy_primitives::hex::decode(text.trim()).expect("checked-in bytecode is hex")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_in_bytecode_is_the_token() {
        let initcode = stave_token_initcode(U256::from(5));
        let runtime = stave_token_runtime();
        assert!(
            initcode.len() > runtime.len(),
            "creation code carries the runtime code"
        );
        // The runtime holds the `transfer(address,uint256)` selector.
        assert!(
            runtime
                .windows(4)
                .any(|w| w == crate::ERC20_TRANSFER_SELECTOR)
        );
        assert_eq!(
            ERC20_TRANSFER_TOPIC,
            keccak256("Transfer(address,address,uint256)")
        );
    }
}
