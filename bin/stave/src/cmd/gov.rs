//! `stave gov`: the consortium's governance contract (docs/governance.md) over a node's
//! JSON-RPC: what it holds, and proposals and votes signed with a committee member's key.

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use alloy_sol_types::{SolCall, SolEvent};
use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;
use stave_governance::{
    GOVERNANCE_ADDRESS,
    IStaveGovernance::{self, Action},
};
use stave_sdk::{LocalSigner, RpcClient, TxBuilder};

/// `stave gov` subcommands.
#[derive(Debug, Subcommand)]
pub enum GovCommand {
    /// Print the committee, threshold, validators, admitted nodes and every proposal as
    /// one JSON object.
    Show(Node),
    /// Print the committee's members and their weights, one JSON line each.
    Members(Node),
    /// Propose a change (and vote for it); prints the proposal's id and whether it applied.
    Propose {
        #[command(flatten)]
        member: Member,
        /// What to change.
        action: ProposalAction,
        /// Whom: an address (members, rights, freezing), a consensus public key
        /// (validators) or a node id (nodes), in hex; leave out for `set-threshold` and
        /// `set-restrictions`.
        target: Option<String>,
        /// A new member's weight, the new threshold, restrictions or rights.
        #[arg(long, default_value_t = 0)]
        value: u64,
    },
    /// Vote for proposal `id`; prints whether it applied.
    Vote {
        #[command(flatten)]
        member: Member,
        /// The proposal's id (`stave gov show` lists them).
        id: u64,
    },
}

/// The node to ask.
#[derive(Debug, Args)]
pub struct Node {
    /// The node's JSON-RPC URL.
    #[arg(long, default_value = "http://127.0.0.1:8545")]
    rpc: String,
}

/// A committee member acting through a node.
#[derive(Debug, Args)]
pub struct Member {
    #[command(flatten)]
    node: Node,
    /// The member's secret key (hex).
    #[arg(long)]
    key: B256,
}

/// What a proposal changes.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ProposalAction {
    /// Add a committee member (target: its address; `--value`: its weight).
    AddMember,
    /// Remove a committee member (target: its address).
    RemoveMember,
    /// Set the threshold (`--value`).
    SetThreshold,
    /// Add a validator (target: its ed25519 consensus public key).
    AddValidator,
    /// Remove a validator (target: its consensus public key).
    RemoveValidator,
    /// Admit a non-validator node (target: its node id).
    AddNode,
    /// Remove an admitted node (target: its node id).
    RemoveNode,
    /// Put lists in force (`--value`: 1 deployers only, 2 senders only, 3 both, 0 none).
    SetRestrictions,
    /// Give an account rights (target: its address; `--value`: 1 may deploy, 2 may send,
    /// 3 both, 0 none).
    SetRights,
    /// Freeze an account (it may not send) or a contract (no transaction may call it).
    Freeze,
    /// Unfreeze an account or a contract.
    Unfreeze,
}

impl ProposalAction {
    fn action(self) -> Action {
        match self {
            Self::AddMember => Action::AddMember,
            Self::RemoveMember => Action::RemoveMember,
            Self::SetThreshold => Action::SetThreshold,
            Self::AddValidator => Action::AddValidator,
            Self::RemoveValidator => Action::RemoveValidator,
            Self::AddNode => Action::AddNode,
            Self::RemoveNode => Action::RemoveNode,
            Self::SetRestrictions => Action::SetRestrictions,
            Self::SetRights => Action::SetRights,
            Self::Freeze => Action::Freeze,
            Self::Unfreeze => Action::Unfreeze,
        }
    }

    /// The proposal's target word: an address left-padded, or 32 bytes as they are.
    fn target(self, target: Option<&str>) -> anyhow::Result<B256> {
        let Some(target) = target else {
            return match self {
                Self::SetThreshold | Self::SetRestrictions => Ok(B256::ZERO),
                _ => bail!("this action needs a target"),
            };
        };
        Ok(match self {
            Self::AddMember
            | Self::RemoveMember
            | Self::SetRights
            | Self::Freeze
            | Self::Unfreeze => target
                .parse::<Address>()
                .with_context(|| format!("{target} is not an address"))?
                .into_word(),
            _ => target
                .parse::<B256>()
                .with_context(|| format!("{target} is not 32 bytes of hex"))?,
        })
    }
}

/// Runs a `stave gov` subcommand.
pub fn run(cmd: GovCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting a runtime")?;
    runtime.block_on(async {
        match cmd {
            GovCommand::Show(node) => show(&client(&node)?).await,
            GovCommand::Members(node) => members(&client(&node)?).await,
            GovCommand::Propose {
                member,
                action,
                target,
                value,
            } => {
                let call = IStaveGovernance::proposeCall {
                    action: action.action(),
                    target: action.target(target.as_deref())?,
                    value: U256::from(value),
                };
                transact(&member, call.abi_encode()).await
            }
            GovCommand::Vote { member, id } => {
                let call = IStaveGovernance::voteCall { id: U256::from(id) };
                transact(&member, call.abi_encode()).await
            }
        }
    })
}

