//! Signed transactions: decoding from exact canonical bytes, stateless validation and
//! sender recovery with libsecp256k1.
//!
//! The accepted types are legacy (with and without EIP-155), EIP-2930 and EIP-1559.
//! Blob (EIP-4844) and set-code (EIP-7702) transactions are refused: a permissioned chain
//! has no blob market and no delegated EOAs.

use alloy_consensus::{Transaction as _, TxEnvelope, transaction::SignerRecoverable as _};
use alloy_eips::eip2718::{Decodable2718, Encodable2718};
use alloy_primitives::{Address, B256, Bytes, TxKind, U256, keccak256};
use revm_context_interface::cfg::gas::calculate_initial_tx_gas;

use crate::{SPEC, error::TxError};

/// Largest accepted encoded transaction, in bytes: 128 KiB, as go-ethereum's pool
/// (`txMaxSize`). Larger inputs are refused before any decoding work is done.
pub const MAX_TX_SIZE: usize = 128 * 1024;

/// EIP-3860 limit on initcode length: twice the EIP-170 code size limit (2 × 24,576 bytes).
pub const MAX_INITCODE_SIZE: usize = revm_primitives::eip3860::MAX_INITCODE_SIZE;

/// Half the secp256k1 group order: EIP-2 requires `s <= SECP256K1N_HALF`.
const SECP256K1N_HALF: U256 = U256::from_be_slice(&alloy_primitives::hex!(
    "7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0"
));

/// The secp256k1 group order n: `r` and `s` must be in `1..n`.
const SECP256K1N: U256 = U256::from_be_slice(&alloy_primitives::hex!(
    "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"
));

/// A signed transaction decoded from its canonical EIP-2718 bytes.
///
/// The hash is computed once, from the exact bytes it was decoded from (keccak-256 of
/// the input, not of a re-encoding: alloy's envelope would re-encode lazily, which costs
/// more than the hash). The envelope is alloy's, so every Ethereum tool understands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTx {
    envelope: TxEnvelope,
    hash: B256,
}

impl SignedTx {
    /// Decodes one transaction from exactly `bytes` (legacy RLP, or type byte || RLP).
    ///
    /// Rejects trailing bytes, non-canonical encodings and unsupported types. Does not
    /// check signatures or gas; see [`SignedTx::check_stateless`].
    pub fn decode(bytes: &[u8]) -> Result<Self, TxError> {
        if bytes.is_empty() {
            return Err(TxError::Empty);
        }
        if bytes.len() > MAX_TX_SIZE {
            return Err(TxError::TooLarge {
                size: bytes.len(),
                limit: MAX_TX_SIZE,
            });
        }
        let envelope =
            TxEnvelope::decode_2718_exact(bytes).map_err(|e| TxError::Decode(e.to_string()))?;
        match &envelope {
            TxEnvelope::Legacy(_) | TxEnvelope::Eip2930(_) | TxEnvelope::Eip1559(_) => {}
            other => return Err(TxError::UnsupportedType(other.tx_type() as u8)),
        }
        // alloy-rlp refuses leading zeros and long forms for short lengths; this catches
        // whatever else could decode to the same value from other bytes.
        let reencoded = envelope.encode_2718_len();
        if reencoded != bytes.len() {
            return Err(TxError::NonCanonical {
                decoded: bytes.len(),
                reencoded,
            });
        }
        Ok(Self {
            envelope,
            hash: keccak256(bytes),
        })
    }

    /// Wraps an envelope built locally (for example by a signer), hashing it once.
    pub fn from_envelope(envelope: TxEnvelope) -> Self {
        let hash = *envelope.tx_hash();
        Self { envelope, hash }
    }

    /// The canonical EIP-2718 encoding.
    pub fn encoded(&self) -> Vec<u8> {
        self.envelope.encoded_2718()
    }

