//! `rkllmd tokenizer`: writes the tokenizer.json a model's prompts are
//! counted with — the configured file, the one beside the model, or the
//! simulated runtime's own — so that client-side tools (AIPerf, GuideLLM)
//! count tokens as the daemon does.

use crate::app::model_specs;
use crate::config::Config;
use crate::conversation::tokenizer_file;
use crate::engine::{runtime_tokenizer_json, BackendKind, RuntimeChoice};

/// The tokenizer.json text of the first configured model (`--model`, else
/// the first `[[models]]` table or file in `models_dir`).
pub fn tokenizer_json(config: &Config) -> Result<String, String> {
    let specs = model_specs(config, &Default::default()).map_err(|e| e.to_string())?;
    let spec = specs.first().ok_or("no model is configured: give --model (or [[models]], models_dir)")?;
    if let Some(path) = tokenizer_file(&spec.prompt, &spec.path) {
        return std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()));
    }
    let simulated = spec.runtime.choice == RuntimeChoice::Sim || spec.path.starts_with("sim:");
    match runtime_tokenizer_json(if simulated { BackendKind::Sim } else { BackendKind::Rkllm }) {
        Some(json) => Ok(json),
        None => Err(format!(
            "the model `{}` has no tokenizer.json: the runtime's tokenizer is inside the .rkllm file, out of reach; \
             download tokenizer.json from the model's Hugging Face repository and put it next to the file",
            spec.id
        )),
    }
}
