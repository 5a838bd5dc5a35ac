//! A JSON body extractor whose every rejection is an OpenAI-style error:
//! wrong content type → 415, too large → 413, malformed JSON, a field of
//! the wrong type or a declared text holding NUL → 400 naming the field (`param`).
//! [`BoundedJson`]: the same for a route whose body the models' contexts
//! bound far below `body_limit_bytes`, refused past that without being parsed.

use super::error::ApiError;
use super::named::NamesModel;
use super::record::Counting;
use super::request::BodySize;
use super::state::AppState;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::StatusCode;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned + ToSchema + NamesModel> FromRequest<AppState> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        read(req, state, None).await.map(ApiJson)
    }
}

/// A body that is all text (or token ids) the model's context bounds: the
/// most bytes of JSON a request of the type can use.
pub trait BodyBound {
    /// The member whose length the bound is for, named in the refusal.
    const FIELD: &'static str;
    /// The most bytes a useful body has for a context of `context` tokens.
    fn most_bytes(context: usize) -> usize;
}

/// JSON writes a byte of text in at most this many (`\u001f`).
pub const JSON_BYTES_PER_TEXT_BYTE: usize = 6;

/// Room in a [`BodyBound`] for the members besides the bounded one (the
/// model's name, flags) and whitespace.
pub const OTHER_MEMBERS_BYTES: usize = 64 * 1024;

/// [`ApiJson`] for a [`BodyBound`] body: once every served model's context
/// is known, a body over the bound for the largest is refused with 413
/// naming the member, decided by its `Content-Length` before any of it is
/// read, or once the bytes read pass the bound; what it sends is read and
/// dropped, never kept or parsed.
pub struct BoundedJson<T>(pub T);

impl<T: DeserializeOwned + ToSchema + NamesModel + BodyBound> FromRequest<AppState> for BoundedJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let route = largest_context(state).map(|context| RouteLimit {
            most: T::most_bytes(context).min(state.settings.body_limit_bytes),
            field: T::FIELD,
            context,
        });
        read(req, state, route).await.map(BoundedJson)
    }
}

/// A route's own body limit, below `body_limit_bytes`.
struct RouteLimit {
    most: usize,
    field: &'static str,
    /// The largest context served, which sets it.
    context: usize,
}

impl RouteLimit {
    fn refusal(&self, size: Option<usize>) -> ApiError {
        let size = size.map_or_else(|| format!("over {} bytes", self.most), |n| format!("{n} bytes"));
        let mut e = ApiError::payload_too_large(self.most);
        e.body.message = format!(
            "The request body is {size}; this route takes at most {} bytes with the largest context served ({} \
             tokens): a longer `{}` is refused before it is read (docs/api.md, \"Limits, queue and time-outs\").",
            self.most, self.context, self.field
        );
        e.body.param = Some(self.field.to_owned());
        e
    }
}

/// The largest context of the registered models, when each one's is known
/// (loaded, or set by `max_context_len`); `None` before that.
fn largest_context(state: &AppState) -> Option<usize> {
    let statuses = state.models().ok()?.statuses();
    let largest = statuses.iter().try_fold(0, |most, s| Some(most.max(s.context()?)))?;
    (largest > 0).then_some(largest)
}

/// Reads and parses a JSON body: whole up to `body_limit_bytes`, or up to
/// `route`'s own limit.
async fn read<T: DeserializeOwned + ToSchema + NamesModel>(
    req: Request,
    state: &AppState,
    route: Option<RouteLimit>,
) -> Result<T, ApiError> {
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
    let bytes = match route {
        Some(route) => read_within(req, route, limit).await?,
        None => Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(limit)
            } else {
                unreadable(rejection)
            }
        })?,
    };
    parse_named(&bytes, counting.as_ref())
}

fn unreadable(e: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(None, format!("Cannot read the request body: {e}"))
}

/// The body whole if it is within `route`'s limit; else its refusal, once
/// the rest (up to `drain_most` bytes in all) has been read and dropped: a
/// client that sends its whole body before it reads the answer would lose
/// the answer to a connection reset otherwise.
async fn read_within(req: Request, route: RouteLimit, drain_most: usize) -> Result<Bytes, ApiError> {
    let announced = req.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    let mut chunks = req.into_body().into_data_stream();
    let mut kept = Vec::with_capacity(announced.unwrap_or(0).min(route.most));
    let mut seen = 0;
    let over = announced.is_some_and(|n| n > route.most);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(unreadable)?;
        seen += chunk.len();
        if over || seen > route.most {
            if seen >= drain_most {
                break;
            }
            continue;
        }
        kept.extend_from_slice(&chunk);
    }
    if over || seen > route.most {
        return Err(route.refusal(announced));
    }
    Ok(Bytes::from(kept))
}

/// Refuses a conversation body (a chat's messages and tools) by its size
/// before it is parsed into its request, with chat's limits and errors
/// (`request::BodySize`): its tools' count, and its texts' bytes when the
/// context of the model it names is known without loading it. A refused
/// request is counted under that model. What passes is checked again,
/// exactly, once built.
pub fn refuse_oversized(
    body: &[u8],
    state: &AppState,
    counting: Option<&Counting>,
    all_tools_sent: bool,
) -> Result<(), ApiError> {
    let Some(size) = BodySize::of(body) else { return Ok(()) };
    let context = size.model.as_deref().and_then(|m| state.known_context(m));
    size.refuse(context, all_tools_sent).inspect_err(|_| {
        if let Some(counting) = counting {
            counting.name_model(&size);
        }
    })
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
