//! How many batch slots a model is opened with. `batch = N` opens N;
//! `batch = "auto"` (the default) chooses, at load:
//!
//! 1. **From memory.** A slot holds a whole context's KV cache
//!    (`max_context_len` × the model's KV bytes per token, `model_shape.rs`),
//!    which the runtime sizes at init for every slot. The slots get what the
//!    board has free (`MemAvailable` in `/proc/meminfo`, read just before
//!    the init, below `telemetry_root`) less the model's weights (its file's
//!    size) and a margin for the rest of the system ([`margin`]: a tenth of
//!    `MemTotal`, at least 512 MiB), at most [`AUTO_MAX`]. A shape or
//!    meminfo that cannot be read gives 1 slot, said.
//! 2. **From the probe** (`short_batch.rs`): where the runtime takes a
//!    batched run with slots left without input, a lone request runs without
//!    fillers (decode 1.00× of one slot: docs/performance.md) and the slots
//!    are kept. Refused or misplaced: every slot without a job gets a filler,
//!    which costs a lone request what a step of all the slots costs beside
//!    one (0.69× at 4 slots on the simulator's default; on a board, the
//!    manual does not say), so the load times it (`filler_cost.rs`) and
//!    keeps the slots only where a lone request keeps 0.9× of one slot's
//!    speed. Else — or timed out, or an init with N slots that fails — the
//!    model is opened again with 1 slot, with one WARN saying why.
//!
//! A model that cannot be batched (a vision encoder, a prompt-cache file,
//! no tokenizer.json, `batch_short_probe = false`) gets 1 slot at once.

use super::context;
use super::error::EngineError;
use super::filler_cost;
use super::limits::Limits;
use super::short_batch::{self, ShortBatches};
use crate::metrics::board::Board;
use rkllm_sys::{InitConfig, Model, Runtime};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The most slots `auto` opens: the manual recommends `n_batch` ≤ 8, and the
/// measured wins do not ask for fewer — with short batches an empty slot
/// costs no prefill and no decode step, and more slots keep more
/// conversations resident (6 conversations on 8 slots: turn 6 at 0.026× of
/// `--batch 1` without the cache; docs/performance.md).
pub const AUTO_MAX: u8 = 8;

/// `batch = "auto"`: where the board's memory is read, and why the model
/// cannot be batched at all, if the registry found a reason.
#[derive(Debug, Clone)]
pub struct AutoBatch {
    /// `/proc/meminfo` is read below this root (`telemetry_root`).
    pub board_root: PathBuf,
    /// The model gets 1 slot, for this reason.
    pub single: Option<String>,
}

/// Who chose the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChosenBy {
    Auto,
    Config,
}

impl ChosenBy {
    pub fn as_str(self) -> &'static str {
        match self {
            ChosenBy::Auto => "auto",
            ChosenBy::Config => "config",
        }
    }
}

/// The slots a model was opened with, and why (`/health`, the `model loaded` line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchChoice {
    pub slots: u8,
    pub chosen_by: ChosenBy,
    pub reason: String,
}

/// The model as opened: its handle, limits, slots and the probe's finding.
pub(super) struct Opened {
    pub model: Model,
    pub limits: Limits,
    pub batch: BatchChoice,
    /// With more than one slot: what the probe found.
    pub short: Option<ShortBatches>,
}

/// What the load was asked for.
pub(super) struct Request<'a> {
    pub runtime: &'a Arc<Runtime>,
    pub init: InitConfig,
    pub limits: Limits,
    /// The configured slots (with `auto`: 1, the floor).
    pub configured: u8,
    pub auto: Option<AutoBatch>,
    pub probe_short: bool,
}

