//! How soon clients come back: the gap between a batch slot's reply end
//! and the next request that continues the conversation it held, measured
//! for every returning conversation of a model (`schedule.rs` records them).
//!
//! The scheduler gathers a batch for as long as these clients take: their
//! recent 95th percentile, doubled, plus [`SLACK`] (a busy CPU delays a
//! client now and then), at least the configured `batch_gather_ms` and at
//! most the ceiling (`config::BATCH_GATHER_CEILING_MS`). A window shorter
//! than the clients' return lets a filler take a returning conversation's
//! slot, and that conversation, and every other slot once it returns,
//! prefills from the start (docs/performance.md). Until a return is
//! measured the window is the ceiling — the first return of a conversation
//! is caught too — but after [`GUESSES`] windows ran out without any
//! return, the clients are taken for ones that send one request each, and
//! the window is the configured one until some client does come back.
//! Returns later than the ceiling are not recorded: no window within it
//! would have caught them.
//! Returns a window missed are recorded (`slots.rs` remembers the
//! conversations slots lost), so the window grows when clients slow down.

use std::collections::VecDeque;
use std::time::Duration;

/// Returns remembered (the most recent).
const KEPT: usize = 64;

/// Added to twice the measured return time.
const SLACK: Duration = Duration::from_millis(10);

/// Windows at the ceiling that may run out before any client came back.
const GUESSES: u32 = 4;

/// The return gaps of one model's conversations.
#[derive(Debug, Default)]
pub(super) struct Returns {
    gaps: VecDeque<Duration>,
    /// Windows that ran out before any return was measured.
    unanswered: u32,
}

impl Returns {
    /// A conversation came back `gap` after its reply ended; `ceiling` is the
    /// longest the scheduler may wait.
    pub fn record(&mut self, gap: Duration, ceiling: Duration) {
        if gap > ceiling {
            return;
        }
        if self.gaps.len() == KEPT {
            self.gaps.pop_front();
        }
        self.gaps.push_back(gap);
    }

    /// A gathering window ran out before every client expected came back.
    pub fn ran_out(&mut self) {
        if self.gaps.is_empty() {
            self.unanswered = self.unanswered.saturating_add(1);
        }
    }

    /// How long to gather for the clients of a run: twice their recent 95th
    /// percentile plus [`SLACK`], within `[floor, ceiling]` (the floor wins
    /// over a lower ceiling); until one came back, the ceiling for the first
    /// [`GUESSES`] windows that run out, then the floor.
    pub fn window(&self, floor: Duration, ceiling: Duration) -> Duration {
        if self.gaps.is_empty() {
            return if self.unanswered < GUESSES { ceiling.max(floor) } else { floor };
        }
        let mut sorted: Vec<Duration> = self.gaps.iter().copied().collect();
        sorted.sort_unstable();
        // The nearest-rank 95th percentile.
        let rank = (sorted.len() * 95).div_ceil(100).max(1);
        (sorted[rank - 1] * 2 + SLACK).min(ceiling).max(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: Duration = Duration::from_millis(10);
    const CEILING: Duration = Duration::from_millis(250);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn until_a_client_returned_the_window_is_the_ceiling_then_the_configured_one() {
        let mut returns = Returns::default();
        for _ in 0..GUESSES {
            assert_eq!(returns.window(FLOOR, CEILING), CEILING);
            returns.ran_out();
        }
        assert_eq!(returns.window(FLOOR, CEILING), FLOOR, "clients that send one request each");
        returns.record(ms(30), CEILING);
        assert_eq!(returns.window(FLOOR, CEILING), ms(70), "until one comes back");
        returns.ran_out();
        assert_eq!(returns.window(FLOOR, CEILING), ms(70), "measured, a window that runs out changes nothing");
    }

    #[test]
    fn the_window_follows_the_95th_percentile_within_its_bounds() {
        let mut returns = Returns::default();
        // Python clients: 12–29 ms after their reply ended.
        for gap in (12..=29).chain(12..=29) {
            returns.record(ms(gap), CEILING);
        }
        // 36 gaps: the 35th smallest is 29 ms.
        assert_eq!(returns.window(FLOOR, CEILING), ms(2 * 29 + 10));
        assert_eq!(returns.window(ms(100), CEILING), ms(100), "never under the configured window");
        assert_eq!(returns.window(ms(1000), CEILING), ms(1000), "which wins over the ceiling");
        let mut slow = Returns::default();
        slow.record(ms(200), CEILING);
        assert_eq!(slow.window(FLOOR, CEILING), CEILING, "never over the ceiling");
    }

    #[test]
    fn returns_beyond_the_ceiling_and_old_ones_are_forgotten() {
        let mut returns = Returns::default();
        returns.record(ms(20), CEILING);
        returns.record(ms(5_000), CEILING);
        assert_eq!(returns.window(FLOOR, CEILING), ms(50), "a human's pause is not waited for");
        for _ in 0..KEPT {
            returns.record(ms(8), CEILING);
        }
        assert_eq!(returns.window(FLOOR, CEILING), ms(26), "only the last {KEPT} count");
    }
}
