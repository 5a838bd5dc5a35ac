//! The checks a configuration passes before anything starts.

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
        if self.max_context_len == 0 || self.max_context_len > i32::MAX as u32 {
            return invalid("max_context_len must be between 1 and 2^31-1".into());
        }
        if self.max_new_tokens > self.max_context_len {
            return invalid(format!(
                "max_new_tokens ({}) exceeds max_context_len ({})",
                self.max_new_tokens, self.max_context_len
            ));
        }
        if !(1..=8).contains(&self.batch) {
            return invalid(format!("batch must be between 1 and 8, got {}", self.batch));
        }
        if self.keepalive_secs == 0 {
            return invalid("keepalive_secs must be at least 1".into());
        }
        if self.header_read_timeout_secs == 0 || self.body_idle_timeout_secs == 0 || self.max_connections == 0 {
            return invalid(
                "header_read_timeout_secs, body_idle_timeout_secs and max_connections must be at least 1".into(),
            );
        }
        if self.max_loaded_models == 0 {
            return invalid("max_loaded_models must be at least 1".into());
        }
        if let Some(k) = &self.keep_alive {
            crate::registry::KeepAlive::parse(k).map_err(ConfigError::Invalid)?;
        }
        if self.api_key.as_deref() == Some("") {
            return invalid("api_key is empty; remove it to disable authentication".into());
        }
        // The ranges a request's sampling fields are held to.
        self.sampling.check().map_err(|e| ConfigError::Invalid(format!("[sampling]: {e}")))
    }
}
