//! Is the runtime thread alive? The question behind the systemd watchdog.
//!
//! An idle runtime thread must answer a ping at once. A thread inside
//! `rkllm_run` cannot answer, so it is judged by its signs of life (run
//! start, callbacks): a prefill has no callbacks for as long as the prompt
//! takes, a decode has one per token. A hung runtime (a wedged NPU driver, a
//! deadlock in the library) shows neither, and the daemon then stops pinging
//! so that systemd restarts it.

use super::halt::ABORT_GRACE;
use super::limits::Limits;
use crate::metrics::{RuntimePerf, Timeline};
use rkllm_sys::{Activity, Model};
use std::sync::Mutex;
use std::time::Duration;

/// The least time a decoding run may go without a token before it counts as
/// stuck and is aborted (`run.rs`). A decode step takes well under a
/// second on a board, so this is tens of steps even for a large model, and
/// short enough that a wedged runtime is told to its clients in seconds.
pub const DECODE_STALL_FLOOR: Duration = Duration::from_secs(10);

/// A decoding run is stuck after this many of its own mean decode steps
/// without a token, if that is longer than [`DECODE_STALL_FLOOR`]: a slow
/// model (or a big batch) is judged by its own pace.
const DECODE_STALL_STEPS: u32 = 50;

/// The least time a prefill may take before it counts as hung: a short
/// prompt's prefill takes well under a second on a board, but the first
/// run after a load or a busy NPU driver may take a few.
pub const PREFILL_STALL_FLOOR: Duration = Duration::from_secs(10);

/// The most a prefill may take before it counts as hung, unless this model
/// measures the prompt's prefill itself longer than
/// 1 / [`PREFILL_STALL_MIN_MARGIN`] of it: with the abort's 1 s and the
/// reply, every client of a hung prefill is told within 60 s. A 16k-token
/// prompt of a 1.5B model takes ~35 s on an RK3588 (docs/timings.md), within it.
pub const PREFILL_STALL_CAP: Duration = Duration::from_secs(50);

/// A prefill's allowance is this many times its expected time, between
/// the floor and the cap: the expected time comes from this model's own
/// recent runs, and an NPU shared with other work is slower by a factor,
/// not by seconds.
const PREFILL_STALL_FACTOR: f64 = 3.0;

/// Whatever the cap, a prefill gets at least this many times its expected
/// time: a model that measures slower than the cap allows (a larger model,
/// a slower board) is not aborted in the middle of every long prompt.
const PREFILL_STALL_MIN_MARGIN: f64 = 1.25;

/// Prefill milliseconds per token before this model measured its own: an
/// RK3588 running a 1.5B model (104 ms + 2.14 ms per token,
/// docs/timings.md) at 256 tokens, the smallest run that is measured.
const PRIOR_PREFILL_MS_PER_TOKEN: f64 = 2.6;

/// Runs that prefilled fewer tokens are not measured: the runtime's fixed
/// cost per run (~100 ms) would dominate their pace.
const PACE_MIN_TOKENS: i64 = 256;

/// The weight of a new measurement in [`PrefillPace`]'s moving average.
const PACE_NEW: f64 = 0.25;

/// A prompt whose ids are not known counts one token per this many bytes
/// (fewer than any tokenizer makes of text: the allowance errs long).
const BYTES_PER_TOKEN: usize = 2;

/// How fast this model prefills, as its runtime reports it (`perf` of runs
/// that prefilled at least [`PACE_MIN_TOKENS`]): milliseconds per token,
/// fixed cost included, a moving average. Runs aborted as stuck count too
/// once they returned: a model slower than the prior (a larger one) then
/// loses one request to the allowance, not every long one. A hang that
/// ended counts as a slow prefill, lengthening later allowances (one such
/// sample moves the pace to at most 1.75× itself).
#[derive(Debug, Default)]
pub struct PrefillPace(Mutex<Option<f64>>);

