//! An incremental Server-Sent Events splitter. The relay forwards upstream bytes untouched; this
//! only watches them, yielding each complete event (name and data) as its last byte arrives.

use std::borrow::Cow;

/// One complete event.
#[derive(Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// The `event:` field, if any.
    pub name: Option<&'a str>,
    /// The `data:` lines, joined by `\n`: borrowed from the chunk when there is one line (every
    /// provider sends one), built only for several.
    pub data: Cow<'a, str>,
}

/// Largest single event the splitter holds to watch it (a Responses `response.completed` carries
/// the whole answer, so this is generous). A longer event is passed through unwatched: its bytes
/// are dropped from the buffer until it ends, and [`Splitter::overflowed`] says so.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Splits a byte stream into events in time linear in its length: a partial event is never
/// searched twice, and at most [`MAX_EVENT_BYTES`] of it are kept.
#[derive(Debug, Default)]
pub struct Splitter {
    buf: Vec<u8>,
    /// How much of `buf` has been searched for a blank line without finding one.
    searched: usize,
    /// Inside an event over the cap: its bytes are dropped until it ends.
    skipping: bool,
    overflowed: bool,
    /// Bytes looked at while searching, over the splitter's life (tests check it stays linear).
    examined: u64,
}

impl Splitter {
    /// Whether no partial event is pending: only then may a heartbeat comment go into a stream
    /// passed on as it comes.
    pub fn at_boundary(&self) -> bool {
        self.buf.is_empty() && !self.skipping
    }

    /// Whether part of an event is pending, or an event over the cap is going by: bytes that are
    /// neither a comment nor a blank line have come and the event has not ended yet. (A block is
    /// judged by its first byte after any line breaks: keep-alive comments come as whole blocks
    /// of their own. At most 3 bytes of line breaks, `\r\n\r`, can lead one: two line breaks in
    /// a row end the block before.)
    pub fn inside_event(&self) -> bool {
        self.skipping
            || self.buf.iter().take(4).find(|b| !matches!(b, b'\n' | b'\r')).is_some_and(|&b| b != b':')
    }

    /// Whether what is pending ends inside a line (the next byte would continue it).
    pub fn mid_line(&self) -> bool {
        self.buf.last().is_some_and(|b| !matches!(b, b'\n' | b'\r'))
    }

