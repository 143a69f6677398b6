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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
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
}
