//! `/openapi.json` and the vendored Swagger UI at `/docs`.

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use axum::Router;

const INDEX: &str = include_str!("../../assets/swagger-ui/index.html");
const BUNDLE: &str = include_str!("../../assets/swagger-ui/swagger-ui-bundle.js");
const CSS: &str = include_str!("../../assets/swagger-ui/swagger-ui.css");

/// Routes serving the document and the UI (no state, no auth).
pub fn routes<S: Clone + Send + Sync + 'static>(openapi: utoipa::openapi::OpenApi) -> Router<S> {
    let json = openapi.to_json().unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"));
    Router::new()
        .route("/openapi.json", get(move || async move { ([(CONTENT_TYPE, "application/json")], json) }))
        .route("/docs", get(|| async { Redirect::permanent("/docs/") }))
        .route("/docs/", get(|| async { ([(CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response() }))
        .route("/docs/swagger-ui-bundle.js", get(|| async { ([(CONTENT_TYPE, "application/javascript")], BUNDLE) }))
        .route("/docs/swagger-ui.css", get(|| async { ([(CONTENT_TYPE, "text/css")], CSS) }))
}