/// Opens the model with the slots its setting gives (blocking, as `rkllm_init`).
pub(super) fn open(request: Request<'_>) -> Result<Opened, EngineError> {
    let Request { runtime, init, limits, configured, auto, probe_short } = request;
    let Some(auto) = auto else {
        let init = InitConfig { n_batch: configured, ..init };
        let (model, limits) = context::load(runtime, init, limits, &|_| configured)?;
        let batch =
            BatchChoice { slots: configured, chosen_by: ChosenBy::Config, reason: format!("batch = {configured}") };
        if configured == 1 {
            return Ok(Opened { model, limits, batch, short: None });
        }
        let short = match probe_short {
            false => ShortBatches::NotProbed,
            true => match short_batch::probe(&model, usize::from(configured), probe_bound(&limits)) {
                Ok((found, why)) => short_batch::report(found, &why, configured),
                Err(why) => return Err(wedged(model, "short-batch", why)),
            },
        };
        return Ok(Opened { model, limits, batch, short: Some(short) });
    };
    let plan = match memory_plan(&init.model_path, &auto, probe_short) {
        Ok(plan) if plan.slots(limits.max_context_len) > 1 => plan,
        Ok(plan) => {
            let reason = plan.reason(limits.max_context_len);
            return single_slot(runtime, init, limits, reason);
        }
        Err(why) => return single_slot(runtime, init, limits, why),
    };
    let planned = plan.slots(limits.max_context_len);
    let (model, served) =
        match context::load(runtime, InitConfig { n_batch: planned, ..init.clone() }, limits.clone(), &|c| {
            plan.slots(c)
        }) {
            Ok(opened) => opened,
            Err(e) => {
                let why = format!("rkllm_init with {planned} slots failed ({e})");
                // Said once: when one slot fails too, the load's error carries the runtime's lines.
                let opened = single_slot(runtime, init, limits, why.clone());
                if opened.is_ok() {
                    tracing::warn!(reason = %why, "batch = auto: opened the model with 1 slot");
                }
                return opened;
            }
        };
    // The context the model is served with (its own, read at init) sized
    // the slots it was opened with (`context::load` asks `plan.slots`).
    let slots = plan.slots(served.max_context_len);
    let reason = plan.reason(served.max_context_len);
    if slots == 1 {
        // The model's own context, read at init, left room for one slot: it was opened with one.
        tracing::info!(slots, reason = %reason, "batch = auto");
        let batch = BatchChoice { slots, chosen_by: ChosenBy::Auto, reason };
        return Ok(Opened { model, limits: served, batch, short: None });
    }
    let (found, why) = match short_batch::probe(&model, usize::from(slots), probe_bound(&served)) {
        Ok(found) => found,
        Err(why) => return Err(wedged(model, "short-batch", why)),
    };
    if found == ShortBatches::Accepted {
        let reason = format!("{reason}; the runtime takes short batches (a lone request runs without fillers)");
        tracing::info!(slots, reason = %reason, "batch = auto");
        let batch = BatchChoice { slots, chosen_by: ChosenBy::Auto, reason };
        return Ok(Opened { model, limits: served, batch, short: Some(found) });
    }
    crate::metrics::observer().metrics.batch_short_off();
    let probe = format!("the short-batch probe with {slots} slots found `{}` ({why})", found.as_str());
    let (init, limits) = (served_init(init, &served), fixed(served));
    if found == ShortBatches::TimedOut {
        drop(model);
        tracing::warn!(reason = %probe, "batch = auto: opening the model again with 1 slot");
        return single_slot(runtime, init, limits, probe);
    }
    with_fillers(runtime, (model, init, limits), (slots, reason), (found, probe))
}

