//! The `batch` line: the slots `serve` opens a model with, said as `/health`
//! `runtime.batch` will say them once it is loaded.

use super::Check;
use crate::conversation::Prompter;
use crate::engine::{planned, single_because, AutoBatch};
use crate::registry::{ModelSpec, AUTO_WITHOUT_TOKENIZER};
use std::path::Path;

const TITLE: &str = "batch";

/// The model's slots and its line. With `batch = "auto"` the part the
/// daemon can know before the load — the board's memory (read under `root`,
/// as `serve` reads it under `telemetry_root`) against the model's KV size,
/// or why it gets 1 slot — is worked out as the load does
/// (`engine/slot_count.rs`); whether the runtime takes short batches, and
/// what fillers cost where it does not, only the load can tell, so the line
/// says that more than one slot depends on it.
pub fn slots(spec: &ModelSpec, prompter: &Prompter, root: &Path) -> (u8, Check) {
    let id = &spec.id;
    let Some(auto) = &spec.engine.auto_batch else {
        let batch = spec.engine.schedule.batch;
        if batch > 1 && !prompter.has_tokenizer() {
            // As the registry's load refuses it (`registry/load.rs`).
            let fail = Check::fail(
                TITLE,
                format!("{id}: batch = {batch} without a tokenizer.json: the model does not load (each request's usage.prompt_tokens is the daemon's count)"),
                "put the model's tokenizer.json (from its Hugging Face repo) next to the .rkllm file, set tokenizer = \"/path/to/tokenizer.json\", or set batch = 1",
            );
            return (batch, fail);
        }
        return (batch, Check::ok(TITLE, format!("{id}: {batch} slot(s), configured (batch = {batch})")));
    };
    // The reasons for 1 slot the registry's and the engine's loads find.
    let single = auto
        .single
        .clone()
        .or_else(|| single_because(spec.engine.vision.is_some(), spec.engine.prompt_cache.is_some()))
        .or_else(|| (!prompter.has_tokenizer()).then(|| AUTO_WITHOUT_TOKENIZER.to_owned()));
    let auto = AutoBatch { board_root: root.to_path_buf(), single };
    let context = spec.engine.limits.max_context_len;
    let (slots, reason) = planned(&spec.path, &auto, spec.engine.schedule.probe_short, context);
    let text = match slots {
        1 => format!("{id}: auto: {reason}"),
        n => format!(
            "{id}: auto: {reason}; the {n} are kept at load only where the runtime takes short batches (the \
             short-batch probe) or its fillers cost a lone request under a tenth of its speed (timed at load), \
             else 1 slot: /health runtime.batch says which"
        ),
    };
    (slots, Check::ok(TITLE, text))
}
