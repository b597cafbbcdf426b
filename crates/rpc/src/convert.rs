//! Stored blocks, transactions and receipts in the shapes of `alloy-rpc-types-eth`, which
//! serialize exactly as Ethereum clients expect.

use alloy_consensus::{
    EMPTY_OMMER_ROOT_HASH, ReceiptEnvelope, ReceiptWithBloom, Transaction as _,
    transaction::Recovered,
};
use alloy_primitives::{Address, B256, Bloom, TxKind, U256};
use alloy_rpc_types_eth::{Block, BlockTransactions, Log, Transaction, TransactionReceipt};
use rayon::prelude::*;
use stave_primitives::{Header, Receipt, SignedTx};
use stave_storage::{KvStore, read};

use crate::error::RpcError;

/// A stored block: header, hash, transactions with their senders, size in bytes.
pub struct StoredBlock {
    /// The header.
    pub header: Header,
    /// Its hash.
    pub hash: B256,
    /// Transactions with their recovered senders.
    pub txs: Vec<(SignedTx, Address)>,
    /// Encoded size (header plus body).
    pub size: usize,
}

fn body_bytes(store: &dyn KvStore, number: u64) -> Result<Vec<u8>, RpcError> {
    Ok(read::encoded_body(store, number)
        .map_err(RpcError::internal)?
        .unwrap_or_default())
}

/// The transactions of block `number` (none if it is not stored).
pub fn load_body(store: &dyn KvStore, number: u64) -> Result<Vec<SignedTx>, RpcError> {
    stave_codec::decode_transactions(&body_bytes(store, number)?).map_err(RpcError::internal)
}

/// Reads block `number` with its senders when `senders`: those recorded when the block
/// was imported, or, for blocks stored before that record existed, recovered on all cores.
/// Without `senders` every sender reads as the zero address (for callers that only need
/// hashes and logs).
pub fn load_block(
    store: &dyn KvStore,
    number: u64,
    senders: bool,
) -> Result<Option<StoredBlock>, RpcError> {
    let Some(header) = read::header(store, number).map_err(RpcError::internal)? else {
        return Ok(None);
    };
    let body = body_bytes(store, number)?;
    let txs = stave_codec::decode_transactions(&body).map_err(RpcError::internal)?;
    let stored = if senders {
        read::senders(store, number)
            .map_err(RpcError::internal)?
            .filter(|stored| stored.len() == txs.len())
    } else {
        Some(vec![Address::ZERO; txs.len()])
    };
    let txs = match stored {
        Some(senders) => txs.into_iter().zip(senders).collect(),
        None => txs
            .into_par_iter()
            .map(|tx| {
                let sender = tx.recover_sender().map_err(RpcError::internal)?;
                Ok((tx, sender))
            })
            .collect::<Result<Vec<_>, RpcError>>()?,
    };
    let encoded_header = alloy_rlp::encode(&header);
    Ok(Some(StoredBlock {
        hash: alloy_primitives::keccak256(&encoded_header),
        size: encoded_header.len() + body.len(),
        header,
        txs,
    }))
}

/// The RPC header of a stored block.
pub fn rpc_header(
    header: &Header,
    hash: B256,
    bloom: Bloom,
    size: usize,
) -> alloy_rpc_types_eth::Header {
    alloy_rpc_types_eth::Header {
        hash,
        inner: alloy_consensus::Header {
            parent_hash: header.parent_hash,
            ommers_hash: EMPTY_OMMER_ROOT_HASH,
            beneficiary: header.proposer,
            state_root: header.state_root,
            transactions_root: header.transactions_root,
            receipts_root: header.receipts_root,
            logs_bloom: bloom,
            difficulty: U256::ZERO,
            number: header.number,
            gas_limit: header.gas_limit,
            gas_used: header.gas_used,
            timestamp: header.timestamp,
            extra_data: header.extra_data.clone(),
            base_fee_per_gas: Some(header.base_fee_per_gas),
            ..alloy_consensus::Header::default()
        },
        total_difficulty: Some(U256::ZERO),
        size: Some(U256::from(size)),
    }
}

/// Where a transaction sits in a block.
#[derive(Debug, Clone, Copy)]
pub struct TxPosition {
    /// The block's hash.
    pub block_hash: B256,
    /// The block's number.
    pub block_number: u64,
    /// The block's timestamp.
    pub timestamp: u64,
    /// The block's base fee.
    pub base_fee: u64,
    /// Index in the block.
    pub index: u64,
}

