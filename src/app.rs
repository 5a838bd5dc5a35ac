//! The composition root: each layer built from its own narrow settings,
//! taken from the one [`Config`]. Only this module, `server`, `doctor` and
//! `main` read the whole configuration; below them every layer gets plain
//! values.
//!
//! Who builds what: [`model_specs`] turns `--model`, the `[[models]]` tables
//! and `models_dir` into one [`ModelSpec`] per model (each with its runtime,
//! prompt and engine settings, all sharing one NPU turn); [`registry`] hands
//! them to the registry, which loads them (`engine` + `conversation`) on
//! demand; [`api_settings`] and [`metrics_settings`] give those layers theirs.

use crate::api;
use crate::config::{Backend, BatchSetting, Config, LoraArg, ModelTable, ReasoningHistory};
use crate::conversation::PromptSettings;
use crate::embed::EmbedSettings;
use crate::engine::{
    AutoBatch, DiskTier, EngineSettings, Limits, Npu, Prefix, PromptCacheSettings, RuntimeChoice, RuntimeSettings,
    SavedSettings, ScheduleSettings, SharedPrefixSettings, VisionSettings, DEFAULT_MAX_CONTEXT_LEN,
};
use crate::metrics;
use crate::registry::{self, KeepAlive, LoadFailure, Loaded, ModelSpec, Registry};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Load(#[from] LoadFailure),
    #[error("{0}")]
    Models(String),
}

/// What the prompter needs: where the chat template and tokenizer come
/// from (a runtime that brings its own tokenizer adds it at load).
pub fn prompt_settings(config: &Config) -> PromptSettings {
    PromptSettings {
        chat_template: config.chat_template.clone(),
        template: config.template,
        tokenizer: config.tokenizer.clone(),
        runtime_tokenizer: None,
    }
}

pub fn runtime_settings(config: &Config, model: Option<String>) -> RuntimeSettings {
    RuntimeSettings {
        choice: match config.backend {
            Backend::Auto => RuntimeChoice::Auto,
            Backend::Rkllm => RuntimeChoice::Rkllm,
            Backend::Sim => RuntimeChoice::Sim,
        },
        lib: config.lib.clone(),
        abi: config.runtime_abi(),
        model,
    }
}

pub fn limits(config: &Config) -> Limits {
    Limits {
        max_new_tokens: config.max_new_tokens,
        first_token_base: Duration::from_secs(config.first_token_timeout_secs),
        first_token_per_kib: Duration::from_millis(config.first_token_timeout_ms_per_kib),
        request_timeout: Duration::from_secs(config.request_timeout_secs),
        max_context_len: config.max_context_len.unwrap_or(DEFAULT_MAX_CONTEXT_LEN),
        context_from_model: config.max_context_len.is_none(),
    }
}

/// The engine's settings; `model_path` and `disable_runtime_template` are set at load.
pub fn engine_settings(config: &Config, npu: &Npu) -> EngineSettings {
    EngineSettings {
        model_path: String::new(),
        limits: limits(config),
        queue_depth: config.queue_depth,
        schedule: ScheduleSettings {
            batch: match config.batch {
                BatchSetting::Slots(n) => n,
                BatchSetting::Auto => 1,
            },
            gather: Duration::from_millis(config.batch_gather_ms),
            gather_ceiling: Duration::from_millis(crate::config::BATCH_GATHER_CEILING_MS),
            max_passed_over: config.queue_max_passed_over,
            probe_short: config.batch_short_probe,
        },
        auto_batch: (config.batch == BatchSetting::Auto)
            .then(|| AutoBatch { board_root: config.telemetry_root.clone(), single: None }),
        base_domain_id: config.base_domain_id,
        sampling: config.sampling,
        disable_runtime_template: false,
        conversation_cache: config.conversation_cache,
        keep_reasoning: config.reasoning_history == ReasoningHistory::Kept,
        npu: npu.clone(),
        loras: Vec::new(),
        prompt_cache: None,
        vision: None,
        shared_prefixes: (config.shared_prefix_min_tokens > 0 && config.shared_prefix_mb > 0).then(|| {
            SharedPrefixSettings {
                min_tokens: config.shared_prefix_min_tokens,
                max_bytes: config.shared_prefix_mb.saturating_mul(1024 * 1024),
            }
        }),
        saved: (config.conversation_cache_mb > 0 && config.conversation_cache_count > 0).then(|| SavedSettings {
            dir: config.conversation_cache_dir.clone(),
            max_bytes: config.conversation_cache_mb.saturating_mul(1024 * 1024),
            max_count: config.conversation_cache_count,
            disk: config
                .conversation_cache_disk_dir
                .clone()
                .filter(|_| config.conversation_cache_disk_mb > 0)
                .map(|dir| DiskTier { dir, max_bytes: config.conversation_cache_disk_mb.saturating_mul(1024 * 1024) }),
        }),
    }
}

