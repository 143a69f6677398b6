//! One module per page.

mod keys;
mod login;
mod placeholders;
mod requests;

pub use keys::KeysPage;
pub use login::LoginPage;
pub use placeholders::{AccountsPage, MembersPage, NotFound, PoolsPage};
pub use requests::{AdminRequestsPage, RequestsPage};
