//! What restoring a saved conversation and prefilling cost on this model,
//! measured as the runs go, so that a file is loaded only while loading
//! it beats prefilling its ids again (`saved.rs`, `shared_prefix.rs`).

/// Milliseconds per token, as measured on this model: loading a file
/// (`rkllm_load_prompt_cache`, timed around the call) and prefilling (the
/// runtime's own `perf` of runs that prefilled at least
/// [`Costs::MIN_PREFILL`] tokens, so that a run's fixed cost does not
/// dominate). A run's `prefill_time_ms` also holds the saving of its file
/// (the simulator's model; whether it does on a board is *open*), which is
/// taken out at the load's rate: so prefills are measured once a load was,
/// and only from runs that prefilled at least half of what they saved.
/// Each is a moving average over recent measurements.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Costs {
    /// From the RAM tier, and from the disk tier.
    load: [Option<f64>; 2],
    prefill: Option<f64>,
}

impl Costs {
    const MIN_PREFILL: i64 = 16;
    const MARGIN_MS: f64 = 5.0;
    /// The weight of a new measurement.
    const NEW: f64 = 0.25;

    fn mix(old: Option<f64>, new: f64) -> Option<f64> {
        Some(old.map_or(new, |old| old + Self::NEW * (new - old)))
    }

    /// Whether loading a file of `held` ids beats prefilling them, by what
    /// each cost here: a load is skipped once it measures clearly slower —
    /// twice the prefill and [`Costs::MARGIN_MS`] more (a load's time is
    /// taken around a call to the runtime thread, which a busy machine
    /// delays; where prefilling is nearly free, as on a simulator without
    /// delays, that is noise). Restoring until both were measured: the
    /// vendor's figures make it 10–100× cheaper on tmpfs
    /// (shared/rkllm-runtime.md).
    pub fn worth_restoring(&self, held: usize, on_disk: bool) -> bool {
        match (self.load[usize::from(on_disk)], self.prefill) {
            (Some(load), Some(prefill)) => {
                let (load, prefill) = (load * held as f64, prefill * held as f64);
                load < 2.0 * prefill || load < prefill + Costs::MARGIN_MS
            }
            _ => true,
        }
    }

    /// A load of a file holding `tokens` ids took `ms`.
    pub fn measured_load(&mut self, ms: f64, tokens: usize, on_disk: bool) {
        let load = &mut self.load[usize::from(on_disk)];
        if tokens > 0 {
            *load = Costs::mix(*load, ms / tokens as f64);
        }
    }

    /// A run prefilled `tokens` ids in `ms` (the runtime's figures) and
    /// saved a file of `saved` ids.
    pub fn measured_prefill(&mut self, ms: f64, tokens: i64, saved: usize) {
        // Runs save to the RAM tier.
        let Some(load) = self.load[0] else { return };
        let ms = ms - load * saved as f64;
        // A run whose save outweighs its prefill leaves mostly that guess.
        let prefill_counts = tokens >= Costs::MIN_PREFILL && usize::try_from(tokens).unwrap_or(0) * 2 >= saved;
        if prefill_counts && ms > 0.0 {
            self.prefill = Costs::mix(self.prefill, ms / tokens as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restore_is_made_while_it_measures_cheaper_than_the_prefill() {
        let mut s = Costs::default();
        assert!(s.worth_restoring(100, false), "nothing measured yet: restore");
        s.measured_prefill(50.0, 100, 0);
        s.measured_load(400.0, 100, false);
        assert!(s.worth_restoring(100, false), "a prefill before any load cannot take its saving out: not counted");
        s.measured_prefill(50.0, 10, 0);
        assert!(s.worth_restoring(100, false), "a prefill of 10 tokens is mostly its fixed cost: not counted");
        s.measured_prefill(1_000.0, 100, 300);
        assert!(s.worth_restoring(100, false), "a save three times the prefill: not counted");
        s.measured_prefill(550.0, 100, 100);
        assert!(
            !s.worth_restoring(100, false),
            "loading 4 ms a token, prefilling 1.5 ms (550 less the 400 of its save)"
        );
        for _ in 0..8 {
            s.measured_load(250.0, 100, false);
        }
        assert!(s.worth_restoring(100, false), "the average follows faster loads; 2.5 ms is within twice 1.5");
        s.measured_load(1_000.0, 100, false);
        assert!(!s.worth_restoring(100, false));
        assert!(s.worth_restoring(1, false), "a small file: a few ms either way");
    }
}
