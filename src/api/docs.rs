//! `/openapi.json`, the vendored Swagger UI at `/docs`, `GET /` pointing
//! there, and what the document says beyond the handlers' own annotations:
//! the responses every operation of a kind can give (auth, body reading,
//! loading; in the route's error shape), the streams' content
//! type, the security schemes (only when a key is configured) and the
//! numeric ranges the server checks; the rules that join fields are added
//! to the serialised document (`schema_rules`), and the served models' own
//! bounds each time it is served (`doc_models`).

use super::embeddings::EmbeddingInput;
use super::error::ErrorEnvelope;
use super::messages::wire::{Conversation, CreateMessage};
use super::ollama::wire as ollama;
use super::request::{
    ChatCompletionRequest, Common, Prompt, SamplingFields, StopSequences, MAX_INPUTS, MAX_STOPS, MAX_TOOLS,
};
use super::rerank::RerankRequest;
use super::responses::CreateResponse;
use super::route::{Errors, Routes};
use super::state::AppState;
use crate::metrics::Kind;
use crate::sampling::SamplingOverrides;
use axum::http::header::{CONTENT_ENCODING, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use axum::Router;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use utoipa::openapi::schema::{Array, ArrayItems, Schema, SchemaType, Type};
use utoipa::openapi::security::{
    ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme,
};
use utoipa::openapi::{Content, OpenApi, Ref, RefOr, Response};
use utoipa::{Number, ToSchema};

const INDEX: &str = include_str!("../../assets/swagger-ui/index.html");
/// Swagger UI's files, vendored gzipped (`gzip -9n`) and served as they are
/// (every browser that runs Swagger UI takes gzip). They are read from a
/// folder, not built into the binary: 0.49 MB less on the board
/// (docs/performance.md, "Binary size"); the `.deb` and the container image
/// install them in /usr/share/rkllmd/swagger-ui.
const BUNDLE: &str = "swagger-ui-bundle.js.gz";
const CSS: &str = "swagger-ui.css.gz";

/// Where `/docs` finds Swagger UI's files: `configured` (`docs_dir`), else
/// the first of the package's folder, `../share/rkllmd/swagger-ui` beside
/// the executable (an install under a prefix) and the source tree the
/// binary was built from (`cargo run`) that holds them. `None`: `/docs`
/// says the UI is not installed (the document is served all the same).
pub fn ui_dir(configured: Option<&Path>) -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = match configured {
        Some(dir) => vec![dir.to_owned()],
        None => {
            let beside =
                std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join("../share/rkllmd/swagger-ui")));
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/swagger-ui");
            [Some(PathBuf::from("/usr/share/rkllmd/swagger-ui")), beside, Some(source)].into_iter().flatten().collect()
        }
    };
    let found = candidates.iter().find(|dir| dir.join(BUNDLE).is_file() && dir.join(CSS).is_file()).cloned();
    if found.is_none() {
        let looked = candidates.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        let said = "Swagger UI's files are not installed: /docs says so; /openapi.json is served";
        // A folder the operator named that lacks them is a mistake; a binary copied alone is not.
        match configured {
            Some(_) => tracing::warn!(docs_dir = %looked, "{said}"),
            None => tracing::info!(looked_in = %looked, "{said}"),
        }
    }
    found
}

