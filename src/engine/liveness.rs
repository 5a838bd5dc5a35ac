//! Is the runtime thread alive? The question behind the systemd watchdog.
//!
//! An idle runtime thread must answer a ping at once. A thread inside
//! `rkllm_run` cannot answer, so it is judged by its signs of life (run
//! start, callbacks): a prefill has no callbacks for as long as the prompt
//! takes, a decode has one per token. A hung runtime (a wedged NPU driver, a
//! deadlock in the library) shows neither, and the daemon then stops pinging
//! so that systemd restarts it.

use super::{Engine, Limits};
use crate::metrics::Timeline;
use rkllm_sys::Activity;
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

/// How often a pending ping looks whether a run started instead.
const RUN_START_POLL: Duration = Duration::from_millis(10);

impl Engine {
    /// A run is inside the runtime and not known to be stuck: what the
    /// shutdown's grace period waits for.
    pub fn is_producing(&self) -> bool {
        self.in_run() && !self.is_unresponsive()
    }

    /// A run is inside the runtime: `rkllm_run` has not returned.
    pub fn in_run(&self) -> bool {
        self.model.activity().running
    }

    /// `Ok` when the runtime thread answered a ping within `ping_timeout`,
    /// or is inside a run that progresses as fast as its limits allow.
    pub async fn check_alive(&self, ping_timeout: Duration) -> Result<(), String> {
        if !self.model.activity().running {
            let answer = self.model.ping();
            // A run queued just before the ping delays the answer until the
            // run ends: stop waiting once it has started, and judge it below.
            let run_started = async {
                let mut every = tokio::time::interval(RUN_START_POLL);
                while !self.model.activity().running {
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
        let activity = self.model.activity();
        if !activity.running && activity.since_progress > ping_timeout {
            return Err(format!("the idle runtime thread did not answer within {} ms", ping_timeout.as_millis()));
        }
        let allowed = self.limits.stall_allowance(&activity);
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

impl Limits {
    /// How long a run may go without a sign of life before it counts as hung.
    /// Prefill: twice its first-token time-out (the request itself gives up
    /// at once, but a slow and healthy runtime only notices the abort after
    /// the prefill). Decode: a step takes well under a second on a board, so
    /// a gap as long as the base first-token time-out is a hang.
    pub fn stall_allowance(&self, activity: &Activity) -> Duration {
        if activity.tokens == 0 {
            self.first_token_timeout(activity.prompt_bytes) * 2
        } else {
            self.first_token_base
        }
    }
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
}
