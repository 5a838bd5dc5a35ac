//! The engine of one loaded model: its runtime handle (`handle.rs`), the
//! queue, the scheduler, the conversation cache (`conversations.rs` with
//! one sequence a run, `batched.rs` with batches), the prompt-cache file
//! and the vision encoder, each owning its state. `mod.rs` builds it
//! (`Engine::load`); the runs (`generation.rs`, `batch_runs.rs`,
//! `forward.rs`) drive it through the narrow methods here.

use super::batch_files::BatchFiles;
use super::batched::Batched;
use super::conversations::{Conversations, WarmConversations};
use super::error::EngineError;
use super::handle::Handle;
use super::info::RuntimeInfo;
use super::job::{CacheHints, Shown};
use super::kv::Plan;
use super::limits::Limits;
use super::outcome::CacheUse;
use super::prompt::Prompt;
use super::prompt_cache::{Expect, PromptCache};
use super::queue::{Place, Queue, QueueState, Turn};
use super::schedule::Scheduler;
use super::short_batch::ShortBatches;
use super::slots::{Kept, Layout, Member};
use super::vision::{Vision, VisionInfo};
use crate::metrics::{ImageTimings, RuntimePerf};
use rkllm_sys::{Finish, Images, SamplingParams};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

pub struct Engine {
    /// Declared first, so dropped first: the runtime thread is joined
    /// before the conversation cache removes its files.
    pub(super) handle: Handle,
    pub(super) queue: Queue,
    pub(super) info: RuntimeInfo,
    pub(super) defaults: SamplingParams,
    /// Picks every generation's turn (`schedule.rs`).
    pub(super) scheduler: Scheduler,
    /// `Some` when the model has a prompt-cache file (loaded).
    pub(super) prompt_cache: Option<PromptCache>,
    /// The names of the LoRA adapters loaded with the model.
    pub(super) adapters: Vec<String>,
    /// `Some` for a vision-language model.
    pub(super) vision: Option<Vision>,
    /// `Some` with the conversation cache on and `batch` = 1.
    pub(super) conversations: Option<Conversations>,
    /// `Some` with the conversation cache on and `batch` > 1: a
    /// conversation per batch slot, instead of `conversations`.
    pub(super) batched: Option<Batched>,
    /// The runtime wraps each prompt in its own chat template (the daemon
    /// renders none for this model) and runs one job at a time: the run's
    /// own prefill count, not the prompt's ids, is the prompt's size. (A
    /// batch's count is the whole batch's, so a batched job keeps the ids'.)
    pub(super) runtime_counts_prompt: bool,
}

impl Engine {
    pub fn info(&self) -> &RuntimeInfo {
        &self.info
    }
    /// Tokens in the KV cache after the last run, once the runtime said.
    pub fn kv_cache_tokens(&self) -> Option<i64> {
        Some(self.handle.kv_tokens.load(Ordering::Relaxed)).filter(|&t| t >= 0)
    }
    /// What the runtime printed while `rkllm_init` ran.
    pub fn init_log(&self) -> &str {
        self.handle.model.init_log()
    }
    pub fn limits(&self) -> &Limits {
        &self.handle.limits
    }
    /// The LoRA adapters loaded with the model, by name.
    pub fn adapter_names(&self) -> impl Iterator<Item = &str> {
        self.adapters.iter().map(String::as_str)
    }
    pub fn conversation_cache(&self) -> bool {
        self.conversations.is_some() || self.batched.is_some()
    }
    /// Whether a long prefix that conversations share is kept as a file
    /// (`shared_prefix.rs`): the api then says where a first turn's
    /// system messages and tools end (`CacheHints::stable`).
    pub fn shares_prefixes(&self) -> bool {
        self.conversations.as_ref().is_some_and(Conversations::shares_prefixes)
    }
    /// Whether a prompt-cache file is loaded.
    pub fn prompt_cache(&self) -> bool {
        self.prompt_cache.is_some()
    }
    /// Sequences per run (1: unbatched).
    pub fn batch(&self) -> usize {
        self.scheduler.size()
    }
    pub fn sampling_defaults(&self) -> SamplingParams {
        self.defaults
    }
    pub fn queue_state(&self) -> QueueState {
        self.queue.state()
    }
    pub fn queue_full(&self) -> bool {
        self.queue.is_full()
    }
    /// Whether any queue place is held: a job waits, runs, or its aborted
    /// run is being drained (the registry's test of "idle", with its leases).
    pub fn in_use(&self) -> bool {
        self.queue.in_use()
    }
    /// A place in the queue, or `QueueFull` (`Unresponsive` while the runtime
    /// is stuck in an aborted run: `halt.rs`) at once. Taken before a request
    /// is prepared (rendered, tokenized), so that a full daemon refuses
    /// without doing that work, as TGI's permit and Ollama's pending channel
    /// do; the place then goes to [`Engine::submit`] or [`Engine::forward`].
    pub fn reserve(&self) -> Result<Place, EngineError> {
        if self.handle.halt.is_unresponsive() {
            return Err(EngineError::Unresponsive);
        }
        self.queue.try_enter().ok_or(EngineError::QueueFull)
    }
    /// Shutdown after the grace period: abort the running generation and
    /// end the queued ones without running them.
    pub fn abort_all(&self) {
        self.handle.halt.close();
        self.handle.model.abort_active();
    }

