//! The governance contract on a real `stave node`: a genesis made with
//! `stave_governance::GovernanceGenesis` serves the committee, threshold and validators it
//! was given through `eth_call`; committee members change them with ordinary signed
//! transactions (a proposal applies when its votes reach the threshold, with its events);
//! bad input reverts with its reason.

mod support;

use std::process::Command;

use alloy_primitives::{Address, B256, Bytes, TxKind, U256};
use alloy_sol_types::{SolCall, SolEvent};
use serde_json::{Value, json};
use stave_governance::{
    GOVERNANCE_ADDRESS, GovernanceGenesis,
    IStaveGovernance::{self, Action},
};
use stave_primitives::{ChainSpec, dev::dev_account};
use stave_sdk::{LocalSigner, TxBuilder};
use support::{JsonRpc, Node, wait_for};

const CHAIN_ID: u64 = 1337;

/// A node producing blocks on a dev chain whose genesis has governance: dev accounts 0, 1
/// and 2 the committee (majority: 2 of 3), four validators, a minimum of four.
fn node_with_governance(dir: &std::path::Path) -> (Node, GovernanceGenesis) {
    let validators: Vec<B256> = (1..=4).map(B256::repeat_byte).collect();
    let members = (0..3).map(|i| dev_account(i).address).collect();
    let governance = GovernanceGenesis::majority(members, validators);
    let spec = governance
        .install(ChainSpec::dev(CHAIN_ID, 4))
        .expect("a valid genesis");
    (Node::with_genesis(dir, &spec.to_json()), governance)
}

/// `eth_call` of `call` on the contract: the decoded return value.
fn read<C: SolCall>(node: &Node, call: C) -> C::Return {
    let output = node.result(
        "eth_call",
        json!([{ "to": GOVERNANCE_ADDRESS, "data": Bytes::from(call.abi_encode()) }, "latest"]),
    );
    let bytes: Bytes = serde_json::from_value(output).expect("hex");
    C::abi_decode_returns(&bytes).expect("decodes")
}

/// The error `eth_call` of `call` from `from` answers (it must fail).
fn refusal<C: SolCall>(node: &Node, from: Address, call: C) -> String {
    let answer = node.call(
        "eth_call",
        json!([{ "from": from, "to": GOVERNANCE_ADDRESS, "data": Bytes::from(call.abi_encode()) }, "latest"]),
    );
    answer["error"]["message"].to_string()
}

/// Dev account `member` sends `call` to the contract at `nonce`; its receipt once mined.
fn send<C: SolCall>(node: &Node, member: u64, nonce: u64, call: C) -> Value {
    let signer = LocalSigner::from_secret(&dev_account(member).secret).expect("key");
    let tx = TxBuilder::new(CHAIN_ID, 4_000_000_000).build(
        nonce,
        500_000,
        TxKind::Call(GOVERNANCE_ADDRESS),
        U256::ZERO,
        call.abi_encode().into(),
    );
    let raw = format!("0x{}", hex::encode(signer.sign_tx(tx).encoded()));
    let hash = node.result("eth_sendRawTransaction", json!([raw]));
    let mut receipt = Value::Null;
    wait_for("the receipt", std::time::Duration::from_secs(30), || {
        receipt = node.result("eth_getTransactionReceipt", json!([hash]));
        !receipt.is_null()
    });
    receipt
}

/// The topics-0 of a receipt's logs.
fn events(receipt: &Value) -> Vec<B256> {
    receipt["logs"]
        .as_array()
        .expect("logs")
        .iter()
        .map(|log| serde_json::from_value(log["topics"][0].clone()).expect("a topic"))
        .collect()
}

