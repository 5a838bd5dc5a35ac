//! The JSON side of tool-call parsing: recognising the head of a call object
//! while it streams in, finding where a JSON object ends, and reading a whole
//! call object when the streaming path could not be taken.

use serde_json::Value;

/// How far the text of a call object matches
/// `{"name": "…", "arguments": {` (or `"parameters"`, the Llama 3 key).
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// Every character so far fits; more are needed.
    Incomplete,
    /// The text cannot be such a head (other key order, not JSON, …).
    Mismatch,
    /// The head is complete; its last character is the `{` that opens the arguments.
    Matched { name: String },
}

/// Matches the head of a call object at the start of `text`.
pub fn head(text: &str) -> Head {
    let mut c = Cursor { rest: text };
    let name = (|| {
        c.lit("{")?;
        c.lit("\"name\"")?;
        c.lit(":")?;
        let name = c.string()?;
        c.lit(",")?;
        c.either("\"arguments\"", "\"parameters\"")?;
        c.lit(":")?;
        c.lit("{")?;
        Ok(name)
    })();
    match name {
        Ok(name) if !name.is_empty() => Head::Matched { name },
        Ok(_) | Err(Stop::Mismatch) => Head::Mismatch,
        Err(Stop::Incomplete) => Head::Incomplete,
    }
}

enum Stop {
    Incomplete,
    Mismatch,
}

struct Cursor<'a> {
    rest: &'a str,
}

impl Cursor<'_> {
    /// Skips whitespace, then expects `lit`.
    fn lit(&mut self, lit: &str) -> Result<(), Stop> {
        self.rest = self.rest.trim_start();
        if let Some(rest) = self.rest.strip_prefix(lit) {
            self.rest = rest;
            Ok(())
        } else if lit.starts_with(self.rest) {
            Err(Stop::Incomplete)
        } else {
            Err(Stop::Mismatch)
        }
    }

    fn either(&mut self, a: &str, b: &str) -> Result<(), Stop> {
        match self.lit(a) {
            Err(Stop::Mismatch) => self.lit(b),
            Err(Stop::Incomplete) => match self.lit(b) {
                Err(Stop::Mismatch) => Err(Stop::Incomplete),
                other => other,
            },
            ok => ok,
        }
    }

    /// A JSON string, decoded.
    fn string(&mut self) -> Result<String, Stop> {
        self.lit("\"")?;
        let mut escaped = false;
        for (i, ch) in self.rest.char_indices() {
            match ch {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    // Decode escapes by letting serde read the quoted literal.
                    let quoted = format!("\"{}\"", &self.rest[..i]);
                    self.rest = &self.rest[i + 1..];
                    return serde_json::from_str(&quoted).map_err(|_| Stop::Mismatch);
                }
                _ => {}
            }
        }
        Err(Stop::Incomplete)
    }
}

/// Finds where a JSON object or array ends, fed one character at a time from
/// its opening bracket. Brackets inside strings do not count.
#[derive(Debug, Default)]
pub struct ValueEnd {
    depth: u32,
    in_string: bool,
    escaped: bool,
}

impl ValueEnd {
    /// Takes the next character; true when it closes the outermost bracket.
    pub fn push(&mut self, c: char) -> bool {
        if self.in_string {
            match c {
                _ if self.escaped => self.escaped = false,
                '\\' => self.escaped = true,
                '"' => self.in_string = false,
                _ => {}
            }
            return false;
        }
        match c {
            '"' => self.in_string = true,
            '{' | '[' => self.depth += 1,
            '}' | ']' => {
                self.depth = self.depth.saturating_sub(1);
                return self.depth == 0;
            }
            _ => {}
        }
        false
    }

    pub fn in_string(&self) -> bool {
        self.in_string
    }
}

/// A complete call object read at once: `{"name": …, "arguments"|"parameters": …}`
/// in any key order. Arguments given as an object are re-encoded; given as a
/// string (some models JSON-encode them) they are taken as they are if they
/// encode an object; absent, `{}`.
pub fn whole_call(text: &str) -> Option<(String, String)> {
    let Value::Object(mut call) = serde_json::from_str::<Value>(text.trim()).ok()? else {
        return None;
    };
    let Some(Value::String(name)) = call.remove("name") else {
        return None;
    };
    let arguments = match call.remove("arguments").or_else(|| call.remove("parameters")) {
        None => "{}".to_owned(),
        Some(Value::String(s)) if serde_json::from_str::<Value>(&s).is_ok_and(|v| v.is_object()) => s,
        Some(v @ Value::Object(_)) => v.to_string(),
        Some(_) => return None,
    };
    (!name.is_empty()).then_some((name, arguments))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_matches_every_prefix_as_incomplete_then_matches() {
        let text = r#" { "name" : "get_weather", "arguments": {"#;
        for (i, _) in text.char_indices() {
            assert_eq!(head(&text[..i]), Head::Incomplete, "prefix {:?}", &text[..i]);
        }
        assert_eq!(head(text), Head::Matched { name: "get_weather".into() });
        assert_eq!(head(r#"{"name":"a\"b","parameters":{"#), Head::Matched { name: "a\"b".into() });
    }

    #[test]
    fn head_mismatches_as_soon_as_it_cannot_fit() {
        assert_eq!(head(r#"{"arguments": {}, "name": "x"}"#), Head::Mismatch);
        assert_eq!(head("get_weather(city="), Head::Mismatch);
        assert_eq!(head(r#"{"name": "x", "arguments": "{"#), Head::Mismatch);
        assert_eq!(head(r#"{"name": "", "arguments": {"#), Head::Mismatch);
        assert_eq!(head(r#"{"name": "x", "argu"#), Head::Incomplete);
        assert_eq!(head(r#"{"name": "x", "par"#), Head::Incomplete);
    }

    #[test]
    fn value_end_ignores_brackets_in_strings() {
        let text = r#"{"a": "}{\"]", "b": [1, {"c": 2}]} tail"#;
        let mut v = ValueEnd::default();
        let end = text.char_indices().find(|&(_, c)| v.push(c)).map(|(i, _)| i);
        assert_eq!(end, Some(text.find(" tail").unwrap() - 1));
    }

    #[test]
    fn whole_call_accepts_any_key_order_and_string_arguments() {
        assert_eq!(whole_call(r#"{"arguments": {"a": 1}, "name": "f"}"#), Some(("f".into(), r#"{"a":1}"#.into())));
        assert_eq!(whole_call(r#"{"name": "f", "arguments": "{\"a\":1}"}"#), Some(("f".into(), r#"{"a":1}"#.into())));
        assert_eq!(whole_call(r#"{"name": "f"}"#), Some(("f".into(), "{}".into())));
        assert_eq!(whole_call(r#"{"name": "f", "arguments": 3}"#), None);
        assert_eq!(
            whole_call(r#"{"name": "f", "arguments": "{\"a\": "}"#),
            None,
            "string arguments that are no JSON object"
        );
        assert_eq!(whole_call(r#"{"name": "f", "arguments": "[1]"}"#), None);
        assert_eq!(whole_call("not json"), None);
        assert_eq!(whole_call(r#"{"answer": 42}"#), None);
    }
}
