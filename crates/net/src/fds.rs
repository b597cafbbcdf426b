//! The process's limit on open files. Every peer connection, pending handshake and
//! accepted socket takes a descriptor; a node that keeps the common default soft limit
//! (1,024) runs out long before its caps on handshakes matter, while the hard limit is
//! usually far higher. Raising the soft limit to the hard one needs no privilege.

/// Raises this process's soft limit on open files to its hard limit; returns the soft
/// limit now in force.
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct passed, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads only the struct passed, which outlives the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit = raised;
    }
    Ok(limit.rlim_cur)
}
