//! The model registry: every model the daemon may serve, loaded on demand
//! and unloaded when idle or short of room.
//!
//! A request asks for a model by id and gets a [`Lease`]: the model, loaded
//! if it was not (on a blocking thread; requests for the same model wait
//! behind that load, requests for other models keep flowing). Before a load,
//! the least recently used *idle* models are unloaded until both
//! `max_loaded` and the memory budget leave room; a model that anybody holds
//! (a request being validated, queued or generating, a stream being read,
//! an aborted run being drained) is never unloaded — the load waits for one
//! to become idle instead. An idle model is unloaded when its `keep_alive`
//! (per request, else the daemon's) expires.
//!
//! Waiting for a busy model is bounded: steady traffic to it would keep it
//! busy, and the load waiting, for as long as the traffic lasts. After
//! `switch_after`, the models in the way *yield*: they take no new request
//! (those wait, like requests for a model being loaded) and finish what
//! they hold; then they are idle, unloaded, and the load goes ahead. Their
//! waiting requests load them back the same way, so under traffic to both,
//! the models take turns of about `switch_after` plus a load.
//!
//! A load whose runtime did not come back from a probe at load
//! (`EngineError::ProbeWedged`) left a thread inside `rkllm_run` and a handle
//! that cannot be destroyed. Loading the model again would leave another
//! one each time (and the runtime that wedged is unlikely to do better), so
//! the model is refused from then on — 503 `model_wedged`, naming the
//! reason — until the daemon is restarted; `rkllmd_model_loads_wedged_total`
//! counts such loads.
//!
//! Below the api, above `engine` and `conversation`; it never reads the
//! configuration: the composition root hands it [`ModelSpec`]s and
//! [`Settings`].

mod lease;
mod load;
mod room;
mod spec;

pub use crate::keep_alive::KeepAlive;
pub use lease::{adapter_id, Lease};
pub use load::{load, LoadFailure, AUTO_WITHOUT_TOKENIZER};
pub use spec::{discover, Found, Learned, ModelSpec};

use crate::conversation::Prompter;
use crate::engine::{open_runtime, BackendError, Engine, EngineError, OpenedRuntime, Place, RuntimeSettings};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::Notify;

/// A loaded model: the engine that runs it and the prompter that renders
/// its prompts, side by side.
pub struct Loaded {
    pub engine: Arc<Engine>,
    pub prompter: Arc<Prompter>,
    pub model_id: String,
    /// Unix seconds: the model file's mtime, or the daemon's start for the simulator.
    pub created: u64,
    /// How this model's embeddings are pooled and its rerank prompts written.
    pub embed: crate::embed::EmbedSettings,
    /// Its spec's: what this load teaches is kept for the next.
    pub learned: Arc<Learned>,
}

/// How the registry treats its models.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Models loaded at the same time (at least 1).
    pub max_loaded: usize,
    /// The model files' sizes loaded at the same time may not exceed this.
    pub memory_budget_bytes: Option<u64>,
    /// How long an idle model stays loaded unless a request says otherwise.
    pub keep_alive: KeepAlive,
    /// How long a load waits for busy models before they yield (module doc).
    pub switch_after: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the model `{0}` is not registered")]
    NotFound(String),
    #[error("loading the model `{id}` failed: {source}")]
    Load { id: String, source: LoadFailure },
    #[error("the model `{id}` ({size} bytes) does not fit in the memory budget of {budget} bytes")]
    TooLarge { id: String, size: u64, budget: u64 },
    #[error("the load of `{0}` stopped unexpectedly")]
    Interrupted(String),
    #[error("the request queue of `{0}` is full")]
    QueueFull(String),
    #[error("the runtime of `{0}` has not returned from an aborted run")]
    Unresponsive(String),
    /// An earlier load of the model left the runtime stuck (module doc).
    #[error(
        "the model `{id}` is not loaded again until rkllmd restarts: a load of it left the runtime stuck ({reason})"
    )]
    Wedged { id: String, reason: String },
}

/// What `/v1/models`, `/api/tags` and `/api/ps` show of one model.
#[derive(Clone)]
pub struct Status {
    pub spec: Arc<ModelSpec>,
    pub loaded: Option<LoadedStatus>,
}

impl Status {
    /// The model's context, when known without loading it: loaded, or set
    /// by `max_context_len` (else the load reads it from the model).
    pub fn context(&self) -> Option<usize> {
        match &self.loaded {
            Some(loaded) => Some(loaded.model.engine.limits().max_context_len as usize),
            None if !self.spec.engine.limits.context_from_model => {
                Some(self.spec.engine.limits.max_context_len as usize)
            }
            None => None,
        }
    }
}

