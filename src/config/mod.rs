//! One `Config`, assembled as: defaults < TOML file < `RKLLMD_*` environment
//! < command-line flags, and validated once at start.
//!
//! Each setting is declared once, as a field of [`Config`]: its doc line is
//! the `--help` text, its `#[arg]` gives the flag (the field name in kebab
//! case), the `RKLLMD_*` variable and the default, and the field name is the
//! TOML key. `layers.rs` lays the sources over each other; `validate.rs`
//! checks the result.

mod adapters;
mod batch;
mod layers;
mod validate;

pub use adapters::LoraArg;
pub use batch::{BatchSetting, MAX_BATCH};
pub use layers::{ConfigArgs, ConfigError};

use crate::conversation::{ReasoningMode, TemplateFamily, ToolsOverflow};
use crate::embed::{Pooling, RerankFormat};
use crate::sampling::SamplingOverrides;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::ValueEnum;
use rkllm_sys::Abi;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::str::FromStr;

/// The longest a batch gathers for the clients of the last run when their
/// measured return time asks for more than `batch_gather_ms`
/// (`engine/returns.rs`): a Python client is back 12–29 ms after its reply,
/// one on a network or a board's slower CPU later; a client slower than
/// this is not waited for (unless `batch_gather_ms` says so).
pub const BATCH_GATHER_CEILING_MS: u64 = 250;

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

/// How a thinking model's earlier reasoning stays in a cached conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ValueEnum, Default)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningHistory {
    /// The KV cache keeps it as generated; a follow-up reuses the cache.
    #[default]
    Kept,
    /// As the template renders history (Qwen3: dropped); a follow-up after a
    /// reply that reasoned prefills again.
    Template,
}

