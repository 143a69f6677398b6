//! Small input rules shared by the domain modules; each failure is a 422 naming its field (in the
//! message and in the error's `field`) and saying why.

use crate::error::{Error, Result};

/// Longest display name for members, pools, accounts and keys.
pub const MAX_NAME_LEN: usize = 64;

/// Trims a display name and checks it is 1..=64 printable characters.
pub fn name(field: &'static str, value: &str) -> Result<String> {
    let v = value.trim();
    if v.is_empty() {
        return Err(Error::field(field, format!("{field} must not be empty")));
    }
    if v.chars().count() > MAX_NAME_LEN {
        return Err(Error::field(field, format!("{field} must have at most {MAX_NAME_LEN} characters")));
    }
    if v.chars().any(char::is_control) {
        return Err(Error::field(field, format!("{field} must not contain control characters")));
    }
    Ok(v.to_owned())
}

/// Usernames: 1..=64 of letters, digits, `.`, `_`, `-`, `@`.
pub fn username(value: &str) -> Result<String> {
    let v = name("username", value)?;
    if !v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@')) {
        return Err(Error::field(
            "username",
            "username may contain only letters, digits, '.', '_', '-' and '@'",
        ));
    }
    Ok(v)
}

/// A number within an inclusive range.
pub fn range(field: &'static str, value: u32, min: u32, max: u32) -> Result<u32> {
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(Error::field(field, format!("{field} must be between {min} and {max}")))
    }
}

/// The suffix a deleted member's username or pool's name gets, so the name is free again. `~` is
/// not allowed in usernames; a pool named like this by hand is merely shown as deleted.
pub const DELETED_MARK: &str = "~deleted~";

/// A stored member or pool name as people should read it: `alice~deleted~7` is `alice (deleted)`.
pub fn shown_name(stored: String) -> String {
    match stored.split_once(DELETED_MARK) {
        Some((name, _)) => format!("{name} (deleted)"),
        None => stored,
    }
}

/// Parses `group_concat(id)` output into ids.
pub fn id_list(joined: Option<String>) -> Vec<i64> {
    let mut ids: Vec<i64> =
        joined.unwrap_or_default().split(',').filter_map(|s| s.trim().parse().ok()).collect();
    ids.sort_unstable();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(name("n", "  laptop ").unwrap(), "laptop");
        assert!(name("n", "   ").is_err());
        assert!(name("n", &"x".repeat(65)).is_err());
        assert!(name("n", "a\nb").is_err());
    }

    #[test]
    fn deleted_names_read_as_deleted() {
        assert_eq!(shown_name("alice~deleted~7".into()), "alice (deleted)");
        assert_eq!(shown_name("alice".into()), "alice");
    }

    #[test]
    fn usernames_are_restricted() {
        assert!(username("alice.b-c_d@x").is_ok());
        assert!(username("al ice").is_err());
        assert!(username("ålice").is_err());
    }

    #[test]
    fn id_lists_parse_and_sort() {
        assert_eq!(id_list(Some("3,1,2".into())), vec![1, 2, 3]);
        assert!(id_list(None).is_empty());
    }
}
