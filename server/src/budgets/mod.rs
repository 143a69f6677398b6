//! Budgets (BUD-1..BUD-3): limits on requests, tokens or credits per key, member or workspace over
//! a window. This part holds the window arithmetic; policies and their enforcement build on it.

pub mod window;
