//! NPU and system telemetry (the table in docs/runtime.md), read
//! with [`super::board`]'s readers. Every file is optional: a board without
//! debugfs access or an x86 machine simply has fewer figures, and a missing
//! file is a missing value, never an error.
//!
//! All paths are read below a configurable root (`telemetry_root`, default
//! `/`) so the readers can be tested on fixture trees in the real formats.
//! [`Sampler`] reads at most once a second, when asked (on a scrape or a
//! `/v1/system` request) — never on the token path.

use super::board::{Board, LOADAVG, NPU_LOAD};
pub use super::board::{CoreLoad, Temperature};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What could be read at one moment; `None`/empty = not available here.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub npu_load: Option<Vec<CoreLoad>>,
    pub npu_frequency_hz: Option<u64>,
    pub driver_version: Option<String>,
    pub temperatures: Vec<Temperature>,
    /// 1, 5 and 15-minute load averages.
    pub loadavg: Option<[f64; 3]>,
}

impl Snapshot {
    /// Reads every source below `root`; `missing` collects what was absent.
    pub fn read(root: &Path, missing: &mut Vec<&'static str>) -> Snapshot {
        let board = Board::new(root);
        let mut note = |what: &'static str, found: bool| {
            if !found {
                missing.push(what);
            }
        };
        let npu_load = board.npu_load();
        note(NPU_LOAD, npu_load.is_some());
        let driver_version = board.npu_driver_version().map(|(version, _file)| version);
        note("rknpu driver version", driver_version.is_some());
        let npu_frequency_hz = board.npu_devfreq().and_then(|d| d.cur_hz);
        note("NPU devfreq cur_freq", npu_frequency_hz.is_some());
        let temperatures = board.temperatures();
        note("thermal zones", !temperatures.is_empty());
        let loadavg = board.loadavg();
        note(LOADAVG, loadavg.is_some());
        Snapshot { npu_load, npu_frequency_hz, driver_version, temperatures, loadavg }
    }
}

/// Reads the telemetry at most once per second and shares the result.
pub struct Sampler {
    root: PathBuf,
    cache: Mutex<Option<(Instant, Arc<Snapshot>)>>,
    /// Sources already reported missing (each is logged once, at debug).
    reported: Mutex<HashSet<&'static str>>,
}

const MAX_AGE: Duration = Duration::from_secs(1);

impl Sampler {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Sampler { root: root.into(), cache: Mutex::new(None), reported: Mutex::new(HashSet::new()) }
    }

    /// The latest snapshot, read again if the cached one is older than a second.
    pub fn get(&self) -> Arc<Snapshot> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, snapshot)) = cache.as_ref() {
            if at.elapsed() < MAX_AGE {
                return snapshot.clone();
            }
        }
        let mut missing = Vec::new();
        let snapshot = Arc::new(Snapshot::read(&self.root, &mut missing));
        let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        for what in missing {
            if reported.insert(what) {
                tracing::debug!(root = %self.root.display(), source = what, "telemetry source not available");
            }
        }
        *cache = Some((Instant::now(), snapshot.clone()));
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Snapshot {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/telemetry").join(name);
        Snapshot::read(&root, &mut Vec::new())
    }

    fn loads(s: &Snapshot) -> Vec<(u32, f64)> {
        s.npu_load.as_ref().unwrap().iter().map(|c| (c.core, c.ratio)).collect()
    }

    #[test]
    fn three_core_board() {
        let s = fixture("rk3588");
        assert_eq!(loads(&s), vec![(0, 0.35), (1, 0.0), (2, 1.0)]);
        assert_eq!(s.driver_version.as_deref(), Some("0.9.8"));
        assert_eq!(s.npu_frequency_hz, Some(1_000_000_000), "the .npu device, not dmc");
        let zones: Vec<_> = s.temperatures.iter().map(|t| (t.zone.as_str(), t.celsius)).collect();
        assert_eq!(zones, vec![("soc-thermal", 41.588), ("bigcore0-thermal", 42.512), ("npu-thermal", 40.662)]);
        assert_eq!(s.loadavg, Some([1.52, 0.98, 0.44]));
    }

    #[test]
    fn single_core_board() {
        let s = fixture("single-core");
        assert_eq!(loads(&s), vec![(0, 0.12)]);
        assert_eq!(s.driver_version.as_deref(), Some("0.9.6"), "from debugfs when the module has no version file");
        assert_eq!(s.npu_frequency_hz, Some(950_000_000));
        assert_eq!(s.temperatures, vec![Temperature { zone: "npu-thermal".into(), celsius: 38.0 }]);
    }

    #[test]
    fn an_empty_number_is_zero() {
        let s = fixture("empty-number");
        assert_eq!(loads(&s), vec![(0, 0.0), (1, 0.07), (2, 0.0)]);
        assert_eq!(s.npu_frequency_hz, None);
    }

    #[test]
    fn missing_files_are_missing_values() {
        let mut missing = Vec::new();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/telemetry/missing");
        assert_eq!(Snapshot::read(&root, &mut missing), Snapshot::default());
        assert_eq!(missing.len(), 5, "{missing:?}");
    }

    #[test]
    fn the_sampler_reads_at_most_once_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let load = Board::new(dir.path()).path(NPU_LOAD);
        std::fs::create_dir_all(load.parent().unwrap()).unwrap();
        std::fs::write(&load, "NPU load:  5%\n").unwrap();
        let sampler = Sampler::new(dir.path());
        let first = sampler.get();
        std::fs::write(&load, "NPU load:  90%\n").unwrap();
        assert!(Arc::ptr_eq(&first, &sampler.get()), "within a second the cached snapshot is reused");
        assert_eq!(first.npu_load.as_ref().unwrap()[0].ratio, 0.05);
    }
}
