//! NPU and system telemetry from sysfs, debugfs and procfs (the table in
//! `shared/rkllm-runtime.md`). Every file is optional: a board without
//! debugfs access or an x86 machine simply has fewer figures, and a missing
//! file is a missing value, never an error.
//!
//! All paths are read below a configurable root (`telemetry_root`, default
//! `/`) so the readers can be tested on fixture trees in the real formats.
//! [`Sampler`] reads at most once a second, when asked (on a scrape or a
//! `/v1/system` request) — never on the token path.

use serde::Serialize;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use utoipa::ToSchema;

const NPU_LOAD: &str = "sys/kernel/debug/rknpu/load";
const DRIVER_VERSIONS: [&str; 2] = ["sys/module/rknpu/version", "sys/kernel/debug/rknpu/version"];
const DEVFREQ: &str = "sys/class/devfreq";
const THERMAL: &str = "sys/class/thermal";
const LOADAVG: &str = "proc/loadavg";

/// One NPU core's load over the driver's 1-second window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, ToSchema)]
pub struct CoreLoad {
    /// Core index (0 on single-core SoCs).
    pub core: u32,
    /// Busy share, 0–1.
    pub ratio: f64,
}

/// One thermal zone.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Temperature {
    /// The zone's `type` (`npu-thermal`, `soc-thermal`, `bigcore0-thermal`, …).
    pub zone: String,
    pub celsius: f64,
}

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
        let mut note = |what: &'static str, found: bool| {
            if !found {
                missing.push(what);
            }
        };
        let npu_load = read(root, NPU_LOAD).and_then(|t| parse_npu_load(&t));
        note(NPU_LOAD, npu_load.is_some());
        let driver_version = DRIVER_VERSIONS.iter().find_map(|p| read(root, p)).and_then(|t| parse_driver_version(&t));
        note("rknpu driver version", driver_version.is_some());
        let npu_frequency_hz = npu_frequency(root);
        note("NPU devfreq cur_freq", npu_frequency_hz.is_some());
        let temperatures = temperatures(root);
        note("thermal zones", !temperatures.is_empty());
        let loadavg = read(root, LOADAVG).and_then(|t| parse_loadavg(&t));
        note(LOADAVG, loadavg.is_some());
        Snapshot { npu_load, npu_frequency_hz, driver_version, temperatures, loadavg }
    }
}

fn read(root: &Path, relative: &str) -> Option<String> {
    std::fs::read_to_string(root.join(relative)).ok()
}

/// `NPU load:  Core0:  0%, Core1:  0%, Core2:  0%,` (multi-core) or
/// `NPU load:  0%` (single-core). An empty number (`Core0: %,`) means 0.
pub fn parse_npu_load(text: &str) -> Option<Vec<CoreLoad>> {
    let rest = text.trim().strip_prefix("NPU load:")?;
    let mut cores = Vec::new();
    for (index, part) in rest.split(',').map(str::trim).filter(|p| !p.is_empty()).enumerate() {
        let (core, value) = match part.strip_prefix("Core") {
            Some(labelled) => {
                let (n, value) = labelled.split_once(':')?;
                (n.trim().parse().ok()?, value)
            }
            None => (u32::try_from(index).ok()?, part),
        };
        let digits = value.trim().strip_suffix('%')?.trim();
        let percent: f64 = if digits.is_empty() { 0.0 } else { digits.parse().ok()? };
        cores.push(CoreLoad { core, ratio: percent / 100.0 });
    }
    (!cores.is_empty()).then_some(cores)
}

/// `0.9.8`, `v0.9.8` or `RKNPU driver: v0.9.8` → `0.9.8`.
pub fn parse_driver_version(text: &str) -> Option<String> {
    let word = text.split_whitespace().last()?;
    let version = word.strip_prefix('v').unwrap_or(word);
    version.starts_with(|c: char| c.is_ascii_digit()).then(|| version.to_owned())
}

/// The NPU's devfreq device is named `<address>.npu` (`fdab0000.npu` on
/// RK3588, `27700000.npu` on RK3576).
fn npu_frequency(root: &Path) -> Option<u64> {
    let mut devices: Vec<PathBuf> = std::fs::read_dir(root.join(DEVFREQ))
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".npu"))
        .map(|e| e.path())
        .collect();
    devices.sort();
    devices.iter().find_map(|d| std::fs::read_to_string(d.join("cur_freq")).ok()?.trim().parse().ok())
}

/// Every `thermal_zone*` with a readable `type` and `temp` (milli-°C), in zone order.
fn temperatures(root: &Path) -> Vec<Temperature> {
    let Ok(entries) = std::fs::read_dir(root.join(THERMAL)) else { return Vec::new() };
    let mut zones: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().strip_prefix("thermal_zone")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    zones.sort();
    zones
        .into_iter()
        .filter_map(|(_, dir)| {
            let zone = std::fs::read_to_string(dir.join("type")).ok()?.trim().to_owned();
            let milli: f64 = std::fs::read_to_string(dir.join("temp")).ok()?.trim().parse().ok()?;
            Some(Temperature { zone, celsius: milli / 1000.0 })
        })
        .collect()
}

/// `/proc/loadavg`: `1.52 0.98 0.44 2/311 12345`.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
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
    fn malformed_text_is_no_value() {
        assert_eq!(parse_npu_load("garbage"), None);
        assert_eq!(parse_npu_load("NPU load:  Core0: abc%,"), None);
        assert_eq!(parse_npu_load("NPU load:"), None);
        assert_eq!(parse_driver_version("RKNPU driver: unknown"), None);
        assert_eq!(parse_loadavg("1.0 x"), None);
    }

    #[test]
    fn the_sampler_reads_at_most_once_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let load = dir.path().join(NPU_LOAD);
        std::fs::create_dir_all(load.parent().unwrap()).unwrap();
        std::fs::write(&load, "NPU load:  5%\n").unwrap();
        let sampler = Sampler::new(dir.path());
        let first = sampler.get();
        std::fs::write(&load, "NPU load:  90%\n").unwrap();
        assert!(Arc::ptr_eq(&first, &sampler.get()), "within a second the cached snapshot is reused");
        assert_eq!(first.npu_load.as_ref().unwrap()[0].ratio, 0.05);
    }
}