/// The effective configuration, and the declaration of every setting.
///
/// `Default` is each field's `default_value`; the file's schema is this
/// struct (unknown keys refused, missing ones defaulted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "RKLLMD_HOST", default_value = "127.0.0.1", value_parser = parse_host)]
    #[serde(deserialize_with = "host_from_toml")]
    pub host: IpAddr,
    /// Port to listen on (0 = any free port).
    #[arg(long, env = "RKLLMD_PORT", default_value_t = 8080)]
    pub port: u16,
    /// Model file (.rkllm); with the simulated backend also `sim:PROFILE?key=value&…`.
    #[arg(long, env = "RKLLMD_MODEL")]
    pub model: Option<String>,
    /// Id the model is served as (default: the file's stem, or `sim-PROFILE`).
    #[arg(long, env = "RKLLMD_MODEL_ID")]
    pub model_id: Option<String>,
    /// Path of librkllmrt.so (default: RKLLM_LIB, then the usual library directories).
    #[arg(long, env = "RKLLMD_LIB")]
    pub lib: Option<PathBuf>,
    /// Which runtime serves the model.
    #[arg(long, env = "RKLLMD_BACKEND", value_enum, default_value = "auto")]
    pub backend: Backend,
    /// ABI of a library without a version marker, named as its runtime (e.g. "1.3" for 1.3.x).
    #[arg(long, env = "RKLLMD_RUNTIME_ABI")]
    pub runtime_abi: Option<String>,
    /// Require the key (`Authorization: Bearer KEY` or `x-api-key: KEY`) on the API; /health, /metrics and /docs stay public.
    #[arg(long, env = "RKLLMD_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Requests that may wait while one runs; more are refused with 429.
    #[arg(long, env = "RKLLMD_QUEUE_DEPTH", default_value_t = 16)]
    pub queue_depth: usize,
    /// Sequences per NPU run (n_batch): `auto` opens as many slots as the board's free memory holds for the model's context (at most 8) and keeps them only where the runtime takes a run with slots left without input (else 1); 1-8: that many, queued requests with the same sampling sharing one batched run.
    #[arg(long, env = "RKLLMD_BATCH", default_value = "auto", value_parser = BatchSetting::from_str)]
    pub batch: BatchSetting,
    /// With batch > 1: milliseconds a batch waits at least, after a run ends, for that run's clients to send again before it starts with empty slots; longer (up to 250) when they were measured to take longer to come back. A lone client never waits.
    #[arg(long, env = "RKLLMD_BATCH_GATHER_MS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=1000))]
    pub batch_gather_ms: u64,
    /// With batch > 1: probe at load whether the runtime takes a batched run with slots left without input (then a lone request runs without fillers); off: fillers, no probe — for a runtime the probe's empty input would upset.
    #[arg(long, env = "RKLLMD_BATCH_SHORT_PROBE", default_value_t = true, action = clap::ArgAction::Set)]
    pub batch_short_probe: bool,
    /// Times a waiting request may be passed over for one whose conversation is warm in the KV cache before it goes first (0: strict arrival order).
    #[arg(long, env = "RKLLMD_QUEUE_MAX_PASSED_OVER", default_value_t = 4)]
    pub queue_max_passed_over: u32,
    /// Upper limit and default for generated tokens per request.
    #[arg(long, env = "RKLLMD_MAX_NEW_TOKENS", default_value_t = 2048)]
    pub max_new_tokens: u32,
    /// Context length given to the runtime. Default: the context the model was converted for (the runtime's max_context_limit at load; 4096 when it does not say).
    #[arg(long, env = "RKLLMD_MAX_CONTEXT_LEN")]
    pub max_context_len: Option<u32>,
    /// Timing profile of the simulated runtime (e.g. instant, qwen2.5-1.5b).
    #[arg(long, env = "RKLLMD_SIM_PROFILE", default_value = "qwen2.5-1.5b")]
    pub sim_profile: String,
    /// Origins allowed by CORS (comma-separated; "*" for any). Default: CORS off.
    #[arg(long, env = "RKLLMD_CORS_ORIGINS", value_delimiter = ',')]
    pub cors_origins: Vec<String>,
    /// Host names the server answers to besides IP addresses, localhost, .local/.internal names and the machine's name (comma-separated; "*" for any).
    #[arg(long, env = "RKLLMD_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Largest accepted request body, in bytes.
    #[arg(long, env = "RKLLMD_BODY_LIMIT_BYTES", default_value_t = 8 * 1024 * 1024)]
    pub body_limit_bytes: usize,
    /// Seconds a client has to send a request's head; also ends idle kept-alive connections.
    #[arg(long, env = "RKLLMD_HEADER_READ_TIMEOUT_SECS", default_value_t = 20)]
    pub header_read_timeout_secs: u64,
    /// Seconds a request body may go without data while it is read (then 408).
    #[arg(long, env = "RKLLMD_BODY_IDLE_TIMEOUT_SECS", default_value_t = 20)]
    pub body_idle_timeout_secs: u64,
    /// Seconds a request body may take in all, however steadily it arrives (then 408).
    #[arg(long, env = "RKLLMD_BODY_TIMEOUT_SECS", default_value_t = 60)]
    pub body_timeout_secs: u64,
    /// Bytes per second a request body must arrive at on average, judged after its first 5 s (then 408; 0: no minimum).
    #[arg(long, env = "RKLLMD_BODY_MIN_RATE_BYTES_PER_SEC", default_value_t = 256)]
    pub body_min_rate_bytes_per_sec: u64,
    /// Open connections at most; one more gets 503 and is closed.
    #[arg(long, env = "RKLLMD_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
    /// Percent of max_connections one client address may hold open (100: any number); behind a reverse proxy every client is the proxy's address.
    #[arg(long, env = "RKLLMD_CLIENT_CONNECTION_SHARE", default_value_t = 50)]
    pub client_connection_share: u8,
    /// Seconds a streamed response may wait for its client to read before the client is dropped.
    #[arg(long, env = "RKLLMD_WRITE_TIMEOUT_SECS", default_value_t = 30)]
    pub write_timeout_secs: u64,
    /// Seconds between keep-alive comments on a quiet stream.
    #[arg(long, env = "RKLLMD_KEEPALIVE_SECS", default_value_t = 10)]
    pub keepalive_secs: u64,
    /// Seconds a queued stream's response head waits for its run to start, so that a request that never ran still gets a status a proxy can retry elsewhere (0: the head goes out at once).
    #[arg(long, env = "RKLLMD_HEAD_WAIT_SECS", default_value_t = 30)]
    pub head_wait_secs: u64,
    /// Base time allowed from admission to the first token.
    #[arg(long, env = "RKLLMD_FIRST_TOKEN_TIMEOUT_SECS", default_value_t = 120)]
    pub first_token_timeout_secs: u64,
    /// Extra first-token time per KiB of prompt (prefill scales with length).
    // Prefill runs at ~6–15 ms per token on RK3588; a KiB of prompt is ~250
    // tokens, so allow 4 s per KiB on top of the base.
    #[arg(long, env = "RKLLMD_FIRST_TOKEN_TIMEOUT_MS_PER_KIB", default_value_t = 4000)]
    pub first_token_timeout_ms_per_kib: u64,
    /// Time allowed for a whole generation after admission.
    #[arg(long, env = "RKLLMD_REQUEST_TIMEOUT_SECS", default_value_t = 1800)]
    pub request_timeout_secs: u64,
    /// On SIGTERM/SIGINT, how long a running generation may go on before it is aborted.
    #[arg(long, env = "RKLLMD_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,
    /// NPU memory domain (1 fixes "failed to malloc npu memory" on some boards).
    #[arg(long, env = "RKLLMD_BASE_DOMAIN_ID", default_value_t = 0)]
    pub base_domain_id: i32,
    /// Log format.
    #[arg(long, env = "RKLLMD_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// split: thinking text goes to `reasoning_content`; inline: left in `content`; hide: dropped.
    #[arg(long, env = "RKLLMD_REASONING", default_value = "split",
          value_parser = named::<ReasoningMode>(ReasoningMode::ALL.map(ReasoningMode::name)))]
    pub reasoning: ReasoningMode,
    /// A chat whose tools do not fit the context: select sends the most relevant tools that fit (and says which were dropped); refuse answers 400.
    #[arg(long, env = "RKLLMD_TOOLS_OVERFLOW", default_value = "select",
          value_parser = named::<ToolsOverflow>(ToolsOverflow::ALL.map(ToolsOverflow::name)))]
    pub tools_overflow: ToolsOverflow,
    /// on: a follow-up turn prefills only what is new (needs the model's chat template and tokenizer.json); off: every request prefills its whole prompt.
    #[arg(long, env = "RKLLMD_CONVERSATION_CACHE", default_value = "on", action = clap::ArgAction::Set,
          value_parser = on_off())]
    pub conversation_cache: bool,
    /// kept: a cached conversation keeps a thinking model's earlier reasoning in its context as generated, so a follow-up that resends the reply without it reuses the cache; template: history as the chat template renders it (Qwen3 drops earlier reasoning), a follow-up after a reply that reasoned prefills again.
    #[arg(long, env = "RKLLMD_REASONING_HISTORY", value_enum, default_value = "kept")]
    pub reasoning_history: ReasoningHistory,
    /// Directory (tmpfs) where conversations the KV cache no longer holds are kept as prompt-cache files, one subdirectory per daemon and model.
    #[arg(long, env = "RKLLMD_CONVERSATION_CACHE_DIR", default_value = "/dev/shm")]
    pub conversation_cache_dir: PathBuf,
    /// The saved conversations' files may add up to this many MiB per model (0: none are saved).
    #[arg(long, env = "RKLLMD_CONVERSATION_CACHE_MB", default_value_t = 512)]
    pub conversation_cache_mb: u64,
    /// At most this many conversations are saved per model (0: none).
    #[arg(long, env = "RKLLMD_CONVERSATION_CACHE_COUNT", default_value_t = 8)]
    pub conversation_cache_count: usize,
    /// A slower directory (NVMe, eMMC) the saved conversations the RAM directory has no room for move to, one subdirectory per daemon and model (unset: they are dropped).
    #[arg(long, env = "RKLLMD_CONVERSATION_CACHE_DISK_DIR")]
    pub conversation_cache_disk_dir: Option<PathBuf>,
    /// The disk directory's files may add up to this many MiB per model; past it the least recently used go.
    #[arg(long, env = "RKLLMD_CONVERSATION_CACHE_DISK_MB", default_value_t = 4096)]
    pub conversation_cache_disk_mb: u64,
    /// The system messages and tools a conversation's first turn starts with (an agent's system prompt and tools), when they take at least this many tokens, are kept as a prompt-cache file of their own, so a new conversation that starts with them prefills only the rest (0: off).
    #[arg(long, env = "RKLLMD_SHARED_PREFIX_MIN_TOKENS", default_value_t = 512)]
    pub shared_prefix_min_tokens: usize,
    /// The shared prefixes' files may add up to this many MiB per model, in the conversation cache's RAM directory; past it the least recently used go (0: none are kept).
    #[arg(long, env = "RKLLMD_SHARED_PREFIX_MB", default_value_t = 1024)]
    pub shared_prefix_mb: u64,
    /// How /v1/embeddings pools the hidden states: last (the last token's; Qwen3-Embedding) or mean.
    #[arg(long, env = "RKLLMD_EMBEDDING_POOLING", value_enum, default_value = "last")]
    pub embedding_pooling: Pooling,
    /// The reranker prompt /v1/rerank sends (qwen3: Qwen3-Reranker's yes/no question; needs tokenizer.json).
    #[arg(long, env = "RKLLMD_RERANK_FORMAT", value_enum, default_value = "qwen3")]
    pub rerank_format: RerankFormat,
    /// Sampling defaults applied at `rkllm_init` and for every field a request omits
    /// (file only: a [sampling] table).
    #[arg(skip)]
    #[serde(deserialize_with = "layers::strict_sampling")]
    pub sampling: SamplingOverrides,
    /// Chat template file: .jinja, tokenizer_config.json or chat_template.json (default: beside the model).
    #[arg(long, env = "RKLLMD_CHAT_TEMPLATE")]
    pub chat_template: Option<PathBuf>,
    /// Built-in chat template when no template file is found.
    #[arg(long, env = "RKLLMD_TEMPLATE",
          value_parser = named::<TemplateFamily>(TemplateFamily::ALL.map(TemplateFamily::name)))]
    pub template: Option<TemplateFamily>,
    /// tokenizer.json for exact prompt token counts (default: beside the model).
    #[arg(long, env = "RKLLMD_TOKENIZER")]
    pub tokenizer: Option<PathBuf>,
    /// Append one JSON line per finished request (timeline and timings) to this file.
    #[arg(long, env = "RKLLMD_TIMINGS_LOG")]
    pub timings_log: Option<PathBuf>,
    /// Serve /metrics on this address (e.g. 127.0.0.1:9090) instead of the main listener.
    #[arg(long, env = "RKLLMD_METRICS_ADDR", value_parser = parse_socket)]
    #[serde(deserialize_with = "socket_from_toml")]
    pub metrics_addr: Option<SocketAddr>,
    /// A second address serving Ollama's clients (e.g. 127.0.0.1:11434, Ollama's port): the Ollama routes, /v1/chat/completions and /v1/models, under ollama_api_key instead of api_key (default: off).
    #[arg(long, env = "RKLLMD_OLLAMA_LISTEN", value_parser = parse_socket)]
    #[serde(deserialize_with = "socket_from_toml")]
    pub ollama_listen: Option<SocketAddr>,
    /// The key ollama_listen requires (`Authorization: Bearer KEY`); unset (the default): none, for clients that cannot send one (VS Code Copilot, Home Assistant).
    #[arg(long, env = "RKLLMD_OLLAMA_API_KEY", hide_env_values = true)]
    pub ollama_api_key: Option<String>,
    /// This daemon's name in the X-Rkllmd-Instance response header, the request log and `timings.instance` (default: the host name).
    #[arg(long, env = "RKLLMD_INSTANCE")]
    pub instance: Option<String>,
    /// Root below which NPU/system telemetry files are read (for tests and containers).
    #[arg(long, env = "RKLLMD_TELEMETRY_ROOT", default_value = "/")]
    pub telemetry_root: PathBuf,
    /// Directory of models: every *.rkllm in it (or in a subfolder) is a model, id = file stem.
    #[arg(long, env = "RKLLMD_MODELS_DIR")]
    pub models_dir: Option<PathBuf>,
    /// Folder of Swagger UI's files for /docs. Default: the package's (/usr/share/rkllmd/swagger-ui), else ../share/rkllmd/swagger-ui beside the executable, else the source tree it was built from.
    #[arg(long, env = "RKLLMD_DOCS_DIR")]
    pub docs_dir: Option<PathBuf>,
    /// on: Ollama's /api/pull downloads converted models from Hugging Face into models_dir (anyone who may call the API can then fill its disk); off: only `rkllmd pull` on the machine does.
    #[arg(long, env = "RKLLMD_ALLOW_PULL", default_value = "off", action = clap::ArgAction::Set,
          value_parser = on_off())]
    pub allow_pull: bool,
    /// Models loaded at the same time (the least recently used idle one is unloaded to make room).
    #[arg(long, env = "RKLLMD_MAX_LOADED_MODELS", default_value_t = 1)]
    pub max_loaded_models: usize,
    /// How long an idle model stays loaded: "5m", seconds, negative = forever, 0 = unload at once (default: 5m, or forever with one model).
    #[arg(long, env = "RKLLMD_KEEP_ALIVE", allow_hyphen_values = true)]
    pub keep_alive: Option<String>,
    /// Seconds a request for a model that needs the room of busy models waits before they yield: they finish what they hold, take no new request, and are unloaded to make room.
    #[arg(long, env = "RKLLMD_MAX_SWITCH_WAIT_SECS", default_value_t = 10)]
    pub max_switch_wait_secs: u64,
    /// The loaded model files may add up to at most this many MiB.
    #[arg(long, env = "RKLLMD_MEMORY_BUDGET_MB")]
    pub memory_budget_mb: Option<u64>,
    /// LoRA adapter of `--model`, served as model id `MODEL:NAME`: NAME=PATH[:SCALE] (scale default 1; repeatable; variable: comma-separated).
    #[arg(long, env = "RKLLMD_LORA", value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lora: Vec<LoraArg>,
    /// Prompt-cache file of `--model`: made at load from the prompt-cache prefix when missing or stale, then loaded, so a prompt that starts with the prefix skips its prefill.
    #[arg(long, env = "RKLLMD_PROMPT_CACHE")]
    pub prompt_cache: Option<PathBuf>,
    /// The text every prompt that uses the prompt cache starts with (e.g. the rendered system prompt).
    #[arg(long, env = "RKLLMD_PROMPT_CACHE_PREFIX")]
    pub prompt_cache_prefix: Option<String>,
    /// A file holding the prompt-cache prefix (instead of prompt_cache_prefix).
    #[arg(long, env = "RKLLMD_PROMPT_CACHE_PREFIX_FILE")]
    pub prompt_cache_prefix_file: Option<PathBuf>,
    /// Vision encoder (.rknn) of `--model`: the model then takes images (a `sim:` vision profile has its own).
    #[arg(long, env = "RKLLMD_VISION_ENCODER")]
    pub vision_encoder: Option<String>,
    /// The image tags of `--model`'s family, START END CONTENT (e.g. `<|vision_start|> <|vision_end|> <|image_pad|>`), over the table chosen by the file's name.
    #[arg(long, env = "RKLLMD_VISION_TAGS", num_args = 3, value_names = ["START", "END", "CONTENT"], value_delimiter = ',')]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vision_tags: Vec<String>,
    /// Path of librknnrt.so for vision encoders (default: LD_LIBRARY_PATH, then the usual library directories).
    #[arg(long, env = "RKLLMD_VISION_LIB")]
    pub vision_lib: Option<PathBuf>,
    /// Images one request may carry; more are refused (400 too_many_images).
    #[arg(long, env = "RKLLMD_MAX_IMAGES", default_value_t = 8)]
    pub max_images: usize,
    /// Largest image, in bytes after base64 decoding (400 image_too_large).
    #[arg(long, env = "RKLLMD_MAX_IMAGE_BYTES", default_value_t = 8_388_608)]
    pub max_image_bytes: usize,
    /// Largest image in pixels (width × height, read before decoding; 400 image_too_large).
    #[arg(long, env = "RKLLMD_MAX_IMAGE_PIXELS", default_value_t = 50_000_000)]
    pub max_image_pixels: u64,
    /// Hosts (names or addresses) whose http and https image URLs are fetched; `*`: any host with only public addresses. Empty (the default): image URLs are refused, only data URLs are taken.
    #[arg(long, env = "RKLLMD_IMAGE_URL_HOSTS", value_delimiter = ',')]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_url_hosts: Vec<String>,
    /// How long fetching one image URL may take (400 when it takes longer).
    #[arg(long, env = "RKLLMD_IMAGE_URL_TIMEOUT_MS", default_value_t = 10_000)]
    pub image_url_timeout_ms: u64,
    /// Image embeddings kept per vision model, least recently used dropped first.
    #[arg(long, env = "RKLLMD_VISION_CACHE_ENTRIES", default_value_t = 32)]
    pub vision_cache_entries: usize,
    /// `[[models]]` tables: models a directory cannot describe (file only). Not `[[model]]`:
    /// TOML cannot hold `model = "…"` and `[[model]]` both.
    #[arg(skip)]
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
    #[serde(default, deserialize_with = "layers::strict_sampling")]
    pub sampling: SamplingOverrides,
    pub max_context_len: Option<u32>,
    pub max_new_tokens: Option<u32>,
    /// LoRA adapters, each `"NAME=PATH[:SCALE]"`, served as `ID:NAME`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora: Vec<LoraArg>,
    pub prompt_cache: Option<PathBuf>,
    pub prompt_cache_prefix: Option<String>,
    pub prompt_cache_prefix_file: Option<PathBuf>,
    /// The model's vision encoder (`.rknn`).
    pub vision_encoder: Option<String>,
    /// `[START, END, CONTENT]`: the image tags, over the family table.
    pub vision_tags: Option<[String; 3]>,
}