/// Routes serving the document and the UI (public, so described in
/// `table`); `ui` is where Swagger UI's files are ([`ui_dir`]). The
/// document is the handlers' with the served models' bounds as they are
/// when it is asked for (`doc_models`).
pub fn routes<S: Clone + Send + Sync + 'static>(
    openapi: OpenApi,
    ui: Option<PathBuf>,
    state: AppState,
    table: &mut Routes,
) -> Router<S> {
    // Kept as text, and parsed when asked for (now and then): as a tree it
    // would stay resident, ~5 times its size. The served document's schemas
    // are the ones `nul.rs` walks: made once, here.
    let doc = serialised(&openapi, table).unwrap_or_else(|e| serde_json::json!({"error": e.to_string()}));
    let doc: Arc<str> = doc.to_string().into();
    super::nul::walk_document(|| Arc::clone(&doc));
    let served = move || {
        let doc = match (serde_json::from_str::<Value>(&doc), state.models()) {
            (Ok(mut doc), Ok(registry)) => {
                super::doc_models::add(&mut doc, &super::doc_models::served(registry));
                doc.to_string()
            }
            _ => doc.to_string(),
        };
        async move { ([(CONTENT_TYPE, "application/json")], doc) }
    };
    let router = table.public(Router::new(), "/", get(|| async { Redirect::temporary("/docs/") }));
    let router = table.public(router, "/openapi.json", get(served));
    let router = table.public(router, "/docs", get(|| async { Redirect::permanent("/docs/") }));
    let Some(ui) = ui else {
        return table.public(router, "/docs/", get(|| async { not_installed() }));
    };
    let (bundle, css) = (ui.join(BUNDLE), ui.join(CSS));
    let index = get(|| async { ([(CONTENT_TYPE, "text/html; charset=utf-8")], INDEX).into_response() });
    let router = table.public(router, "/docs/", index);
    let router = table.public(
        router,
        "/docs/swagger-ui-bundle.js",
        get(move || gzipped("application/javascript", bundle.clone())),
    );
    table.public(router, "/docs/swagger-ui.css", get(move || gzipped("text/css", css.clone())))
}

/// A gzipped file, read when asked for (on the blocking pool: `tokio::fs`):
/// the UI is opened now and then, and the daemon keeps no copy in memory.
async fn gzipped(content_type: &'static str, path: PathBuf) -> axum::response::Response {
    match tokio::fs::read(&path).await {
        Ok(body) => ([(CONTENT_TYPE, content_type), (CONTENT_ENCODING, "gzip")], body).into_response(),
        Err(e) => {
            tracing::warn!(path = %path.display(), "cannot read Swagger UI's file: {e}");
            (StatusCode::NOT_FOUND, format!("{} cannot be read: {e}", path.display())).into_response()
        }
    }
}

fn not_installed() -> axum::response::Response {
    let page = "<!doctype html><title>rkllmd API</title><p>Swagger UI is not installed here: set \
        <code>docs_dir</code> (<code>--docs-dir</code>) to a folder holding its files (the source tree's \
        <code>assets/swagger-ui</code>; the .deb installs them in /usr/share/rkllmd/swagger-ui). \
        The API's description is <a href=\"/openapi.json\">/openapi.json</a>.</p>";
    (StatusCode::NOT_FOUND, [(CONTENT_TYPE, "text/html; charset=utf-8")], page).into_response()
}

/// The document as served: the handlers' with the rules `schema_rules`
/// adds, the rule on every text of a request on the bodies `table`'s
/// routes name.
fn serialised(openapi: &OpenApi, table: &Routes) -> Result<serde_json::Value, serde_json::Error> {
    let mut doc = serde_json::to_value(openapi)?;
    let bodies: Vec<_> = table.iter().filter_map(|(_, route)| route.body_schema()).collect();
    super::schema_rules::add(&mut doc, &bodies);
    Ok(doc)
}

/// The component schemas of `openapi` as it would be served (the tests
/// walk them as `nul.rs` does the served text's).
#[cfg(test)]
pub fn schemas_of(openapi: &OpenApi, table: &Routes) -> serde_json::Map<String, serde_json::Value> {
    super::nul::component_schemas(serialised(openapi, table).unwrap_or_default())
}

/// What the document depends on in the configuration.
pub struct DocSettings {
    pub api_key: bool,
}

