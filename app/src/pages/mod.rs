//! One module per page.

mod account;
mod account_forms;
mod accounts;
mod admin_keys;
mod budgets;
mod keys;
mod login;
mod members;
mod placeholders;
mod pools;
mod quota_rows;
mod requests;
mod settings;
mod usage;

pub use account::AccountPage;
pub use accounts::AccountsPage;
pub use admin_keys::AdminKeysPage;
pub use budgets::BudgetsPage;
pub use keys::KeysPage;
pub use login::LoginPage;
pub use members::MembersPage;
pub use placeholders::NotFound;
pub use pools::PoolsPage;
pub use requests::{AdminRequestDetailPage, AdminRequestsPage, RequestDetailPage, RequestsPage};
pub use settings::SettingsPage;
pub use usage::{AdminUsagePage, UsagePage};
