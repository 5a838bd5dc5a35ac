//! The composition root: each layer built from its own narrow settings,
//! taken from the one [`Config`]. Only this module, `server`, `doctor` and
//! `main` read the whole configuration.

use crate::config::Config;
use crate::conversation::PromptSettings;

/// What the prompter needs: where the chat template and tokenizer come from.
pub fn prompt_settings(config: &Config) -> PromptSettings {
    PromptSettings {
        chat_template: config.chat_template.clone(),
        template: config.template,
        tokenizer: config.tokenizer.clone(),
    }
}
