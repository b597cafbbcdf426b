//! Tuning of the node's process that must happen at its start: how the kernel backs its
//! memory, how mimalloc hands freed memory back, and how a write over the file-size limit
//! fails.

/// Tunes this process for a node: transparent huge pages off, mimalloc's purged memory
/// handed back without decommitting it, and a write over the file-size limit an error
/// rather than a kill. Call it early in `main`, before much is allocated, and after the
/// tracing subscriber is set so a failure is logged.
pub fn tune() {
    purge_without_decommitting();
    disable_transparent_huge_pages();
    ignore_file_size_signal();
}

/// Ignores SIGXFSZ, which the kernel sends a process that writes past its file-size limit
/// (`ulimit -f`) and whose default action kills it without a word. Ignored, the write
/// fails with `EFBIG` instead, which storage reports as a full disk
/// (`StorageError::Write`): the node stops with a line saying so, and every block it
/// committed before stays committed.
fn ignore_file_size_signal() {
    #[cfg(unix)]
    {
        // SAFETY: installs SIG_IGN, no handler of ours runs; done once at start.
        let failed = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR;
        if failed {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "SIGXFSZ keeps its default action"
            );
        }
    }
}

/// Turns transparent huge pages off for this process (before it allocates much).
///
/// mimalloc asks the kernel for huge pages on its arena (`MADV_HUGEPAGE`), and it hands
/// freed memory back to the kernel after a delay; the next touch of such a huge-page
/// region then faults a whole huge page in and zeroes it, even for a few kilobytes. A
/// restarted validator catching up spent much of its CPU in the kernel zeroing those pages
/// (`clear_page_erms` under `do_huge_pmd_anonymous_page`), CPU the catch-up needs. The
/// flag holds for mappings made before it too.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and touches no memory of
        // ours.
        let failed = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0;
        if failed {
            tracing::debug!(
                error = %std::io::Error::last_os_error(),
                "transparent huge pages stay on"
            );
        }
    }
}

/// mimalloc's `mi_option_purge_decommits`: its place in `mi_option_e` (`mimalloc.h`, v3 as
/// v2), for which `libmimalloc-sys` has no constant.
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// Has mimalloc hand the memory it purges back with `MADV_FREE`, which the kernel takes
/// only when it needs it, rather than decommit it (`MADV_DONTNEED`), unless
/// `MIMALLOC_PURGE_DECOMMITS` says otherwise. A decommitted page faults in zeroed at its
/// next use, and the executor's threads met their heaps purged between blocks, so a
/// speculating thread paid page faults the first chunk's thread did not. Never purging
/// at all helps as much; a longer purge delay does not. The cost: purged memory counts in
/// the process's RSS until the kernel reclaims it.
fn purge_without_decommitting() {
    if std::env::var_os("MIMALLOC_PURGE_DECOMMITS").is_none() {
        // SAFETY: sets one of mimalloc's options, read at each purge; touches no memory of
        // ours.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 0) };
    }
}

#[cfg(test)]
mod tests {
    /// The option [`super::purge_without_decommitting`] sets is the one mimalloc reads as
    /// `MIMALLOC_PURGE_DECOMMITS`: run again with that variable set, this test finds its
    /// value there.
    #[test]
    fn the_option_set_at_start_is_the_one_mimalloc_reads_as_purge_decommits() {
        const CHILD: &str = "STAVE_TEST_PURGE_DECOMMITS_CHILD";
        if std::env::var_os(CHILD).is_some() {
            // SAFETY: reads one of mimalloc's options.
            let value = unsafe { libmimalloc_sys::mi_option_get(super::MI_OPTION_PURGE_DECOMMITS) };
            assert_eq!(value, 7);
            return;
        }
        let child = std::process::Command::new(std::env::current_exe().expect("a test binary"))
            .args([
                "--exact",
                "process::tests::the_option_set_at_start_is_the_one_mimalloc_reads_as_purge_decommits",
            ])
            .env("MIMALLOC_PURGE_DECOMMITS", "7")
            .env(CHILD, "1")
            .output()
            .expect("the test binary runs");
        let report = String::from_utf8_lossy(&child.stdout);
        assert!(child.status.success(), "{report}");
        assert!(
            report.contains("1 passed"),
            "the child ran this test: {report}"
        );
    }
}
