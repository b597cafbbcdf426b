//! What a [`NodeConfig`] is checked for before a node starts: values it cannot run with
//! (a zero block time, pools that hold nothing, a map too small for LMDB, WebSocket pings
//! rarer than the idle timeout), ports another process holds, and private key files that
//! others can read. Each refusal names the config key (as the TOML file spells it) and
//! what would work.

use std::{
    net::{SocketAddr, TcpListener},
    path::Path,
    time::Duration,
};

use super::{CONSENSUS_NEEDS, NodeConfig, Role};
use crate::LaunchError;

/// The smallest `map_size` accepted: LMDB's tables and a genesis need more than a few
/// pages, and a map this small fills within the first blocks anyway.
pub const MIN_MAP_SIZE: usize = 1 << 20;
/// The longest `block_time_ms` accepted: clients wait up to a block time for the next
/// block.
pub const MAX_BLOCK_TIME: Duration = Duration::from_secs(600);
/// The longest `[consensus] leader_timeout_ms` accepted: a leader that is down costs each
/// view it leads this long (and the engine's timers are multiples of it).
pub const MAX_LEADER_TIMEOUT: Duration = Duration::from_secs(3_600);
/// The most `prefetch_threads` accepted: past the disk's queue depth more threads only
/// wait longer.
pub const MAX_PREFETCH_THREADS: usize = 256;
/// The longest `prefetch_disk_load_us` accepted: no disk takes a second a read, and a
/// bound past every load's time would only turn prefetching off (`prefetch_threads = 0`
/// says that).
pub const MAX_PREFETCH_DISK_LOAD: Duration = Duration::from_secs(1);

/// A refusal of `key`'s value, saying why.
fn refuse(key: &str, why: impl std::fmt::Display) -> LaunchError {
    LaunchError::Config(format!("`{key}` {why}"))
}

impl NodeConfig {
    /// Checks what can be checked without touching the machine: that the role has what it
    /// needs and that every value can work.
    pub(crate) fn check(&self) -> Result<(), LaunchError> {
        self.check_role()?;
        self.check_values()
    }

    /// Checks, just before the node starts, that the ports it is to listen on are free
    /// and that its private key files are readable by their owner only. Takes nothing:
    /// each port is bound and released again.
    pub(crate) fn check_machine(&self) -> Result<(), LaunchError> {
        let mut keys = Vec::new();
        if let Some(p2p) = &self.p2p {
            keys.push(("[p2p] key", p2p.key.as_path()));
        }
        if let Role::Validator(consensus) = &self.role {
            keys.push(("[consensus] key", consensus.key.as_path()));
        }
        for (key, path) in keys {
            check_private(key, path)?;
        }
        let mut addrs: Vec<(&str, SocketAddr)> = Vec::new();
        if self.rpc_enabled {
            addrs.push(("rpc_addr", self.rpc.addr));
        }
        addrs.extend(self.metrics_addr.map(|addr| ("metrics_addr", addr)));
        addrs.extend(self.p2p.as_ref().map(|p2p| ("[p2p] listen", p2p.listen)));
        check_ports(&addrs)
    }

    /// A follower needs peers; a validator needs the network its validators are on.
    fn check_role(&self) -> Result<(), LaunchError> {
        let needs_peers = match &self.role {
            Role::Producer => return Ok(()),
            Role::Follower => {
                "a node that does not produce blocks needs a [p2p] section with peers to follow"
            }
            Role::Validator(_) | Role::FullNode => CONSENSUS_NEEDS,
        };
        match self.p2p {
            Some(_) => Ok(()),
            None => Err(LaunchError::Config(needs_peers.into())),
        }
    }