#[derive(Clone)]
pub struct LoadedStatus {
    pub model: Arc<Loaded>,
    /// When the load finished.
    pub since: SystemTime,
    /// When it will be unloaded if still idle; `None`: it is in use or kept forever.
    pub expires: Option<SystemTime>,
}

/// One loaded model in the registry.
struct Slot {
    model: Arc<Loaded>,
    since: SystemTime,
    last_used: Instant,
    /// Deadline once idle; `None` = forever.
    expires: Option<Instant>,
    /// Leases out now: counted when one is made and when it is handed back,
    /// both under the registry's lock (never read off the `Arc`, whose
    /// count any new clone would change).
    leases: usize,
}

impl Slot {
    /// No lease is out and the engine holds no queue place (nothing waits,
    /// runs, or is being drained after an abort; `Engine::in_use`).
    fn idle(&self) -> bool {
        self.leases == 0 && !self.model.engine.in_use()
    }
}

#[derive(Default)]
struct State {
    loaded: HashMap<String, Slot>,
    /// Loads in progress, with their sizes: counted as loaded when making room.
    reserved: Vec<(String, u64)>,
    /// (model, the load it yields to): loaded models that take no new request.
    yielding: Vec<(String, String)>,
    /// Models whose load left the runtime stuck, with why: refused (module doc).
    wedged: HashMap<String, String>,
}

impl State {
    fn yields(&self, id: &str) -> bool {
        self.yielding.iter().any(|(model, _)| model == id)
    }
}

pub struct Registry {
    /// Grows when a model is pulled while serving (`register`); never shrinks.
    specs: RwLock<Vec<Arc<ModelSpec>>>,
    settings: Settings,
    state: Mutex<State>,
    /// One per model: requests for a model that is loading wait here.
    load_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// A model was released or unloaded: a waiting load or the reaper looks again.
    changed: Notify,
    /// Runtimes opened so far, kept open: loading a model again does not
    /// `dlopen` the library again (a re-opened library does not give all its
    /// memory back when closed: RSS grew ~0.5 MiB per load/unload cycle).
    runtimes: Mutex<Vec<(RuntimeSettings, OpenedRuntime)>>,
    /// `models_dir` and how a model found there is made a spec (`rescan`).
    models_dir: Option<(PathBuf, SpecOf)>,
}

/// Makes the spec of a model found in `models_dir` (the daemon's settings live in `app`).
pub type SpecOf = Box<dyn Fn(Found) -> ModelSpec + Send + Sync>;

/// How often a load that waits for room, or the reaper with a busy expired
/// model, looks again even without a notification (a drained, aborted run
/// lets go of its engine without one).
const RECHECK: Duration = Duration::from_millis(50);

