//! The chat templates shipped with the daemon (config `template`), written
//! after each family's published Hugging Face template and rendering the
//! same text (tests/templates.rs holds the published ones as fixtures).

use super::template::TemplateSource;

/// A built-in template family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TemplateFamily {
    /// Qwen2.5-Instruct's ChatML (Hermes-style tools).
    Chatml,
    /// Qwen3 (ChatML, tools, `<think>` handling, `enable_thinking`).
    Qwen3,
    /// Llama 3.1/3.2 Instruct (JSON tool calls, `ipython` results).
    Llama3,
    /// Gemma 2/3 (system text joins the first user turn).
    Gemma,
    /// Phi-3/3.5 mini.
    Phi3,
    /// DeepSeek-R1 distills (the reply starts inside `<think>`).
    DeepseekR1,
}

impl TemplateFamily {
    pub const ALL: [TemplateFamily; 6] = [
        TemplateFamily::Chatml,
        TemplateFamily::Qwen3,
        TemplateFamily::Llama3,
        TemplateFamily::Gemma,
        TemplateFamily::Phi3,
        TemplateFamily::DeepseekR1,
    ];

    /// The name in the config (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            TemplateFamily::Chatml => "chatml",
            TemplateFamily::Qwen3 => "qwen3",
            TemplateFamily::Llama3 => "llama3",
            TemplateFamily::Gemma => "gemma",
            TemplateFamily::Phi3 => "phi3",
            TemplateFamily::DeepseekR1 => "deepseek-r1",
        }
    }

    /// The template text and the family's BOS/EOS tokens.
    pub fn source(self) -> TemplateSource {
        let (text, bos, eos) = match self {
            TemplateFamily::Chatml => (include_str!("templates/chatml.jinja"), "", "<|im_end|>"),
            TemplateFamily::Qwen3 => (include_str!("templates/qwen3.jinja"), "", "<|im_end|>"),
            TemplateFamily::Llama3 => (include_str!("templates/llama3.jinja"), "<|begin_of_text|>", "<|eot_id|>"),
            TemplateFamily::Gemma => (include_str!("templates/gemma.jinja"), "<bos>", "<eos>"),
            TemplateFamily::Phi3 => (include_str!("templates/phi3.jinja"), "<s>", "<|endoftext|>"),
            TemplateFamily::DeepseekR1 => {
                (include_str!("templates/deepseek-r1.jinja"), "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>")
            }
        };
        TemplateSource {
            origin: format!("built-in template `{}`", self.name()),
            default: text.to_owned(),
            tool_use: None,
            bos_token: bos.to_owned(),
            eos_token: eos.to_owned(),
        }
    }
}

impl std::str::FromStr for TemplateFamily {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        super::by_name(&Self::ALL, Self::name, "template", s)
    }
}

#[cfg(test)]
#[path = "builtin_tests.rs"]
mod tests;