#[test]
fn the_genesis_state_is_what_the_contract_reads_and_members_change_it_by_vote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, governance) = node_with_governance(dir.path());

    // The storage the genesis wrote is the state the contract's getters read.
    let members: Vec<Address> = governance.members.iter().map(|(m, _)| *m).collect();
    assert_eq!(read(&node, IStaveGovernance::getMembersCall {}), members);
    assert_eq!(
        read(&node, IStaveGovernance::thresholdCall {}),
        U256::from(2)
    );
    assert_eq!(
        read(&node, IStaveGovernance::weightOfCall { member: members[1] }),
        U256::from(1)
    );
    assert_eq!(
        read(&node, IStaveGovernance::minValidatorsCall {}),
        U256::from(4)
    );
    assert_eq!(
        read(&node, IStaveGovernance::getValidatorsCall {}),
        governance.validators
    );
    // `stave_admitted` reads the same from the contract's storage.
    let admitted = node.result("stave_admitted", json!(["latest"]));
    assert_eq!(admitted["validators"], json!(governance.validators));
    assert_eq!(admitted["nodes"], json!([]));

    // A fifth validator: proposed by member 0 (its vote counts), applied by member 1's.
    let key = B256::repeat_byte(5);
    let add = IStaveGovernance::proposeCall {
        action: Action::AddValidator,
        target: key,
        value: U256::ZERO,
    };
    let proposed = send(&node, 0, 0, add.clone());
    assert_eq!(proposed["status"], "0x1", "{proposed}");
    assert_eq!(
        events(&proposed),
        vec![
            IStaveGovernance::Proposed::SIGNATURE_HASH,
            IStaveGovernance::Voted::SIGNATURE_HASH
        ]
    );
    assert_eq!(read(&node, IStaveGovernance::getValidatorsCall {}).len(), 4);
    let voted = send(&node, 1, 0, IStaveGovernance::voteCall { id: U256::ZERO });
    assert_eq!(voted["status"], "0x1", "{voted}");
    assert_eq!(
        events(&voted),
        vec![
            IStaveGovernance::Voted::SIGNATURE_HASH,
            IStaveGovernance::Executed::SIGNATURE_HASH
        ]
    );
    let mut expected = governance.validators.clone();
    expected.push(key);
    assert_eq!(
        read(&node, IStaveGovernance::getValidatorsCall {}),
        expected
    );

    // Bad input reverts with its reason.
    let outsider = dev_account(3).address;
    let vote = |id| IStaveGovernance::voteCall { id: U256::from(id) };
    for (from, reason, message) in [
        (
            outsider,
            "not a committee member",
            refusal(&node, outsider, vote(0)),
        ),
        (
            members[0],
            "proposal already applied",
            refusal(&node, members[0], vote(0)),
        ),
        (
            members[2],
            "no such proposal",
            refusal(&node, members[2], vote(7)),
        ),
        (
            members[0],
            "already a validator",
            refusal(&node, members[0], add.clone()),
        ),
    ] {
        assert!(message.contains(reason), "{from}: {message}");
    }
    let remove = |target| IStaveGovernance::proposeCall {
        action: Action::RemoveValidator,
        target,
        value: U256::ZERO,
    };
    assert!(refusal(&node, members[0], remove(B256::repeat_byte(9))).contains("unknown key"));
    // Member 0 proposes a removal; a second proposal to remove another one is refused
    // when it would apply below the minimum of four.
    let removed = send(&node, 0, 1, remove(B256::repeat_byte(1)));
    assert_eq!(removed["status"], "0x1");
    let applied = send(
        &node,
        2,
        0,
        IStaveGovernance::voteCall { id: U256::from(1) },
    );
    assert_eq!(applied["status"], "0x1");
    assert_eq!(read(&node, IStaveGovernance::getValidatorsCall {}).len(), 4);
    let message = refusal(&node, members[0], remove(B256::repeat_byte(2)));
    assert!(message.contains("below its minimum"), "{message}");
    // A member who voted once cannot vote again.
    let admit = IStaveGovernance::proposeCall {
        action: Action::AddNode,
        target: B256::repeat_byte(0xaa),
        value: U256::ZERO,
    };
    assert_eq!(send(&node, 0, 2, admit)["status"], "0x1");
    assert!(refusal(&node, members[0], vote(2)).contains("already voted"));
}

