//! A JSON body extractor whose every rejection is an OpenAI-style error:
//! wrong content type → 415, too large → 413, malformed JSON, a field of
//! the wrong type or a declared text holding NUL → 400 naming the field (`param`).

use super::error::ApiError;
use super::named::NamesModel;
use super::record::Counting;
use super::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + ToSchema + NamesModel> FromRequest<AppState> for ApiJson<T> {
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
pub fn parse_named<T: DeserializeOwned + ToSchema + NamesModel>(
    bytes: &[u8],
    counting: Option<&Counting>,
) -> Result<T, ApiError> {
    let body: T = parse(bytes)?;
    if let Some(counting) = counting {
        counting.name_model(&body);
    }
    Ok(body)
}

/// Parses a body, reporting the path of the offending field as `param`:
/// its type ([`typed`]), then NUL characters where the document declares
/// a text (`nul.rs`; `T`'s schema is the one the document names).
pub fn parse<T: DeserializeOwned + ToSchema>(bytes: &[u8]) -> Result<T, ApiError> {
    let body = typed(bytes)?;
    super::nul::refuse(bytes, &T::name())?;
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

    #[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
    struct Body {
        n: u32,
        rate: f32,
        nested: Vec<Option<i64>>,
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
        #[derive(Debug, serde::Deserialize, PartialEq, utoipa::ToSchema)]
        #[serde(untagged)]
        enum Input {
            Text(String),
            Ids(Vec<u32>),
        }
        assert_eq!(parse::<Input>(b"[1.0, 2]").unwrap(), Input::Ids(vec![1, 2]));
        assert!(parse::<Input>(b"[1.5]").is_err());
    }
}