    /// Appends the canonical EIP-2718 encoding to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        self.envelope.encode_2718(out);
    }

    /// Length of the canonical encoding, in bytes.
    pub fn encoded_len(&self) -> usize {
        self.envelope.encode_2718_len()
    }

    /// The transaction hash: keccak-256 of the canonical encoding.
    pub fn hash(&self) -> B256 {
        self.hash
    }

    /// The alloy envelope, for field access.
    pub fn envelope(&self) -> &TxEnvelope {
        &self.envelope
    }

    /// The EIP-2718 type byte (0 for legacy).
    pub fn tx_type(&self) -> u8 {
        self.envelope.tx_type() as u8
    }

    /// The chain id the signature commits to; `None` for a pre-EIP-155 legacy tx.
    pub fn chain_id(&self) -> Option<u64> {
        self.envelope.chain_id()
    }

    /// Intrinsic gas under [`SPEC`]: what the tx pays before any code runs, and the
    /// EIP-7623 calldata floor. A gas limit below either can never execute.
    pub fn intrinsic_gas(&self) -> IntrinsicGas {
        let tx = &self.envelope;
        let (accounts, slots) = tx.access_list().map_or((0, 0), |list| {
            let slots: usize = list.iter().map(|item| item.storage_keys.len()).sum();
            (list.len() as u64, slots as u64)
        });
        let gas =
            calculate_initial_tx_gas(SPEC, tx.input(), tx.is_create(), accounts, slots, 0, None);
        IntrinsicGas {
            initial: gas.initial_regular_gas + gas.initial_state_gas,
            floor: gas.floor_gas,
        }
    }

    /// Applies every rule that needs no state: field ranges (EIP-2681 nonce, fee order),
    /// intrinsic gas, EIP-3860 initcode size, signature range and low `s` (EIP-2), and the
    /// chain id when `chain_id` is given. Does not recover the sender.
    pub fn check_stateless(&self, chain_id: Option<u64>) -> Result<(), TxError> {
        let tx = &self.envelope;
        if tx.nonce() == u64::MAX {
            return Err(TxError::NonceTooBig(tx.nonce()));
        }
        if let Some(priority) = tx.max_priority_fee_per_gas()
            && priority > tx.max_fee_per_gas()
        {
            return Err(TxError::PriorityFeeAboveMax {
                priority,
                max: tx.max_fee_per_gas(),
            });
        }
        if tx.is_create() && tx.input().len() > MAX_INITCODE_SIZE {
            return Err(TxError::InitcodeTooLarge {
                size: tx.input().len(),
                limit: MAX_INITCODE_SIZE,
            });
        }
        let intrinsic = self.intrinsic_gas().required();
        if tx.gas_limit() < intrinsic {
            return Err(TxError::IntrinsicGasTooLow {
                gas_limit: tx.gas_limit(),
                intrinsic,
            });
        }
        let signature = tx.signature();
        let (r, s) = (signature.r(), signature.s());
        if r.is_zero() || s.is_zero() || r >= SECP256K1N || s >= SECP256K1N {
            return Err(TxError::SignatureOutOfRange { r, s });
        }
        if s > SECP256K1N_HALF {
            return Err(TxError::HighS(s));
        }
        if let Some(expected) = chain_id
            && let Some(found) = self.chain_id()
            && found != expected
        {
            return Err(TxError::WrongChainId { found, expected });
        }
        Ok(())
    }

    /// Recovers the sender with libsecp256k1. Call [`SignedTx::check_stateless`] first:
    /// this only fails when no key recovers.
    pub fn recover_sender(&self) -> Result<Address, TxError> {
        self.envelope
            .recover_signer()
            .map_err(|_| TxError::BadSignature)
    }

    /// Checks every stateless rule and recovers the sender: the one path that
    /// `stave tx inspect`, txpool admission and block verification share.
    pub fn validate(self, chain_id: Option<u64>) -> Result<RecoveredTx, TxError> {
        self.check_stateless(chain_id)?;
        let sender = self.recover_sender()?;
        Ok(RecoveredTx { tx: self, sender })
    }
}

/// The gas a transaction owes before any code runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct IntrinsicGas {
    /// Base cost, calldata (EIP-2028), access list (EIP-2930), creation and initcode words.
    pub initial: u64,
    /// EIP-7623 floor: the least a calldata-heavy transaction is charged.
    pub floor: u64,
}

impl IntrinsicGas {
    /// The least gas limit that can execute: the larger of the two.
    pub fn required(&self) -> u64 {
        self.initial.max(self.floor)
    }
}

/// Decodes `bytes` as one transaction, applies every stateless rule (with `chain_id` when
/// given) and recovers the sender: what `stave tx inspect` and the test vectors run.
pub fn decode_and_validate(bytes: &[u8], chain_id: Option<u64>) -> Result<RecoveredTx, TxError> {
    SignedTx::decode(bytes)?.validate(chain_id)
}

/// A transaction with its sender, recovered or taken from the sender cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveredTx {
    /// The signed transaction.
    pub tx: SignedTx,
    /// Its sender.
    pub sender: Address,
}

impl RecoveredTx {
    /// A summary of the transaction's fields for people and scripts (`stave tx inspect`).
    pub fn summary(&self) -> TxSummary {
        let tx = self.tx.envelope();
        TxSummary {
            hash: self.tx.hash(),
            tx_type: self.tx.tx_type(),
            chain_id: self.tx.chain_id(),
            nonce: tx.nonce(),
            from: self.sender,
            to: match tx.kind() {
                TxKind::Call(to) => Some(to),
                TxKind::Create => None,
            },
            value: tx.value(),
            gas_limit: tx.gas_limit(),
            gas_price: tx.gas_price(),
            max_fee_per_gas: tx.max_fee_per_gas(),
            max_priority_fee_per_gas: tx.max_priority_fee_per_gas(),
            intrinsic_gas: self.tx.intrinsic_gas(),
            input: tx.input().clone(),
            size: self.tx.encoded_len(),
        }
    }
}

