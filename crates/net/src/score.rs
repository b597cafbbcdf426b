//! Peer scores: each offence costs a peer points; below a threshold it is banned for a
//! while. A decompression failure, a bad length or an oversize frame closes the
//! connection and costs the most; a frame for a module nobody serves costs less; a peer a
//! protocol above blocks is banned at once. Points come back with time (one per
//! [`ScoreConfig::recover_every`], up to the initial score), so an honest peer's rare
//! faults (a timeout while it was busy) never add up to a ban over a long uptime.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use crate::frame::FrameError;

/// A peer's identity: the hash of its certificate's public key.
pub type NodeId = [u8; 32];

/// What a peer did wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offence {
    /// A frame the codec refused: bad length, oversize, bomb, corrupt, unknown version.
    BadFrame,
    /// A frame for a group or module this node does not serve.
    UnknownModule,
    /// A message that does not decode, or a block that does not match its header.
    BadMessage,
    /// A request it did not answer in time.
    Timeout,
    /// A message on a channel it may not use: e.g. a consensus message from a node whose
    /// certificate is from the chain's CA but whose key is not a validator's.
    Unauthorized,
    /// A protocol above judged it faulty and blocks it (consensus's `Blocker`): it is banned
    /// at once, whatever its score and the [`ScoreConfig`].
    Blocked,
}

impl Offence {
    /// Points the offence costs.
    pub fn penalty(self) -> i32 {
        match self {
            Offence::BadFrame => 50,
            Offence::UnknownModule => 20,
            Offence::BadMessage => 25,
            Offence::Timeout => 5,
            Offence::Unauthorized => 25,
            // Everything; `PeerScores::penalize` bans on a block whatever the score.
            Offence::Blocked => i32::MAX,
        }
    }
}

impl FrameError {
    /// The offence a peer committed by sending this; `None` for socket errors, which are
    /// nobody's fault in particular.
    pub fn offence(&self) -> Option<Offence> {
        match self {
            FrameError::Io(_) => None,
            _ => Some(Offence::BadFrame),
        }
    }
}

/// Scoring rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreConfig {
    /// A new (or unbanned) peer's score.
    pub initial: i32,
    /// A peer whose score falls below this is banned.
    pub ban_below: i32,
    /// How long a ban lasts.
    pub ban_for: Duration,
    /// A peer regains one point each time this passes, up to `initial`.
    pub recover_every: Duration,
}

impl Default for ScoreConfig {
    fn default() -> Self {
        Self {
            initial: 100,
            ban_below: 1,
            ban_for: Duration::from_secs(600),
            recover_every: Duration::from_secs(6),
        }
    }
}

/// What happened to a peer after an offence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It may stay (with this score).
    Keep(i32),
    /// It is banned until then: drop its connection and refuse it until the time passes.
    Banned(Instant),
}

#[derive(Debug, Clone, Copy)]
struct PeerState {
    /// The score when it was last charged...
    score: i32,
    /// ... at this time; it recovers from there.
    charged_at: Instant,
    banned_until: Option<Instant>,
}

impl PeerState {
    /// The score at `now`: the charged score plus what it recovered since, at most
    /// `config.initial` (and never below what it was charged to).
    fn score_at(&self, now: Instant, config: &ScoreConfig) -> i32 {
        if self.score >= config.initial {
            return self.score;
        }
        let elapsed = now.saturating_duration_since(self.charged_at);
        let points = elapsed.as_nanos() / config.recover_every.as_nanos().max(1);
        let missing = u128::from(config.initial.abs_diff(self.score));
        // Below `missing`, so it fits an i32 difference.
        let recovered = i32::try_from(points.min(missing)).unwrap_or(i32::MAX);
        self.score.saturating_add(recovered).min(config.initial)
    }
}

/// Every known peer's score and ban.
#[derive(Debug, Default)]
pub struct PeerScores {
    config: ScoreConfig,
    peers: HashMap<NodeId, PeerState>,
}

impl PeerScores {
    /// Scores under `config`.
    pub fn new(config: ScoreConfig) -> Self {
        Self {
            config,
            peers: HashMap::new(),
        }
    }

    /// Charges `peer` for `offence` at `now`.
    pub fn penalize(&mut self, peer: NodeId, offence: Offence, now: Instant) -> Verdict {
        let config = self.config;
        let state = self.peers.entry(peer).or_insert(PeerState {
            score: config.initial,
            charged_at: now,
            banned_until: None,
        });
        state.score = state
            .score_at(now, &config)
            .saturating_sub(offence.penalty());
        state.charged_at = now;
        // A block bans whatever the score: the protocol above has judged the peer already.
        if state.score < config.ban_below || offence == Offence::Blocked {
            let until = now + config.ban_for;
            state.banned_until = Some(until);
            return Verdict::Banned(until);
        }
        Verdict::Keep(state.score)
    }

    /// `peer`'s score at `now` (a peer never charged has the initial score).
    pub fn score(&self, peer: &NodeId, now: Instant) -> i32 {
        self.peers.get(peer).map_or(self.config.initial, |state| {
            state.score_at(now, &self.config)
        })
    }

    /// True while `peer` is banned; an expired ban is lifted and the score reset.
    pub fn is_banned(&mut self, peer: &NodeId, now: Instant) -> bool {
        let initial = self.config.initial;
        match self.peers.get_mut(peer) {
            Some(state) => match state.banned_until {
                Some(until) if now < until => true,
                Some(_) => {
                    *state = PeerState {
                        score: initial,
                        charged_at: now,
                        banned_until: None,
                    };
                    false
                }
                None => false,
            },
            None => false,
        }
    }
}