/// A model's vision encoder: the one configured, else a simulated vision
/// profile's own; `None`: a text model.
fn vision_settings(
    config: &Config,
    path: &str,
    encoder: Option<&String>,
    tags: Option<&[String; 3]>,
) -> Option<VisionSettings> {
    let encoder = encoder.cloned().or_else(|| crate::engine::builtin_encoder(path))?;
    Some(VisionSettings {
        encoder,
        lib: config.vision_lib.clone(),
        tags: tags.map(|[start, end, content]| rkllm_sys::ImageTags {
            start: start.clone(),
            end: end.clone(),
            content: content.clone(),
        }),
        cache_entries: config.vision_cache_entries,
        limits: crate::vision::ImageLimits {
            max_images: config.max_images,
            max_bytes: config.max_image_bytes,
            max_pixels: config.max_image_pixels,
        },
        fetch: std::sync::Arc::new(crate::vision::UrlFetch {
            hosts: config.image_url_hosts.clone(),
            timeout: std::time::Duration::from_millis(config.image_url_timeout_ms),
        }),
    })
}

/// A model's LoRA adapters, as the runtime takes them.
fn loras(args: &[LoraArg]) -> Vec<rkllm_sys::LoraAdapter> {
    args.iter().map(|a| rkllm_sys::LoraAdapter { name: a.name.clone(), path: a.path.clone(), scale: a.scale }).collect()
}

/// A model's prompt cache (validated: a file comes with exactly one prefix).
fn prompt_cache(
    file: Option<&std::path::PathBuf>,
    prefix: Option<&String>,
    prefix_file: Option<&std::path::PathBuf>,
) -> Option<PromptCacheSettings> {
    let prefix = match (prefix, prefix_file) {
        (Some(text), _) => Prefix::Text(text.clone()),
        (None, Some(path)) => Prefix::File(path.clone()),
        (None, None) => return None,
    };
    file.map(|file| PromptCacheSettings { file: file.clone(), prefix })
}

pub fn metrics_settings(config: &Config) -> metrics::Settings {
    metrics::Settings {
        telemetry_root: config.telemetry_root.clone(),
        timings_log: config.timings_log.clone(),
        instance: config.instance.clone().unwrap_or_else(host_name),
    }
}

/// The host name (gethostname(2)): the default instance name, and a name
/// the server answers to (`Host`). Anything
/// a header value cannot hold becomes `-` (validate.rs holds a configured
/// name to the same rule); "localhost" if the call fails.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the result is NUL-terminated
    // unless truncated, which the search for NUL below covers.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name: String = buf[..len].iter().map(|&b| if b.is_ascii_graphic() { b as char } else { '-' }).collect();
    if ok && !name.is_empty() {
        name
    } else {
        "localhost".to_owned()
    }
}

pub fn api_settings(config: &Config) -> api::Settings {
    api::Settings {
        api_key: config.api_key.clone(),
        cors_origins: config.cors_origins.clone(),
        // The machine's own name is one the server answers to (e.g. `http://rock5b:8080`).
        allowed_hosts: config.allowed_hosts.iter().cloned().chain(std::iter::once(host_name())).collect(),
        body_limit_bytes: config.body_limit_bytes,
        keepalive: Duration::from_secs(config.keepalive_secs),
        head_wait: Duration::from_secs(config.head_wait_secs),
        write_timeout: Duration::from_secs(config.write_timeout_secs),
        reasoning: config.reasoning,
        tools_overflow: config.tools_overflow,
        metrics_on_main_listener: config.metrics_addr.is_none(),
        allow_pull: config.allow_pull,
        docs_dir: config.docs_dir.clone(),
    }
}

pub fn listener_settings(config: &Config) -> crate::listener::Settings {
    crate::listener::Settings {
        header_read_timeout: Duration::from_secs(config.header_read_timeout_secs),
        body_idle_timeout: Duration::from_secs(config.body_idle_timeout_secs),
        body_timeout: Duration::from_secs(config.body_timeout_secs),
        body_min_rate: config.body_min_rate_bytes_per_sec,
        max_connections: config.max_connections,
        client_connection_share: config.client_connection_share,
    }
}