/// `auto` on a runtime that refuses short batches: the slots are kept, with
/// fillers, only where a lone request beside them keeps its speed, as the
/// runtime's timing runs say (`filler_cost.rs`); else the model is opened
/// again with 1 slot, with one WARN saying why. Costs one more
/// `rkllm_init` (two where the slots are kept) and two runs of a few tokens.
fn with_fillers(
    runtime: &Arc<Runtime>,
    (model, init, limits): (Model, InitConfig, Limits),
    (slots, memory): (u8, String),
    (found, probe): (ShortBatches, String),
) -> Result<Opened, EngineError> {
    let bound = probe_bound(&limits) + filler_cost::DECODE_ALLOWANCE;
    let beside_fillers = match filler_cost::step(&model, usize::from(slots), bound) {
        Ok(measured) => measured,
        Err(why) => return Err(wedged(model, "fillers' timing", why)),
    };
    drop(model);
    let (one, one_limits) = context::load(runtime, InitConfig { n_batch: 1, ..init.clone() }, limits.clone(), &|_| 1)?;
    let alone = match beside_fillers {
        Ok(_) => match filler_cost::step(&one, 1, bound) {
            Ok(measured) => measured,
            Err(why) => return Err(wedged(one, "fillers' timing", why)),
        },
        Err(_) => Err("not run".to_owned()),
    };
    let figures = match filler_cost::verdict(beside_fillers, alone) {
        Ok(figures) => figures,
        Err(cost) => {
            let reason = format!("{probe}; {cost}: fillers would cost a lone request its speed");
            tracing::warn!(reason = %reason, "batch = auto: opened the model again with 1 slot");
            let batch = BatchChoice { slots: 1, chosen_by: ChosenBy::Auto, reason };
            return Ok(Opened { model: one, limits: one_limits, batch, short: None });
        }
    };
    drop(one);
    match context::load(runtime, InitConfig { n_batch: slots, ..init.clone() }, limits.clone(), &|_| slots) {
        Ok((model, limits)) => {
            let reason = format!("{memory}; {probe}, but {figures}: the slots are kept, with fillers");
            tracing::info!(slots, reason = %reason, "batch = auto");
            let batch = BatchChoice { slots, chosen_by: ChosenBy::Auto, reason };
            Ok(Opened { model, limits, batch, short: Some(found) })
        }
        Err(e) => {
            single_slot(runtime, init, limits, format!("rkllm_init with {slots} slots failed when opened again ({e})"))
        }
    }
}

/// The board's memory and the model's KV size, or why the model gets 1 slot.
fn memory_plan(model_path: &str, auto: &AutoBatch, probe_short: bool) -> Result<MemoryPlan, String> {
    let single = auto.single.clone().or_else(|| (!probe_short).then(|| "batch_short_probe is off".to_owned()));
    match single {
        Some(why) => Err(why),
        None => MemoryPlan::read(model_path, &Board::new(&auto.board_root)),
    }
}

/// What `auto` chooses before the model is opened, at `context` (its
/// configured one: a model whose own is read at init is sized again for
/// it): the slots and why, as `/health` `runtime.batch` would say them.
/// More than one slot is then kept only where the load finds the runtime
/// takes short batches or fillers that cost little, which only the runtime
/// can tell (`rkllmd doctor` says so).
pub fn planned(model_path: &str, auto: &AutoBatch, probe_short: bool, context: u32) -> (u8, String) {
    match memory_plan(model_path, auto, probe_short) {
        Ok(plan) => (plan.slots(context), plan.reason(context)),
        Err(why) => (1, why),
    }
}

/// Why a model with a vision encoder or its own prompt-cache file gets 1 slot.
pub fn single_because(vision: bool, prompt_cache: bool) -> Option<String> {
    [
        (vision, "a model with a vision encoder is served with 1 slot (batched runs take text only)"),
        (prompt_cache, "a model with a prompt-cache file is served with 1 slot"),
    ]
    .into_iter()
    .find_map(|(applies, why)| applies.then(|| why.to_owned()))
}

/// How long a probe's one-token run at load may take (then it is aborted):
/// a request's first-token allowance for its one-character prompt
/// (`first_token_timeout_secs`). With that base at 0 the allowance is a few
/// milliseconds — no runtime answers in that, and every probe would time
/// out — so the probe then takes [`PROBE_BOUND_WITHOUT_BASE`]. The bound
/// costs time only when the run does not come back: a working runtime
/// answers in well under a second.
pub(super) fn probe_bound(limits: &Limits) -> Duration {
    match limits.first_token_base.is_zero() {
        true => PROBE_BOUND_WITHOUT_BASE,
        false => limits.first_token_timeout(short_batch::PROBE.len()),
    }
}

/// The probes' bound with `first_token_timeout_secs = 0`: the setting's default.
const PROBE_BOUND_WITHOUT_BASE: Duration = Duration::from_secs(120);

/// A runtime that did not come back from a probe at load (`probe` names
/// which): its thread is inside `rkllm_run` for good, and dropping the
/// model would join it, so the handle is left to the process and the load
/// fails. The registry refuses the model from then on (`registry/mod.rs`).
pub(super) fn wedged(model: Model, probe: &'static str, why: String) -> EngineError {
    std::mem::forget(model);
    tracing::error!(probe, reason = %why, "the runtime did not come back from a probe at load: the model is not loaded");
    EngineError::ProbeWedged { probe, why }
}

