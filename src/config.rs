//! One `Config`, assembled as: defaults < TOML file < `RKLLMD_*` environment
//! < command-line flags, and validated once at start.
//!
//! clap reads each flag and its `RKLLMD_*` variable into [`Overrides`] (a flag
//! beats its variable); the file is read into the same shape; both are laid
//! over the defaults in that order. Unknown keys in the file are an error
//! that names them.

use crate::conversation::{ReasoningMode, TemplateFamily};
use crate::sampling::SamplingOverrides;
use clap::{Args, ValueEnum};
use rkllm_sys::{Abi, SamplingParams};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The real runtime if a library is found and loads, else the simulated one.
    Auto,
    /// The real runtime or fail.
    Rkllm,
    /// The simulated runtime.
    Sim,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    pub host: IpAddr,
    pub port: u16,
    /// A `.rkllm` file, or with the simulated backend a `sim:PROFILE?…` spec.
    pub model: Option<String>,
    pub model_id: Option<String>,
    pub lib: Option<PathBuf>,
    pub backend: Backend,
    /// Only for libraries without a version marker.
    pub runtime_abi: Option<String>,
    pub api_key: Option<String>,
    pub queue_depth: usize,
    pub max_new_tokens: u32,
    pub max_context_len: u32,
    pub sim_profile: String,
    pub cors_origins: Vec<String>,
    pub body_limit_bytes: usize,
    pub keepalive_secs: u64,
    pub first_token_timeout_secs: u64,
    pub first_token_timeout_ms_per_kib: u64,
    pub request_timeout_secs: u64,
    pub shutdown_grace_secs: u64,
    pub base_domain_id: i32,
    pub log_format: LogFormat,
    /// What becomes of `<think>…</think>` text in replies.
    pub reasoning: ReasoningMode,
    /// Sampling defaults applied at `rkllm_init` and for every field a request omits.
    pub sampling: SamplingOverrides,
    /// The model's chat template: a `.jinja` file, `tokenizer_config.json` or `chat_template.json`.
    pub chat_template: Option<PathBuf>,
    /// A built-in chat template, used when no template file is found.
    pub template: Option<TemplateFamily>,
    /// A `tokenizer.json` for exact prompt token counts.
    pub tokenizer: Option<PathBuf>,
    /// Append one JSON line per finished request here.
    pub timings_log: Option<PathBuf>,
    /// Serve `/metrics` on this address instead of the main listener.
    pub metrics_addr: Option<SocketAddr>,
    /// Where the sysfs/debugfs/procfs telemetry files are read from.
    pub telemetry_root: PathBuf,
    /// Every `*.rkllm` here (and in its direct subfolders) is a model.
    pub models_dir: Option<PathBuf>,
    /// Models loaded at the same time; the least recently used idle one makes room.
    pub max_loaded_models: usize,
    /// How long an idle model stays loaded (Ollama's form: "5m", seconds, negative = forever, 0 = unload at once).
    /// Default: 5m, or forever when only one model is registered.
    pub keep_alive: Option<String>,
    /// The loaded model files' sizes may not add up to more than this (MiB).
    pub memory_budget_mb: Option<u64>,
    /// `[[models]]` tables: models a directory cannot describe. (Not
    /// `[[model]]`: TOML cannot have `model = "…"` and `[[model]]` both.)
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelTable>,
}