/// Fields of a transaction as `stave tx inspect` prints them (one JSON object).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TxSummary {
    /// Transaction hash.
    pub hash: B256,
    /// EIP-2718 type (0 legacy, 1 EIP-2930, 2 EIP-1559).
    #[serde(rename = "type")]
    pub tx_type: u8,
    /// Chain id; null for a pre-EIP-155 legacy tx.
    pub chain_id: Option<u64>,
    /// Sender nonce.
    pub nonce: u64,
    /// Recovered sender.
    pub from: Address,
    /// Recipient; null for contract creation.
    pub to: Option<Address>,
    /// Value in wei.
    pub value: U256,
    /// Gas limit.
    pub gas_limit: u64,
    /// Gas price (legacy and EIP-2930 only).
    pub gas_price: Option<u128>,
    /// Fee cap per gas (equals the gas price for legacy and EIP-2930).
    pub max_fee_per_gas: u128,
    /// Priority fee cap (EIP-1559 only).
    pub max_priority_fee_per_gas: Option<u128>,
    /// Intrinsic gas under the chain's fork.
    pub intrinsic_gas: IntrinsicGas,
    /// Call data or initcode.
    pub input: Bytes,
    /// Encoded size in bytes.
    pub size: usize,
}

/// What a transaction offers to pay for gas, as a JSON-RPC request names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GasFee {
    /// `gasPrice`: a legacy transaction (EIP-2930 with an access list).
    Legacy {
        /// Wei per gas.
        gas_price: u128,
    },
    /// `maxFeePerGas` and `maxPriorityFeePerGas`: an EIP-1559 transaction.
    Dynamic {
        /// Most wei per gas, base fee included.
        max_fee: u128,
        /// Most wei per gas to the proposer.
        priority_fee: u128,
    },
}

/// No fee: an EIP-1559 transaction offering nothing, as go-ethereum fills one in.
impl Default for GasFee {
    fn default() -> Self {
        Self::Dynamic {
            max_fee: 0,
            priority_fee: 0,
        }
    }
}

impl GasFee {
    /// True when it offers nothing.
    pub fn is_zero(self) -> bool {
        matches!(
            self,
            Self::Legacy { gas_price: 0 }
                | Self::Dynamic {
                    max_fee: 0,
                    priority_fee: 0
                }
        )
    }

    /// The most it pays per gas: the legacy price, or the fee cap.
    pub fn max_fee(self) -> u128 {
        match self {
            Self::Legacy { gas_price } => gas_price,
            Self::Dynamic { max_fee, .. } => max_fee,
        }
    }
}

/// A transaction a node builds for a caller before it is signed (a dev node's
/// `eth_sendTransaction`, a simulated call): every field settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxFields {
    /// The chain it is for.
    pub chain_id: u64,
    /// Its sender's nonce.
    pub nonce: u64,
    /// Its gas limit.
    pub gas_limit: u64,
    /// A call's target, or a creation.
    pub to: TxKind,
    /// Wei sent.
    pub value: U256,
    /// Calldata, or initcode.
    pub input: Bytes,
    /// Addresses and slots warmed (EIP-2930).
    pub access_list: alloy_eips::eip2930::AccessList,
    /// What it pays for gas.
    pub fee: GasFee,
}

impl TxFields {
    /// The transaction of these fields: legacy for a gas price without an access list,
    /// EIP-2930 for one with, EIP-1559 for a fee cap.
    pub fn typed(self) -> alloy_consensus::TypedTransaction {
        use alloy_consensus::{TxEip1559, TxEip2930, TxLegacy, TypedTransaction};
        let Self {
            chain_id,
            nonce,
            gas_limit,
            to,
            value,
            input,
            access_list,
            fee,
        } = self;
        match fee {
            GasFee::Legacy { gas_price } if access_list.is_empty() => {
                TypedTransaction::Legacy(TxLegacy {
                    chain_id: Some(chain_id),
                    nonce,
                    gas_price,
                    gas_limit,
                    to,
                    value,
                    input,
                })
            }
            GasFee::Legacy { gas_price } => TypedTransaction::Eip2930(TxEip2930 {
                chain_id,
                nonce,
                gas_price,
                gas_limit,
                to,
                value,
                access_list,
                input,
            }),
            GasFee::Dynamic {
                max_fee,
                priority_fee,
            } => TypedTransaction::Eip1559(TxEip1559 {
                chain_id,
                nonce,
                gas_limit,
                max_fee_per_gas: max_fee,
                max_priority_fee_per_gas: priority_fee,
                to,
                value,
                access_list,
                input,
            }),
        }
    }
}