    pub(super) fn is_closing(&self) -> bool {
        self.handle.halt.is_closing()
    }

    /// The runtime has not returned from an aborted run (`halt.rs`): nothing can run now.
    pub fn is_unresponsive(&self) -> bool {
        self.handle.halt.is_unresponsive()
    }

    /// A run is inside the runtime and not known to be stuck: what the
    /// shutdown's grace period waits for.
    pub fn is_producing(&self) -> bool {
        self.handle.in_run() && !self.is_unresponsive()
    }

    /// A run is inside the runtime: `rkllm_run` has not returned.
    pub fn in_run(&self) -> bool {
        self.handle.in_run()
    }

    /// `Ok` when the runtime thread answered a ping within `ping_timeout`,
    /// or is inside a run that progresses as fast as its limits allow (`liveness.rs`).
    pub async fn check_alive(&self, ping_timeout: Duration) -> Result<(), String> {
        let handle = &self.handle;
        handle.liveness.check_alive(&handle.model, &handle.limits, ping_timeout).await
    }

    /// The model's encoder, if it has one.
    pub fn vision(&self) -> Option<&VisionInfo> {
        self.vision.as_ref().map(Vision::info)
    }

    /// Encoder runs in progress now (`None`: the model has no encoder).
    pub fn encoder_running(&self) -> Option<usize> {
        self.vision.as_ref().map(Vision::running)
    }

    /// A prompt's images as a run's multimodal input, with its image figures
    /// (`None`: a text job). Called with the job's turn held.
    pub(super) async fn encode_images(
        &self,
        prompt: &Prompt,
        timings: ImageTimings,
        turn: &mut Option<Turn>,
    ) -> Result<Option<(Images, ImageTimings)>, String> {
        let images: Vec<_> = prompt.images().collect();
        let vision = match (&self.vision, images.is_empty()) {
            (_, true) => return Ok(None),
            (None, false) => return Err("this model has no vision encoder".into()),
            (Some(vision), false) => vision,
        };
        vision.encode(&images, timings, turn).await.map(Some)
    }

    /// Before a run with images the conversation cache does not plan: the
    /// KV cache is cleared first (`Conversations::clear_before_stateless_images`).
    pub(super) async fn clear_before_stateless_images(&self) -> Result<(), String> {
        match &self.conversations {
            Some(conversations) => conversations.clear_before_stateless_images(&self.handle).await,
            None => Ok(()),
        }
    }

    /// What a job's run should show of the prompt cache (`None`: the model has none).
    pub(super) fn prompt_cache_expect(&self, prompt: &str) -> Option<Expect> {
        self.prompt_cache.as_ref().map(|cache| cache.expect(prompt))
    }

    /// How the job holding the turn uses the caches: `None` runs it
    /// stateless (`Conversations::plan`).
    pub(super) async fn plan_kv(
        &self,
        tokens: Option<&[i32]>,
        hints: &CacheHints,
        lora: Option<&str>,
        max_new: u32,
    ) -> Option<Plan> {
        self.conversations.as_ref()?.plan(&self.handle, tokens, hints, lora, max_new).await
    }

