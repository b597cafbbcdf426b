//! Checks that bound a request's memory before its work starts: the size of log filters,
//! and the size of an answer as it is built ([`ResponseBudget`]), so an answer over the
//! response cap is refused before it is whole rather than after. The budget serializes
//! each item once: what it counted is what is sent ([`Json`]).

use alloy_rpc_types_eth::Filter;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::{config::RpcConfig, error::RpcError};

/// Refuses a log filter with more addresses or topic alternatives than the config allows,
/// in go-ethereum's words.
pub(crate) fn check_filter(filter: &Filter, config: &RpcConfig) -> Result<(), RpcError> {
    if filter.address.len() > config.max_filter_addresses {
        return Err(RpcError::LimitExceeded(format!(
            "exceed max addresses: {} given, at most {}",
            filter.address.len(),
            config.max_filter_addresses
        )));
    }
    if let Some(topics) = filter
        .topics
        .iter()
        .find(|topics| topics.len() > config.max_filter_topics)
    {
        return Err(RpcError::LimitExceeded(format!(
            "exceed max subtopics: {} given, at most {}",
            topics.len(),
            config.max_filter_topics
        )));
    }
    Ok(())
}

/// What is left of the response cap while an answer is built.
pub(crate) struct ResponseBudget {
    left: usize,
    cap: usize,
}

impl ResponseBudget {
    /// The budget of one answer under `config`'s response cap.
    pub(crate) fn new(config: &RpcConfig) -> Self {
        let cap = config.max_response_bytes as usize;
        Self { left: cap, cap }
    }

    /// Serializes `item` and counts its JSON against the budget; over it, the error says
    /// what the answer held and `hint` says what to ask instead. Returns the JSON, to be
    /// sent as it is.
    pub(crate) fn charge(
        &mut self,
        item: &impl Serialize,
        hint: impl FnOnce() -> String,
    ) -> Result<Json, RpcError> {
        let json = serde_json::value::to_raw_value(item).map_err(RpcError::internal)?;
        let size = json.get().len().saturating_add(1);
        self.left = self.left.checked_sub(size).ok_or_else(|| {
            RpcError::LimitExceeded(format!(
                "response exceeds the {} byte limit. {}",
                self.cap,
                hint()
            ))
        })?;
        Ok(json)
    }
}

/// One item of an answer, already serialized (by [`ResponseBudget::charge`]).
pub type Json = Box<RawValue>;

#[cfg(test)]
mod tests {
    use alloy_primitives::{Address, B256};

    use super::*;

    #[test]
    fn filters_over_the_limits_are_refused_by_what_they_exceed() {
        let config = RpcConfig {
            max_filter_addresses: 2,
            max_filter_topics: 2,
            ..RpcConfig::default()
        };
        let addresses = |n: u8| (0..n).map(Address::repeat_byte).collect::<Vec<_>>();
        let topics = |n: u8| (0..n).map(B256::repeat_byte).collect::<Vec<_>>();
        assert!(
            check_filter(
                &Filter::new()
                    .address(addresses(2))
                    .event_signature(topics(2)),
                &config
            )
            .is_ok()
        );
        let error =
            check_filter(&Filter::new().address(addresses(3)), &config).expect_err("3 addresses");
        assert!(
            error.to_string().starts_with("exceed max addresses"),
            "{error}"
        );
        let error = check_filter(&Filter::new().topic2(topics(3)), &config).expect_err("3 topics");
        assert!(
            error.to_string().starts_with("exceed max subtopics"),
            "{error}"
        );
    }

    #[test]
    fn the_budget_counts_json_bytes_and_refuses_past_the_cap() {
        let config = RpcConfig {
            max_response_bytes: 10,
            ..RpcConfig::default()
        };
        let mut budget = ResponseBudget::new(&config);
        // "\"abc\"" is 5 bytes, plus one for the separator.
        let json = budget.charge(&"abc", String::new).expect("6 of 10");
        assert_eq!(json.get(), "\"abc\"");
        let error = budget
            .charge(&"abc", || "Ask for less.".into())
            .expect_err("12 of 10");
        assert_eq!(
            error.to_string(),
            "response exceeds the 10 byte limit. Ask for less."
        );
    }
}
