//! Peer scores: offences add up to a ban, a ban expires, points come back with time,
//! socket errors are nobody's fault.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use stave_net::{FrameCodec, FrameError, Offence, PeerScores, ScoreConfig, Verdict};
use tokio_util::codec::Decoder;

#[test]
fn bad_frames_get_a_peer_banned_until_the_ban_expires() {
    let mut scores = PeerScores::new(ScoreConfig::default());
    let (peer, other) = ([1u8; 32], [2u8; 32]);
    let now = Instant::now();
    // The codec's refusal of a short frame is the offence.
    let mut short = BytesMut::from(&[0u8, 0, 0, 3][..]);
    let error = FrameCodec::default()
        .decode(&mut short)
        .expect_err("refused");
    assert_eq!(error.offence(), Some(Offence::BadFrame));
    assert_eq!(
        scores.penalize(peer, Offence::BadFrame, now),
        Verdict::Keep(50)
    );
    assert_eq!(
        scores.penalize(peer, Offence::UnknownModule, now),
        Verdict::Keep(30)
    );
    let Verdict::Banned(until) = scores.penalize(peer, Offence::BadFrame, now) else {
        panic!("a third offence bans")
    };
    assert_eq!(until, now + Duration::from_secs(600));
    assert!(scores.is_banned(&peer, now + Duration::from_secs(599)));
    assert!(!scores.is_banned(&other, now), "others are unaffected");
    // Once the ban is over the peer starts again from the initial score.
    assert!(!scores.is_banned(&peer, until));
    assert_eq!(
        scores.penalize(peer, Offence::Timeout, until),
        Verdict::Keep(95)
    );
}

#[test]
fn socket_errors_are_no_offence() {
    let error = FrameError::Io(std::io::Error::other("reset"));
    assert_eq!(error.offence(), None);
}

#[test]
fn a_block_bans_at_once_whatever_the_score_and_the_config() {
    for config in [
        ScoreConfig::default(),
        ScoreConfig {
            initial: i32::MAX,
            ban_below: -1_000_000,
            ban_for: Duration::from_secs(5),
            recover_every: Duration::from_secs(1),
        },
    ] {
        let mut scores = PeerScores::new(config);
        let now = Instant::now();
        assert!(matches!(
            scores.penalize([3; 32], Offence::Blocked, now),
            Verdict::Banned(_)
        ));
        assert!(scores.is_banned(&[3; 32], now));
    }
    // An unauthorized message costs like a bad message: not a ban on its own.
    let mut scores = PeerScores::new(ScoreConfig::default());
    assert_eq!(
        scores.penalize([4; 32], Offence::Unauthorized, Instant::now()),
        Verdict::Keep(75)
    );
}

#[test]
fn points_come_back_with_time_up_to_the_initial_score() {
    let config = ScoreConfig::default();
    let mut scores = PeerScores::new(config);
    let peer = [5u8; 32];
    let now = Instant::now();
    assert_eq!(
        scores.penalize(peer, Offence::BadFrame, now),
        Verdict::Keep(50)
    );
    assert_eq!(scores.score(&peer, now), 50);
    let later = now + config.recover_every * 20 + config.recover_every / 2;
    assert_eq!(scores.score(&peer, later), 70, "one point per period");
    // A later offence is charged on the recovered score: no ban.
    assert_eq!(
        scores.penalize(peer, Offence::BadFrame, later),
        Verdict::Keep(20)
    );
    let much_later = later + config.recover_every * 1_000;
    assert_eq!(scores.score(&peer, much_later), config.initial, "capped");
    // The same two offences at once ban.
    let mut at_once = PeerScores::new(config);
    at_once.penalize(peer, Offence::BadFrame, now);
    assert!(matches!(
        at_once.penalize(peer, Offence::BadFrame, now),
        Verdict::Banned(_)
    ));
}
