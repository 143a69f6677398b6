//! Random secrets SubLane hands out and the hashes it keeps of them.
//!
//! Gateway API keys (`sk-sl-` + 256 random bits) and session tokens carry full entropy, so a
//! single SHA-256 is the right lookup hash: it is fast enough for the hot path and cannot be
//! brute-forced. Only hashes are stored; a key's `hint` shows a few characters so people can tell
//! keys apart.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Prefix of every gateway key, so leaked keys are recognisable (and scannable).
pub const API_KEY_PREFIX: &str = "sk-sl-";

/// 32 random bytes, base64url without padding (43 characters).
fn random_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A new gateway API key secret.
pub fn new_api_key() -> String {
    format!("{API_KEY_PREFIX}{}", random_token())
}

/// A new browser session token.
pub fn new_session_token() -> String {
    random_token()
}

/// The stored form of a key or token.
pub fn hash(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// A short, non-secret fragment shown in lists: `sk-sl-Ab3d…x9Qz`.
pub fn hint(secret: &str) -> String {
    let body = secret.strip_prefix(API_KEY_PREFIX).unwrap_or(secret);
    let chars: Vec<char> = body.chars().collect();
    if chars.len() < 12 {
        return format!("{API_KEY_PREFIX}…");
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{API_KEY_PREFIX}{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_are_prefixed_random_and_long() {
        let a = new_api_key();
        let b = new_api_key();
        assert!(a.starts_with("sk-sl-"));
        assert_eq!(a.len(), 6 + 43);
        assert_ne!(a, b);
        assert!(a[6..].chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    }

    #[test]
    fn hash_is_stable_distinct_and_not_the_secret() {
        let key = new_api_key();
        assert_eq!(hash(&key), hash(&key));
        assert_eq!(hash(&key).len(), 32);
        assert_ne!(hash(&key), hash(&new_api_key()));
        assert_ne!(hash(&key), key.as_bytes());
        // a known vector: SHA-256("abc")
        assert_eq!(hash("abc")[..4], [0xba, 0x78, 0x16, 0xbf],);
    }

    #[test]
    fn hint_shows_only_a_few_characters() {
        let key = "sk-sl-ABCDefghijklmnopqrstuvwxyz0123456789WXYZ";
        assert_eq!(hint(key), "sk-sl-ABCD…WXYZ");
        assert!(!hint(key).contains("efgh"));
        assert_eq!(hint("sk-sl-short"), "sk-sl-…");
    }
}
