//! A server-sent-events parser fed with the raw byte chunks of a response.
//!
//! Network reads split the stream anywhere — inside a `data:` line, inside a
//! UTF-8 character — so bytes are buffered until a line ends, and a line is
//! decoded only whole. An event is dispatched at the blank line that ends it;
//! comment lines (`: keep-alive`) are counted and skipped.

/// What one fed chunk completed.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    /// The `data` of each event completed, multi-line data joined with `\n`.
    pub events: Vec<String>,
    pub comments: usize,
}

#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Data lines of the event being read.
    data: Option<String>,
}

impl SseParser {
    pub fn feed(&mut self, bytes: &[u8]) -> Parsed {
        self.buf.extend_from_slice(bytes);
        let mut out = Parsed::default();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos;
            let line = self.buf[start..end].strip_suffix(b"\r").unwrap_or(&self.buf[start..end]);
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            self.line(&line, &mut out);
        }
        self.buf.drain(..start);
        out
    }

    fn line(&mut self, line: &str, out: &mut Parsed) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.events.push(data);
            }
        } else if line.starts_with(':') {
            out.comments += 1;
        } else if line == "data" {
            self.push_data("");
        } else if let Some(value) = line.strip_prefix("data:") {
            self.push_data(value.strip_prefix(' ').unwrap_or(value));
        }
        // Other fields (event:, id:, retry:) carry nothing a chat stream uses.
    }

    fn push_data(&mut self, value: &str) {
        match &mut self.data {
            Some(d) => {
                d.push('\n');
                d.push_str(value);
            }
            None => self.data = Some(value.to_owned()),
        }
    }

    /// At the end of the body: an event that was never terminated by a blank
    /// line, or bytes that never formed a line.
    pub fn finish(self) -> Option<String> {
        let tail = String::from_utf8_lossy(&self.buf).into_owned();
        match (self.data, tail.trim().is_empty()) {
            (Some(d), true) => Some(d),
            (Some(d), false) => Some(format!("{d}\n{tail}")),
            (None, false) => Some(tail),
            (None, true) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parts: &[&[u8]]) -> (Vec<String>, usize, Option<String>) {
        let mut p = SseParser::default();
        let (mut events, mut comments) = (Vec::new(), 0);
        for part in parts {
            let got = p.feed(part);
            events.extend(got.events);
            comments += got.comments;
        }
        (events, comments, p.finish())
    }

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let whole = "data: {\"a\":\"日本\"}\n\n: keep-alive\n\ndata: [DONE]\n\n".as_bytes();
        for cut in 0..whole.len() {
            let (events, comments, tail) = feed_all(&[&whole[..cut], &whole[cut..]]);
            assert_eq!(events, ["{\"a\":\"日本\"}", "[DONE]"], "cut at {cut}");
            assert_eq!(comments, 1);
            assert_eq!(tail, None);
        }
    }

    #[test]
    fn crlf_multiline_data_and_field_forms() {
        let (events, _, _) = feed_all(&[b"data:x\r\ndata: y\r\n\r\nevent: e\nid: 3\ndata\n\n"]);
        assert_eq!(events, ["x\ny", ""]);
    }

    #[test]
    fn an_event_needs_its_blank_line() {
        let (events, _, tail) = feed_all(&[b"data: 1\n\ndata: 2\n"]);
        assert_eq!(events, ["1"]);
        assert_eq!(tail.as_deref(), Some("2"));
        let (_, _, tail) = feed_all(&[b"data: 1\n\ndata: par"]);
        assert_eq!(tail.as_deref(), Some("data: par"));
    }

    #[test]
    fn one_chunk_can_complete_many_events() {
        let got = SseParser::default().feed(b"data: a\n\ndata: b\n\n: c\n\n");
        assert_eq!(got, Parsed { events: vec!["a".into(), "b".into()], comments: 1 });
    }

    #[test]
    fn a_field_named_like_data_is_not_data() {
        let (events, _, _) = feed_all(&[b"dataset: 1\n\ndata: 2\n\n"]);
        assert_eq!(events, ["2"]);
    }
}
