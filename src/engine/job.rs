//! What the API hands the engine: a prompt, limits and sampling choices,
//! and the conversation cache's hand-off.

use super::prompt::Prompt;
use crate::sampling::SamplingOverrides;

/// One generation request, already validated by the API layer.
#[derive(Debug)]
pub struct Job {
    /// The request id (for the request log).
    pub id: String,
    /// The fully rendered prompt (the runtime's own template is disabled),
    /// and with a tokenizer its sequence of ids and images (its length is
    /// `usage.prompt_tokens`; with the conversation cache it is what the
    /// runtime is sent).
    pub prompt: Prompt,
    /// `None` = the configured maximum.
    pub max_new_tokens: Option<u32>,
    pub sampling: SamplingOverrides,
    pub enable_thinking: bool,
    /// The LoRA adapter to run with (loaded with the model); `None`: the base model.
    pub lora: Option<String>,
    /// `count`, `tokens` and `preprocess_ms` filled in by the api.
    pub image_timings: crate::metrics::ImageTimings,
    /// What the conversation cache is told of the prompt, and given back of the reply.
    pub cache: Handoff,
}

impl Job {
    /// A job of `prompt` asking nothing else: the configured token limit,
    /// RKLLM's sampling, no thinking, token ids, adapter, images or cache
    /// hints. Callers set what they ask with `Job { …, ..Job::new(id, prompt) }`.
    pub fn new(id: impl Into<String>, prompt: impl Into<String>) -> Job {
        Job {
            id: id.into(),
            prompt: Prompt::new(prompt),
            max_new_tokens: None,
            sampling: SamplingOverrides::default(),
            enable_thinking: false,
            lora: None,
            image_timings: Default::default(),
            cache: Handoff::default(),
        }
    }
}

/// The conversation cache's hand-off of one job: made by the api at
/// validation with what it knows of the prompt ([`CacheHints`]), moved with
/// the job into the engine, which binds it to its record of the job
/// (`Engine::submit`), and given back by value when the reply ends with what
/// the client was shown ([`Handoff::returned`]): once, and for its own job.
#[derive(Default)]
pub struct Handoff {
    pub hints: CacheHints,
    /// Where it goes back: the engine's record of the job.
    back: Option<Box<dyn FnOnce(Shown) + Send>>,
}

impl Handoff {
    pub fn new(hints: CacheHints) -> Handoff {
        Handoff { hints, back: None }
    }

    /// The hand-off, to go back through `back`.
    pub(super) fn bound(self, back: impl FnOnce(Shown) + Send + 'static) -> Handoff {
        Handoff { back: Some(Box::new(back)), ..self }
    }

    /// Gives the hand-off back: the client was shown the reply so, and a
    /// follow-up resending it can reuse the cached reply.
    pub fn returned(self, shown: Shown) {
        if let Some(back) = self.back {
            back(shown);
        }
    }
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff").field("hints", &self.hints).field("bound", &self.back.is_some()).finish()
    }
}

/// How the client was shown a finished reply.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    /// The api's view of the reply (what a client resends of it).
    pub view: String,
    /// The reply held reasoning the view leaves out.
    pub reasoned: bool,
    /// The reply's tokens the client got.
    pub tokens: u32,
}

/// What the conversation cache matches a prompt with besides its ids, all
/// indices into the prompt's one sequence (`Prompt::ids`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CacheHints {
    /// Where the prompt resends the reply of an earlier turn (chat requests
    /// with a tokenizer and the conversation cache on).
    pub resent: Option<Resent>,
    /// The client's name for the conversation (`prompt_cache_key`,
    /// `X-Session-Id`): a hint; the cache matches the ids themselves.
    pub conversation: Option<String>,
    /// How many of the prompt's ids its leading system messages and tools
    /// render to, on a conversation's first turn (no reply in it yet): the
    /// start every conversation of the same agent shares (`shared_prefix.rs`).
    pub stable: Option<usize>,
}

/// An earlier reply in a prompt, as the client resent it: the ids
/// `ids[start..end]` of the prompt's one sequence (`Prompt::ids`, images
/// included) render the assistant message whose view (the api's name for
/// what a client was shown of a reply) is `view`. The conversation cache
/// matches it against the reply it generated (`kv.rs`).
#[derive(Debug, Clone, PartialEq)]
pub struct Resent {
    pub start: usize,
    pub end: usize,
    pub view: String,
    /// The ids of the prompt that asked for the reply, as the client's
    /// history before it renders: only a cached run of that prompt can stand
    /// for it.
    pub before: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_handoff_goes_back_to_where_it_was_bound_with_what_was_shown() {
        let got = Arc::new(Mutex::new(Vec::new()));
        let record = got.clone();
        let handoff = Handoff::new(CacheHints::default()).bound(move |shown| record.lock().unwrap().push(shown));
        let shown = Shown { view: "Hello".into(), reasoned: true, tokens: 2 };
        handoff.returned(shown.clone());
        assert_eq!(*got.lock().unwrap(), vec![shown]);
        // One no engine took (never bound) goes nowhere.
        Handoff::new(CacheHints::default()).returned(Shown { view: String::new(), reasoned: false, tokens: 0 });
        assert_eq!(got.lock().unwrap().len(), 1);
    }
}
