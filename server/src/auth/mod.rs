//! Who is calling: passwords, secrets (API keys, session tokens), browser sessions, the
//! same-origin rule for mutations, and the axum extractors built on them.

pub mod extract;
pub mod origin;
pub mod password;
pub mod secrets;
pub mod session;
