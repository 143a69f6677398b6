//! How numbers and query values are written on the pages.

/// Percent-encodes a query value (`:` stays, so times read in the address bar).
pub fn query_value(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A duration in milliseconds as people read it: `850 ms`, `2.3 s`, or a dash when unknown.
pub fn millis(v: Option<i64>) -> String {
    match v {
        None => "\u{2014}".into(),
        Some(ms) if ms >= 1000 => format!("{:.1} s", ms as f64 / 1000.0),
        Some(ms) => format!("{ms} ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_durations_readable() {
        assert_eq!(query_value("gpt 5/&x=1:2"), "gpt%205%2F%26x%3D1:2");
        assert_eq!(millis(None), "\u{2014}");
        assert_eq!(millis(Some(850)), "850 ms");
        assert_eq!(millis(Some(2_340)), "2.3 s");
    }
}
