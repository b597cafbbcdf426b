//! Running state tests: each case as a one-transaction block on its test's pre-state, in
//! its test's environment, under its fork's rules, through the serial executor, the
//! parallel one, or both (which must then agree with each other as well as with the
//! fixture).

use std::{
    path::{Path, PathBuf},
    str::FromStr,
};

use alloy_primitives::{B256, Log, keccak256};
use revm::primitives::hardfork::SpecId;
use stave_exec::{BlockEnv, BlockInput, ExecutionOutcome, Mode, ParallelExecutor, execute_serial};
use stave_primitives::{Header, RecoveredTx, SignedTx, TxError};

use crate::{
    fixture::{self, Case, Env, FixtureError, Indexes, StateTest},
    skip::skip_for,
    world::World,
};

/// The chain id the fixtures sign for.
const FIXTURE_CHAIN_ID: u64 = 1;

/// Why a run could not start or a file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateTestError {
    /// Reading a file or a directory failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A file is not a state test fixture.
    #[error("{path}: {source}")]
    Fixture {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: FixtureError,
    },
    /// The parallel executor's threads could not start.
    #[error("starting the parallel executor: {0}")]
    Threads(std::io::Error),
    /// `--executor` names no executor.
    #[error("unknown executor {0:?}: serial, parallel or both")]
    UnknownExecutor(String),
}

/// Which executors run each case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Executors {
    /// The serial (reference) executor.
    Serial,
    /// The parallel executor.
    Parallel,
    /// Both, which must agree.
    Both,
}

impl FromStr for Executors {
    type Err = StateTestError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "serial" => Ok(Self::Serial),
            "parallel" => Ok(Self::Parallel),
            "both" => Ok(Self::Both),
            other => Err(StateTestError::UnknownExecutor(other.to_owned())),
        }
    }
}

/// What became of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Root and logs as the fixture says (and both executors alike).
    Pass,
    /// Why not.
    Fail(String),
    /// Not run: the skip list's reason.
    Skip(&'static str),
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseReport {
    /// The test's name.
    pub name: String,
    /// The fork.
    pub fork: String,
    /// Position among the fork's cases of the test.
    pub index: usize,
    /// The case's indexes into the transaction template.
    pub indexes: Indexes,
    /// The state root the run gave (none when skipped).
    pub state_root: Option<B256>,
    /// Pass, fail or skip.
    pub verdict: Verdict,
}

impl CaseReport {
    /// The line `--json` prints: go-ethereum's `evm statetest` fields (`name`, `pass`,
    /// `fork`, `stateRoot`, `error`), with the case's index and indexes.
    pub fn to_json(&self) -> serde_json::Value {
        let mut line = serde_json::json!({
            "name": self.name,
            "index": self.index,
            "indexes": self.indexes,
            "pass": self.verdict == Verdict::Pass,
            "fork": self.fork,
        });
        if let Some(root) = self.state_root {
            line["stateRoot"] = serde_json::json!(root);
        }
        match &self.verdict {
            Verdict::Pass => {}
            Verdict::Fail(error) => line["error"] = serde_json::json!(error),
            Verdict::Skip(reason) => line["skipped"] = serde_json::json!(reason),
        }
        line
    }
}

/// Counts of a run, printed last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    /// Cases seen.
    pub total: usize,
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// Cases skipped (see [`crate::SKIPS`]).
    pub skipped: usize,
}

impl Summary {
    /// Counts `report`.
    pub fn add(&mut self, report: &CaseReport) {
        self.total += 1;
        match report.verdict {
            Verdict::Pass => self.passed += 1,
            Verdict::Fail(_) => self.failed += 1,
            Verdict::Skip(_) => self.skipped += 1,
        }
    }
}

/// Runs state tests with the chosen executors, keeping the parallel executor's threads
/// from case to case.
#[derive(Debug)]
pub struct Runner {
    executors: Executors,
    fork: String,
    parallel: Option<ParallelExecutor>,
}

impl Runner {
    /// Threads the parallel executor runs on.
    const THREADS: usize = 2;

    /// Runs the cases of fork `fork` with `executors`.
    pub fn new(executors: Executors, fork: &str) -> Result<Self, StateTestError> {
        let parallel = match executors {
            Executors::Serial => None,
            Executors::Parallel | Executors::Both => {
                Some(ParallelExecutor::new(Self::THREADS).map_err(StateTestError::Threads)?)
            }
        };
        Ok(Self {
            executors,
            fork: fork.to_owned(),
            parallel,
        })
    }

    /// Runs every case of the runner's fork in the fixture file at `path`.
    pub fn run_file(&self, path: &Path) -> Result<Vec<CaseReport>, StateTestError> {
        let bytes = std::fs::read(path).map_err(|source| StateTestError::Io {
            path: path.to_owned(),
            source,
        })?;
        let tests = fixture::parse(&bytes).map_err(|source| StateTestError::Fixture {
            path: path.to_owned(),
            source,
        })?;
        Ok(tests.iter().flat_map(|test| self.run_test(test)).collect())
    }

    /// Runs every case of the runner's fork in `test`.
    pub fn run_test(&self, test: &StateTest) -> Vec<CaseReport> {
        let pre = World::from_pre(&test.pre);
        test.cases
            .iter()
            .filter(|case| case.fork == self.fork)
            .map(|case| {
                let (state_root, verdict) = match skip_for(test, case) {
                    Some(skip) => (None, Verdict::Skip(skip.what)),
                    None => match self.run_case(test, &pre, case) {
                        Ok(root) => (Some(root), Verdict::Pass),
                        Err((root, error)) => (root, Verdict::Fail(error)),
                    },
                };
                CaseReport {
                    name: test.name.clone(),
                    fork: case.fork.clone(),
                    index: case.index,
                    indexes: case.indexes,
                    state_root,
                    verdict,
                }
            })
            .collect()
    }

