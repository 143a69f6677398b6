//! Class lists shared by the forms, so every page's controls look and focus the same.

/// A text, number or select input on its own line.
pub const INPUT: &str = "mt-1 block w-full rounded-md border border-slate-300 bg-white px-3 py-2 text-sm focus:border-slate-900 focus:outline-none focus:ring-1 focus:ring-slate-900";
/// The primary action of a form.
pub const BUTTON: &str = "rounded-md bg-slate-900 px-3 py-2 text-sm font-medium text-white hover:bg-slate-700 focus-visible:outline-2 focus-visible:outline-offset-2 focus-visible:outline-slate-900 disabled:opacity-60";
/// A small secondary action in a table row.
pub const SMALL_BUTTON: &str = "rounded-md border border-slate-300 px-2 py-1 text-xs text-slate-700 hover:bg-slate-100 focus-visible:outline-2 focus-visible:outline-slate-900";
/// A small destructive action (revoke, delete).
pub const DANGER_BUTTON: &str = "rounded-md border border-red-300 bg-white px-2 py-1 text-xs font-medium text-red-700 hover:bg-red-50 focus-visible:outline-2 focus-visible:outline-red-700";
/// A `<summary>` that opens a panel of further actions.
pub const SUMMARY: &str = "cursor-pointer select-none rounded text-xs font-medium text-slate-700 underline-offset-2 hover:underline focus-visible:outline-2 focus-visible:outline-slate-900";
