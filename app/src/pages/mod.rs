//! One module per page.

mod account;
mod account_forms;
mod accounts;
mod keys;
mod login;
mod placeholders;
mod quota_rows;
mod requests;
mod settings;

pub use account::AccountPage;
pub use accounts::AccountsPage;
pub use keys::KeysPage;
pub use login::LoginPage;
pub use placeholders::{MembersPage, NotFound, PoolsPage};
pub use requests::{AdminRequestDetailPage, AdminRequestsPage, RequestDetailPage, RequestsPage};
pub use settings::SettingsPage;