    /// Whether an event over [`MAX_EVENT_BYTES`] went by unwatched.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Feeds bytes as [`Self::feed`] does and says whether they carried (some of) an event that
    /// is not a keep-alive ([`keep_alive`]): what CD-6's idle timeout counts. A chunk counts if it
    /// goes on with a pending event (the one that ends it included), completes an event, or
    /// leaves part of one pending; comments and blank lines never count. (A keep-alive event is
    /// known only once whole: one that comes in parts counts while it is pending.)
    pub fn feed_counting(&mut self, bytes: &[u8], mut on_event: impl FnMut(Event<'_>)) -> bool {
        let mut event = self.inside_event();
        self.feed(bytes, |ev| {
            event |= !keep_alive(ev.name);
            on_event(ev);
        });
        event || self.inside_event()
    }

    /// Feeds bytes and calls `on_event` for every event they complete.
    ///
    /// Most chunks hold whole events. When no partial event is pending, a chunk is read where it
    /// is and only its unfinished tail is copied; the buffer is let go once no event is pending
    /// again. So a chunk is not copied on its way through, and an idle stream between events
    /// holds no buffer (performance goal 3).
    pub fn feed(&mut self, bytes: &[u8], mut on_event: impl FnMut(Event<'_>)) {
        let pending = !self.buf.is_empty();
        // (Skipping an over-cap event always leaves its last 2 bytes pending.)
        debug_assert!(pending || (!self.skipping && self.searched == 0));
        if pending {
            self.buf.extend_from_slice(bytes);
        }
        let Splitter { buf, searched, skipping, examined, .. } = self;
        let text: &[u8] = if pending { buf } else { bytes };
        let mut start = 0;
        // A separator is at most 3 bytes: resume 2 before the end of what was searched.
        let mut from = searched.saturating_sub(2);
        while let Some((block_len, sep_len)) = find_boundary(&text[start..], from, examined) {
            if !*skipping {
                emit(&text[start..start + block_len], &mut on_event);
            }
            *skipping = false;
            start += block_len + sep_len;
            from = 0;
        }
        if pending {
            buf.drain(..start);
            if buf.is_empty() {
                *buf = Vec::new();
            }
        } else {
            buf.extend_from_slice(&bytes[start..]);
        }
        self.searched = self.buf.len();
        if self.buf.len() > MAX_EVENT_BYTES || (self.skipping && self.buf.len() > 2) {
            // Keep only what a separator could start with; the rest of this event goes unwatched.
            self.overflowed |= !self.skipping;
            self.skipping = true;
            let keep = self.buf.len() - 2;
            self.buf.drain(..keep);
            self.searched = self.buf.len();
        }
    }
}

/// Whether an event is only a keep-alive: Anthropic's `ping`, OpenAI's `keepalive` (sent on
/// long Responses streams).
pub fn keep_alive(name: Option<&str>) -> bool {
    matches!(name, Some("ping" | "keepalive"))
}

/// Parses one event block and reports it if it has a name or data.
fn emit(block: &[u8], on_event: &mut impl FnMut(Event<'_>)) {
    let Ok(text) = std::str::from_utf8(block) else { return };
    let mut name = None;
    let mut data: Option<Cow<'_, str>> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(v) = line.strip_prefix("event:") {
            name = Some(v.trim_start());
        } else if let Some(v) = line.strip_prefix("data:") {
            let v = v.strip_prefix(' ').unwrap_or(v);
            match &mut data {
                None => data = Some(Cow::Borrowed(v)),
                Some(joined) => {
                    let joined = joined.to_mut();
                    joined.push('\n');
                    joined.push_str(v);
                }
            }
        }
    }
    if name.is_some() || data.is_some() {
        on_event(Event { name, data: data.unwrap_or_default() });
    }
}

/// Position of the first blank line (`\n\n` or `\n\r\n`) at or after `from`: (event length,
/// separator length).
fn find_boundary(buf: &[u8], from: usize, examined: &mut u64) -> Option<(usize, usize)> {
    let mut i = from;
    while i + 1 < buf.len() {
        let Some(nl) = buf[i..buf.len() - 1].iter().position(|&b| b == b'\n') else {
            *examined += (buf.len() - i) as u64;
            return None;
        };
        *examined += nl as u64 + 1;
        i += nl;
        if buf[i + 1] == b'\n' {
            return Some((i, 2));
        }
        if buf[i + 1] == b'\r' && buf.get(i + 2) == Some(&b'\n') {
            return Some((i, 3));
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
            s.feed(c, |e| out.push((e.name.map(str::to_owned), e.data.into_owned())));
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
    fn an_event_split_byte_by_byte_is_found_once() {
        let stream = b"event: a\r\ndata: 1\r\n\r\nevent: b\ndata: 2\n\n";
        let chunks: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(collect(&chunks), vec![(Some("a".into()), "1".into()), (Some("b".into()), "2".into())]);
    }

    #[test]
    fn a_partial_event_is_not_searched_again_on_each_chunk() {
        // 64 KiB of one event in 1-byte chunks: a rescan per chunk would be ~2 billion steps.
        let mut s = Splitter::default();
        let mut seen = 0;
        s.feed(b"data: ", |_| seen += 1);
        for _ in 0..64 * 1024 {
            s.feed(b"x", |_| seen += 1);
        }
        s.feed(b"\n\n", |_| seen += 1);
        assert_eq!(seen, 1);
        assert!(s.examined < 4 * 64 * 1024, "{} bytes examined for a 64 KiB event", s.examined);
        assert!(s.at_boundary());
    }

    #[test]
    fn inside_an_event_is_told_from_keep_alives() {
        let after = |chunks: &[&[u8]]| {
            let mut s = Splitter::default();
            for c in chunks {
                s.feed(c, |_| {});
            }
            s.inside_event()
        };
        // keep-alives, whole or in part, and whole events leave nothing of an event pending
        for chunks in [
            &[b": kee".as_slice()][..],
            &[b": keep-alive\n\n", b"\n"],
            &[b"\r\n"],
            &[b"data: 1\r\n\r\n", b"\r\n: x"],
            &[b"event: a\ndata: 1\n\n"],
        ] {
            assert!(!after(chunks), "{chunks:?}");
        }
        // part of an event, behind any line breaks the upstream left before it
        for chunks in [&[b"event: x\nda".as_slice()][..], &[b"data: 1\n\n\n", b"dat"], &[b"\r\n\r\nd"]] {
            assert!(after(chunks), "{chunks:?}");
        }
        // an event over the cap is inside until it ends
        let mut s = Splitter::default();
        s.feed(b"data: ", |_| {});
        s.feed(&vec![b'x'; MAX_EVENT_BYTES + 1], |_| {});
        assert!(s.inside_event() && s.overflowed());
        s.feed(b"\n\n", |_| {});
        assert!(!s.inside_event());
    }

    #[test]
    fn an_event_over_the_cap_is_skipped_and_the_next_one_is_seen() {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        let big = vec![b'x'; 1024 * 1024];
        s.feed(b"event: huge\ndata: ", |e| out.push(e.data.into_owned()));
        for _ in 0..(MAX_EVENT_BYTES / big.len() + 2) {
            s.feed(&big, |e| out.push(e.data.into_owned()));
        }
        assert!(s.overflowed() && !s.at_boundary());
        assert!(s.buf.len() <= 2, "the oversized event is not kept");
        s.feed(b"\n\nevent: next\ndata: 1\n\n", |e| out.push(e.data.into_owned()));
        assert_eq!(out, vec!["1".to_owned()]);
        assert!(s.at_boundary());
    }

    #[test]
    fn whole_events_are_read_in_place_and_only_a_tail_is_kept() {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        s.feed(b"event: a\ndata: 1\n\ndata: 2\n\n", |e| out.push(e.data.into_owned()));
        assert_eq!(s.buf.capacity(), 0, "nothing copied for whole events");
        s.feed(b"data: 3\n\nevent: b\nda", |e| out.push(e.data.into_owned()));
        assert_eq!(s.buf, b"event: b\nda", "only the unfinished tail is kept");
        s.feed(b"ta: 4\n", |e| out.push(e.data.into_owned()));
        s.feed(b"\ndata: 5\n\n", |e| out.push(e.data.into_owned()));
        assert_eq!(out, ["1", "2", "3", "4", "5"]);
        assert!(s.at_boundary());
        assert_eq!(s.buf.capacity(), 0, "the buffer is let go once nothing is pending");
    }

    #[test]
    fn a_crlf_separator_split_after_whole_events_and_empty_chunks() {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        s.feed(b"", |e| out.push(e.data.into_owned()));
        s.feed(b"data: 1\n\ndata: 2\n\r", |e| out.push(e.data.into_owned()));
        assert_eq!(out, ["1"]);
        s.feed(b"", |e| out.push(e.data.into_owned()));
        s.feed(b"\nevent: only-a-name\n\n", |e| out.push(e.data.into_owned()));
        assert_eq!(out, ["1", "2", ""]);
        assert!(s.at_boundary());
    }

    #[test]
    fn one_data_line_is_borrowed_and_several_are_joined() {
        let mut s = Splitter::default();
        let mut borrowed = Vec::new();
        let mut joined = Vec::new();
        s.feed(b"data: one\n\ndata: a\ndata:b\r\ndata: c\n\n", |e| {
            borrowed.push(matches!(e.data, Cow::Borrowed(_)));
            joined.push(e.data.into_owned());
        });
        assert_eq!(borrowed, [true, false]);
        assert_eq!(joined, ["one", "a\nb\nc"]);
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