/// `auto`'s one slot, and why.
fn single_slot(
    runtime: &Arc<Runtime>,
    init: InitConfig,
    limits: Limits,
    reason: String,
) -> Result<Opened, EngineError> {
    let (model, limits) = context::load(runtime, InitConfig { n_batch: 1, ..init }, limits, &|_| 1)?;
    tracing::info!(slots = 1, reason = %reason, "batch = auto");
    Ok(Opened { model, limits, batch: BatchChoice { slots: 1, chosen_by: ChosenBy::Auto, reason }, short: None })
}

/// The init of a model opened again: the context it was served with, known now.
fn served_init(init: InitConfig, served: &Limits) -> InitConfig {
    InitConfig { max_context_len: served.max_context_len as i32, max_new_tokens: served.max_new_tokens as i32, ..init }
}

/// Limits whose context is no longer to be read from the model.
fn fixed(served: Limits) -> Limits {
    Limits { context_from_model: false, ..served }
}

/// The board's free memory and the model's size per slot, read before the init.
struct MemoryPlan {
    available: u64,
    total: u64,
    weights: u64,
    per_token: u64,
}

/// What `auto` leaves the rest of the system: a tenth of the board's
/// memory, at least 512 MiB (the OS, the daemon, a tmpfs of saved
/// conversations, another process).
fn margin(total: u64) -> u64 {
    (total / 10).max(512 << 20)
}

impl MemoryPlan {
    fn read(model_path: &str, board: &Board) -> Result<MemoryPlan, String> {
        let per_token = super::model_shape::kv_bytes_per_token(model_path)?;
        let (total, available) = board
            .memory()
            .ok_or_else(|| format!("{} has no MemTotal and MemAvailable", board.path("/proc/meminfo").display()))?;
        // A `sim:` spec is no file: no weights in memory.
        let weights = std::fs::metadata(model_path).map(|m| m.len()).unwrap_or(0);
        Ok(MemoryPlan { available, total, weights, per_token })
    }

    fn per_slot(&self, context: u32) -> u64 {
        u64::from(context).saturating_mul(self.per_token)
    }

    fn for_slots(&self) -> u64 {
        self.available.saturating_sub(self.weights).saturating_sub(margin(self.total))
    }

    /// Slots the memory holds at this context: 1 to [`AUTO_MAX`].
    fn slots(&self, context: u32) -> u8 {
        let fit = self.for_slots() / self.per_slot(context).max(1);
        fit.clamp(1, u64::from(AUTO_MAX)) as u8
    }

    fn reason(&self, context: u32) -> String {
        let mib = |b: u64| b >> 20;
        format!(
            "{} slot(s): {} MiB free (MemAvailable {} MiB, less {} MiB of weights and a {} MiB margin) for {} MiB of \
             KV per slot ({context} tokens × {} KiB), at most {AUTO_MAX}",
            self.slots(context),
            mib(self.for_slots()),
            mib(self.available),
            mib(self.weights),
            mib(margin(self.total)),
            mib(self.per_slot(context)),
            self.per_token >> 10,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(available_mib: u64, total_mib: u64) -> MemoryPlan {
        MemoryPlan { available: available_mib << 20, total: total_mib << 20, weights: 0, per_token: 28 << 10 }
    }

    #[test]
    fn slots_follow_the_free_memory() {
        // 4096 tokens × 28 KiB = 112 MiB a slot; the margin of a 4 GiB board is 512 MiB.
        assert_eq!(plan(512 + 3 * 112, 4096).slots(4096), 3);
        assert_eq!(plan(512 + 100, 4096).slots(4096), 1);
        assert_eq!(plan(100, 4096).slots(4096), 1, "less than the margin: one slot, never none");
        assert_eq!(plan(16 << 10, 16 << 10).slots(4096), AUTO_MAX);
        assert_eq!(plan(512 + 3 * 112, 4096).slots(16384), 1, "a longer context takes more a slot");
        assert!(plan(512 + 3 * 112, 4096).reason(4096).starts_with("3 slot(s): 336 MiB free"));
    }
}
