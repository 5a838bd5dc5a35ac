//! What each route is, said where it is registered (the route tables in
//! `api/mod.rs` and `ollama/mod.rs`): whether the listener's key guards it,
//! whether its POST requests are counted and as what (`rkllmd_requests_total`),
//! whether its reply may be a server-sent event stream, the shape its
//! errors take and the body type it parses. The key check (`auth.rs`), the
//! OpenAPI document (`docs.rs`), the request counting (`metrics.rs`) and the
//! refusals met before a handler read these descriptions, never a path's
//! spelling, so a new endpoint is its module and one line in a route table.

use super::state::AppState;
use crate::metrics::Kind;
use axum::routing::MethodRouter;
use axum::Router;
use std::borrow::Cow;
use std::collections::HashMap;
use utoipa::ToSchema;
use utoipa_axum::router::UtoipaMethodRouter;

/// The shape of a route's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Errors {
    /// OpenAI's envelope, `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
    /// Ollama's `{"error": "…"}` (`ollama::error`).
    Ollama,
    /// Anthropic's `{"type": "error", "error": {"type", "message"}}` (`messages::error`).
    Anthropic,
}

/// One route's description.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// Behind the listener's key (`auth.rs`) and served once the models
    /// are (503 while loading); `false`: public (health, docs, metrics).
    pub guarded: bool,
    /// Its POST requests counted as this kind.
    pub counted: Option<Kind>,
    /// With `stream: true` its reply is a `text/event-stream`.
    pub streams: bool,
    pub errors: Errors,
    /// The name the document gives the body type its handler parses
    /// (`ToSchema::name` of it): the schema `nul.rs` walks a body along.
    pub body: Option<fn() -> Cow<'static, str>>,
}

impl Route {
    /// A JSON endpoint behind the key (models, system, tokenize, …).
    pub const JSON: Route = Route { guarded: true, counted: None, streams: false, errors: Errors::OpenAi, body: None };
    /// A generation: counted, and streamed with `stream: true`.
    pub const GENERATION: Route = Route { counted: Some(Kind::Completion), streams: true, ..Route::JSON };
    /// A public route: health probes, the document, `/metrics`.
    pub const PUBLIC: Route = Route { guarded: false, ..Route::JSON };

    /// Its POST requests counted as `kind`.
    pub const fn counted(kind: Kind) -> Route {
        Route { counted: Some(kind), ..Route::JSON }
    }

    /// Its handler parses a body of type `T`.
    pub const fn takes<T: ToSchema>(self) -> Route {
        Route { body: Some(T::name), ..self }
    }

    /// The same route on Ollama's API: its error shape, its own stream
    /// format (NDJSON, which its handler's annotation states).
    pub const fn ollama(self) -> Route {
        Route { errors: Errors::Ollama, streams: false, ..self }
    }

    /// The same route on Anthropic's Messages API: its error shape.
    pub const fn anthropic(self) -> Route {
        Route { errors: Errors::Anthropic, ..self }
    }

    /// The schema name of the body it parses.
    pub fn body_schema(&self) -> Option<Cow<'static, str>> {
        self.body.map(|name| name())
    }
}

/// The routes of a router and their descriptions, filled as they are registered.
#[derive(Debug, Default)]
pub struct Routes(HashMap<String, Route>);

impl Routes {
    /// Registers a route of the OpenAPI router with its description.
    pub fn add(&mut self, route: Route, router: UtoipaMethodRouter<AppState>) -> UtoipaMethodRouter<AppState> {
        for path in router.1.paths.keys() {
            self.insert(path, route);
        }
        router
    }

    /// Adds a public route the document does not describe (`/`, the
    /// document itself, `/docs`, `/metrics`) to `router`, described.
    pub fn public<S: Clone + Send + Sync + 'static>(
        &mut self,
        router: Router<S>,
        path: &str,
        method: MethodRouter<S>,
    ) -> Router<S> {
        self.insert(path, Route::PUBLIC);
        router.route(path, method)
    }

    /// Describes the route at `path`.
    pub fn insert(&mut self, path: &str, route: Route) {
        self.0.insert(path.to_owned(), route);
    }

    /// What the route at `path` (as the router names it: `/v1/models/{id}`) is.
    pub fn get(&self, path: &str) -> Option<Route> {
        self.0.get(path).copied()
    }

    /// Every route, by the path the router names it with.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Route)> {
        self.0.iter().map(|(path, route)| (path.as_str(), route))
    }

    /// Whether the key guards the route the router matched at `path`: a
    /// route registered without a description is guarded (a mistake fails
    /// closed: its clients get 401, not a route open to anyone).
    pub fn guards(&self, path: &str) -> bool {
        self.0.get(path).is_none_or(|route| route.guarded)
    }

    /// The error shape of a request to `path` (its own path): its route's,
    /// else that of the routes under the same first segment when they all
    /// have one (a path under Ollama's `/api/` that is no route answers as
    /// Ollama does), else OpenAI's.
    pub fn errors_for(&self, path: &str) -> Errors {
        if let Some(route) = self.0.get(path) {
            return route.errors;
        }
        let first = |p: &str| p.trim_start_matches('/').split('/').next().unwrap_or_default().to_owned();
        let segment = first(path);
        let mut shapes = self.0.iter().filter(|(p, _)| first(p) == segment).map(|(_, r)| r.errors);
        match shapes.next() {
            Some(shape) if shapes.all(|other| other == shape) => shape,
            _ => Errors::OpenAi,
        }
    }

    /// The kind a POST to `path` (a request's own path) is counted as.
    pub fn counted(&self, path: &str) -> Option<Kind> {
        self.0.get(path).and_then(|r| r.counted)
    }
}
