//! What the API hands the engine: a prompt, limits and sampling choices.

use rkllm_sys::SamplingParams;
use std::time::Instant;

/// One generation request, already validated by the API layer.
#[derive(Debug, Clone)]
pub struct Job {
    /// The request id (for the request log).
    pub id: String,
    /// The fully rendered prompt (the runtime's own template is disabled).
    pub prompt: String,
    pub received: Instant,
    /// `None` = the configured maximum.
    pub max_new_tokens: Option<u32>,
    pub sampling: SamplingOverrides,
    pub enable_thinking: bool,
    /// The prompt's length by the model's tokenizer, when one is configured.
    pub prompt_tokens: Option<u32>,
}

/// Sampling fields laid over defaults: a request's fields (over the
/// configured defaults) or the config's `[sampling]` table (over RKLLM's).
/// Every `None` keeps the value underneath — never OpenAI's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct SamplingOverrides {
    /// 0..2; 0 = greedy.
    pub temperature: Option<f32>,
    /// 0..1
    pub top_p: Option<f32>,
    /// Extension: ≥ 0.
    pub top_k: Option<i32>,
    /// Extension: 0..10.
    pub repeat_penalty: Option<f32>,
    /// −2..2
    pub frequency_penalty: Option<f32>,
    /// −2..2
    pub presence_penalty: Option<f32>,
    /// Extension: 0, 1 or 2.
    pub mirostat: Option<i32>,
    /// Extension: 0..100.
    pub mirostat_tau: Option<f32>,
    /// Extension: 0..1.
    pub mirostat_eta: Option<f32>,
}

impl SamplingOverrides {
    /// The field names, in declaration order.
    pub const FIELDS: [&'static str; 9] = [
        "temperature",
        "top_p",
        "top_k",
        "repeat_penalty",
        "frequency_penalty",
        "presence_penalty",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
    ];

    /// The names of the fields that are set, in declaration order.
    pub fn given(&self) -> Vec<&'static str> {
        let set = [
            self.temperature.is_some(),
            self.top_p.is_some(),
            self.top_k.is_some(),
            self.repeat_penalty.is_some(),
            self.frequency_penalty.is_some(),
            self.presence_penalty.is_some(),
            self.mirostat.is_some(),
            self.mirostat_tau.is_some(),
            self.mirostat_eta.is_some(),
        ];
        Self::FIELDS.into_iter().zip(set).filter(|(_, set)| *set).map(|(name, _)| name).collect()
    }

    /// The defaults with this request's fields laid over them. Temperature 0
    /// means greedy decoding, which RKLLM expresses as `top_k = 1`.
    pub fn apply(&self, defaults: SamplingParams) -> SamplingParams {
        let mut s = defaults;
        macro_rules! over {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { s.$f = v; } )* };
        }
        over!(
            temperature,
            top_p,
            top_k,
            repeat_penalty,
            frequency_penalty,
            presence_penalty,
            mirostat,
            mirostat_tau,
            mirostat_eta
        );
        if self.temperature == Some(0.0) {
            s.top_k = 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omitted_fields_keep_rkllm_defaults_not_openai_ones() {
        let d = SamplingParams::RKLLM_DEFAULTS;
        let r = SamplingOverrides { top_p: Some(0.5), ..Default::default() };
        let s = r.apply(d);
        assert_eq!(s.top_p, 0.5);
        assert_eq!(s.temperature, d.temperature, "OpenAI's default would be 1.0");
        assert_eq!(s.top_k, d.top_k);
        assert_eq!(r.given(), vec!["top_p"]);
    }

    #[test]
    fn temperature_zero_is_greedy() {
        let r = SamplingOverrides { temperature: Some(0.0), top_k: Some(40), ..Default::default() };
        assert_eq!(r.apply(SamplingParams::RKLLM_DEFAULTS).top_k, 1);
        assert_eq!(r.given(), vec!["temperature", "top_k"]);
    }
}