/// One `[[models]]` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelTable {
    /// Default: the file's stem (or `sim-PROFILE`).
    pub id: Option<String>,
    /// A `.rkllm` file or a `sim:` spec.
    pub path: String,
    pub chat_template: Option<PathBuf>,
    pub template: Option<TemplateFamily>,
    pub tokenizer: Option<PathBuf>,
    /// Over the daemon's `[sampling]`.
    #[serde(default, deserialize_with = "strict_sampling")]
    pub sampling: Option<SamplingOverrides>,
    pub max_context_len: Option<u32>,
    pub max_new_tokens: Option<u32>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8080,
            model: None,
            model_id: None,
            lib: None,
            backend: Backend::Auto,
            runtime_abi: None,
            api_key: None,
            queue_depth: 16,
            max_new_tokens: 2048,
            max_context_len: 4096,
            sim_profile: "qwen2.5-1.5b".into(),
            cors_origins: Vec::new(),
            body_limit_bytes: 8 * 1024 * 1024,
            keepalive_secs: 10,
            first_token_timeout_secs: 120,
            // Prefill runs at ~6–15 ms per token on RK3588; a KiB of prompt is
            // ~250 tokens, so allow 4 s per KiB on top of the base.
            first_token_timeout_ms_per_kib: 4000,
            request_timeout_secs: 1800,
            shutdown_grace_secs: 30,
            base_domain_id: 0,
            log_format: LogFormat::Text,
            reasoning: ReasoningMode::Split,
            sampling: SamplingOverrides::default(),
            chat_template: None,
            template: None,
            tokenizer: None,
            timings_log: None,
            metrics_addr: None,
            telemetry_root: PathBuf::from("/"),
            models_dir: None,
            max_loaded_models: 1,
            keep_alive: None,
            memory_budget_mb: None,
            models: Vec::new(),
        }
    }
}

