//! JSON as Python's `json.dumps` writes it, which is what Hugging Face's
//! `tojson` filter produces (`ensure_ascii=False`): `", "` and `": "`
//! separators, or with `indent` one item per line. minijinja's own `tojson`
//! is HTML-safe (`<` becomes `\u003c`), which would change the prompt a
//! model was trained on.

use serde::Serialize;
use serde_json::ser::{Formatter, PrettyFormatter, Serializer};
use std::io;

/// Python's default separators: a space after `,` and `:`.
struct Spaced;

impl Formatter for Spaced {
    fn begin_array_value<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + io::Write>(&mut self, w: &mut W, first: bool) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_value<W: ?Sized + io::Write>(&mut self, w: &mut W) -> io::Result<()> {
        w.write_all(b": ")
    }
}

/// `json.dumps(value, ensure_ascii=False, indent=indent)`.
pub fn dumps(value: &impl Serialize, indent: Option<usize>) -> Result<String, serde_json::Error> {
    let mut out = Vec::new();
    match indent {
        None => value.serialize(&mut Serializer::with_formatter(&mut out, Spaced))?,
        Some(n) => {
            let pad = vec![b' '; n];
            value.serialize(&mut Serializer::with_formatter(&mut out, PrettyFormatter::with_indent(&pad)))?
        }
    }
    // serde_json writes only valid UTF-8.
    String::from_utf8(out).map_err(|e| serde::ser::Error::custom(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn like_python_json_dumps() {
        let v = json!({"name": "get_weather", "parameters": {"city": "Zürich <3", "days": [1, 2.5], "x": {}}});
        // json.dumps(v, ensure_ascii=False)
        assert_eq!(
            dumps(&v, None).unwrap(),
            r#"{"name": "get_weather", "parameters": {"city": "Zürich <3", "days": [1, 2.5], "x": {}}}"#
        );
        // json.dumps(v, ensure_ascii=False, indent=2)
        assert_eq!(
            dumps(&json!({"a": [1], "b": "\n"}), Some(2)).unwrap(),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": \"\\n\"\n}"
        );
    }
}
