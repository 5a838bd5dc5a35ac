//! The checks a configuration passes before anything starts.

use super::adapters::check;
use super::{Config, ConfigError};
use rkllm_sys::Abi;

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |m: String| Err(ConfigError::Invalid(m));
        if let Some(abi) = &self.runtime_abi {
            abi.parse::<Abi>().map_err(ConfigError::Invalid)?;
        }
        if self.max_new_tokens == 0 {
            return invalid("max_new_tokens must be at least 1".into());
        }
        if let Some(context) = self.max_context_len {
            if context == 0 || context > i32::MAX as u32 {
                return invalid("max_context_len must be between 1 and 2^31-1".into());
            }
            if self.max_new_tokens > context {
                return invalid(format!(
                    "max_new_tokens ({}) exceeds max_context_len ({context})",
                    self.max_new_tokens
                ));
            }
        }
        if self.keepalive_secs == 0 || self.write_timeout_secs == 0 {
            return invalid("keepalive_secs and write_timeout_secs must be at least 1".into());
        }
        if self.header_read_timeout_secs == 0
            || self.body_idle_timeout_secs == 0
            || self.body_timeout_secs == 0
            || self.max_connections == 0
            || !(1..=100).contains(&self.client_connection_share)
        {
            return invalid(
                "header_read_timeout_secs, body_idle_timeout_secs, body_timeout_secs and max_connections must be at least 1, client_connection_share from 1 to 100"
                    .into(),
            );
        }
        if !matches!(self.vision_tags.len(), 0 | 3) {
            return invalid(format!("vision_tags needs 3 tags (START, END, CONTENT), not {}", self.vision_tags.len()));
        }
        if self.max_loaded_models == 0 {
            return invalid("max_loaded_models must be at least 1".into());
        }
        if let Some(k) = &self.keep_alive {
            crate::keep_alive::KeepAlive::parse(k).map_err(ConfigError::Invalid)?;
        }
        if let Some(name) = &self.instance {
            // It is sent as a header value and logged as is: visible ASCII, no spaces.
            if name.is_empty() || name.len() > 253 || !name.bytes().all(|b| b.is_ascii_graphic()) {
                return invalid(format!("instance {name:?} must be 1-253 visible ASCII characters without spaces"));
            }
        }
        if self.allow_pull && self.models_dir.is_none() {
            return invalid("allow_pull needs models_dir: the folder pulled models go into".into());
        }
        if self.api_key.as_deref() == Some("") {
            return invalid("api_key is empty; remove it to disable authentication".into());
        }
        if self.ollama_api_key.as_deref() == Some("") {
            return invalid("ollama_api_key is empty; remove it to serve ollama_listen without a key".into());
        }
        if self.ollama_api_key.is_some() && self.ollama_listen.is_none() {
            return invalid("ollama_api_key is the key of ollama_listen, which is not set".into());
        }
        self.check_adapters().map_err(ConfigError::Invalid)?;
        // The ranges a request's sampling fields are held to.
        self.sampling.check().map_err(|e| ConfigError::Invalid(format!("[sampling]: {e}")))
    }
}

impl Config {
    /// LoRA adapters and prompt caches: given where a model takes them, and consistent.
    fn check_adapters(&self) -> Result<(), String> {
        let top_level = !self.lora.is_empty()
            || self.prompt_cache.is_some()
            || self.prompt_cache_prefix.is_some()
            || self.prompt_cache_prefix_file.is_some()
            || self.vision_encoder.is_some();
        if top_level && self.model.is_none() && (self.models_dir.is_some() || !self.models.is_empty()) {
            return Err(
                "lora, prompt_cache* and vision_encoder belong to --model; for a [[models]] table give them in the table"
                    .into()
            );
        }
        let p = self.prompt_cache_prefix.as_ref();
        check("--model", &self.lora, self.prompt_cache.as_ref(), p, self.prompt_cache_prefix_file.as_ref())?;
        let mut caches = usize::from(self.prompt_cache.is_some());
        for t in &self.models {
            let name = format!("[[models]] {}", t.id.as_deref().unwrap_or(&t.path));
            let p = t.prompt_cache_prefix.as_ref();
            check(&name, &t.lora, t.prompt_cache.as_ref(), p, t.prompt_cache_prefix_file.as_ref())?;
            caches += usize::from(t.prompt_cache.is_some());
        }
        if caches > 0 && self.batch.configured_above_one() {
            // Whether and how a loaded prompt cache serves the slots of a batch is
            // undocumented (`auto` gives such a model 1 slot).
            return Err("prompt_cache needs batch = 1 (or auto)".into());
        }
        Ok(())
    }
}