/// Completes the handlers' document (see the module doc) from what each
/// route's description says of it (`route.rs`).
pub fn complete(openapi: &mut OpenApi, settings: &DocSettings, table: &Routes) {
    security(openapi, settings.api_key);
    for (path, item) in openapi.paths.paths.iter_mut() {
        let Some(route) = table.get(path) else {
            tracing::error!(%path, "a documented route without a description: the document says less of it");
            continue;
        };
        let ollama = route.errors == Errors::Ollama;
        for (op, post) in [(&mut item.get, false), (&mut item.post, true)] {
            let Some(op) = op.as_mut() else { continue };
            let mut add = |status: &str, description: &str| {
                let error = Content::new(Some(Ref::from_schema_name(error_schema(route.errors))));
                let response = Response::builder().description(description).content("application/json", error);
                op.responses.responses.entry(status.to_owned()).or_insert_with(|| response.into());
            };
            if route.guarded && settings.api_key {
                add("401", "Missing or wrong API key");
            }
            // Any route: a browser request from a foreign web origin or under a foreign host name,
            // and a malformed Host (`api::cross_site`).
            add("403", "A foreign Origin (cors_origins) or Host (allowed_hosts)");
            add("400", "Invalid request (on every route: more than one Host, or one with a port that is not a number)");
            if route.guarded {
                add(
                    "503",
                    "The model is loading, the server is shutting down, or the runtime is stuck in an aborted run",
                );
            }
            if ollama && post {
                // Ollama's handlers share their refusals (`api::ollama`): said here, not by each.
                add("404", "Unknown model");
                if route.counted.is_some() {
                    add("429", "Queue full");
                }
                if route.counted == Some(Kind::Completion) {
                    add(
                        "500",
                        "The model failed to load or the runtime failed, or the reply is not the `format` asked for",
                    );
                }
            }
            if post {
                add(
                    "408",
                    "The request body stopped arriving (body_idle_timeout_secs) or took too long (body_timeout_secs)",
                );
                add("413", "The body is larger than body_limit_bytes");
                // Ollama's and Anthropic's handlers read any content type (`body.rs`).
                if route.errors == Errors::OpenAi {
                    add("415", "The body is not JSON (Content-Type)");
                }
            }
            if route.streams {
                if let Some(RefOr::T(ok)) = op.responses.responses.get_mut("200") {
                    // Each event's data is a chunk, an error envelope or `[DONE]`: no one schema.
                    ok.content.insert("text/event-stream".into(), Content::new(None::<RefOr<Schema>>));
                }
            }
            op.security = (route.guarded && settings.api_key).then(|| {
                vec![
                    SecurityRequirement::new("bearer", Vec::<String>::new()),
                    SecurityRequirement::new("api_key", Vec::<String>::new()),
                ]
            });
        }
    }
    ranges(openapi);
}

/// The document's schema of an error shape.
fn error_schema(errors: Errors) -> std::borrow::Cow<'static, str> {
    match errors {
        Errors::OpenAi => ErrorEnvelope::name(),
        Errors::Ollama => super::ollama::wire::ErrorReply::name(),
        Errors::Anthropic => super::messages::wire::ErrorResponse::name(),
    }
}

/// The schemes only exist with a key: without one, nothing asks for any.
fn security(openapi: &mut OpenApi, api_key: bool) {
    let Some(components) = openapi.components.as_mut() else { return };
    components.security_schemes.clear();
    if api_key {
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "api_key",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(super::auth::API_KEY_HEADER))),
        );
    }
}

