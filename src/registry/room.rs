//! Room for a load, and letting models go: unloading the least recently
//! used idle models until a load fits (`max_loaded`, the memory budget),
//! making busy ones yield after `switch_after`, unloading a model whose
//! keep-alive expired or that a request unloads, and the unload itself.

use super::{KeepAlive, Loaded, ModelSpec, Registry, RegistryError, Slot, State, RECHECK};
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Registry {
    /// Unloads least recently used idle models until `spec` fits, then
    /// reserves its room; waits while every model in the way is busy.
    pub(super) async fn make_room(&self, spec: &ModelSpec) -> Result<(), RegistryError> {
        if let Some(budget) = self.settings.memory_budget_bytes.filter(|&b| spec.size_bytes > b) {
            return Err(RegistryError::TooLarge { id: spec.id.clone(), size: spec.size_bytes, budget });
        }
        let mut said = false;
        let waiting = Instant::now();
        // Whatever way this ends (room made, or the request gone), the
        // models that yielded to it take requests again.
        let _yielded = Yielded { registry: self, load: &spec.id };
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let victims = {
                let mut state = self.state();
                match self.victims(&mut state, spec) {
                    Some(victims) => {
                        state.reserved.push((spec.id.clone(), spec.size_bytes));
                        victims
                    }
                    None => {
                        if !std::mem::replace(&mut said, true) {
                            tracing::info!(model = %spec.id, "loading waits for room: the loaded models are in use");
                            crate::metrics::observer().metrics.model_load_waited();
                        }
                        if waiting.elapsed() >= self.settings.switch_after {
                            self.yield_to(&mut state, spec);
                        }
                        Vec::new()
                    }
                }
            };
            let reserved = self.state().reserved.iter().any(|(r, _)| *r == spec.id);
            for victim in victims {
                unload(victim, Why::Room).await;
            }
            if reserved {
                return Ok(());
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(RECHECK) => {}
            }
        }
    }

    /// Marks the busy models in `spec`'s way, least recently used first, as
    /// yielding to its load: they finish what they hold and take nothing new.
    fn yield_to(&self, state: &mut State, spec: &ModelSpec) {
        let mut by_use: Vec<(&String, &Slot)> = state.loaded.iter().collect();
        by_use.sort_by_key(|(_, slot)| slot.last_used);
        let (in_the_way, _) = self.to_unload(state, spec, by_use.into_iter().map(|(id, _)| id));
        let busy: Vec<String> = in_the_way
            .into_iter()
            .filter(|id| state.loaded.get(id).is_some_and(|slot| !slot.idle()) && !state.yields(id))
            .collect();
        for id in busy {
            tracing::info!(
                model = %id,
                to = %spec.id,
                waited_ms = self.settings.switch_after.as_millis() as u64,
                "model yields: it finishes what it holds and takes no new request until the other model has run"
            );
            crate::metrics::observer().metrics.model_yielded();
            state.yielding.push((id, spec.id.clone()));
        }
    }

    /// Waits until the model does not yield to another model's load.
    pub(super) async fn wait_while_yielding(&self, id: &str) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !self.state().yields(id) {
                return;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(RECHECK) => {}
            }
        }
    }

    /// The idle models to unload (taken out of the state) so that `spec`
    /// fits, or `None` when busy models are in the way.
    fn victims(&self, state: &mut State, spec: &ModelSpec) -> Option<Vec<Arc<Loaded>>> {
        let mut idle: Vec<(&String, Instant)> =
            state.loaded.iter().filter(|(_, s)| s.idle()).map(|(id, s)| (id, s.last_used)).collect();
        idle.sort_by_key(|(_, used)| *used);
        let (chosen, fits) = self.to_unload(state, spec, idle.into_iter().map(|(id, _)| id));
        fits.then(|| chosen.iter().filter_map(|id| state.loaded.remove(id)).map(|s| s.model).collect())
    }

    /// Of `candidates`, in order, those to unload one after another until
    /// `spec` fits beside the rest and the loads in progress, and whether it
    /// fits then (`max_loaded`, the memory budget).
    fn to_unload<'a>(
        &self,
        state: &State,
        spec: &ModelSpec,
        candidates: impl Iterator<Item = &'a String>,
    ) -> (Vec<String>, bool) {
        let size = |id: &str| self.spec(id).map_or(0, |s| s.size_bytes);
        let mut count = state.loaded.len() + state.reserved.len();
        let mut bytes: u64 =
            state.loaded.keys().map(|id| size(id)).sum::<u64>() + state.reserved.iter().map(|(_, s)| s).sum::<u64>();
        let fits = |count: usize, bytes: u64| {
            count < self.settings.max_loaded.max(1)
                && self.settings.memory_budget_bytes.is_none_or(|b| bytes + spec.size_bytes <= b)
        };
        let mut chosen = Vec::new();
        for id in candidates {
            if fits(count, bytes) {
                break;
            }
            count -= 1;
            bytes -= size(id);
            chosen.push(id.clone());
        }
        (chosen, fits(count, bytes))
    }

    /// A lease ended: the model's idle clock starts; `keep_alive` 0 unloads
    /// it at once when nobody else holds it.
    pub(super) fn released(&self, model: Arc<Loaded>, keep_alive: KeepAlive) {
        let now = Instant::now();
        let unload_now = {
            let mut state = self.state();
            let Some(slot) = state.loaded.get_mut(&model.model_id).filter(|s| Arc::ptr_eq(&s.model, &model)) else {
                return;
            };
            slot.last_used = now;
            slot.expires = keep_alive.deadline(now);
            slot.leases = slot.leases.saturating_sub(1);
            if keep_alive.is_zero() && slot.idle() {
                state.loaded.remove(&model.model_id).map(|s| s.model)
            } else {
                None
            }
        };
        drop(model);
        if let Some(model) = unload_now {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(unload(model, Why::KeepAlive));
            }
        }
        self.changed.notify_waiters();
    }

    /// Unloads the model now if it is idle; otherwise it is unloaded as soon
    /// as its work is done. `Ok(false)`: it was not loaded.
    pub async fn unload(&self, id: &str) -> Result<bool, RegistryError> {
        // An adapter's id unloads its model (they are one load).
        let (spec, _) = self.resolve(id).ok_or_else(|| RegistryError::NotFound(id.to_owned()))?;
        let id = spec.id.as_str();
        let now_idle = {
            let mut state = self.state();
            let Some(slot) = state.loaded.get_mut(id) else { return Ok(false) };
            slot.expires = Some(Instant::now());
            if slot.idle() {
                state.loaded.remove(id).map(|s| s.model)
            } else {
                None
            }
        };
        self.changed.notify_waiters();
        if let Some(model) = now_idle {
            unload(model, Why::Request).await;
        }
        Ok(true)
    }

    /// Unloads idle models whose keep-alive expired; runs for the process's
    /// life. Spawn once.
    pub async fn reap(self: Arc<Self>) {
        let this = self;
        loop {
            let notified = this.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let (expired, next) = {
                let mut state = this.state();
                let expired: Vec<String> = state
                    .loaded
                    .iter()
                    .filter(|(_, s)| s.expires.is_some_and(|at| at <= now) && s.idle())
                    .map(|(id, _)| id.clone())
                    .collect();
                let models: Vec<_> = expired.iter().filter_map(|id| state.loaded.remove(id)).map(|s| s.model).collect();
                // A busy model past its deadline is looked at again soon.
                let next = state.loaded.values().filter_map(|s| s.expires).map(|at| at.max(now + RECHECK)).min();
                (models, next)
            };
            for model in expired {
                unload(model, Why::KeepAlive).await;
            }
            let wait = next.map_or(Duration::from_secs(3600), |at| at.saturating_duration_since(Instant::now()));
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }
}