    /// After a cached run (turn still held): `Conversations::settle`.
    pub(super) async fn settle_kv(
        &self,
        job: &str,
        plan: &Plan,
        generated: &[i32],
        perf: Option<&RuntimePerf>,
        failed: bool,
    ) -> (u32, CacheUse) {
        match &self.conversations {
            Some(c) => c.settle(&self.handle, job, plan, generated, perf, failed).await,
            None => (0, CacheUse::Miss(super::outcome::MissReason::Empty)),
        }
    }

    /// Where each job of a batch runs (`Batched::lay_out`); `None`: the run
    /// keeps no history.
    pub(super) async fn lay_out_batch(&self, members: &[Member<'_>]) -> Option<Layout> {
        self.batched.as_ref()?.lay_out(&self.handle, members).await
    }

    /// After a batched run that kept history (turn still held): `Batched::settle`.
    pub(super) async fn settle_batch(&self, kept: Kept, finish: &Finish, slot_tokens: &[Vec<i32>]) {
        if let Some(batched) = &self.batched {
            batched.settle(&self.handle, kept, finish, slot_tokens).await;
        }
    }

    /// The clients of these slots left them at these times (after their run).
    pub(super) fn slots_left(&self, left: &[(usize, Instant)]) {
        if let Some(batched) = &self.batched {
            batched.left(left);
        }
    }

    /// How the client was shown the reply of `job` (its hand-off given
    /// back, `Handoff::returned`; see [`super::kv::KvCache::seen`]).
    pub(super) fn reply_seen(&self, job: &str, shown: Shown) {
        let Shown { view, reasoned, tokens } = shown;
        if let Some(conversations) = &self.conversations {
            conversations.seen(job, view, reasoned, tokens);
        } else if let Some(batched) = &self.batched {
            batched.seen(job, view, reasoned, tokens);
        }
    }

    /// What the KV cache holds is no longer known (a run ended without its
    /// events being read, or a stateless run).
    pub(super) fn forget_kv(&self) {
        if let Some(conversations) = &self.conversations {
            conversations.forget();
        }
        if let Some(batched) = &self.batched {
            batched.forget();
        }
    }

    /// The conversations kept warm now; `None` with the cache off.
    pub fn warm_conversations(&self) -> Option<WarmConversations> {
        match (&self.conversations, &self.batched) {
            (Some(conversations), _) => Some(conversations.warm()),
            (None, Some(batched)) => Some(batched.warm()),
            (None, None) => None,
        }
    }

    /// Whether a job of these ids, run with `lora`, extends the conversation
    /// the KV cache holds: the one question the scheduler asks of the cache
    /// (`schedule.rs` lets such a job go first, its prefill mostly done).
    pub(super) fn is_warm(&self, ids: Option<&[i32]>, lora: Option<&str>) -> bool {
        let Some(ids) = ids else { return false };
        match (&self.conversations, &self.batched) {
            (Some(conversations), _) => conversations.is_warm(ids, lora),
            (None, Some(batched)) => batched.is_warm(ids, lora),
            (None, None) => false,
        }
    }

    /// Asks the runtime for the KV cache's size, kept for `/metrics`.
    pub(super) fn sample_kv_cache(&self) {
        self.handle.sample_kv_cache();
    }

    /// Whether this run leaves slots without a job without input.
    pub(super) fn short_batches(&self) -> bool {
        self.handle.short_batches()
    }

    /// What the probe at load found, or `SwitchedOff` once a short run broke
    /// them (`None` at `batch` 1): what `/health` reports now.
    pub fn short_batches_now(&self) -> Option<ShortBatches> {
        match self.info.short_batches {
            Some(ShortBatches::Accepted) if !self.short_batches() => Some(ShortBatches::SwitchedOff),
            found => found,
        }
    }

    /// A short run did not keep a slot without input as it was: fillers from
    /// now on (WARN, counted).
    pub(super) fn short_batch_broken(&self, why: &str) {
        match &self.batched {
            Some(batched) => batched.short_broken(&self.handle, why),
            None => drop(self.handle.short_batch_broken(why)),
        }
    }

    /// What the probe at load found, or `SwitchedOff` once a run's file or
    /// restore did not deliver: what `/health` reports now.
    pub fn batch_files_now(&self) -> Option<BatchFiles> {
        match &self.batched {
            Some(batched) => batched.files_now(self.info.batch_files),
            None => self.info.batch_files,
        }
    }
}
