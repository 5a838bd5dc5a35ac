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
    pub sampling: SamplingRequest,
    pub enable_thinking: bool,
}

/// Sampling fields a request set; every `None` keeps RKLLM's default.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SamplingRequest {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub repeat_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub mirostat: Option<i32>,
    pub mirostat_tau: Option<f32>,
    pub mirostat_eta: Option<f32>,
}

impl SamplingRequest {
    /// The wire names of the fields the request set, in a fixed order.
    pub fn given(&self) -> Vec<&'static str> {
        let fields: [(&'static str, bool); 9] = [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("top_k", self.top_k.is_some()),
            ("repeat_penalty", self.repeat_penalty.is_some()),
            ("frequency_penalty", self.frequency_penalty.is_some()),
            ("presence_penalty", self.presence_penalty.is_some()),
            ("mirostat", self.mirostat.is_some()),
            ("mirostat_tau", self.mirostat_tau.is_some()),
            ("mirostat_eta", self.mirostat_eta.is_some()),
        ];
        fields.into_iter().filter(|(_, set)| *set).map(|(name, _)| name).collect()
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
        let r = SamplingRequest { top_p: Some(0.5), ..Default::default() };
        let s = r.apply(d);
        assert_eq!(s.top_p, 0.5);
        assert_eq!(s.temperature, d.temperature, "OpenAI's default would be 1.0");
        assert_eq!(s.top_k, d.top_k);
        assert_eq!(r.given(), vec!["top_p"]);
    }

    #[test]
    fn temperature_zero_is_greedy() {
        let r = SamplingRequest { temperature: Some(0.0), top_k: Some(40), ..Default::default() };
        assert_eq!(r.apply(SamplingParams::RKLLM_DEFAULTS).top_k, 1);
        assert_eq!(r.given(), vec!["temperature", "top_k"]);
    }
}