    /// Values the node cannot run with.
    fn check_values(&self) -> Result<(), LaunchError> {
        if self.block_time.is_zero() {
            return Err(refuse(
                "block_time_ms",
                "is 0: the longest time between blocks must be at least 1 ms",
            ));
        }
        if self.block_time > MAX_BLOCK_TIME {
            return Err(refuse(
                "block_time_ms",
                format_args!(
                    "is {} ms: at most {} ms (clients wait that long for a block)",
                    millis(self.block_time),
                    millis(MAX_BLOCK_TIME)
                ),
            ));
        }
        if self.block_txs == 0 {
            return Err(refuse(
                "block_txs",
                "is 0: a block must be able to hold at least 1 transaction",
            ));
        }
        if self.block_fill_rounds == 0 {
            return Err(refuse(
                "block_fill_rounds",
                "is 0: a block must be built at least once (1 builds it once, with no refill after failed transactions)",
            ));
        }
        if self.rpc.ws_ping_interval >= self.rpc.idle_timeout {
            return Err(refuse(
                "[rpc] ws_ping_interval_ms",
                format_args!(
                    "({} ms) must be less than `[rpc] idle_timeout_ms` ({} ms): a WebSocket that answers no ping for the idle timeout is closed, so one must be sent before it",
                    millis(self.rpc.ws_ping_interval),
                    millis(self.rpc.idle_timeout)
                ),
            ));
        }
        for (key, value) in [
            ("pool_max_txs", self.pool_max_txs),
            ("pool_max_per_sender", self.pool_max_per_sender),
        ] {
            if value == Some(0) {
                return Err(refuse(
                    key,
                    "is 0: the txpool must hold at least 1 transaction (leave the key out for the default)",
                ));
            }
        }
        for (key, value) in [
            ("state_cache_entries", self.state_cache_entries),
            ("sender_cache_entries", self.sender_cache_entries),
        ] {
            if value == 0 {
                return Err(refuse(key, "is 0: the cache must hold at least 1 entry"));
            }
        }
        if self.prefetch_threads > MAX_PREFETCH_THREADS {
            return Err(refuse(
                "prefetch_threads",
                format_args!(
                    "is {}: at most {MAX_PREFETCH_THREADS} (each is a thread with its own stack)",
                    self.prefetch_threads
                ),
            ));
        }
        if self.prefetch_disk_load > MAX_PREFETCH_DISK_LOAD {
            return Err(refuse(
                "prefetch_disk_load_us",
                format_args!(
                    "is {} µs: at most {} µs (`prefetch_threads = 0` turns prefetching off)",
                    self.prefetch_disk_load.as_micros(),
                    MAX_PREFETCH_DISK_LOAD.as_micros()
                ),
            ));
        }
        if self.map_size < MIN_MAP_SIZE {
            return Err(refuse(
                "map_size",
                format_args!(
                    "is {} bytes: the store needs at least {MIN_MAP_SIZE} bytes (the map is address space, not disk: it may be far larger than the data)",
                    self.map_size
                ),
            ));
        }
        let page = page_size();
        if !self.map_size.is_multiple_of(page) {
            return Err(refuse(
                "map_size",
                format_args!(
                    "is {} bytes: it must be a multiple of the page size ({page} bytes)",
                    self.map_size
                ),
            ));
        }
        match &self.role {
            Role::Validator(consensus) if consensus.leader_timeout <= self.block_time => {
                Err(refuse(
                    "[consensus] leader_timeout_ms",
                    format_args!(
                        "({} ms) must exceed `block_time_ms` ({} ms), or an idle leader's view times out before it proposes",
                        millis(consensus.leader_timeout),
                        millis(self.block_time)
                    ),
                ))
            }
            Role::Validator(consensus) if consensus.leader_timeout > MAX_LEADER_TIMEOUT => {
                Err(refuse(
                    "[consensus] leader_timeout_ms",
                    format_args!(
                        "is {} ms: at most {} ms (a leader that is down costs each of its views this long)",
                        millis(consensus.leader_timeout),
                        millis(MAX_LEADER_TIMEOUT)
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}

fn millis(duration: Duration) -> u128 {
    duration.as_millis()
}

/// The system's memory page size, which LMDB's map size must be a multiple of.
fn page_size() -> usize {
    // SAFETY: sysconf reads a system constant and touches no memory of ours.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4_096)
}

/// Refuses a private key file that its group or others may read or write, as ssh refuses
/// an unprotected private key: anyone who reads it can act as this node.
fn check_private(key: &str, path: &Path) -> Result<(), LaunchError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(path).map_err(LaunchError::io(format!(
            "reading `{key}` {}",
            path.display()
        )))?;
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(refuse(
                key,
                format_args!(
                    "{} is readable by others (mode {mode:03o}): a private key must be readable by its owner only; run `chmod 600 {}`",
                    path.display(),
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses an address another process already listens on, or one two keys share, naming
/// the key. Port 0 (the OS picks a free one) always passes.
fn check_ports(addrs: &[(&str, SocketAddr)]) -> Result<(), LaunchError> {
    // Held until every address is tried, so two keys given the same port collide here.
    let mut bound: Vec<(&str, SocketAddr, TcpListener)> = Vec::new();
    for &(key, addr) in addrs.iter().filter(|(_, addr)| addr.port() != 0) {
        if let Some((other, ..)) = bound.iter().find(|(_, at, _)| at.port() == addr.port()) {
            return Err(refuse(
                key,
                format_args!("({addr}) uses the same port as `{other}`: give each its own"),
            ));
        }
        match TcpListener::bind(addr) {
            Ok(listener) => bound.push((key, addr, listener)),
            Err(error) => {
                return Err(refuse(
                    key,
                    format_args!(
                        "({addr}) cannot be listened on ({error}): is another node or process using the port? Choose another"
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::ConsensusConfig;

    fn refusal(config: &NodeConfig) -> String {
        config.check().expect_err("refused").to_string()
    }

    /// Makes a config nonsensical in one way.
    type Spoil = fn(&mut NodeConfig);

    /// Makes `config` a validator with `leader_timeout`.
    fn validator(config: &mut NodeConfig, leader_timeout: Duration) {
        config.role = Role::Validator(ConsensusConfig {
            leader_timeout,
            ..ConsensusConfig::new(PathBuf::from("k"))
        });
        config.p2p = Some(crate::P2pConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ca: PathBuf::new(),
            cert: PathBuf::new(),
            key: PathBuf::new(),
            allowed: Vec::new(),
            peers: Vec::new(),
            block_sources: Vec::new(),
            limits: crate::P2pLimits::default(),
        });
    }

    #[test]
    fn nonsensical_values_are_refused_with_their_key_named() {
        let dev = NodeConfig::dev().expect("dev").in_process();
        dev.check().expect("the dev config passes");
        let mut config = dev.clone();
        validator(&mut config, Duration::from_secs(3));
        config
            .check()
            .expect("a validator with the defaults passes");
        let cases: [(&str, Spoil); 15] = [
            ("`block_time_ms` is 0", |c| c.block_time = Duration::ZERO),
            ("`block_fill_rounds` is 0", |c| c.block_fill_rounds = 0),
            (
                "`[rpc] ws_ping_interval_ms` (60000 ms) must be less than `[rpc] idle_timeout_ms` (60000 ms)",
                |c| c.rpc.ws_ping_interval = c.rpc.idle_timeout,
            ),
            ("`block_time_ms` is 600001 ms", |c| {
                c.block_time = MAX_BLOCK_TIME + Duration::from_millis(1)
            }),
            ("`block_txs` is 0", |c| c.block_txs = 0),
            ("`pool_max_txs` is 0", |c| c.pool_max_txs = Some(0)),
            ("`pool_max_per_sender` is 0", |c| {
                c.pool_max_per_sender = Some(0)
            }),
            ("`state_cache_entries` is 0", |c| c.state_cache_entries = 0),
            ("`sender_cache_entries` is 0", |c| {
                c.sender_cache_entries = 0
            }),
            ("`prefetch_threads` is 257", |c| c.prefetch_threads = 257),
            ("`prefetch_disk_load_us` is 1000001 µs", |c| {
                c.prefetch_disk_load = MAX_PREFETCH_DISK_LOAD + Duration::from_micros(1)
            }),
            ("`map_size` is 4096 bytes", |c| c.map_size = 4_096),
            ("multiple of the page size", |c| {
                c.map_size = MIN_MAP_SIZE + 1
            }),
            (
                "`[consensus] leader_timeout_ms` (1000 ms) must exceed",
                |c| validator(c, Duration::from_secs(1)),
            ),
            ("`[consensus] leader_timeout_ms` is 3600001 ms", |c| {
                validator(c, MAX_LEADER_TIMEOUT + Duration::from_millis(1))
            }),
        ];
        for (expected, spoil) in cases {
            let mut config = dev.clone();
            spoil(&mut config);
            let refused = refusal(&config);
            assert!(refused.contains(expected), "{expected}: {refused}");
        }
    }

    #[test]
    fn a_port_in_use_or_used_twice_is_refused_with_its_key_named() {
        let taken = TcpListener::bind("127.0.0.1:0").expect("binds");
        let addr = taken.local_addr().expect("an address");
        let free = |key| (key, SocketAddr::from(([127, 0, 0, 1], 0)));
        let error = check_ports(&[free("rpc_addr"), ("[p2p] listen", addr)])
            .expect_err("in use")
            .to_string();
        assert!(error.starts_with("`[p2p] listen` (127.0.0.1:"), "{error}");
        assert!(error.contains("in use"), "{error}");
        drop(taken);
        check_ports(&[free("rpc_addr"), ("[p2p] listen", addr)]).expect("free again");
        let error = check_ports(&[("rpc_addr", addr), ("metrics_addr", addr)])
            .expect_err("shared")
            .to_string();
        assert!(
            error.contains("`metrics_addr`") && error.contains("same port as `rpc_addr`"),
            "{error}"
        );
    }

    #[test]
    fn a_key_file_others_can_read_is_refused_with_the_chmod_that_fixes_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("node.key");
        crate::files::write_new(&path, "secret", true).expect("writes");
        check_private("[p2p] key", &path).expect("written owner-only");
        for mode in [0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let error = check_private("[p2p] key", &path)
                .expect_err("refused")
                .to_string();
            assert!(error.starts_with("`[p2p] key`"), "{error}");
            assert!(
                error.contains(&format!("chmod 600 {}", path.display())),
                "{error}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).expect("chmod");
        check_private("[p2p] key", &path).expect("owner read-only passes");
    }
}