impl Registry {
    /// The registry of these models (ids already checked to be unique).
    pub fn new(specs: Vec<ModelSpec>, settings: Settings, models_dir: Option<(PathBuf, SpecOf)>) -> Arc<Registry> {
        let load_locks = specs.iter().map(|s| (s.id.clone(), Arc::default())).collect();
        Arc::new(Registry {
            specs: RwLock::new(specs.into_iter().map(Arc::new).collect()),
            settings,
            state: Mutex::new(State::default()),
            load_locks: Mutex::new(load_locks),
            changed: Notify::new(),
            runtimes: Mutex::new(Vec::new()),
            models_dir,
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn specs(&self) -> RwLockReadGuard<'_, Vec<Arc<ModelSpec>>> {
        self.specs.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn spec(&self, id: &str) -> Option<Arc<ModelSpec>> {
        self.specs().iter().find(|s| s.id == id).cloned()
    }

    /// The models directory, if models come from one.
    pub fn models_dir(&self) -> Option<&Path> {
        self.models_dir.as_ref().map(|(dir, _)| dir.as_path())
    }

    /// Registers the models `models_dir` holds now that it did not at start
    /// (a pull while serving); their ids, in the folder's order. Reading a
    /// folder is blocking work: it runs on the blocking pool.
    pub async fn rescan(self: &Arc<Self>) -> Result<Vec<String>, String> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.rescan_now()).await.map_err(|e| e.to_string())?
    }

    fn rescan_now(&self) -> Result<Vec<String>, String> {
        let Some((dir, spec_of)) = &self.models_dir else { return Ok(Vec::new()) };
        let mut added = Vec::new();
        for found in discover(dir)? {
            let id = found.id.clone();
            // One model whose id is taken does not keep the others out.
            match self.register(spec_of(found)) {
                Ok(true) => {
                    tracing::info!(model = %id, "model registered");
                    added.push(id);
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(model = %id, "not registered: {e}"),
            }
        }
        Ok(added)
    }

    /// Adds a model found while serving. `Ok(false)`: the same file is
    /// registered already. An id taken by another file, or by an adapter,
    /// is refused as at start (`app::model_specs`).
    fn register(&self, spec: ModelSpec) -> Result<bool, String> {
        let mut specs = self.specs.write().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = specs.iter().find(|s| s.id == spec.id) {
            return if known.path == spec.path {
                Ok(false)
            } else {
                Err(format!("the model id `{}` is taken by {}", spec.id, known.path))
            };
        }
        if let Some(base) = specs.iter().find(|s| s.engine.loras.iter().any(|l| adapter_id(&s.id, &l.name) == spec.id))
        {
            return Err(format!("the model id `{}` is the id of an adapter of `{}`", spec.id, base.id));
        }
        self.load_locks.lock().unwrap_or_else(|e| e.into_inner()).insert(spec.id.clone(), Arc::default());
        specs.push(Arc::new(spec));
        Ok(true)
    }

    /// The model an id names and the adapter, if it names one: a model's own
    /// id first, else `BASE:NAME` with NAME one of BASE's adapters, else
    /// `MODEL:latest` for the model (Ollama's tag for a name without one,
    /// which some Ollama clients add).
    pub fn resolve(&self, id: &str) -> Option<(Arc<ModelSpec>, Option<String>)> {
        if let Some(spec) = self.spec(id) {
            return Some((spec, None));
        }
        let (base, name) = id.rsplit_once(':')?;
        let spec = self.spec(base)?;
        if spec.engine.loras.iter().any(|l| l.name == name) {
            return Some((spec, Some(name.to_owned())));
        }
        (name == "latest").then_some((spec, None))
    }

    /// Every name [`Registry::resolve`] takes for `spec`: its id, `ID:latest`
    /// and `ID:ADAPTER` for each adapter (kept beside it, so the two agree).
    pub fn names(spec: &ModelSpec) -> Vec<String> {
        let adapters = spec.engine.loras.iter().map(|l| adapter_id(&spec.id, &l.name));
        [spec.id.clone(), format!("{}:latest", spec.id)].into_iter().chain(adapters).collect()
    }

    /// The model a request that names none gets (`/tokenize`, `/detokenize`): the first registered.
    pub fn default_id(&self) -> Option<String> {
        self.specs().first().map(|s| s.id.clone())
    }

    /// Requests that may wait per model (every model has the same).
    pub fn queue_depth(&self) -> usize {
        self.specs().first().map_or(0, |s| s.engine.queue_depth)
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Every registered model, in registration order.
    pub fn statuses(&self) -> Vec<Status> {
        let state = self.state();
        let now = (Instant::now(), SystemTime::now());
        self.specs()
            .iter()
            .map(|spec| Status {
                spec: spec.clone(),
                loaded: state.loaded.get(&spec.id).map(|slot| LoadedStatus {
                    model: slot.model.clone(),
                    since: slot.since,
                    expires: slot.expires.filter(|_| slot.idle()).map(|at| now.1 + at.saturating_duration_since(now.0)),
                }),
            })
            .collect()
    }

    /// The loaded models, most recently used first.
    pub fn loaded(&self) -> Vec<Arc<Loaded>> {
        let state = self.state();
        let mut slots: Vec<&Slot> = state.loaded.values().collect();
        slots.sort_by_key(|s| std::cmp::Reverse(s.last_used));
        slots.into_iter().map(|s| s.model.clone()).collect()
    }

    /// The model, loaded if it is not; `keep_alive` overrides the daemon's
    /// for this request's release.
    pub async fn acquire(self: &Arc<Self>, id: &str, keep_alive: Option<KeepAlive>) -> Result<Lease, RegistryError> {
        Ok(self.acquire_with(id, keep_alive, |_| Ok(())).await?.0)
    }

    /// A lease and a place in the model's queue. A loaded model's queue is
    /// asked first, under the registry's lock: a full queue refuses at once,
    /// before any lease (so a refusal is no use of the model and does not
    /// restart its keep-alive clock) and before the request is prepared.
    pub async fn acquire_queued(
        self: &Arc<Self>,
        id: &str,
        keep_alive: Option<KeepAlive>,
    ) -> Result<(Lease, Place), RegistryError> {
        self.acquire_with(id, keep_alive, |model| {
            model.engine.reserve().map_err(|e| match e {
                EngineError::Unresponsive => RegistryError::Unresponsive(model.model_id.clone()),
                _ => RegistryError::QueueFull(model.model_id.clone()),
            })
        })
        .await
    }

    /// A lease, with what `take` takes of the model before the lease is made
    /// (refusing it when `take` does).
    async fn acquire_with<T>(
        self: &Arc<Self>,
        id: &str,
        keep_alive: Option<KeepAlive>,
        take: impl Fn(&Loaded) -> Result<T, RegistryError>,
    ) -> Result<(Lease, T), RegistryError> {
        let (spec, adapter) = self.resolve(id).ok_or_else(|| RegistryError::NotFound(id.to_owned()))?;
        let (mut lease, taken) = self.acquire_model(&spec, keep_alive, take).await?;
        lease.adapter = adapter;
        Ok((lease, taken))
    }

    /// A lease of the base model (`acquire` names the adapter).
    async fn acquire_model<T>(
        self: &Arc<Self>,
        spec: &Arc<ModelSpec>,
        keep_alive: Option<KeepAlive>,
        take: impl Fn(&Loaded) -> Result<T, RegistryError>,
    ) -> Result<(Lease, T), RegistryError> {
        let id = spec.id.as_str();
        let keep_alive = keep_alive.unwrap_or(self.settings.keep_alive);
        let started = Instant::now();
        if let Some(leased) = self.lease_loaded(id, keep_alive, Duration::ZERO, &take) {
            return leased;
        }
        let lock = self.load_locks.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned();
        let Some(lock) = lock else { return Err(RegistryError::NotFound(id.to_owned())) };
        let _loading = loop {
            // A model yielding to another's load takes no new request until
            // it has been unloaded (then this request loads it back).
            self.wait_while_yielding(id).await;
            let loading = lock.lock().await;
            // Loaded by the request ahead of us while we waited.
            if let Some(leased) = self.lease_loaded(id, keep_alive, started.elapsed(), &take) {
                return leased;
            }
            if !self.state().loaded.contains_key(id) {
                break loading;
            }
        };
        // After the lock: the requests that waited behind a load that wedged are refused too.
        if let Some(reason) = self.state().wedged.get(id) {
            return Err(RegistryError::Wedged { id: id.to_owned(), reason: reason.clone() });
        }
        self.make_room(spec).await?;
        let loading = spec.clone();
        let this = self.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            let loaded = load(&loading, |settings| this.runtime(settings));
            // What the load parsed and dropped (a tokenizer.json's tree, ~10× the file) goes back.
            crate::heap::give_back();
            loaded
        })
        .await;
        let mut state = self.state();
        state.reserved.retain(|(r, _)| r != id);
        let loaded = match loaded {
            Ok(Ok(loaded)) => Arc::new(loaded),
            Ok(Err(source)) => {
                let wedged = source.wedged();
                if let Some(reason) = &wedged {
                    crate::metrics::observer().metrics.model_load_wedged(id);
                    state.wedged.insert(id.to_owned(), reason.clone());
                }
                drop(state);
                self.changed.notify_waiters();
                return Err(match wedged {
                    Some(reason) => RegistryError::Wedged { id: id.to_owned(), reason },
                    None => RegistryError::Load { id: id.to_owned(), source },
                });
            }
            Err(_) => return Err(RegistryError::Interrupted(id.to_owned())),
        };
        let now = Instant::now();
        load::log_loaded(&loaded, started.elapsed());
        state.loaded.insert(
            id.to_owned(),
            Slot { model: loaded.clone(), since: SystemTime::now(), last_used: now, expires: None, leases: 1 },
        );
        // Another request may have filled the new queue since the insert;
        // the model stays loaded either way.
        let taken = take(&loaded)?;
        let lease = Lease {
            model: Some(loaded),
            registry: self.clone(),
            keep_alive,
            load_duration: started.elapsed(),
            adapter: None,
        };
        Ok((lease, taken))
    }

    /// The runtime for these settings, opened once.
    fn runtime(&self, settings: &RuntimeSettings) -> Result<OpenedRuntime, BackendError> {
        let mut runtimes = self.runtimes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, opened)) = runtimes.iter().find(|(s, _)| s == settings) {
            return Ok(opened.clone());
        }
        let opened = open_runtime(settings)?;
        if let Some(why) = &opened.fallback {
            tracing::warn!("no usable runtime library ({why}); using the simulated runtime");
        }
        runtimes.push((settings.clone(), opened.clone()));
        Ok(opened)
    }

    /// A lease of the model if it is loaded, `take` asked first.
    fn lease_loaded<T>(
        self: &Arc<Self>,
        id: &str,
        keep_alive: KeepAlive,
        waited: Duration,
        take: impl Fn(&Loaded) -> Result<T, RegistryError>,
    ) -> Option<Result<(Lease, T), RegistryError>> {
        let mut state = self.state();
        if state.yields(id) {
            return None;
        }
        let slot = state.loaded.get_mut(id)?;
        let taken = match take(&slot.model) {
            Ok(taken) => taken,
            Err(e) => return Some(Err(e)),
        };
        slot.last_used = Instant::now();
        slot.leases += 1;
        let lease = Lease {
            model: Some(slot.model.clone()),
            registry: self.clone(),
            keep_alive,
            load_duration: waited,
            adapter: None,
        };
        Some(Ok((lease, taken)))
    }
}
