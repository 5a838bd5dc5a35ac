//! What fillers cost a lone request, measured at load where the runtime
//! refuses short batches (`short_batch.rs`). There every slot without a job
//! gets a filler, so a lone request decodes at the pace of a step of all
//! the slots. The manual says only that decode is memory-bound (a batch
//! step costs "little more" than a single one), not how much more; that is
//! the whole question of whether `batch = auto` may keep the slots on such
//! a runtime. So the load asks the runtime: the same short run once with
//! every slot given the same input (a lone request beside fillers) and once
//! on one slot, each read for [`TOKENS`] tokens; `slot_count.rs` keeps
//! the slots where the first decodes at least [`MIN_LONE_DECODE`] of the
//! second's speed (issue 36's rule for a lone request), else opens 1 slot,
//! and says which with both figures.

use super::calls::wait_for;
use super::short_batch::{read_bounded, Bounded, ProbeRun, PROBE};
use rkllm_sys::{BatchInput, BatchRequest, Model, RunInput, RunRequest};
use std::time::{Duration, Instant};

/// Tokens each timing run is read for: 5 intervals between them, enough
/// for a median that one late step does not move, few enough that the
/// load's cost stays small (at a board's pace, 6 steps of 8 slots and 6 of
/// one: about a second for a 1.5B model).
const TOKENS: usize = 6;

/// The least a lone request beside fillers may decode at, as a share of
/// one slot's speed, for the slots to be kept.
pub(super) const MIN_LONE_DECODE: f64 = 0.9;

/// A step of one slot faster than this is no model's on the NPUs rkllmd
/// serves (the fastest Rockchip publishes, Qwen2-0.5B on RK3588, decodes
/// 41.6 tokens/s: 24 ms), but a simulator's at a fraction of its pace,
/// whose steps are sleeps: there the machine's scheduling delays, added to
/// every step alike, would pull the ratio towards 1 and keep slots whose
/// fillers cost more than it says. So no verdict below it: 1 slot.
const MEASURABLE_STEP: Duration = Duration::from_millis(20);

/// What the timing runs may take beyond the probe's bound (a request's
/// first-token allowance): their few decode steps, 8 slots' at the pace of
/// the slowest model Rockchip lists (~5 tokens/s), and a margin.
pub(super) const DECODE_ALLOWANCE: Duration = Duration::from_secs(10);

/// The median time between the tokens of one timing run on `model`, opened
/// with `slots` slots (blocking): with more than one, every slot is given
/// the probe's input, as a lone request and its fillers. The inner `Err`
/// says why nothing could be measured; the outer one that the runtime did
/// not come back from the run's abort (the handle is lost).
pub(super) fn step(model: &Model, slots: usize, bound: Duration) -> Result<Result<Duration, String>, String> {
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let submitted = match slots {
        1 => model
            .submit(RunRequest { max_new_tokens: Some(TOKENS as i32), ..RunRequest::prompt(PROBE) }, tx)
            .map(|control| ProbeRun { control, events, done: None }),
        _ => {
            let input = BatchInput { input: RunInput::Prompt(PROBE.into()), enable_thinking: false };
            let mut channels = vec![None; slots];
            channels[0] = Some(tx);
            let request = BatchRequest {
                slots: vec![Some(input); slots],
                max_new_tokens: Some(TOKENS as i32),
                sampling: None,
                lora: None,
                keep_history: false,
                save_prompt_cache: None,
            };
            model.submit_batch(request, channels).map(|(control, done)| ProbeRun { control, events, done: Some(done) })
        }
    };
    let run = match submitted {
        Ok(run) => run,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let measured = match read_bounded(run, TOKENS, bound)? {
        Bounded::Ended { finish: Some(finish), tokens } if !finish.is_error() => median_interval(&tokens)
            .ok_or_else(|| format!("its run gave {} token(s), too few to time a step", tokens.len())),
        Bounded::Ended { finish: Some(finish), .. } => Err(format!("rkllm_run returned {}", finish.code)),
        Bounded::Ended { finish: None, .. } => Err("the runtime thread is gone".into()),
        Bounded::Unread(why) => Err(why),
        Bounded::TimedOut => Err(format!("its run took longer than {bound:?} and was aborted")),
    };
    // The run kept no history; the clear makes sure of it on a runtime that would.
    if let Err(why) = wait_for(model.clear_kv_cache(false)) {
        tracing::warn!("rkllm_clear_kv_cache failed after the fillers' timing run ({why})");
    }
    Ok(measured)
}

/// The median of the intervals between `stamps`, with at least two.
fn median_interval(stamps: &[Instant]) -> Option<Duration> {
    let mut gaps: Vec<Duration> = stamps.windows(2).map(|w| w[1] - w[0]).collect();
    if gaps.len() < 2 {
        return None;
    }
    gaps.sort_unstable();
    Some(gaps[gaps.len() / 2])
}

/// Whether a lone request beside fillers (its step `with_fillers`) keeps
/// enough of one slot's speed (`alone`): `Ok` with the figures that say
/// it does, or `Err` with why the slots go.
pub(super) fn verdict(
    with_fillers: Result<Duration, String>,
    alone: Result<Duration, String>,
) -> Result<String, String> {
    let (with_fillers, alone) = match (with_fillers, alone) {
        (Ok(f), Ok(a)) => (f, a),
        (Err(why), _) => return Err(format!("the fillers' timing run failed ({why})")),
        (_, Err(why)) => return Err(format!("the one-slot timing run failed ({why})")),
    };
    if alone < MEASURABLE_STEP {
        return Err(format!("a step of one slot took {alone:?}, too fast to tell what fillers cost"));
    }
    let share = alone.as_secs_f64() / with_fillers.as_secs_f64().max(f64::MIN_POSITIVE);
    let figures = format!(
        "a lone request beside fillers decodes at {share:.2}× of one slot ({with_fillers:?} against {alone:?} a token)"
    );
    match share >= MIN_LONE_DECODE {
        true => Ok(figures),
        false => Err(format!("{figures}, below {MIN_LONE_DECODE}×")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Result<Duration, String> {
        Ok(Duration::from_millis(n))
    }

    #[test]
    fn the_slots_stay_only_where_fillers_cost_little() {
        assert!(verdict(ms(105), ms(100)).unwrap().contains("at 0.95× of one slot (105ms against 100ms"));
        let refused = verdict(ms(205), ms(100)).unwrap_err();
        assert!(refused.contains("0.49×") && refused.contains("below 0.9×"), "{refused}");
        // Too fast to measure, or not measured: the slots go, said why.
        assert!(verdict(ms(30), ms(15)).unwrap_err().contains("too fast"), "a step under 20 ms is no NPU's");
        assert!(verdict(Err("x".into()), ms(100)).unwrap_err().contains("fillers' timing run failed (x)"));
        assert!(verdict(ms(100), Err("y".into())).unwrap_err().contains("one-slot timing run failed (y)"));
    }

    #[test]
    fn a_late_step_does_not_move_the_median() {
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        assert_eq!(median_interval(&[at(0), at(10), at(20), at(90), at(100)]), Some(Duration::from_millis(10)));
        assert_eq!(median_interval(&[at(0), at(10)]), None, "one interval is not a median");
    }
}