/// A flag value that is one of a type's names (listed by `--help`), read by
/// its `FromStr`: for the conversation's types, which know nothing of clap.
fn named<T>(names: impl IntoIterator<Item = &'static str>) -> impl TypedValueParser<Value = T>
where
    T: FromStr<Err = String> + Clone + Send + Sync + 'static,
{
    PossibleValuesParser::new(names).try_map(|s| s.parse::<T>())
}

/// A switch given as `on` or `off` (`true`/`false` in the TOML file).
fn on_off() -> impl TypedValueParser<Value = bool> {
    PossibleValuesParser::new(["on", "off"]).map(|s| s == "on")
}

impl Config {
    pub fn runtime_abi(&self) -> Option<Abi> {
        self.runtime_abi.as_deref().and_then(|a| a.parse().ok())
    }

    /// The effective configuration as TOML, API key masked.
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        for key in [&mut shown.api_key, &mut shown.ollama_api_key] {
            if key.is_some() {
                *key = Some("<set>".into());
            }
        }
        let rendered = toml::Value::try_from(&shown).map(|mut v| {
            f32_decimals(&mut v, false);
            v
        });
        rendered.and_then(|v| toml::to_string_pretty(&v)).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// An IP address, or a refusal that says what to give instead (a host name
/// is not resolved: the daemon binds one address, and `localhost` may name two).
fn parse_host(text: &str) -> Result<IpAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "`{text}` is not an IP address; give 127.0.0.1 (this machine only, what `localhost` means), \
             0.0.0.0 (every IPv4 interface) or :: (every interface)"
        )
    })
}