/// The ranges the server enforces: the sampling fields' from their one
/// list, the token counts' (from 1: above `max_new_tokens` a ceiling), `n`
/// (only 1), and at least one message.
fn ranges(openapi: &mut OpenApi) {
    let Some(components) = openapi.components.as_mut() else { return };
    let tokens = (1.0, f64::from(u32::MAX));
    let fields = SamplingOverrides::RANGES
        .iter()
        .map(|&(name, lo, hi)| (SamplingFields::name(), name, (lo, hi)))
        .chain([(Common::name(), "n", (1.0, 1.0))])
        // A ceiling above `max_new_tokens` on every front end (`ceiling.rs`): any count from 1.
        .chain([
            (Common::name(), "max_tokens", tokens),
            (ChatCompletionRequest::name(), "max_completion_tokens", tokens),
        ])
        .chain([(CreateMessage::name(), "max_tokens", tokens), (CreateResponse::name(), "max_output_tokens", tokens)])
        // Any count the server can hold exactly (JSON numbers are f64).
        .chain([(RerankRequest::name(), "top_n", (0.0, 9_007_199_254_740_991.0))]);
    for (schema, field, (lo, hi)) in fields {
        if let Some(Schema::Object(property)) = property(components.schemas.get_mut(schema.as_ref()), field) {
            property.minimum = Some(number(lo));
            property.maximum = Some(number(hi));
        }
    }
    for (schema, field) in [(ChatCompletionRequest::name(), "messages"), (RerankRequest::name(), "documents")] {
        if let Some(Schema::Array(array)) = property(components.schemas.get_mut(schema.as_ref()), field) {
            array.min_items = Some(1);
        }
    }
    // The counts refused right after parsing: documents
    // (`embeddings::check_count`), tools (`request::size`).
    for (schema, field, max) in [
        (RerankRequest::name(), "documents", MAX_INPUTS),
        // The Messages API's, in what `/v1/messages` and `count_tokens` share.
        (Conversation::name(), "tools", MAX_TOOLS),
    ] {
        if let Some(Schema::Array(array)) = property(components.schemas.get_mut(schema.as_ref()), field) {
            array.max_items = Some(max);
        }
    }
    // An embedding's input: no empty string, array, or string or array in
    // one; token ids within the runtime's range; at most MAX_INPUTS inputs.
    if let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(EmbeddingInput::name().as_ref()) {
        for item in one_of.items.iter_mut() {
            if let RefOr::T(schema) = item {
                non_empty(schema);
                if let Schema::Array(array) = schema {
                    if !of_ids(array) {
                        array.max_items = Some(MAX_INPUTS);
                    }
                    if let ArrayItems::RefOrSchema(inner) = &mut array.items {
                        if let RefOr::T(inner) = inner.as_mut() {
                            non_empty(inner);
                            token_id_range(inner);
                        }
                    }
                }
            }
        }
    }
    // The other lists of stop sequences.
    for (schema, field) in [(CreateMessage::name(), "stop_sequences"), (ollama::Options::name(), "stop")] {
        if let Some(Schema::Array(array)) = property(components.schemas.get_mut(schema.as_ref()), field) {
            array.max_items = Some(MAX_STOPS);
        }
    }
    // The array forms: `stop` takes up to 4 sequences, `prompt` exactly one.
    for (schema, (min, max)) in [(StopSequences::name(), (0, MAX_STOPS)), (Prompt::name(), (1, 1))] {
        if let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(schema.as_ref()) {
            for item in one_of.items.iter_mut() {
                if let RefOr::T(Schema::Array(array)) = item {
                    array.min_items = Some(min);
                    array.max_items = Some(max);
                }
            }
        }
    }
}

/// At least one character (a string) or one item (an array).
fn non_empty(schema: &mut Schema) {
    match schema {
        Schema::Object(string) if string.schema_type == SchemaType::Type(Type::String) => string.min_length = Some(1),
        Schema::Array(array) => array.min_items = Some(1),
        _ => {}
    }
}

/// Whether an array holds token ids (one input), not inputs.
fn of_ids(array: &Array) -> bool {
    let ArrayItems::RefOrSchema(inner) = &array.items else { return false };
    matches!(inner.as_ref(), RefOr::T(Schema::Object(id)) if id.schema_type == SchemaType::Type(Type::Integer))
}

/// A token id, or an array of them (nested one level): 0 to the runtime's
/// `int32` (the model's vocabulary bounds it further).
fn token_id_range(schema: &mut Schema) {
    match schema {
        Schema::Object(id) if id.schema_type == SchemaType::Type(Type::Integer) => {
            id.minimum = Some(number(0.0));
            id.maximum = Some(number(f64::from(i32::MAX)));
        }
        Schema::Array(array) => {
            if let ArrayItems::RefOrSchema(inner) = &mut array.items {
                if let RefOr::T(inner) = inner.as_mut() {
                    token_id_range(inner);
                }
            }
        }
        _ => {}
    }
}

/// A property of a component schema, also inside an `allOf` (a flattened struct).
fn property<'a>(schema: Option<&'a mut RefOr<Schema>>, name: &str) -> Option<&'a mut Schema> {
    match schema? {
        RefOr::T(Schema::Object(object)) => object.properties.get_mut(name).and_then(|p| match p {
            RefOr::T(schema) => Some(schema),
            RefOr::Ref(_) => None,
        }),
        RefOr::T(Schema::AllOf(all)) => all.items.iter_mut().find_map(|item| property(Some(item), name)),
        _ => None,
    }
}

fn number(v: f64) -> Number {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        Number::Int(v as isize)
    } else {
        Number::Float(v)
    }
}