/// `stave gov` with `args` against `node`: exit success, stdout, stderr.
fn gov(node: &Node, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_stave"))
        .arg("gov")
        .args(args)
        .args(["--rpc", &format!("http://127.0.0.1:{}", node.port)])
        .output()
        .expect("runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn stave_gov_shows_proposes_and_votes_and_says_why_a_call_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, governance) = node_with_governance(dir.path());
    let key = |i: u64| dev_account(i).secret.to_string();

    let (ok, members, _) = gov(&node, &["members"]);
    assert!(ok);
    let members: Vec<Value> = members
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(members.len(), governance.members.len());
    assert_eq!(members[0]["weight"], "0x1");

    let node_id = format!("0x{}", "bb".repeat(32));
    let (ok, out, err) = gov(&node, &["propose", "--key", &key(0), "add-node", &node_id]);
    assert!(ok, "{err}");
    let proposed: Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(proposed["proposal"], "0x0", "{proposed}");
    assert_eq!(proposed["applied"], false);

    // Not a member: refused before anything is sent, with the contract's reason.
    let (ok, _, err) = gov(&node, &["vote", "--key", &key(3), "0"]);
    assert!(!ok);
    assert!(err.contains("not a committee member"), "{err}");

    let (ok, out, err) = gov(&node, &["vote", "--key", &key(1), "0"]);
    assert!(ok, "{err}");
    let voted: Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(voted["applied"], true, "{voted}");

    let (ok, out, _) = gov(&node, &["show"]);
    assert!(ok);
    let shown: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(shown["nodes"], json!([node_id]));
    assert_eq!(shown["proposals"][0]["applied"], true);
    assert_eq!(shown["threshold"], "0x2");
    // An action without the target it needs is a usage error.
    let (ok, _, err) = gov(&node, &["propose", "--key", &key(0), "add-validator"]);
    assert!(!ok);
    assert!(err.contains("needs a target"), "{err}");
}

/// Dev account `from` sends a transaction (`to`: `None` deploys `data`) at `nonce`: the
/// node's JSON-RPC answer to `eth_sendRawTransaction`, error and all.
fn submit(node: &Node, from: u64, nonce: u64, to: Option<Address>, data: &[u8]) -> Value {
    let signer = LocalSigner::from_secret(&dev_account(from).secret).expect("key");
    let kind = to.map_or(TxKind::Create, TxKind::Call);
    let tx = TxBuilder::new(CHAIN_ID, 4_000_000_000).build(
        nonce,
        500_000,
        kind,
        U256::ZERO,
        data.to_vec().into(),
    );
    let raw = format!("0x{}", hex::encode(signer.sign_tx(tx).encoded()));
    node.call("eth_sendRawTransaction", json!([raw]))
}

/// The committee (members 0 and 1 of 3, at their nonce `nonce`) applies `action`.
fn decide(node: &Node, nonce: u64, id: u64, action: Action, target: B256, value: u64) {
    let propose = IStaveGovernance::proposeCall {
        action,
        target,
        value: U256::from(value),
    };
    assert_eq!(send(node, 0, nonce, propose)["status"], "0x1");
    let vote = IStaveGovernance::voteCall { id: U256::from(id) };
    let applied = send(node, 1, nonce, vote);
    assert_eq!(
        events(&applied).last(),
        Some(&IStaveGovernance::Executed::SIGNATURE_HASH)
    );
}

/// Permissions decided on chain are enforced at admission, each refusal naming its rule
/// in the JSON-RPC error: an outsider's transaction to the contract; with deployment
/// restricted, a deployment from an account without the right (taken once the committee
/// gives it); a frozen account's transfer (taken again once unfrozen).
#[test]
fn permissions_voted_on_chain_refuse_transactions_at_admission_naming_the_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (node, _) = node_with_governance(dir.path());
    let outsider = 3;
    let outsider_address = dev_account(outsider).address;
    let error = |answer: Value| answer["error"]["message"].as_str().unwrap_or("").to_owned();

    let vote = IStaveGovernance::voteCall { id: U256::ZERO }.abi_encode();
    let refused = error(submit(&node, outsider, 0, Some(GOVERNANCE_ADDRESS), &vote));
    assert!(refused.contains("is not a committee member"), "{refused}");

    // Deployment restricted (`SetRestrictions` 1): the outsider may not deploy, until
    // `SetRights` 1 lets it.
    decide(&node, 0, 0, Action::SetRestrictions, B256::ZERO, 1);
    let rule = |to: Option<Address>| {
        node.result(
            "stave_checkPermission",
            json!([outsider_address, to, "latest"]),
        )
    };
    assert!(
        rule(None)
            .as_str()
            .is_some_and(|rule| rule.contains("may not deploy"))
    );
    assert_eq!(rule(Some(Address::repeat_byte(7))), Value::Null);
    let init_code = [0x60, 0x00, 0x60, 0x00, 0xf3]; // returns empty code
    let refused = error(submit(&node, outsider, 0, None, &init_code));
    assert!(refused.contains("may not deploy contracts"), "{refused}");
    let transfer = submit(&node, outsider, 0, Some(Address::repeat_byte(7)), &[]);
    assert!(
        transfer["error"].is_null(),
        "a transfer is still allowed: {transfer}"
    );
    decide(
        &node,
        1,
        1,
        Action::SetRights,
        outsider_address.into_word(),
        1,
    );
    let deployed = submit(&node, outsider, 1, None, &init_code);
    assert!(deployed["error"].is_null(), "{deployed}");

    // Frozen, the outsider cannot send; unfrozen, it can.
    decide(&node, 2, 2, Action::Freeze, outsider_address.into_word(), 0);
    let refused = error(submit(
        &node,
        outsider,
        2,
        Some(Address::repeat_byte(7)),
        &[],
    ));
    assert!(
        refused.contains(&format!("account {outsider_address} is frozen")),
        "{refused}"
    );
    decide(
        &node,
        3,
        3,
        Action::Unfreeze,
        outsider_address.into_word(),
        0,
    );
    let sent = submit(&node, outsider, 2, Some(Address::repeat_byte(7)), &[]);
    assert!(sent["error"].is_null(), "{sent}");
}
