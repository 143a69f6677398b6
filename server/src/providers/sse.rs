//! An incremental Server-Sent Events splitter. The relay forwards upstream bytes untouched; this
//! only watches them, yielding each complete event (name and data) as its last byte arrives.

/// One complete event.
#[derive(Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event:` field, if any.
    pub name: Option<&'a str>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

#[derive(Debug, Default)]
pub struct Splitter {
    buf: Vec<u8>,
}

impl Splitter {
    /// Whether no partial event is pending: only then may a heartbeat comment be inserted.
    pub fn at_boundary(&self) -> bool {
        self.buf.is_empty()
    }

    /// Feeds bytes and calls `on_event` for every event they complete.
    pub fn feed(&mut self, bytes: &[u8], mut on_event: impl FnMut(Event<'_>)) {
        self.buf.extend_from_slice(bytes);
        let mut start = 0;
        while let Some(end) = find_boundary(&self.buf[start..]) {
            let (block_len, sep_len) = end;
            let block = &self.buf[start..start + block_len];
            if let Ok(text) = std::str::from_utf8(block) {
                let mut name = None;
                let mut data: Vec<&str> = Vec::new();
                for line in text.split('\n') {
                    let line = line.strip_suffix('\r').unwrap_or(line);
                    if let Some(v) = line.strip_prefix("event:") {
                        name = Some(v.trim_start());
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if name.is_some() || !data.is_empty() {
                    on_event(Event { name, data: data.join("\n") });
                }
            }
            start += block_len + sep_len;
        }
        self.buf.drain(..start);
    }
}

/// Position of the first blank line (`\n\n` or `\r\n\r\n`): (event length, separator length).
fn find_boundary(buf: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i + 1 < buf.len() {
        if buf[i] == b'\n' {
            if buf[i + 1] == b'\n' {
                return Some((i, 2));
            }
            if buf[i + 1] == b'\r' && buf.get(i + 2) == Some(&b'\n') {
                return Some((i, 3));
            }
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(chunks: &[&[u8]]) -> Vec<(Option<String>, String)> {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        for c in chunks {
            s.feed(c, |e| out.push((e.name.map(str::to_owned), e.data)));
        }
        out
    }

    #[test]
    fn events_split_across_chunks_are_reassembled() {
        let out = collect(&[b"event: a\nda", b"ta: {\"x\":1}\n", b"\nevent: b\ndata: 2\n\n"]);
        assert_eq!(out, vec![(Some("a".into()), "{\"x\":1}".into()), (Some("b".into()), "2".into())]);
    }

    #[test]
    fn comments_crlf_and_multiline_data() {
        let out = collect(&[b": ping\n\nevent: x\r\ndata: 1\r\ndata: 2\r\n\r\n"]);
        assert_eq!(out, vec![(Some("x".into()), "1\n2".into())]);
    }

    #[test]
    fn boundary_tracking() {
        let mut s = Splitter::default();
        s.feed(b"data: 1\n", |_| {});
        assert!(!s.at_boundary());
        s.feed(b"\n", |_| {});
        assert!(s.at_boundary());
    }
}
