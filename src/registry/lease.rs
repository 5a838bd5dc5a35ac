//! A [`Lease`]: a loaded model held for one request, handed back to the
//! registry when dropped (its keep-alive clock starts then).

use super::{KeepAlive, Loaded, Registry};
use std::sync::Arc;
use std::time::Duration;

/// A loaded model held for one request. While any lease (or anything the
/// engine holds for a queued or running job) exists, the model stays loaded.
pub struct Lease {
    /// `None` only inside `drop`, which hands it back to the registry.
    pub(super) model: Option<Arc<Loaded>>,
    pub(super) registry: Arc<Registry>,
    pub(super) keep_alive: KeepAlive,
    /// Time this request spent loading the model (zero when it was loaded).
    pub load_duration: Duration,
    /// The LoRA adapter the request named (`BASE:NAME`); `None`: the base model.
    pub adapter: Option<String>,
}

impl Lease {
    /// The id the request named: the model's, or `BASE:NAME` for an adapter.
    pub fn served_id(&self) -> String {
        match &self.adapter {
            Some(name) => adapter_id(&self.model_id, name),
            None => self.model_id.clone(),
        }
    }
}

/// The model id an adapter is served as.
pub fn adapter_id(base: &str, adapter: &str) -> String {
    format!("{base}:{adapter}")
}

impl std::ops::Deref for Lease {
    type Target = Loaded;
    fn deref(&self) -> &Loaded {
        self.model.as_deref().expect("a lease holds its model until it is dropped")
    }
}

impl Lease {
    /// The leased model for work that outlives a borrow (the blocking
    /// pool); the lease itself still marks the model in use.
    pub fn shared(&self) -> Arc<Loaded> {
        self.model.clone().expect("a lease holds its model until it is dropped")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(model) = self.model.take() {
            self.registry.released(model, self.keep_alive);
        }
    }
}
