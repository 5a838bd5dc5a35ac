//! A JSON body extractor whose every rejection is an OpenAI-style error:
//! wrong content type → 415, too large → 413, malformed JSON or a field of
//! the wrong type → 400 naming the field (`param`).

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

/// Parses a body, reporting the path of the offending field as `param`.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
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
    })
}
