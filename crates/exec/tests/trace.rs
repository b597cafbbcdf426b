//! `trace_block` and `trace_call`: transactions run again under revm-inspectors' tracers,
//! each on the state the block's earlier transactions left, bounded in time and bytes.
//! (`interop/anvil.py` compares the answers field by field with Anvil's.)

mod support;

use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256, Bytes, TxKind, U256, map::HashSet};
use alloy_rpc_types_trace::{
    geth::{
        CallConfig, DefaultFrame, GethDebugBuiltInTracerType, GethDebugTracerType,
        GethDebugTracingOptions, GethDefaultTracingOptions, GethTrace,
    },
    parity::{Action, TraceType},
};
use stave_exec::{
    BlockEnv, CallRequest, Mode, TraceBounds, TraceError, TracedBlock, Tracer, TxTrace,
    execute_serial, trace_block, trace_call,
};
use stave_primitives::dev::dev_account;
use stave_sdk::{contracts::stave_token_balance_slot, erc20_transfer_calldata};
use support::{CHAIN_ID, SPINNER, TOKEN, header, input, state, tx};

fn bounds() -> TraceBounds {
    TraceBounds {
        deadline: Instant::now() + Duration::from_secs(30),
        max_bytes: 1 << 20,
    }
}

/// The struct logger's frame in `trace`.
fn struct_logs_of(trace: TxTrace) -> DefaultFrame {
    match trace {
        TxTrace::Geth(trace) => match *trace {
            GethTrace::Default(frame) => frame,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn call_tracer(config: CallConfig) -> Tracer {
    Tracer::Geth(Box::new(
        GethDebugTracingOptions::new_tracer(GethDebugTracerType::BuiltInTracer(
            GethDebugBuiltInTracerType::CallTracer,
        ))
        .with_call_config(config),
    ))
}

#[test]
fn a_block_is_traced_on_the_state_its_earlier_transactions_left() {
    let state = state();
    let header = header(30_000_000);
    let to = Address::repeat_byte(0x66);
    // Account 0 holds 100 tokens: it sends 60, then 60 more, which reverts.
    let txs = [
        tx(
            0,
            0,
            TxKind::Call(TOKEN),
            0,
            100_000,
            erc20_transfer_calldata(to, U256::from(60)),
        ),
        tx(
            0,
            1,
            TxKind::Call(TOKEN),
            0,
            100_000,
            erc20_transfer_calldata(to, U256::from(60)),
        ),
    ];
    let outcome = execute_serial(input(&state, &header, &txs, Mode::Validate)).expect("runs");
    let block = TracedBlock {
        base: &state,
        env: BlockEnv::new(CHAIN_ID, &header),
        txs: &txs,
        hash: B256::repeat_byte(0xbb),
    };

    // The second transaction alone: traced after the first ran untraced, so it reverts.
    let traces =
        trace_block(block, 1..2, &call_tracer(CallConfig::default()), bounds()).expect("traced");
    let [TxTrace::Geth(trace)] = &traces[..] else {
        panic!("one trace: {traces:?}");
    };
    let GethTrace::CallTracer(frame) = trace.as_ref() else {
        panic!("a call frame: {trace:?}");
    };
    assert_eq!(frame.from, dev_account(0).address);
    assert_eq!(frame.to, Some(TOKEN));
    assert_eq!(
        frame.input,
        alloy_consensus::Transaction::input(txs[1].tx.envelope()).clone()
    );
    assert_eq!(frame.gas, U256::from(100_000));
    assert_eq!(
        frame.gas_used,
        U256::from(
            outcome.receipts[1].receipt.cumulative_gas_used
                - outcome.receipts[0].receipt.cumulative_gas_used
        )
    );
    assert_eq!(frame.error.as_deref(), Some("execution reverted"));

    // Both, with logs: the first emits its Transfer, the second nothing.
    let traces = trace_block(
        block,
        0..2,
        &call_tracer(CallConfig::default().with_log()),
        bounds(),
    )
    .expect("traced");
    let logs: Vec<usize> = traces
        .iter()
        .map(|trace| match trace {
            TxTrace::Geth(trace) => match trace.as_ref() {
                GethTrace::CallTracer(frame) => frame.logs.len(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(logs, [1, 0]);

    // Parity's call frames and state diff agree.
    let traces = trace_block(block, 0..2, &Tracer::Calls, bounds()).expect("traced");
    let TxTrace::Calls(frames) = &traces[0] else {
        panic!()
    };
    assert_eq!(frames[0].transaction_position, Some(0));
    assert_eq!(frames[0].block_hash, Some(block.hash));
    assert!(matches!(&frames[0].trace.action, Action::Call(call) if call.to == TOKEN));
    let types: HashSet<TraceType> = [TraceType::StateDiff, TraceType::Trace]
        .into_iter()
        .collect();
    let traces = trace_block(block, 0..1, &Tracer::Replay(types), bounds()).expect("traced");
    let TxTrace::Replay(results) = &traces[0] else {
        panic!()
    };
    let diff = results.state_diff.as_ref().expect("asked for");
    let slot = stave_token_balance_slot(to);
    let stored = &diff.0[&TOKEN].storage[&slot];
    assert_eq!(
        stored.as_changed().map(|change| change.to),
        Some(B256::with_last_byte(60))
    );
}

#[test]
fn a_call_is_traced_as_eth_call_runs_it() {
    let state = state();
    let header = header(30_000_000);
    let holder = dev_account(2).address;
    let mut input = vec![0x70, 0xa0, 0x82, 0x31];
    input.extend_from_slice(&[0u8; 12]);
    input.extend_from_slice(holder.as_slice());
    let request = CallRequest {
        from: holder,
        to: Some(TOKEN),
        gas: 50_000,
        input: Bytes::from(input),
        ..CallRequest::default()
    };
    let struct_logs = Tracer::Geth(Box::default());
    let trace = trace_call(
        &state,
        BlockEnv::new(CHAIN_ID, &header),
        &request,
        &struct_logs,
        bounds(),
    )
    .expect("traced");
    let frame = struct_logs_of(trace);
    assert!(!frame.failed);
    assert_eq!(U256::from_be_slice(&frame.return_value), U256::from(100));
    assert!(frame.struct_logs.iter().any(|log| log.op == "SLOAD"));
    assert_eq!(frame.struct_logs.last().map(|log| &*log.op), Some("RETURN"));
}

#[test]
fn a_trace_stops_at_its_deadline_its_byte_budget_and_bad_tracers() {
    let state = state();
    let header = header(30_000_000);
    let env = BlockEnv::new(CHAIN_ID, &header);
    let endless = CallRequest {
        to: Some(SPINNER),
        gas: 1_000_000_000_000,
        ..CallRequest::default()
    };
    let struct_logs = Tracer::Geth(Box::default());
    let soon = TraceBounds {
        deadline: Instant::now() + Duration::from_millis(200),
        ..bounds()
    };
    let started = Instant::now();
    let stopped = trace_call(&state, env, &endless, &Tracer::Calls, soon);
    assert!(matches!(stopped, Err(TraceError::TimedOut)), "{stopped:?}");
    assert!(started.elapsed() < Duration::from_secs(10));

    // Memory snapshots of a loop that grows memory run past a small budget.
    let memory = Tracer::Geth(Box::new(GethDebugTracingOptions {
        config: GethDefaultTracingOptions::default().enable_memory(),
        ..GethDebugTracingOptions::default()
    }));
    let spinner = CallRequest {
        gas: 2_000_000,
        ..endless.clone()
    };
    let small = TraceBounds {
        max_bytes: 4096,
        ..bounds()
    };
    let mut grows = vec![0x5b]; // JUMPDEST
    grows.extend_from_slice(&[0x5a, 0x5a, 0x52]); // GAS GAS MSTORE: memory grows each round
    grows.extend_from_slice(&[0x60, 0x00, 0x56]); // PUSH1 0 JUMP
    let create = CallRequest {
        to: None,
        input: Bytes::from(grows),
        gas: 200_000,
        ..CallRequest::default()
    };
    let over = trace_call(&state, env, &create, &memory, small);
    assert!(
        matches!(
            over,
            Err(TraceError::TooLarge {
                max_bytes: 4096,
                ..
            })
        ),
        "{over:?}"
    );
    // Within the budget, the spinner's struct logs just run out of gas.
    let trace = trace_call(&state, env, &spinner, &struct_logs, bounds()).expect("traced");
    let frame = struct_logs_of(trace);
    assert!(frame.failed);

    // A JavaScript tracer, and a config that does not fit its tracer, are refused.
    let js = Tracer::Geth(Box::new(GethDebugTracingOptions::new_tracer(
        GethDebugTracerType::JsTracer("{}".into()),
    )));
    assert!(matches!(
        trace_call(&state, env, &spinner, &js, bounds()),
        Err(TraceError::Unsupported(_))
    ));
    let mut bad = GethDebugTracingOptions::new_tracer(GethDebugTracerType::BuiltInTracer(
        GethDebugBuiltInTracerType::CallTracer,
    ));
    bad.tracer_config = serde_json::json!({"onlyTopCall": "yes"}).into();
    let refused = trace_call(
        &state,
        env,
        &spinner,
        &Tracer::Geth(Box::new(bad)),
        bounds(),
    );
    assert!(
        matches!(refused, Err(TraceError::InvalidConfig)),
        "{refused:?}"
    );
}