impl PrefillPace {
    /// A run finished with the runtime's own figures.
    pub fn measured(&self, perf: Option<&RuntimePerf>) {
        let Some(perf) = perf.filter(|p| p.prefill_tokens >= PACE_MIN_TOKENS && p.prefill_time_ms > 0.0) else {
            return;
        };
        let new = perf.prefill_time_ms / perf.prefill_tokens as f64;
        let mut pace = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A sample counts as at most 4× the measured pace (so moves it to at
        // most 1.75× itself): a hang that returned after minutes is counted,
        // but cannot undo the bound for every later prefill in one go.
        *pace = Some(pace.map_or(new, |old| old + PACE_NEW * (new.min(old * 4.0) - old)));
    }

    fn ms_per_token(&self) -> f64 {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(PRIOR_PREFILL_MS_PER_TOKEN)
    }

    /// How long a run that prefills `tokens` may go from its start without
    /// a first token before it counts as hung (the runtime gives no sign of
    /// life during a prefill): [`PREFILL_STALL_FACTOR`] times the expected
    /// time, between [`PREFILL_STALL_FLOOR`] and [`PREFILL_STALL_CAP`], and
    /// never under [`PREFILL_STALL_MIN_MARGIN`] times the expected time.
    pub fn stall(&self, tokens: usize) -> Duration {
        let expected = Duration::from_secs_f64(self.ms_per_token() * tokens as f64 / 1000.0);
        let bounded = expected.mul_f64(PREFILL_STALL_FACTOR).clamp(PREFILL_STALL_FLOOR, PREFILL_STALL_CAP);
        bounded.max(expected.mul_f64(PREFILL_STALL_MIN_MARGIN))
    }
}

/// The tokens a run prefills, as far as they are known: what it sends after
/// the cached ones (`sent`), else the prompt's ids, else its bytes over
/// [`BYTES_PER_TOKEN`]. A slot of a batch of `batch` runs with the others'
/// prefills, whose prompts it does not know: each may fill the `context`.
pub fn prefill_tokens(sent: Option<usize>, prompt: (Option<usize>, usize), batch: u32, context: u32) -> usize {
    if batch > 1 {
        return batch as usize * context as usize;
    }
    let (ids, bytes) = prompt;
    sent.or(ids).unwrap_or(bytes / BYTES_PER_TOKEN)
}

/// The prefill bound the engine enforces on the run inside the runtime
/// (`run.rs`: from its start to its first token, the shorter of the
/// first-token time-out and [`PrefillPace::stall`]), by the run's id, so that
/// the watchdog judges a prefill as the abort does. Each slot of a batch
/// records its own; the batch is aborted once every slot gave up, so the
/// run's bound is the longest.
#[derive(Debug, Default)]
pub struct PrefillBound(Mutex<Option<(u64, Duration)>>);

impl PrefillBound {
    /// Run `run`'s generation (or one of its slots') enforces `allowed`.
    pub fn record(&self, run: u64, allowed: Duration) {
        let mut bound = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *bound = match *bound {
            Some((id, longest)) if id == run => Some((id, longest.max(allowed))),
            // A slot that saw its start late: a later run is inside the runtime already.
            Some((id, _)) if id > run => return,
            _ => Some((run, allowed)),
        };
    }

    fn of(&self, run: u64) -> Option<Duration> {
        let bound = self.0.lock().unwrap_or_else(|e| e.into_inner());
        bound.filter(|(id, _)| *id == run).map(|(_, allowed)| allowed)
    }
}

/// How often a pending ping looks whether a run started instead.
const RUN_START_POLL: Duration = Duration::from_millis(10);

/// What the watchdog learns of one model's runs: how fast it prefills,
/// and the prefill bound of the run inside the runtime.
#[derive(Default)]
pub(super) struct Liveness {
    pub pace: PrefillPace,
    pub bound: PrefillBound,
}

impl Liveness {
    /// How long a run may prefill (see [`PrefillPace::stall`] and
    /// [`prefill_tokens`] for the arguments).
    pub fn prefill_stall(
        &self,
        limits: &Limits,
        sent: Option<usize>,
        prompt: (Option<usize>, usize),
        batch: u32,
    ) -> Duration {
        self.pace.stall(prefill_tokens(sent, prompt, batch, limits.max_context_len))
    }

