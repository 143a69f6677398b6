//! Member passwords (ID-2): Argon2id with the crate's recommended parameters, PHC strings.
//!
//! Hashing is CPU-heavy by design, so the async wrappers run it on the blocking pool, at most
//! [`HASHING_CONCURRENCY`] at a time: a flood of sign-ins queues (and after
//! [`HASHING_QUEUE_TIMEOUT`] is told to come back) instead of taking every core. Checking a
//! login for an unknown user still verifies against a fixed hash so that timing does not reveal
//! which usernames exist.

use std::{
    sync::{Arc, LazyLock},
    time::Duration,
};

use tokio::sync::Semaphore;

use argon2::{
    Argon2,
    password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString, rand_core::OsRng},
};

use crate::error::{Error, Result};

/// Shortest password accepted for a member (ID-2).
pub const MIN_PASSWORD_LEN: usize = 8;
/// Longest password accepted (keeps hashing cost bounded).
pub const MAX_PASSWORD_LEN: usize = 256;

/// Password hashes computed at once (each takes tens of milliseconds of one core and 19 MiB).
pub const HASHING_CONCURRENCY: usize = 2;
/// Longest a sign-in or password change waits for a hashing slot before answering 503.
pub const HASHING_QUEUE_TIMEOUT: Duration = Duration::from_secs(10);

static HASHING: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(HASHING_CONCURRENCY)));

/// Runs `work` on the blocking pool under the hashing semaphore. `gate` runs once the permit is
/// held, before any hashing: a check that must see the results of the hashes queued before it
/// (the sign-in throttle); `after` runs on the result while the permit is still held, so the
/// next one through the gate sees it (a failed guess is counted before the next guess is let
/// in). The permit travels with the blocking task and comes back with its result, so a caller
/// that goes away while the hash runs does not free its slot early.
async fn hashing<T: Send + 'static>(
    gate: impl FnOnce() -> Result<()>,
    work: impl FnOnce() -> T + Send + 'static,
    after: impl FnOnce(&T),
) -> Result<T> {
    let permit = tokio::time::timeout(HASHING_QUEUE_TIMEOUT, Arc::clone(&HASHING).acquire_owned())
        .await
        .map_err(|_| Error::Busy)?
        .map_err(|_| Error::Internal("hashing semaphore closed".into()))?;
    gate()?;
    let (out, permit) = tokio::task::spawn_blocking(move || (work(), permit))
        .await
        .map_err(|e| Error::Internal(format!("hashing task failed: {e}")))?;
    after(&out);
    drop(permit);
    Ok(out)
}

/// Rejects passwords that are too short or too long.
pub fn validate(password: &str) -> Result<()> {
    let len = password.chars().count();
    if len < MIN_PASSWORD_LEN {
        return Err(Error::field(
            "password",
            format!("password must have at least {MIN_PASSWORD_LEN} characters"),
        ));
    }
    if len > MAX_PASSWORD_LEN {
        return Err(Error::field(
            "password",
            format!("password must have at most {MAX_PASSWORD_LEN} characters"),
        ));
    }
    Ok(())
}

/// Hashes a password into a PHC string (`$argon2id$...`).
pub fn hash(password: &str) -> Result<String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| Error::Internal(format!("password hashing failed: {e}")))
}

/// Checks a password against a stored PHC string. A malformed hash never verifies.
pub fn verify(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|parsed| Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok())
        .unwrap_or(false)
}

/// A valid hash of a random password, verified against when the username is unknown.
static DECOY: LazyLock<String> = LazyLock::new(|| {
    let mut random = [0u8; 16];
    rand::RngCore::fill_bytes(&mut rand::rng(), &mut random);
    hash(&format!("{random:?}")).unwrap_or_default()
});

pub async fn hash_async(password: String) -> Result<String> {
    hashing(|| Ok(()), move || hash(&password), |_| {}).await?
}

/// Verifies on the blocking pool; with `None` it burns the same time on the decoy hash. A
/// password longer than [`MAX_PASSWORD_LEN`] never verifies and is not hashed. `gate` runs
/// when a hashing slot is free, before hashing; `wrong` runs on a wrong password before the
/// slot is free again (see [`hashing`]).
pub async fn verify_async(
    password: String,
    phc: Option<String>,
    gate: impl FnOnce() -> Result<()>,
    wrong: impl FnOnce(),
) -> Result<bool> {
    if password.chars().count() > MAX_PASSWORD_LEN {
        gate()?;
        wrong();
        return Ok(false);
    }
    let work = move || match phc {
        Some(phc) => verify(&password, &phc),
        None => {
            let _ = verify(&password, &DECOY);
            false
        }
    };
    hashing(gate, work, |ok| {
        if !ok {
            wrong();
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_verifies_only_the_same_password() {
        let h = hash("correct horse battery").unwrap();
        assert!(h.starts_with("$argon2id$"), "{h}");
        assert!(!h.contains("correct horse"));
        assert!(verify("correct horse battery", &h));
        assert!(!verify("correct horse batterY", &h));
        assert!(!verify("", &h));
    }

    #[test]
    fn same_password_gets_a_fresh_salt() {
        assert_ne!(hash("password1").unwrap(), hash("password1").unwrap());
    }

    #[test]
    fn malformed_hash_never_verifies() {
        assert!(!verify("anything", "not-a-phc-string"));
        assert!(!verify("anything", ""));
    }

    #[test]
    fn length_rules() {
        assert!(validate("short").is_err());
        assert!(validate("12345678").is_ok());
        assert!(validate(&"x".repeat(MAX_PASSWORD_LEN + 1)).is_err());
    }

    #[tokio::test]
    async fn unknown_user_path_rejects() {
        assert!(!verify_async("whatever1".into(), None, || Ok(()), || {}).await.unwrap());
    }

    #[tokio::test]
    async fn overlong_passwords_never_verify_and_are_not_hashed() {
        let long = "x".repeat(MAX_PASSWORD_LEN + 1);
        let h = hash(&long).unwrap();
        assert!(verify(&long, &h), "the plain check would accept it");
        assert!(!verify_async(long, Some(h), || Ok(()), || {}).await.unwrap());
    }

    #[tokio::test]
    async fn the_gate_runs_before_hashing_and_can_refuse() {
        let refused = verify_async("whatever1".into(), None, || Err(Error::TooManyAttempts(3)), || {}).await;
        assert!(matches!(refused, Err(Error::TooManyAttempts(3))));
    }

    #[tokio::test]
    async fn at_most_a_few_hashes_run_at_once() {
        let running = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (running, peak) = (running.clone(), peak.clone());
                tokio::spawn(hashing(
                    || Ok(()),
                    move || {
                        use std::sync::atomic::Ordering::SeqCst;
                        let now = running.fetch_add(1, SeqCst) + 1;
                        peak.fetch_max(now, SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        running.fetch_sub(1, SeqCst);
                    },
                    |_| {},
                ))
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), HASHING_CONCURRENCY);
    }
}