fn host_from_toml<'de, D: serde::Deserializer<'de>>(de: D) -> Result<IpAddr, D::Error> {
    let text = String::deserialize(de)?;
    parse_host(&text).map_err(serde::de::Error::custom)
}

/// An IP address and port, or a refusal that says what to give instead.
fn parse_socket(text: &str) -> Result<SocketAddr, String> {
    text.parse().map_err(|_| {
        format!(
            "`{text}` is not an IP address with a port; give e.g. 127.0.0.1:9090 (this machine only, what \
             `localhost` means) or 0.0.0.0:9090 (every IPv4 interface)"
        )
    })
}

fn socket_from_toml<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<SocketAddr>, D::Error> {
    let text = Option::<String>::deserialize(de)?;
    text.as_deref().map(parse_socket).transpose().map_err(serde::de::Error::custom)
}

/// The sampling fields are `f32`: widened to TOML's `f64` they would print
/// as `0.699999988079071` for a configured `0.7`. Each float of a
/// `[sampling]` table (top level or a model's) becomes the decimal the `f32`
/// prints as.
fn f32_decimals(value: &mut toml::Value, in_sampling: bool) {
    match value {
        toml::Value::Float(x) if in_sampling => {
            *x = (*x as f32).to_string().parse().unwrap_or(*x);
        }
        toml::Value::Table(table) => {
            for (key, v) in table.iter_mut() {
                f32_decimals(v, in_sampling || key == "sampling");
            }
        }
        toml::Value::Array(items) => items.iter_mut().for_each(|v| f32_decimals(v, in_sampling)),
        _ => {}
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