/// The models yielding to a load take requests again when it has made its
/// room (they are unloaded by then) or given up.
struct Yielded<'a> {
    registry: &'a Registry,
    load: &'a str,
}

impl Drop for Yielded<'_> {
    fn drop(&mut self) {
        let mut state = self.registry.state();
        let before = state.yielding.len();
        state.yielding.retain(|(_, to)| to != self.load);
        if state.yielding.len() != before {
            drop(state);
            self.registry.changed.notify_waiters();
        }
    }
}

/// Why a model is unloaded: the log's and the metric's `reason`.
#[derive(Clone, Copy)]
enum Why {
    /// Another model's load needs its room.
    Room,
    /// Idle past its keep-alive (`0`: as soon as its last lease ended).
    KeepAlive,
    /// `POST /v1/models/{id}/unload`, or an Ollama load-only request with `keep_alive: 0`.
    Request,
}

impl Why {
    fn label(self) -> &'static str {
        match self {
            Why::Room => "room",
            Why::KeepAlive => "keep_alive",
            Why::Request => "request",
        }
    }
}

/// How long an unload waits for the last transient holders of the model
/// (a status snapshot, a finished generation's stream) before it says so.
const HELD_WARN: Duration = Duration::from_secs(5);

/// Destroys the model on a blocking thread: the runtime thread is joined
/// and `rkllm_destroy` called before this returns. The model was chosen
/// because no lease and no queue place holds it; anything that still holds
/// a reference lets go within moments (a status snapshot, a finished
/// stream), and the destroy waits for that here rather than happening
/// wherever the last reference drops (an async task, which it would block).
/// A holder that does not let go is a bug, said once as a WARN. Counted
/// once the runtime is destroyed (`rkllmd_model_unloads_total`).
async fn unload(model: Arc<Loaded>, why: Why) {
    let id = model.model_id.clone();
    tracing::info!(model = %id, reason = why.label(), "unloading model");
    let started = Instant::now();
    let destroy = move || {
        let mut warned = false;
        let mut held = model;
        let loaded = loop {
            match Arc::try_unwrap(held) {
                Ok(loaded) => break loaded,
                Err(again) => held = again,
            }
            if !warned && started.elapsed() > HELD_WARN {
                tracing::warn!(model = %held.model_id, "unloading waits: something still holds the model although no lease or queue place does");
                warned = true;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let Loaded { mut engine, .. } = loaded;
        loop {
            match Arc::try_unwrap(engine) {
                Ok(engine) => {
                    drop(engine);
                    // The model's tokenizer, template and caches freed on this thread go back.
                    crate::heap::give_back();
                    return;
                }
                Err(again) => engine = again,
            }
            if !warned && started.elapsed() > HELD_WARN {
                tracing::warn!(
                    "unloading waits: something still holds the engine although no lease or queue place does"
                );
                warned = true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    if tokio::task::spawn_blocking(destroy).await.is_err() {
        tracing::error!(model = %id, "unloading the model panicked");
    }
    tracing::info!(model = %id, unload_ms = started.elapsed().as_millis() as u64, "model unloaded");
    crate::metrics::observer().metrics.model_unloaded(&id, why.label());
}