/// The id the model is served as: configured, or `sim-PROFILE`, or the file's stem.
pub fn model_id(configured: Option<&str>, model_path: &str) -> String {
    if let Some(id) = configured {
        return id.to_owned();
    }
    if let Some(spec) = model_path.strip_prefix("sim:") {
        let profile = spec.split('?').next().unwrap_or_default();
        return format!("sim-{profile}");
    }
    std::path::Path::new(model_path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "model".into())
}

/// The one-model case: `--model` (or, with no model anywhere, the
/// simulator's `sim:PROFILE`); it is loaded at start. `None` when the models
/// come only from `models_dir` and `[[models]]` tables.
pub fn primary_spec(config: &Config, npu: &Npu) -> Option<ModelSpec> {
    let path = match &config.model {
        Some(model) => model.clone(),
        None if config.models_dir.is_none() && config.models.is_empty() => format!("sim:{}", config.sim_profile),
        None => return None,
    };
    let engine = EngineSettings {
        loras: loras(&config.lora),
        prompt_cache: prompt_cache(
            config.prompt_cache.as_ref(),
            config.prompt_cache_prefix.as_ref(),
            config.prompt_cache_prefix_file.as_ref(),
        ),
        vision: vision_settings(
            config,
            &path,
            config.vision_encoder.as_ref(),
            <&[String; 3]>::try_from(config.vision_tags.as_slice()).ok(),
        ),
        ..engine_settings(config, npu)
    };
    Some(ModelSpec {
        id: model_id(config.model_id.as_deref(), &path),
        runtime: runtime_settings(config, config.model.clone()),
        prompt: prompt_settings(config),
        engine,
        embed: embed_settings(config),
        size_bytes: file_size(&path),
        modified: model_created(&path),
        path,
        learned: Default::default(),
    })
}

pub fn embed_settings(config: &Config) -> EmbedSettings {
    EmbedSettings { pooling: config.embedding_pooling, rerank_format: config.rerank_format }
}

fn table_spec(config: &Config, table: &ModelTable, npu: &Npu) -> ModelSpec {
    let mut engine = engine_settings(config, npu);
    if let Some(n) = table.max_context_len {
        (engine.limits.max_context_len, engine.limits.context_from_model) = (n, false);
    }
    if let Some(n) = table.max_new_tokens {
        engine.limits.max_new_tokens = n;
    }
    engine.sampling = merge_sampling(config.sampling, table.sampling);
    engine.loras = loras(&table.lora);
    engine.prompt_cache = prompt_cache(
        table.prompt_cache.as_ref(),
        table.prompt_cache_prefix.as_ref(),
        table.prompt_cache_prefix_file.as_ref(),
    );
    engine.vision = vision_settings(config, &table.path, table.vision_encoder.as_ref(), table.vision_tags.as_ref());
    ModelSpec {
        id: model_id(table.id.as_deref(), &table.path),
        path: table.path.clone(),
        runtime: runtime_settings(config, Some(table.path.clone())),
        prompt: PromptSettings {
            chat_template: table.chat_template.clone(),
            template: table.template.or(config.template),
            tokenizer: table.tokenizer.clone(),
            runtime_tokenizer: None,
        },
        engine,
        embed: embed_settings(config),
        size_bytes: file_size(&table.path),
        modified: model_created(&table.path),
        learned: Default::default(),
    }
}

/// A `[[models]]`'s sampling over the daemon's `[sampling]`.
fn merge_sampling(
    base: crate::sampling::SamplingOverrides,
    over: crate::sampling::SamplingOverrides,
) -> crate::sampling::SamplingOverrides {
    let mut merged = base;
    macro_rules! lay {
        ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty = $lo:literal ..= $hi:literal ),* $(,)?) => {
            $( if over.$name.is_some() { merged.$name = over.$name; } )*
        };
    }
    crate::with_sampling_fields!(lay);
    merged
}

