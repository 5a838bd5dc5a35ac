//! A JSON body extractor whose every rejection is an OpenAI-style error:
//! wrong content type → 415, too large → 413, malformed JSON, a field of
//! the wrong type or a text holding NUL → 400 naming the field (`param`).

use super::error::ApiError;
use super::named::NamesModel;
use super::record::Counting;
use super::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use serde::de::DeserializeOwned;

pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + NamesModel> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let counting = req.extensions().get::<Counting>().cloned();
        let is_json = req
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || mime.ends_with("+json")
            })
            .unwrap_or(false);
        if !is_json {
            return Err(ApiError::unsupported_media_type());
        }
        let limit = state.settings.body_limit_bytes;
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(limit)
            } else {
                ApiError::bad_request(None, format!("Cannot read the request body: {rejection}"))
            }
        })?;
        parse_named(&bytes, counting.as_ref()).map(ApiJson)
    }
}

/// [`parse`] a counted request's body and tell its [`Counting`] the model it names.
pub fn parse_named<T: DeserializeOwned + NamesModel>(bytes: &[u8], counting: Option<&Counting>) -> Result<T, ApiError> {
    let body: T = parse(bytes)?;
    if let Some(counting) = counting {
        counting.name_model(&body);
    }
    Ok(body)
}

/// Parses a body, reporting the path of the offending field as `param`:
/// its type ([`typed`]), then NUL characters ([`refuse_nul`]).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let body = typed(bytes)?;
    refuse_nul(bytes)?;
    Ok(body)
}

/// JSON has one number type: an integer field also takes an integral float
/// (`100.0`), as a JSON Schema validator does; serde refuses one, so a body
/// refused for a type is read a second time with its integral floats made
/// integers (only then: it costs a second parse).
fn typed<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let first = serde_path_to_error::deserialize(de);
    let Err(e) = first else { return first.map_err(report) };
    if e.inner().is_syntax() || e.inner().is_eof() {
        return Err(report(e));
    }
    // A type error (an untagged enum says only that no variant matched):
    // again with integral floats as integers, if there were any.
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(bytes) else { return Err(report(e)) };
    if !integral_floats_as_integers(&mut value) {
        return Err(report(e));
    }
    serde_path_to_error::deserialize(value).map_err(report)
}

/// Makes every integral float an integer; whether there was one.
fn integral_floats_as_integers(value: &mut serde_json::Value) -> bool {
    match value {
        serde_json::Value::Number(n) => {
            // Only floats an f64 holds exactly (|v| < 2^53): the integer is the one sent.
            let exact = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15);
            if let Some(f) = exact {
                *n = serde_json::Number::from(f as i64);
            }
            exact.is_some()
        }
        serde_json::Value::Array(items) => items.iter_mut().fold(false, |any, v| integral_floats_as_integers(v) | any),
        serde_json::Value::Object(map) => map.values_mut().fold(false, |any, v| integral_floats_as_integers(v) | any),
        _ => false,
    }
}

/// The runtime takes its texts as C strings, which end at a NUL, and rkllmd
/// will not cut one short or drop what follows: no text in a body (nor a
/// key) may hold U+0000, whatever the field: one rule, rather than a list
/// of the fields that reach the runtime (the OpenAPI document says it on
/// every text it declares, `schema_rules.rs`). JSON carries a NUL only as
/// the escape `\u0000`, so only a body holding those six bytes is read
/// again to find where.
fn refuse_nul(bytes: &[u8]) -> Result<(), ApiError> {
    if memchr::memmem::find(bytes, br"\u0000").is_none() {
        return Ok(());
    }
    // The typed parse took the body, so it is valid JSON.
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::bad_request(None, e.to_string()))?;
    let mut path = String::new();
    if !nul_at(&value, &mut path) {
        // An escaped backslash before `u0000`: text, not a NUL.
        return Ok(());
    }
    let message = format!("`{path}` contains a NUL character (U+0000), which the runtime cannot take.");
    Err(ApiError::invalid_value(&path, message))
}

/// Whether `value` holds a NUL; if so, `path` ends at the first text (or
/// key) that does, written as serde's paths are (`messages[0].content`).
fn nul_at(value: &serde_json::Value, path: &mut String) -> bool {
    let start = path.len();
    let found = match value {
        serde_json::Value::String(text) => text.contains('\0'),
        serde_json::Value::Array(items) => items.iter().enumerate().any(|(i, item)| {
            path.truncate(start);
            path.push_str(&format!("[{i}]"));
            nul_at(item, path)
        }),
        serde_json::Value::Object(map) => map.iter().any(|(key, item)| {
            path.truncate(start);
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key.replace('\0', "\\u0000"));
            key.contains('\0') || nul_at(item, path)
        }),
        _ => false,
    };
    if !found {
        path.truncate(start);
    }
    found
}

/// The error, with the path of the offending field as `param`.
fn report(e: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let param = (path != ".").then_some(path.as_str());
    let message = if inner.is_syntax() || inner.is_eof() {
        format!("The body is not valid JSON: {inner}")
    } else {
        match param {
            Some(p) => format!("Invalid value for `{p}`: {inner}"),
            None => format!("Invalid request body: {inner}"),
        }
    };
    ApiError::bad_request(if inner.is_syntax() || inner.is_eof() { None } else { param }, message)
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        n: u32,
        rate: f32,
        nested: Vec<Option<i64>>,
    }

    #[test]
    fn a_nul_anywhere_is_refused_naming_where() {
        let param = |body: &[u8]| parse::<serde_json::Value>(body).unwrap_err().body.param;
        assert_eq!(
            param(br#"{"messages": [{"role": "user", "content": "a\u0000b"}]}"#).as_deref(),
            Some("messages[0].content")
        );
        let tools = br#"{"tools": [{"function": {"parameters": {"properties": {"x": {"enum": ["ok", "\u0000"]}}}}}]}"#;
        assert_eq!(param(tools).as_deref(), Some("tools[0].function.parameters.properties.x.enum[1]"));
        assert_eq!(param(br#"{"kwargs": {"a\u0000": 1}}"#).as_deref(), Some("kwargs.a\\u0000"));
        // An escaped backslash before `u0000` is text; so is a NUL's name.
        let text: serde_json::Value = parse(br#"{"content": "C:\\u0000 and \\\\u0000"}"#).unwrap();
        assert_eq!(text["content"], "C:\\u0000 and \\\\u0000");
    }

    #[test]
    fn an_integer_field_takes_an_integral_float_and_nothing_else() {
        let body: Body = parse(br#"{"n": 100.0, "rate": 1.0, "nested": [-3.0, null]}"#).unwrap();
        assert_eq!((body.n, body.rate, body.nested), (100, 1.0, vec![Some(-3), None]));
        let e = parse::<Body>(br#"{"n": 100.5, "rate": 1, "nested": []}"#).unwrap_err();
        assert_eq!(e.body.param.as_deref(), Some("n"), "{}", e.body.message);
        // Out of the type's range once an integer: refused with the field named.
        let e = parse::<Body>(br#"{"n": 4294967296.0, "rate": 1, "nested": []}"#).unwrap_err();
        assert_eq!(e.body.param.as_deref(), Some("n"), "{}", e.body.message);
        // In an untagged enum too, whose error names no type.
        #[derive(Debug, serde::Deserialize, PartialEq)]
        #[serde(untagged)]
        enum Input {
            Text(String),
            Ids(Vec<u32>),
        }
        assert_eq!(parse::<Input>(b"[1.0, 2]").unwrap(), Input::Ids(vec![1, 2]));
        assert!(parse::<Input>(b"[1.5]").is_err());
    }
}