fn client(node: &Node) -> anyhow::Result<RpcClient> {
    RpcClient::new(&node.rpc).with_context(|| format!("connecting to {}", node.rpc))
}

/// Calls `call` on the contract at the head.
async fn read<C: SolCall>(rpc: &RpcClient, call: C) -> anyhow::Result<C::Return> {
    let output = rpc
        .call_contract(None, GOVERNANCE_ADDRESS, &call.abi_encode())
        .await
        .context("calling the governance contract (does this chain's genesis have it?)")?;
    C::abi_decode_returns(&output).context("decoding the governance contract's answer")
}

async fn members(rpc: &RpcClient) -> anyhow::Result<()> {
    for member in read(rpc, IStaveGovernance::getMembersCall {}).await? {
        let weight = read(rpc, IStaveGovernance::weightOfCall { member }).await?;
        println!("{}", json!({ "member": member, "weight": weight }));
    }
    Ok(())
}

async fn show(rpc: &RpcClient) -> anyhow::Result<()> {
    let mut members = Vec::new();
    for member in read(rpc, IStaveGovernance::getMembersCall {}).await? {
        let weight = read(rpc, IStaveGovernance::weightOfCall { member }).await?;
        members.push(json!({ "member": member, "weight": weight }));
    }
    let count: u64 = read(rpc, IStaveGovernance::proposalCountCall {})
        .await?
        .try_into()
        .context("a proposal count past u64")?;
    let mut proposals = Vec::new();
    for id in 0..count {
        let p = read(
            rpc,
            IStaveGovernance::getProposalCall { id: U256::from(id) },
        )
        .await?;
        proposals.push(json!({
            "id": id,
            "action": format!("{:?}", p.action),
            "target": p.target,
            "value": p.value,
            "expires": p.expires,
            "weight": p.weight,
            "applied": p.executed,
        }));
    }
    let shown = json!({
        "address": GOVERNANCE_ADDRESS,
        "members": members,
        "threshold": read(rpc, IStaveGovernance::thresholdCall {}).await?,
        "proposalLifetime": read(rpc, IStaveGovernance::proposalLifetimeCall {}).await?,
        "minValidators": read(rpc, IStaveGovernance::minValidatorsCall {}).await?,
        "validators": read(rpc, IStaveGovernance::getValidatorsCall {}).await?,
        "nodes": read(rpc, IStaveGovernance::getNodesCall {}).await?,
        "restrictions": read(rpc, IStaveGovernance::restrictionsCall {}).await?,
        "frozenCount": read(rpc, IStaveGovernance::frozenCountCall {}).await?,
        "proposals": proposals,
    });
    println!("{}", serde_json::to_string_pretty(&shown)?);
    Ok(())
}

/// Sends `data` to the contract, signed by `member`'s key, and waits for its receipt;
/// prints the proposal's id and whether it applied. A call the contract would refuse is
/// not sent: its revert reason is the error.
async fn transact(member: &Member, data: Vec<u8>) -> anyhow::Result<()> {
    let rpc = client(&member.node)?;
    let signer = LocalSigner::from_secret(&member.key).context("the member's key")?;
    let from = signer.address();
    let gas = rpc
        .estimate_gas(from, GOVERNANCE_ADDRESS, &data)
        .await
        .context("the governance contract refuses it")?;
    let chain_id = rpc.chain_id().await?;
    let nonce = rpc
        .get_transaction_count(from, alloy_eips::BlockNumberOrTag::Pending)
        .await?;
    let price = rpc.gas_price().await?;
    let tx = TxBuilder::new(chain_id, price.saturating_mul(2)).build(
        nonce,
        gas.saturating_add(gas / 4),
        TxKind::Call(GOVERNANCE_ADDRESS),
        U256::ZERO,
        Bytes::from(data),
    );
    let hash = rpc
        .send_raw_transaction(&signer.sign_tx(tx).encoded())
        .await
        .context("sending the transaction")?;
    let receipt = loop {
        if let Some(receipt) = rpc.get_transaction_receipt(hash).await? {
            break receipt;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    if !receipt.status() {
        bail!("transaction {hash} reverted");
    }
    let mut id = None;
    let mut applied = false;
    for log in receipt.inner.logs() {
        if let Ok(voted) = IStaveGovernance::Voted::decode_log(&log.inner) {
            id = Some(voted.id);
        }
        applied |= IStaveGovernance::Executed::decode_log(&log.inner).is_ok();
    }
    println!(
        "{}",
        json!({ "transaction": hash, "proposal": id, "applied": applied, "block": receipt.block_number })
    );
    Ok(())
}