/// Settings given by the file, the environment or flags; `None` = not given.
/// The same struct is the TOML file's schema and clap's argument group.
#[derive(Debug, Clone, Default, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Overrides {
    /// Address to listen on.
    #[arg(long, env = "RKLLMD_HOST")]
    pub host: Option<IpAddr>,
    /// Port to listen on (0 = any free port).
    #[arg(long, env = "RKLLMD_PORT")]
    pub port: Option<u16>,
    /// Model file (.rkllm); with the simulated backend also `sim:PROFILE?key=value&…`.
    #[arg(long, env = "RKLLMD_MODEL")]
    pub model: Option<String>,
    /// Id the model is served as (default: the file's stem, or `sim-PROFILE`).
    #[arg(long, env = "RKLLMD_MODEL_ID")]
    pub model_id: Option<String>,
    /// Path of librkllmrt.so (default: RKLLM_LIB, then the usual library directories).
    #[arg(long, env = "RKLLMD_LIB")]
    pub lib: Option<PathBuf>,
    /// auto: real runtime when it loads, else simulated; rkllm: real or fail; sim: simulated.
    #[arg(long, env = "RKLLMD_BACKEND", value_enum)]
    pub backend: Option<Backend>,
    /// ABI of a library without a version marker: "1.3" or "1.2".
    #[arg(long, env = "RKLLMD_RUNTIME_ABI")]
    pub runtime_abi: Option<String>,
    /// Require `Authorization: Bearer KEY` on the API (health checks stay public).
    #[arg(long, env = "RKLLMD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Requests that may wait while one runs; more are refused with 429.
    #[arg(long, env = "RKLLMD_QUEUE_DEPTH")]
    pub queue_depth: Option<usize>,
    /// Upper limit and default for generated tokens per request.
    #[arg(long, env = "RKLLMD_MAX_NEW_TOKENS")]
    pub max_new_tokens: Option<u32>,
    /// Context length given to the runtime.
    #[arg(long, env = "RKLLMD_MAX_CONTEXT_LEN")]
    pub max_context_len: Option<u32>,
    /// Timing profile of the simulated runtime (e.g. instant, qwen2.5-1.5b).
    #[arg(long, env = "RKLLMD_SIM_PROFILE")]
    pub sim_profile: Option<String>,
    /// Origins allowed by CORS (comma-separated; "*" for any). Default: CORS off.
    #[arg(long, env = "RKLLMD_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Option<Vec<String>>,
    /// Largest accepted request body.
    #[arg(long, env = "RKLLMD_BODY_LIMIT_BYTES")]
    pub body_limit_bytes: Option<usize>,
    /// Seconds between keep-alive comments on a quiet stream.
    #[arg(long, env = "RKLLMD_KEEPALIVE_SECS")]
    pub keepalive_secs: Option<u64>,
    /// Base time allowed from admission to the first token.
    #[arg(long, env = "RKLLMD_FIRST_TOKEN_TIMEOUT_SECS")]
    pub first_token_timeout_secs: Option<u64>,
    /// Extra first-token time per KiB of prompt (prefill scales with length).
    #[arg(long, env = "RKLLMD_FIRST_TOKEN_TIMEOUT_MS_PER_KIB")]
    pub first_token_timeout_ms_per_kib: Option<u64>,
    /// Time allowed for a whole generation after admission.
    #[arg(long, env = "RKLLMD_REQUEST_TIMEOUT_SECS")]
    pub request_timeout_secs: Option<u64>,
    /// On SIGTERM/SIGINT, how long a running generation may go on before it is aborted.
    #[arg(long, env = "RKLLMD_SHUTDOWN_GRACE_SECS")]
    pub shutdown_grace_secs: Option<u64>,
    /// NPU memory domain (1 fixes "failed to malloc npu memory" on some boards).
    #[arg(long, env = "RKLLMD_BASE_DOMAIN_ID")]
    pub base_domain_id: Option<i32>,
    /// Log format.
    #[arg(long, env = "RKLLMD_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// split: thinking text goes to `reasoning_content`; inline: left in `content`; hide: dropped.
    #[arg(long, env = "RKLLMD_REASONING", value_enum)]
    pub reasoning: Option<ReasoningMode>,
    /// Sampling defaults (file only: a [sampling] table).
    #[arg(skip)]
    #[serde(default, deserialize_with = "strict_sampling")]
    pub sampling: Option<SamplingOverrides>,
    /// Chat template file: .jinja, tokenizer_config.json or chat_template.json (default: beside the model).
    #[arg(long, env = "RKLLMD_CHAT_TEMPLATE")]
    pub chat_template: Option<PathBuf>,
    /// Built-in chat template when no template file is found.
    #[arg(long, env = "RKLLMD_TEMPLATE", value_enum)]
    pub template: Option<TemplateFamily>,
    /// tokenizer.json for exact prompt token counts (default: beside the model).
    #[arg(long, env = "RKLLMD_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// Append one JSON line per finished request (timeline and timings) to this file.
    #[arg(long, env = "RKLLMD_TIMINGS_LOG")]
    pub timings_log: Option<PathBuf>,
    /// Serve /metrics on this address (e.g. 127.0.0.1:9090) instead of the main listener.
    #[arg(long, env = "RKLLMD_METRICS_ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// Root below which NPU/system telemetry files are read (for tests and containers).
    #[arg(long, env = "RKLLMD_TELEMETRY_ROOT")]
    pub telemetry_root: Option<PathBuf>,
    /// Directory of models: every *.rkllm in it (or in a subfolder) is a model, id = file stem.
    #[arg(long, env = "RKLLMD_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Models loaded at the same time (the least recently used idle one is unloaded to make room).
    #[arg(long, env = "RKLLMD_MAX_LOADED_MODELS")]
    pub max_loaded_models: Option<usize>,
    /// How long an idle model stays loaded: "5m", seconds, negative = forever, 0 = unload at once.
    #[arg(long, env = "RKLLMD_KEEP_ALIVE", allow_hyphen_values = true)]
    pub keep_alive: Option<String>,
    /// The loaded model files may add up to at most this many MiB.
    #[arg(long, env = "RKLLMD_MEMORY_BUDGET_MB")]
    pub memory_budget_mb: Option<u64>,
    /// `[[models]]` tables (file only).
    #[arg(skip)]
    pub models: Option<Vec<ModelTable>>,
}

