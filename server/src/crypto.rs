//! Secrets at rest (ID-6): provider OAuth tokens and API keys are sealed with XChaCha20-Poly1305
//! under a 32-byte key kept in `<data dir>/credentials.key`.
//!
//! The key file is created on first start with mode 0600 and never rewritten. Back it up together
//! with the stopped database: without it the sealed credentials cannot be opened. A sealed blob is
//! `version (1 byte) || nonce (24 bytes) || ciphertext+tag`, so the format can evolve.

use std::{
    io::Write,
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::Path,
};

use chacha20poly1305::{
    KeyInit, XChaCha20Poly1305, XNonce,
    aead::{Aead, Payload},
};
use rand::RngCore;

const KEY_LEN: usize = 32;
const NONCE_LEN: usize = 24;
const FORMAT_V1: u8 = 1;
/// Associated data binds a blob to its purpose, so a sealed value cannot be replayed elsewhere.
const AAD_PREFIX: &[u8] = b"sublane/sealed/v1/";

/// Why sealing or opening failed. Messages never contain secret material.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("cannot read or create the credentials key {path}: {source}")]
    KeyFile { path: String, source: std::io::Error },
    #[error(
        "credentials key {path} must be exactly {KEY_LEN} bytes; restore it from the backup made with the database"
    )]
    KeyLength { path: String },
    #[error("sealed credential is malformed or was sealed with another credentials.key")]
    Open,
    #[error("sealing failed")]
    Seal,
}

/// The loaded credentials key. Debug prints nothing of the key.
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(*****)")
    }
}

impl Sealer {
    /// Loads `path`, creating it with a fresh random key (mode 0600) if it does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, CryptoError> {
        let err = |source| CryptoError::KeyFile { path: path.display().to_string(), source };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => {
                // Tighten permissions left loose by a manual restore.
                let mode = std::fs::metadata(path).map_err(err)?.permissions().mode();
                if mode & 0o077 != 0 {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
                }
                bytes
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = [0u8; KEY_LEN];
                rand::rng().fill_bytes(&mut key);
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                    .map_err(err)?;
                file.write_all(&key).and_then(|_| file.sync_all()).map_err(err)?;
                key.to_vec()
            }
            Err(e) => return Err(err(e)),
        };
        Self::from_key(&bytes).ok_or(CryptoError::KeyLength { path: path.display().to_string() })
    }

    fn from_key(bytes: &[u8]) -> Option<Self> {
        (bytes.len() == KEY_LEN)
            .then(|| XChaCha20Poly1305::new_from_slice(bytes).ok())
            .flatten()
            .map(|cipher| Self { cipher })
    }

    /// Seals `plaintext` for `purpose` (for example `"account-credentials"`).
    pub fn seal(&self, purpose: &str, plaintext: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        let aad = [AAD_PREFIX, purpose.as_bytes()].concat();
        let ct = self
            .cipher
            .encrypt(XNonce::from_slice(&nonce), Payload { msg: plaintext, aad: &aad })
            .map_err(|_| CryptoError::Seal)?;
        let mut out = Vec::with_capacity(1 + NONCE_LEN + ct.len());
        out.push(FORMAT_V1);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&ct);
        Ok(out)
    }

    /// Opens a blob made by [`Sealer::seal`] with the same `purpose`.
    pub fn open(&self, purpose: &str, sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
        let (&version, rest) = sealed.split_first().ok_or(CryptoError::Open)?;
        if version != FORMAT_V1 || rest.len() < NONCE_LEN {
            return Err(CryptoError::Open);
        }
        let (nonce, ct) = rest.split_at(NONCE_LEN);
        let aad = [AAD_PREFIX, purpose.as_bytes()].concat();
        self.cipher
            .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad: &aad })
            .map_err(|_| CryptoError::Open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_file_is_created_0600_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.key");
        let a = Sealer::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read(&path).unwrap().len(), KEY_LEN);
        let sealed = a.seal("account-credentials", b"refresh-token-123").unwrap();
        let b = Sealer::load_or_create(&path).unwrap();
        assert_eq!(b.open("account-credentials", &sealed).unwrap(), b"refresh-token-123");
    }

    #[test]
    fn sealing_round_trips_and_hides_the_plaintext() {
        let s = Sealer::from_key(&[7u8; KEY_LEN]).unwrap();
        let sealed = s.seal("p", b"sk-ant-secret").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_ne!(s.seal("p", b"sk-ant-secret").unwrap(), sealed, "fresh nonce each time");
        assert_eq!(s.open("p", &sealed).unwrap(), b"sk-ant-secret");
    }

    #[test]
    fn tampering_wrong_purpose_and_wrong_key_are_rejected() {
        let s = Sealer::from_key(&[7u8; KEY_LEN]).unwrap();
        let mut sealed = s.seal("p", b"x").unwrap();
        assert!(s.open("other", &sealed).is_err());
        assert!(Sealer::from_key(&[8u8; KEY_LEN]).unwrap().open("p", &sealed).is_err());
        let last = sealed.len() - 1;
        sealed[last] ^= 1;
        assert!(s.open("p", &sealed).is_err());
        assert!(s.open("p", &[]).is_err());
    }

    #[test]
    fn short_key_file_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("credentials.key");
        std::fs::write(&path, b"short").unwrap();
        let err = Sealer::load_or_create(&path).unwrap_err();
        assert!(err.to_string().contains("32 bytes"), "{err}");
    }
}