    /// How long the run inside the runtime may prefill before the watchdog
    /// calls it hung: the bound the engine enforces on it ([`PrefillBound`])
    /// and the abort's grace, in which a healthy runtime returns from the
    /// aborted run (past it the engine counts as unresponsive, `halt.rs`). A
    /// run no generation bounds (an embedding's, or one in the moment before
    /// its generation saw it start) gets what a generation of its prompt's
    /// bytes would. (A decode gap longer than the first-token time-out's
    /// base is a hang: a step takes well under a second on a board.)
    fn prefill_allowance(&self, limits: &Limits, activity: &Activity) -> Duration {
        let recorded = activity.run.and_then(|run| self.bound.of(run));
        let bound = recorded.unwrap_or_else(|| {
            let bytes = activity.prompt_bytes;
            limits.first_token_timeout(bytes).min(self.prefill_stall(limits, None, (None, bytes), 1))
        });
        bound + ABORT_GRACE
    }

    /// `Ok` when the runtime thread answered a ping within `ping_timeout`,
    /// or is inside a run that progresses as fast as its limits allow.
    pub async fn check_alive(&self, model: &Model, limits: &Limits, ping_timeout: Duration) -> Result<(), String> {
        if !model.activity().running() {
            let answer = model.ping();
            // A run queued just before the ping delays the answer until the
            // run ends: stop waiting once it has started, and judge it below.
            let run_started = async {
                let mut every = tokio::time::interval(RUN_START_POLL);
                while !model.activity().running() {
                    every.tick().await;
                }
            };
            let answered = async {
                tokio::select! {
                    answer = answer => Some(answer),
                    () = run_started => None,
                }
            };
            match tokio::time::timeout(ping_timeout, answered).await {
                Ok(Some(Ok(Ok(())))) => return Ok(()),
                Ok(Some(_)) => return Err("the runtime thread has stopped".into()),
                Ok(None) | Err(_) => {}
            }
        }
        let activity = model.activity();
        if !activity.running() && activity.since_progress > ping_timeout {
            return Err(format!("the idle runtime thread did not answer within {} ms", ping_timeout.as_millis()));
        }
        let allowed =
            if activity.tokens == 0 { self.prefill_allowance(limits, &activity) } else { limits.first_token_base };
        if activity.since_progress <= allowed {
            return Ok(());
        }
        let phase = if activity.tokens == 0 { "prefill" } else { "decoding" };
        Err(format!(
            "no progress from the runtime for {:.0} s during {phase} (allowed {:.0} s)",
            activity.since_progress.as_secs_f64(),
            allowed.as_secs_f64()
        ))
    }
}

/// How long a decoding run may go without a token before it is aborted as
/// stuck: [`DECODE_STALL_STEPS`] of the run's own mean step so far, at least
/// [`DECODE_STALL_FLOOR`].
pub fn decode_stall(timeline: &Timeline) -> Duration {
    let mean = match (timeline.first_token, timeline.last_token) {
        (Some(first), Some(last)) if timeline.tokens > 1 => {
            last.saturating_duration_since(first) / (timeline.tokens - 1)
        }
        _ => Duration::ZERO,
    };
    (mean * DECODE_STALL_STEPS).max(DECODE_STALL_FLOOR)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_decode_stall_is_fifty_mean_steps_at_least_the_floor() {
        let start = Instant::now();
        let mut timeline = Timeline::new(start);
        assert_eq!(decode_stall(&timeline), DECODE_STALL_FLOOR, "nothing decoded yet");
        timeline.token(start);
        assert_eq!(decode_stall(&timeline), DECODE_STALL_FLOOR, "one token: no step measured");
        // Three steps of 100 ms: 5 s, under the floor.
        for i in 1..=3 {
            timeline.token(start + Duration::from_millis(100 * i));
        }
        assert_eq!(decode_stall(&timeline), DECODE_STALL_FLOOR);
        // A slow model: steps of 400 ms make 20 s.
        let mut slow = Timeline::new(start);
        for i in 0..=4 {
            slow.token(start + Duration::from_millis(400 * i));
        }
        assert_eq!(decode_stall(&slow), Duration::from_secs(20));
    }

    fn perf(ms: f64, tokens: i64) -> RuntimePerf {
        RuntimePerf {
            prefill_time_ms: ms,
            prefill_tokens: tokens,
            generate_time_ms: 0.0,
            generate_tokens: 0,
            memory_usage_mb: 0.0,
            batch_size: 1,
        }
    }

    /// The allowance in seconds, to compare with figures worked out by hand.
    fn stall_secs(pace: &PrefillPace, tokens: usize) -> f64 {
        (pace.stall(tokens).as_secs_f64() * 1000.0).round() / 1000.0
    }

    #[test]
    fn a_prefill_stall_is_three_expected_times_between_the_floor_and_the_cap() {
        let pace = PrefillPace::default();
        // The prior, 2.6 ms per token.
        assert_eq!(stall_secs(&pace, 10), 10.0, "the floor");
        assert_eq!(stall_secs(&pace, 2_048), 15.974, "3 × 5.325 s");
        assert_eq!(stall_secs(&pace, 8_192), 50.0, "3 × 21.3 s, capped");
        assert_eq!(stall_secs(&pace, 16_384), 53.248, "1.25 × 42.6 s: more than the cap");
        // Measured: 1 ms per token; runs under 256 tokens and no figures say nothing.
        pace.measured(Some(&perf(1_000.0, 1_000)));
        pace.measured(Some(&perf(5_000.0, 100)));
        pace.measured(None);
        assert_eq!(stall_secs(&pace, 5_000), 15.0);
        assert_eq!(stall_secs(&pace, 20_000), 50.0, "3 × 20 s, capped");
        // A slower run moves the average a quarter of the way: 1.5 ms per token.
        pace.measured(Some(&perf(3_000.0, 1_000)));
        assert_eq!(stall_secs(&pace, 5_000), 22.5);
        // A hang that returned (100 ms per token) counts as 4 × the pace:
        // 1.5 + (6 − 1.5) / 4 = 2.625 ms per token, not 25.
        pace.measured(Some(&perf(100_000.0, 1_000)));
        assert_eq!(stall_secs(&pace, 5_000), 39.375);
        // A model slower than the cap allows is given 1.25 × its own time.
        let slow = PrefillPace::default();
        slow.measured(Some(&perf(10_000.0, 1_000)));
        assert_eq!(stall_secs(&slow, 8_000), 100.0);
    }

    #[test]
    fn a_runs_prefill_bound_is_its_slots_longest_and_only_its_own() {
        let secs = Duration::from_secs;
        let bound = PrefillBound::default();
        assert_eq!(bound.of(1), None);
        for slot in [10, 30, 20] {
            bound.record(1, secs(slot));
        }
        assert_eq!(bound.of(1), Some(secs(30)), "a batch's slots: the longest");
        bound.record(2, secs(5));
        assert_eq!((bound.of(1), bound.of(2)), (None, Some(secs(5))), "the next run's own");
        bound.record(1, secs(40));
        assert_eq!(bound.of(2), Some(secs(5)), "a slot of the earlier run seen late changes nothing");
    }

    #[test]
    fn the_prefilled_tokens_are_the_sent_ids_else_the_prompts_else_its_bytes() {
        assert_eq!(prefill_tokens(Some(30), (Some(1_000), 4_000), 1, 4_096), 30);
        assert_eq!(prefill_tokens(None, (Some(1_000), 4_000), 1, 4_096), 1_000);
        assert_eq!(prefill_tokens(None, (None, 4_000), 1, 4_096), 2_000);
        assert_eq!(
            prefill_tokens(Some(30), (Some(1_000), 4_000), 2, 4_096),
            8_192,
            "a batch: every slot may fill the context"
        );
    }
}