/// The `[sampling]` table. Requests may carry fields we ignore, but a
/// config key we do not know is a mistake: name it.
fn strict_sampling<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SamplingOverrides>, D::Error> {
    use serde::de::Error;
    let table = toml::Table::deserialize(d)?;
    if let Some(key) = table.keys().find(|k| !SamplingOverrides::FIELDS.contains(&k.as_str())) {
        return Err(D::Error::custom(format!(
            "unknown key `{key}` in [sampling]; expected one of {}",
            SamplingOverrides::FIELDS.join(", ")
        )));
    }
    table.try_into().map(Some).map_err(D::Error::custom)
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl Config {
    /// Defaults, then the file (if any), then env/flags.
    pub fn assemble(file: Option<&Path>, cli: Overrides) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        if let Some(path) = file {
            let shown = path.display().to_string();
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: shown.clone(), source })?;
            let from_file: Overrides =
                toml::from_str(&text).map_err(|e| ConfigError::Parse { path: shown, message: e.to_string() })?;
            config.apply(from_file);
        }
        config.apply(cli);
        config.validate()?;
        Ok(config)
    }

    fn apply(&mut self, o: Overrides) {
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = o.$field { self.$field = v; } )* };
        }
        macro_rules! set_opt {
            ($($field:ident),*) => { $( if o.$field.is_some() { self.$field = o.$field; } )* };
        }
        set!(
            host,
            port,
            backend,
            queue_depth,
            max_new_tokens,
            max_context_len,
            sim_profile,
            cors_origins,
            body_limit_bytes,
            keepalive_secs,
            first_token_timeout_secs,
            first_token_timeout_ms_per_kib,
            request_timeout_secs,
            shutdown_grace_secs,
            base_domain_id,
            log_format,
            reasoning,
            sampling,
            telemetry_root,
            max_loaded_models,
            models
        );
        set_opt!(
            model,
            model_id,
            lib,
            runtime_abi,
            api_key,
            chat_template,
            template,
            tokenizer,
            timings_log,
            metrics_addr,
            models_dir,
            keep_alive,
            memory_budget_mb
        );
    }

    fn validate(&self) -> Result<(), ConfigError> {
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
        if self.keepalive_secs == 0 {
            return invalid("keepalive_secs must be at least 1".into());
        }
        if self.api_key.as_deref() == Some("") {
            return invalid("api_key is empty; remove it to disable authentication".into());
        }
        if self.max_loaded_models == 0 {
            return invalid("max_loaded_models must be at least 1".into());
        }
        if let Some(k) = &self.keep_alive {
            crate::registry::KeepAlive::parse(k).map_err(ConfigError::Invalid)?;
        }
        let s = self.sampling.apply(SamplingParams::RKLLM_DEFAULTS);
        if !(0.0..=2.0).contains(&s.temperature) || !(0.0..=1.0).contains(&s.top_p) || s.top_k < 0 {
            return invalid("sampling: temperature must be 0..2, top_p 0..1, top_k >= 0".into());
        }
        Ok(())
    }

    pub fn runtime_abi(&self) -> Option<Abi> {
        self.runtime_abi.as_deref().and_then(|a| a.parse().ok())
    }

    /// The effective configuration as TOML, API key masked.
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        if shown.api_key.is_some() {
            shown.api_key = Some("<set>".into());
        }
        toml::to_string_pretty(&shown).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        f
    }

    #[test]
    fn file_then_flags_in_that_order() {
        let f = write("port = 9000\nqueue_depth = 3\n[sampling]\ntop_k = 20\n");
        let cli = Overrides { port: Some(9100), ..Default::default() };
        let c = Config::assemble(Some(f.path()), cli).unwrap();
        assert_eq!(c.port, 9100, "flag beats file");
        assert_eq!(c.queue_depth, 3, "file beats default");
        assert_eq!(c.sampling.apply(SamplingParams::RKLLM_DEFAULTS).top_k, 20);
        assert_eq!(c.sampling.apply(SamplingParams::RKLLM_DEFAULTS).top_p, SamplingParams::RKLLM_DEFAULTS.top_p);
        assert_eq!(c.host, IpAddr::from([127, 0, 0, 1]));
    }

    #[test]
    fn unknown_keys_are_named() {
        let f = write("prot = 9000\n");
        let err = Config::assemble(Some(f.path()), Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("prot"), "{err}");
        let f = write("[sampling]\ntopk = 1\n");
        let err = Config::assemble(Some(f.path()), Overrides::default()).unwrap_err().to_string();
        assert!(err.contains("topk"), "{err}");
    }

    #[test]
    fn bad_values_are_refused() {
        for (text, needle) in [
            ("runtime_abi = \"1.1\"\n", "1.1"),
            ("max_new_tokens = 0\n", "max_new_tokens"),
            ("max_new_tokens = 9000\n", "exceeds"),
            ("api_key = \"\"\n", "api_key"),
        ] {
            let f = write(text);
            let err = Config::assemble(Some(f.path()), Overrides::default()).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