    /// Runs one case on `pre`: its state root, or the root (when it got one) and why it
    /// failed.
    fn run_case(
        &self,
        test: &StateTest,
        pre: &World,
        case: &Case,
    ) -> Result<B256, (Option<B256>, String)> {
        let spec = SpecId::from_str(&case.fork)
            .map_err(|_| (None, format!("unknown fork {:?}", case.fork)))?;
        let tx = match transaction(case) {
            Ok(tx) => tx,
            Err(refused) => {
                // Refused before execution: nothing changes.
                let root = pre.root();
                return match &case.expect_exception {
                    Some(_) => check(root, logs_hash(&[]), case)
                        .map(|()| root)
                        .map_err(|error| (Some(root), error)),
                    None => Err((Some(root), format!("transaction refused: {refused}"))),
                };
            }
        };
        let header = header(&test.env);
        let block_env = block_env(&test.env, &header, spec);
        let txs = [tx];
        let input = BlockInput::new(pre, block_env, &txs, Mode::Build);
        let run = |executor: &str, outcome: Result<ExecutionOutcome, _>| {
            outcome.map_err(|error| (None, format!("{executor} executor failed: {error}")))
        };
        let outcome = match (self.executors, &self.parallel) {
            (Executors::Serial, _) | (_, None) => run("serial", execute_serial(input))?,
            (Executors::Parallel, Some(parallel)) => run("parallel", parallel.execute(input))?,
            (Executors::Both, Some(parallel)) => {
                let serial = run("serial", execute_serial(input))?;
                let parallel = run("parallel", parallel.execute(input))?;
                if serial != parallel {
                    return Err((None, "the serial and parallel executors differ".into()));
                }
                serial
            }
        };
        let mut post = pre.clone();
        post.apply(&outcome.diff);
        let root = post.root();
        let logs: Vec<_> = outcome
            .receipts
            .iter()
            .flat_map(|receipt| receipt.receipt.logs.iter().cloned())
            .collect();
        match (&case.expect_exception, outcome.skipped.first()) {
            (Some(expected), None) => {
                return Err((
                    Some(root),
                    format!("expected {expected}, but the transaction was included"),
                ));
            }
            (None, Some(skipped)) => {
                return Err((
                    Some(root),
                    format!("transaction refused: {}", skipped.reason),
                ));
            }
            _ => {}
        }
        check(root, logs_hash(&logs), case).map_err(|error| (Some(root), error))?;
        Ok(root)
    }
}

/// The header of the block a test's transactions run in.
pub(crate) fn header(env: &Env) -> Header {
    Header {
        number: env.number,
        timestamp: env.timestamp,
        proposer: env.coinbase,
        gas_limit: env.gas_limit,
        base_fee_per_gas: env.base_fee,
        ..Header::default()
    }
}

/// The environment of block `header` of a test of environment `env`, under `spec`.
pub(crate) fn block_env<'a>(env: &Env, header: &'a Header, spec: SpecId) -> BlockEnv<'a> {
    BlockEnv::new(FIXTURE_CHAIN_ID, header)
        .with_spec(spec)
        .with_randomness(env.random, env.excess_blob_gas)
}

/// keccak-256 of the RLP list of `logs`: the fixtures' `logs`.
pub(crate) fn logs_hash(logs: &[Log]) -> B256 {
    let mut out = Vec::new();
    alloy_rlp::encode_list(logs, &mut out);
    keccak256(out)
}

/// Compares a run's state root and logs hash with the case's.
fn check(root: B256, logs_hash: B256, case: &Case) -> Result<(), String> {
    if root != case.state_root {
        return Err(format!("state root {root}, fixture {}", case.state_root));
    }
    if logs_hash != case.logs_hash {
        return Err(format!("logs hash {logs_hash}, fixture {}", case.logs_hash));
    }
    Ok(())
}

/// The case's transaction with its sender, or why the chain refuses it before execution.
/// The intrinsic gas is left to revm, which applies the case's fork's rule (the chain's
/// own check applies Prague's EIP-7623 floor).
pub(crate) fn transaction(case: &Case) -> Result<RecoveredTx, TxError> {
    let tx = SignedTx::decode(&case.tx)?;
    match tx.check_stateless(Some(FIXTURE_CHAIN_ID)) {
        Ok(()) | Err(TxError::IntrinsicGasTooLow { .. }) => {}
        Err(other) => return Err(other),
    }
    let sender = tx.recover_sender()?;
    Ok(RecoveredTx { tx, sender })
}

/// Every `.json` file at or under `paths`, each directory walked in name order.
pub fn fixture_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, StateTestError> {
    let mut files = Vec::new();
    for path in paths {
        walk(path, &mut files)?;
    }
    Ok(files)
}

fn walk(path: &Path, files: &mut Vec<PathBuf>) -> Result<(), StateTestError> {
    let io = |source| StateTestError::Io {
        path: path.to_owned(),
        source,
    };
    if !path.is_dir() {
        files.push(path.to_owned());
        return Ok(());
    }
    let mut entries = std::fs::read_dir(path)
        .map_err(io)?
        .map(|entry| entry.map(|entry| entry.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io)?;
    entries.sort();
    for entry in entries {
        if entry.is_dir() {
            walk(&entry, files)?;
        } else if entry.extension().is_some_and(|ext| ext == "json") {
            files.push(entry);
        }
    }
    Ok(())
}