/// A model found in `models_dir`: the daemon's settings, its own file,
/// template, tokenizer and vision encoder.
fn found_spec(config: &Config, npu: &Npu, found: registry::Found) -> ModelSpec {
    let path = found.file.display().to_string();
    ModelSpec {
        id: found.id,
        runtime: runtime_settings(config, Some(path.clone())),
        prompt: PromptSettings {
            chat_template: found.chat_template,
            template: config.template,
            tokenizer: found.tokenizer,
            runtime_tokenizer: None,
        },
        engine: EngineSettings {
            vision: vision_settings(
                config,
                &path,
                found.vision_encoder.map(|p| p.display().to_string()).as_ref(),
                None,
            ),
            ..engine_settings(config, npu)
        },
        embed: embed_settings(config),
        size_bytes: file_size(&path),
        modified: model_created(&path),
        path,
        learned: Default::default(),
    }
}

/// Every registered model: the primary one, the `[[models]]` tables, then
/// `models_dir`. An id given twice is an error naming both sources.
pub fn model_specs(config: &Config, npu: &Npu) -> Result<Vec<ModelSpec>, AppError> {
    let mut specs: Vec<ModelSpec> = primary_spec(config, npu).into_iter().collect();
    specs.extend(config.models.iter().map(|t| table_spec(config, t, npu)));
    if let Some(dir) = &config.models_dir {
        specs
            .extend(registry::discover(dir).map_err(AppError::Models)?.into_iter().map(|f| found_spec(config, npu, f)));
    }
    for (i, spec) in specs.iter().enumerate() {
        if let Some(first) = specs[..i].iter().find(|s| s.id == spec.id) {
            return Err(AppError::Models(format!(
                "two models have the id `{}`: {} and {}; give one another id (`--model-id`, or `id` in its [[models]] table)",
                spec.id, first.path, spec.path
            )));
        }
        // A model named like another's adapter would hide it (a model's own id is resolved first).
        let adapters =
            specs.iter().flat_map(|s| s.engine.loras.iter().map(move |l| (s, registry::adapter_id(&s.id, &l.name))));
        if let Some((base, _)) = adapters.into_iter().find(|(_, id)| *id == spec.id) {
            return Err(AppError::Models(format!(
                "the model id `{}` ({}) is also the id of an adapter of `{}`; give the model another id",
                spec.id, spec.path, base.id
            )));
        }
    }
    Ok(specs)
}

pub fn registry_settings(config: &Config, models: usize) -> registry::Settings {
    // With one model there is nothing to make room for: unloading it would only slow the next request.
    let default = if models > 1 { KeepAlive::For(Duration::from_secs(300)) } else { KeepAlive::Forever };
    registry::Settings {
        max_loaded: config.max_loaded_models,
        memory_budget_bytes: config.memory_budget_mb.map(|mb| mb * 1024 * 1024),
        keep_alive: config.keep_alive.as_deref().and_then(|k| KeepAlive::parse(k).ok()).unwrap_or(default),
        switch_after: Duration::from_secs(config.max_switch_wait_secs),
    }
}

/// The registry of every configured model (nothing loaded yet).
pub fn registry(config: &Config) -> Result<Arc<Registry>, AppError> {
    let npu = Npu::default();
    let specs = model_specs(config, &npu)?;
    let settings = registry_settings(config, specs.len());
    // Models pulled while serving join from models_dir, with the same
    // settings and the same NPU turn as those found at start.
    let models_dir = config.models_dir.clone().map(|dir| {
        let config = config.clone();
        let spec_of: registry::SpecOf = Box::new(move |found| found_spec(&config, &npu, found));
        (dir, spec_of)
    });
    Ok(Registry::new(specs, settings, models_dir))
}

/// Loads the primary model by itself, outside any registry (`doctor --smoke`).
pub fn load_model(config: &Config, on_fallback: impl FnOnce(&str)) -> Result<Loaded, AppError> {
    let spec = primary_spec(config, &Npu::default())
        .ok_or_else(|| AppError::Models("no model configured: pass --model".into()))?;
    Ok(registry::load(&spec, |settings| {
        let opened = crate::engine::open_runtime(settings)?;
        if let Some(why) = &opened.fallback {
            on_fallback(why);
        }
        Ok(opened)
    })?)
}

fn file_size(path: &str) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The model file's mtime; for a simulated spec, now.
fn model_created(model_path: &str) -> u64 {
    std::fs::metadata(model_path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
        .unwrap_or_else(api::unix_now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids() {
        assert_eq!(model_id(None, "sim:qwen2.5-1.5b?time_scale=0.1"), "sim-qwen2.5-1.5b");
        assert_eq!(model_id(None, "/models/Qwen3-1.7B_w8a8.rkllm"), "Qwen3-1.7B_w8a8");
        assert_eq!(model_id(Some("mine"), "/x/y.rkllm"), "mine");
    }
}
