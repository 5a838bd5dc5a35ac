//! What a job's run sends to the runtime, worked out once when the job is
//! handed in (as TGI's validated parameters) and read by single and batched
//! runs alike. This is the one place that asks the ABI what a run may carry:
//! ABI 1.3 takes the token limit and sampling per run; on 1.2 the limit is
//! enforced by aborting the run at it, and sampling fields the request set
//! are reported as ignored, never pretended.

use super::job::Job;
use super::prompt::Prompt;
use rkllm_sys::{Abi, BatchInput, RunInput, RunRequest, SamplingParams};

/// One job's run, as the runtime will be asked for it.
#[derive(Debug, Clone)]
pub(super) struct RunPlan {
    /// The prompt: its text (sent unless the conversation cache sends ids),
    /// its sequence of ids and images, its images (embedded in the job's
    /// turn, `vision.rs`).
    pub prompt: Prompt,
    pub enable_thinking: bool,
    /// The reply's token limit: the request's, capped by the configured maximum.
    pub limit: u32,
    /// The limit sent with the run; `None` where the ABI takes none per run
    /// (the engine then aborts the run at `limit`).
    pub max_new_tokens: Option<i32>,
    /// The sampling sent with the run; `None`: the init values (the
    /// configured defaults), also when the request's values equal them, so
    /// that jobs which sample alike are seen to be alike (batching groups them).
    pub sampling: Option<SamplingParams>,
    /// The LoRA adapter (`None`: the base model).
    pub lora: Option<String>,
    /// Sampling fields the request set that this runtime cannot apply per run.
    pub ignored: Vec<&'static str>,
    /// The images' figures as the api measured them (count, tokens, preprocessing).
    pub image_timings: crate::metrics::ImageTimings,
}

impl RunPlan {
    /// The plan of `job` on a runtime of `abi` loaded with `defaults` and a
    /// configured limit of `max_new_tokens`.
    pub fn new(abi: Abi, defaults: SamplingParams, max_new_tokens: u32, job: Job) -> RunPlan {
        let per_run = abi.per_run_sampling();
        let limit = job.max_new_tokens.unwrap_or(max_new_tokens).min(max_new_tokens);
        let given = job.sampling.given();
        let sampling = per_run.then(|| job.sampling.apply(defaults)).filter(|s| *s != defaults);
        RunPlan {
            prompt: job.prompt,
            enable_thinking: job.enable_thinking,
            limit,
            max_new_tokens: per_run.then_some(i32::try_from(limit).unwrap_or(i32::MAX)),
            sampling,
            lora: job.lora,
            ignored: if per_run { Vec::new() } else { given },
            image_timings: job.image_timings,
        }
    }

    /// A run of `prompt` alone with the init sampling, limited to `limit`
    /// tokens (the prompt-cache file's saving run).
    pub fn plain(abi: Abi, prompt: &str, limit: u32) -> RunPlan {
        let job = Job { max_new_tokens: Some(limit), ..Job::new("", prompt) };
        RunPlan::new(abi, SamplingParams::RKLLM_DEFAULTS, limit, job)
    }

    /// The runtime cannot be told the limit: the run is aborted at it.
    pub fn aborts_at_limit(&self) -> bool {
        self.max_new_tokens.is_none()
    }

    /// A run of its own with `input` (the prompt, or the conversation
    /// cache's ids with `keep_history`).
    pub fn request(&self, input: RunInput, keep_history: bool) -> RunRequest {
        RunRequest {
            input,
            role: rkllm_sys::Role::User,
            enable_thinking: self.enable_thinking,
            keep_history,
            max_new_tokens: self.max_new_tokens,
            sampling: self.sampling,
            capture: None,
            lora: self.lora.clone(),
            save_prompt_cache: None,
            images: None,
        }
    }

    /// Its slot's input in a batched run (the run's other fields are shared).
    pub fn batch_input(&self) -> BatchInput {
        BatchInput { input: RunInput::Prompt(self.prompt.text().to_owned()), enable_thinking: self.enable_thinking }
    }

    /// Whether it may share a batched run with `other`: the runtime takes
    /// sampling and the adapter per run, not per slot.
    pub fn shares_run_with(&self, other: &RunPlan) -> bool {
        self.sampling == other.sampling && self.lora == other.lora
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SamplingOverrides;

    fn job(sampling: SamplingOverrides, max_new_tokens: Option<u32>) -> Job {
        Job { max_new_tokens, sampling, ..Job::new("j", "p") }
    }

    #[test]
    fn sampling_and_limit_are_sent_per_run_only_where_the_abi_takes_them() {
        let defaults = SamplingParams::RKLLM_DEFAULTS;
        let hot = SamplingOverrides { temperature: Some(1.5), ..Default::default() };
        let plan = RunPlan::new(Abi::V1_3, defaults, 100, job(hot, Some(500)));
        assert_eq!(plan.limit, 100, "capped by the configured maximum");
        assert_eq!(plan.max_new_tokens, Some(100));
        assert_eq!(plan.sampling.map(|s| s.temperature), Some(1.5));
        assert!(plan.ignored.is_empty() && !plan.aborts_at_limit());

        let plan = RunPlan::new(Abi::V1_2, defaults, 100, job(hot, Some(7)));
        assert_eq!((plan.limit, plan.max_new_tokens, plan.sampling), (7, None, None));
        assert_eq!(plan.ignored, vec!["temperature"]);
        assert!(plan.aborts_at_limit(), "ABI 1.2 takes no per-run limit");
    }

    #[test]
    fn values_equal_to_the_defaults_are_sent_as_the_defaults() {
        let defaults = SamplingParams::RKLLM_DEFAULTS;
        let same = SamplingOverrides { top_k: Some(defaults.top_k), ..Default::default() };
        let a = RunPlan::new(Abi::V1_3, defaults, 100, job(same, None));
        let b = RunPlan::new(Abi::V1_3, defaults, 100, job(SamplingOverrides::default(), None));
        assert_eq!(a.sampling, None);
        assert!(a.shares_run_with(&b), "they sample alike, so they may share a batched run");
        let hot = SamplingOverrides { temperature: Some(1.5), ..Default::default() };
        assert!(!a.shares_run_with(&RunPlan::new(Abi::V1_3, defaults, 100, job(hot, None))));
    }
}
