//! Sign-in throttling (ID-2): failed logins back off per username and per client address, so a
//! password cannot be guessed at speed and a flood of logins cannot keep every core hashing.
//!
//! Each key (a username, an address) may fail a few times freely; then every further failure
//! blocks it for twice as long as the last, up to [`MAX_BLOCK`]. A blocked key is refused with 429
//! and a Retry-After before any password is hashed. Failures are forgotten after [`FORGET_AFTER`]
//! of quiet, and a successful sign-in clears its username. The tables are LRU maps of bounded size,
//! so a stream of random usernames or addresses cannot grow memory. Time is tokio's, so tests run
//! on paused time.

use std::{net::IpAddr, sync::Mutex, time::Duration};

use hashlink::LruCache;
use tokio::time::Instant;

/// Failures a username may have before it is slowed down.
pub const FREE_USERNAME_FAILURES: u32 = 5;
/// Failures one address may have (teams share addresses behind NAT, so more).
pub const FREE_ADDRESS_FAILURES: u32 = 20;
/// The first block; each further failure doubles it.
pub const FIRST_BLOCK: Duration = Duration::from_secs(1);
/// The longest block.
pub const MAX_BLOCK: Duration = Duration::from_secs(15 * 60);
/// Quiet time after which a key's failures are forgotten.
pub const FORGET_AFTER: Duration = Duration::from_secs(30 * 60);
/// Keys remembered per table (least recently failed go first).
const TABLE_SIZE: usize = 10_000;
/// Longest username kept as a key.
const MAX_KEY_CHARS: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
    blocked_until: Option<Instant>,
}

pub struct LoginThrottle {
    usernames: Mutex<LruCache<String, Failures>>,
    addresses: Mutex<LruCache<IpAddr, Failures>>,
}

impl Default for LoginThrottle {
    fn default() -> Self {
        LoginThrottle {
            usernames: Mutex::new(LruCache::new(TABLE_SIZE)),
            addresses: Mutex::new(LruCache::new(TABLE_SIZE)),
        }
    }
}

fn username_key(username: &str) -> String {
    username.trim().chars().take(MAX_KEY_CHARS).collect::<String>().to_lowercase()
}

/// One client, as far as an address tells: an IPv6 host commonly holds a whole /64, so its
/// failures count together.
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

impl LoginThrottle {
    /// `Err(wait)` while the username or the address is blocked.
    pub fn check(&self, username: &str, ip: IpAddr) -> Result<(), Duration> {
        let now = Instant::now();
        let wait =
            |f: Option<&Failures>| f.and_then(|f| f.blocked_until).filter(|u| *u > now).map(|u| u - now);
        let by_name = wait(lock(&self.usernames).peek(&username_key(username)));
        let by_address = wait(lock(&self.addresses).peek(&address_key(ip)));
        match by_name.max(by_address) {
            Some(w) => Err(w),
            None => Ok(()),
        }
    }

    /// Counts a failed sign-in against both keys.
    pub fn failed(&self, username: &str, ip: IpAddr) {
        let now = Instant::now();
        bump(&mut lock(&self.usernames), username_key(username), FREE_USERNAME_FAILURES, now);
        bump(&mut lock(&self.addresses), address_key(ip), FREE_ADDRESS_FAILURES, now);
    }

    /// A successful sign-in clears its username (the address keeps its count, so one valid
    /// account does not reset an address that is guessing others).
    pub fn succeeded(&self, username: &str) {
        lock(&self.usernames).remove(&username_key(username));
    }
}

fn lock<K: std::hash::Hash + Eq>(
    m: &Mutex<LruCache<K, Failures>>,
) -> std::sync::MutexGuard<'_, LruCache<K, Failures>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn bump<K: std::hash::Hash + Eq>(table: &mut LruCache<K, Failures>, key: K, free: u32, now: Instant) {
    let fresh = Failures { count: 0, last: now, blocked_until: None };
    let f = table.get(&key).copied().filter(|f| now.duration_since(f.last) < FORGET_AFTER).unwrap_or(fresh);
    let count = f.count.saturating_add(1);
    let blocked_until = (count >= free).then(|| {
        let doublings = (count - free).min(20);
        now + FIRST_BLOCK.saturating_mul(1 << doublings).min(MAX_BLOCK)
    });
    table.insert(key, Failures { count, last: now, blocked_until });
}

#[cfg(test)]
mod tests {
    use super::*;

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 7));
    const OTHER_IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(198, 51, 100, 8));

    #[tokio::test(start_paused = true)]
    async fn a_username_is_slowed_after_a_few_failures_and_the_block_doubles() {
        let t = LoginThrottle::default();
        for _ in 0..FREE_USERNAME_FAILURES - 1 {
            assert!(t.check("alice", IP).is_ok());
            t.failed("alice", IP);
        }
        assert!(t.check("alice", IP).is_ok());
        t.failed("alice", IP);
        assert_eq!(t.check("Alice", OTHER_IP), Err(FIRST_BLOCK), "per username, whatever the address");
        tokio::time::advance(FIRST_BLOCK).await;
        assert!(t.check("alice", IP).is_ok());
        t.failed("alice", IP);
        assert_eq!(t.check("alice", IP), Err(2 * FIRST_BLOCK));
        assert!(t.check("bob", OTHER_IP).is_ok(), "other users and addresses are not affected");
        // a success clears the username
        tokio::time::advance(2 * FIRST_BLOCK).await;
        t.succeeded("alice");
        assert!(t.check("alice", OTHER_IP).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn an_address_guessing_many_usernames_is_slowed_and_failures_are_forgotten() {
        let t = LoginThrottle::default();
        for i in 0..FREE_ADDRESS_FAILURES {
            t.failed(&format!("user{i}"), IP);
        }
        assert!(t.check("someone-else", IP).is_err());
        assert!(t.check("someone-else", OTHER_IP).is_ok());
        tokio::time::advance(FORGET_AFTER).await;
        t.failed("user0", IP);
        assert!(t.check("someone-else", IP).is_ok(), "old failures were forgotten");
    }

    #[tokio::test(start_paused = true)]
    async fn an_ipv6_client_counts_as_its_slash_64() {
        let t = LoginThrottle::default();
        for i in 0..FREE_ADDRESS_FAILURES {
            let ip: IpAddr = format!("2001:db8:1:2::{:x}", i + 1).parse().unwrap();
            t.failed(&format!("user{i}"), ip);
        }
        assert!(t.check("x", "2001:db8:1:2:ffff::1".parse().unwrap()).is_err());
        assert!(t.check("x", "2001:db8:1:3::1".parse().unwrap()).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn blocks_are_capped_and_tables_are_bounded() {
        let t = LoginThrottle::default();
        for _ in 0..200 {
            t.failed("alice", IP);
        }
        assert_eq!(t.check("alice", IP), Err(MAX_BLOCK));
        for i in 0..TABLE_SIZE + 100 {
            t.failed(&format!("random-{i}"), IP);
        }
        assert_eq!(lock(&t.usernames).len(), TABLE_SIZE);
    }
}
