//! Who is calling: passwords, secrets (API keys, session tokens), browser sessions, the
//! same-origin rule for mutations, the client's address and scheme, sign-in throttling, and the
//! axum extractors built on them.

pub mod client;
pub mod extract;
pub mod origin;
pub mod password;
pub mod secrets;
pub mod session;
pub mod throttle;
