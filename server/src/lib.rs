//! SubLane server: configuration, storage, identity, the JSON API and the web app.
//! The binary (`main.rs`) only parses the command line, sets up logging and signals, and runs
//! [`serve::start`]; integration tests call the same function.

pub mod account_actions;
pub mod accounts;
pub mod api;
pub mod app_state;
pub mod auth;
pub mod breaker;
pub mod budgets;
pub mod catalogue;
pub mod chat;
pub mod clock;
pub mod config;
pub mod credentials;
pub mod crypto;
pub mod db;
pub mod directory;
pub mod error;
pub mod file_limit;
pub mod header_names;
pub mod huge_pages;
pub mod keys;
pub mod members;
pub mod metrics;
pub mod mock_upstream;
pub mod pools;
pub mod providers;
pub mod proxy;
pub mod quota;
pub mod records;
pub mod scheduler;
pub mod serve;
pub mod signal;
pub mod telemetry;
#[cfg(test)]
mod test_support;
pub mod usage;
pub mod validate;
pub mod web;
pub mod workspace_settings;