/// The RPC form of a transaction; `position` is `None` while it is pending.
pub fn rpc_tx(tx: &SignedTx, sender: Address, position: Option<TxPosition>) -> Transaction {
    let envelope = tx.envelope().clone();
    Transaction {
        effective_gas_price: position.map(|p| envelope.effective_gas_price(Some(p.base_fee))),
        inner: Recovered::new_unchecked(envelope, sender),
        block_hash: position.map(|p| p.block_hash),
        block_number: position.map(|p| p.block_number),
        transaction_index: position.map(|p| p.index),
        block_timestamp: position.map(|p| p.timestamp),
    }
}

/// The RPC block: transaction hashes, or whole transactions when `full`.
pub fn rpc_block(block: &StoredBlock, bloom: Bloom, full: bool) -> Block {
    let transactions = if full {
        BlockTransactions::Full(
            block
                .txs
                .iter()
                .enumerate()
                .map(|(index, (tx, sender))| rpc_tx(tx, *sender, Some(position(block, index))))
                .collect(),
        )
    } else {
        BlockTransactions::Hashes(block.txs.iter().map(|(tx, _)| tx.hash()).collect())
    };
    Block {
        header: rpc_header(&block.header, block.hash, bloom, block.size),
        uncles: Vec::new(),
        transactions,
        withdrawals: None,
    }
}

/// Position of transaction `index` of `block`.
pub fn position(block: &StoredBlock, index: usize) -> TxPosition {
    TxPosition {
        block_hash: block.hash,
        block_number: block.header.number,
        timestamp: block.header.timestamp,
        base_fee: block.header.base_fee_per_gas,
        index: index as u64,
    }
}

/// Every log of `block` with its RPC metadata, receipt by receipt.
pub fn rpc_logs(block: &StoredBlock, receipts: &[Receipt]) -> Vec<Vec<Log>> {
    rpc_logs_of(
        block,
        receipts
            .iter()
            .map(|receipt| receipt.receipt.logs.as_slice()),
    )
}

/// `logs`, one list per transaction of `block` in order, with their RPC metadata: the
/// block, the transaction, and each log's index in the block.
pub fn rpc_logs_of<'a>(
    block: &StoredBlock,
    logs: impl IntoIterator<Item = &'a [alloy_primitives::Log]>,
) -> Vec<Vec<Log>> {
    let mut log_index = 0u64;
    logs.into_iter()
        .zip(&block.txs)
        .enumerate()
        .map(|(index, (logs, (tx, _)))| {
            logs.iter()
                .map(|log| {
                    let rpc = Log {
                        inner: log.clone(),
                        block_hash: Some(block.hash),
                        block_number: Some(block.header.number),
                        block_timestamp: Some(block.header.timestamp),
                        transaction_hash: Some(tx.hash()),
                        transaction_index: Some(index as u64),
                        log_index: Some(log_index),
                        removed: false,
                    };
                    log_index += 1;
                    rpc
                })
                .collect()
        })
        .collect()
}

/// The RPC receipts of every transaction of `block`.
pub fn rpc_receipts(block: &StoredBlock, receipts: &[Receipt]) -> Vec<TransactionReceipt> {
    let logs = rpc_logs(block, receipts);
    let mut cumulative_before = 0;
    receipts
        .iter()
        .zip(logs)
        .enumerate()
        .map(|(index, (receipt, logs))| {
            let (tx, sender) = &block.txs[index];
            let envelope = tx.envelope();
            let gas_used = receipt.receipt.cumulative_gas_used - cumulative_before;
            cumulative_before = receipt.receipt.cumulative_gas_used;
            let inner = ReceiptWithBloom {
                receipt: alloy_consensus::Receipt {
                    status: receipt.receipt.status,
                    cumulative_gas_used: receipt.receipt.cumulative_gas_used,
                    logs,
                },
                logs_bloom: receipt.logs_bloom,
            };
            TransactionReceipt {
                inner: receipt_envelope(tx.tx_type(), inner),
                transaction_hash: tx.hash(),
                transaction_index: Some(index as u64),
                block_hash: Some(block.hash),
                block_number: Some(block.header.number),
                gas_used,
                effective_gas_price: envelope
                    .effective_gas_price(Some(block.header.base_fee_per_gas)),
                blob_gas_used: None,
                blob_gas_price: None,
                from: *sender,
                to: envelope.to(),
                contract_address: match envelope.kind() {
                    TxKind::Create => Some(sender.create(envelope.nonce())),
                    TxKind::Call(_) => None,
                },
            }
        })
        .collect()
}

/// A receipt in the envelope of its transaction's type (`tx_type`, EIP-2718).
pub fn receipt_envelope<T>(
    tx_type: u8,
    receipt: ReceiptWithBloom<alloy_consensus::Receipt<T>>,
) -> ReceiptEnvelope<T> {
    match tx_type {
        0 => ReceiptEnvelope::Legacy(receipt),
        1 => ReceiptEnvelope::Eip2930(receipt),
        _ => ReceiptEnvelope::Eip1559(receipt),
    }
}
