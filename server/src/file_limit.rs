//! The open-file limit: SubLane raises its own soft limit to the hard one when it starts.
//!
//! Every proxied call holds two sockets while it is open (the client's and the upstream's), so
//! 10,000 open streams need 20,000 files (performance goal 3). Most Linux systems start a login
//! or a service with a soft limit of 1,024 (systemd: 1,024 soft, 524,288 hard): left there, the
//! accept loop fails with "too many open files" at about 500 open streams, while the machine
//! would allow hundreds of times more. The hard limit is the administrator's ceiling and stays
//! as it is; the soft one is only this process's default, which it may raise up to the ceiling
//! (Go's runtime does the same when a program starts).

/// Each open stream holds this many files.
pub const FILES_PER_STREAM: u64 = 2;

/// Slots [`reserve_table`] gives the file table at start: 16,000 open streams before it grows
/// again.
pub const TABLE_SLOTS: u64 = 32_768;

/// What [`raise`] did: the soft limit before and after (equal when there was nothing to raise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub was: u64,
    pub now: u64,
}

impl Limit {
    /// About how many streams can be open at once under this limit.
    pub fn streams(&self) -> u64 {
        self.now / FILES_PER_STREAM
    }
}

/// Raises the soft open-file limit to the hard one. `None` where the limit is not known (not
/// Linux, or unlimited).
pub fn raise() -> std::io::Result<Option<Limit>> {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
        // Unlimited does not happen for files on Linux (the kernel caps them at `nr_open`);
        // asking for it would fail, so an unknown side is left alone.
        let (Some(was), Some(hard)) = (current, maximum) else { return Ok(None) };
        if was < hard {
            setrlimit(Resource::Nofile, Rlimit { current: Some(hard), maximum: Some(hard) })?;
        }
        Ok(Some(Limit { was, now: was.max(hard) }))
    }
    #[cfg(not(target_os = "linux"))]
    Ok(None)
}

/// Grows this process's table of open files, at start, to [`TABLE_SLOTS`] or the soft limit
/// if that is lower (the kernel rounds up to a power of two); returns the slots asked for,
/// `None` where the limit is not known. Call it
/// after [`raise`] and before the runtime starts its threads.
///
/// The kernel grows the table by doubling when a new file needs a slot past its end (64, 128,
/// ... slots), and in a process with more than one thread each growth first waits for an RCU
/// grace period, 10-40 ms on our 2-core VM; meanwhile every other thread that opens a file waits
/// for the growth. A serving thread that accepts a connection or dials an upstream then holds up
/// every call on it. A gateway meeting its first surge grows the table several times in quick
/// succession: in `make bench`'s open-loop run at 5,000 calls a second, nothing ran for about
/// 40 ms at a time, and the backlog reached the workspace capacity. The table never shrinks, so
/// one growth here, while the process has a single thread (no grace period to wait for), is the
/// last until the process holds more files than that. Its cost is about 8 bytes of kernel memory
/// per slot: 264 KiB for 32,768.
pub fn reserve_table() -> std::io::Result<Option<u64>> {
    #[cfg(target_os = "linux")]
    {
        use rustix::process::{Resource, getrlimit};
        let Some(limit) = getrlimit(Resource::Nofile).current else { return Ok(None) };
        let slots = limit.min(TABLE_SLOTS);
        // A file in the last slot wanted (the lowest free one at or above it) makes the kernel
        // grow the table to hold it; closing it keeps the table.
        let last = rustix::fd::RawFd::try_from(slots.saturating_sub(1)).unwrap_or(rustix::fd::RawFd::MAX);
        let null = std::fs::File::open("/dev/null")?;
        match rustix::io::fcntl_dupfd_cloexec(&null, last) {
            Ok(file) => drop(file),
            // every slot from there up is taken: the table already holds them
            Err(rustix::io::Errno::MFILE) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(Some(slots))
    }
    #[cfg(not(target_os = "linux"))]
    Ok(None)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    use super::*;

    /// Held by the tests that read or change this process's limit (`cargo test` runs them on
    /// threads of one process).
    static LIMIT: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let _limit = LIMIT.lock().unwrap_or_else(|p| p.into_inner());
        let Rlimit { maximum: Some(hard), .. } = getrlimit(Resource::Nofile) else {
            eprintln!("skipped: no hard limit on open files");
            return;
        };
        // Lowered first (a process may always lower its soft limit), so the raise is seen.
        let low = hard / 2;
        setrlimit(Resource::Nofile, Rlimit { current: Some(low), maximum: Some(hard) }).unwrap();

        let limit = raise().unwrap().unwrap();

        assert_eq!(limit, Limit { was: low, now: hard });
        let now = getrlimit(Resource::Nofile);
        assert_eq!(now.current, Some(hard), "the kernel has the new limit");
        assert_eq!(now.maximum, Some(hard), "the hard limit is the administrator's and stays");
        assert_eq!(limit.streams(), hard / 2);
        assert_eq!(
            raise().unwrap().unwrap(),
            Limit { was: hard, now: hard },
            "a second raise changes nothing"
        );
    }

    /// Slots in this process's table of open files, as the kernel reports them.
    fn table_slots() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        status.lines().find_map(|l| l.strip_prefix("FDSize:"))?.trim().parse().ok()
    }

    #[test]
    fn the_file_table_is_grown_once_at_start() {
        let _limit = LIMIT.lock().unwrap_or_else(|p| p.into_inner());
        let wanted = getrlimit(Resource::Nofile).current.unwrap().min(TABLE_SLOTS);
        let before = table_slots().unwrap();
        if before >= wanted {
            eprintln!("skipped: this process started with a table of {before} slots, {wanted} wanted");
            return;
        }

        assert_eq!(reserve_table().unwrap(), Some(wanted));

        let after = table_slots().unwrap();
        assert!(after >= wanted, "the table has {after} slots, {wanted} wanted");
        assert!(
            !std::path::Path::new(&format!("/proc/self/fd/{}", wanted - 1)).exists(),
            "the file that grew the table is closed again"
        );
    }
}
