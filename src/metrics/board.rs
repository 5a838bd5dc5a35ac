//! The one set of readers of the board's files in sysfs, debugfs, procfs,
//! /dev and /etc, all under a root directory (`/` on a board, a fixture tree
//! in tests), with the formats of the telemetry table in docs/runtime.md.
//! `telemetry` samples them for `/metrics` and `/v1/system`; `doctor` judges them.
//!
//! Every file is optional (absent on x86, without the vendor kernel, or
//! without root for debugfs): an absent, empty or malformed file is a missing
//! value, never an error.

use serde::Serialize;
use std::path::{Path, PathBuf};
use utoipa::ToSchema;

/// Per-core NPU load over the driver's 1-second window (root only).
pub const NPU_LOAD: &str = "/sys/kernel/debug/rknpu/load";
/// The module's `version` (readable by anyone) first, then debugfs (root only).
const DRIVER_VERSIONS: [&str; 2] = ["/sys/module/rknpu/version", "/sys/kernel/debug/rknpu/version"];
pub const LOADAVG: &str = "/proc/loadavg";
const DEVFREQ: &str = "/sys/class/devfreq";
const THERMAL: &str = "/sys/class/thermal";
const CPUFREQ: &str = "/sys/devices/system/cpu/cpufreq";

/// The filesystem as seen from `root`.
#[derive(Debug, Clone)]
pub struct Board {
    root: PathBuf,
}

/// One devfreq device (NPU or DDR).
#[derive(Debug, Clone, PartialEq)]
pub struct Devfreq {
    pub name: String,
    pub governor: Option<String>,
    pub cur_hz: Option<u64>,
    pub max_hz: Option<u64>,
}

/// One cpufreq policy (a cluster of cores sharing a clock).
#[derive(Debug, Clone, PartialEq)]
pub struct CpuPolicy {
    pub name: String,
    pub cpus: String,
    pub governor: Option<String>,
    pub cur_khz: Option<u64>,
    pub max_khz: Option<u64>,
}

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

/// The NPU device nodes found.
#[derive(Debug, Clone, Default)]
pub struct NpuNodes {
    pub rknpu: Option<PathBuf>,
    pub heaps: Vec<PathBuf>,
    pub render: Option<PathBuf>,
}

impl Board {
    pub fn new(root: impl Into<PathBuf>) -> Board {
        Board { root: root.into() }
    }

    /// An absolute system path under the root.
    pub fn path(&self, absolute: &str) -> PathBuf {
        self.root.join(absolute.trim_start_matches('/'))
    }

    /// A file's trimmed text; `None` when it is absent, unreadable or empty.
    fn read(&self, absolute: &str) -> Option<String> {
        std::fs::read_to_string(self.path(absolute)).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
    }

    fn number<T: std::str::FromStr>(&self, absolute: &str) -> Option<T> {
        self.read(absolute)?.parse().ok()
    }

    /// Per-core NPU load from debugfs.
    pub fn npu_load(&self) -> Option<Vec<CoreLoad>> {
        parse_npu_load(&self.read(NPU_LOAD)?)
    }

    /// The rknpu driver version and the file it came from: the module's
    /// `version` (`0.9.8`), else debugfs (`RKNPU driver: v0.9.8`, root only).
    /// A file without a version in it gives way to the next.
    pub fn npu_driver_version(&self) -> Option<(String, &'static str)> {
        DRIVER_VERSIONS.into_iter().find_map(|file| Some((parse_driver_version(&self.read(file)?)?, file)))
    }

    /// The NPU's devfreq device, named `<address>.npu` (`fdab0000.npu` on
    /// RK3588, `27700000.npu` on RK3576); the first by name if several.
    pub fn npu_devfreq(&self) -> Option<Devfreq> {
        self.devfreq_where(|name| name.ends_with(".npu"))
    }

    /// The DDR controller's devfreq device (`dmc`).
    pub fn ddr_devfreq(&self) -> Option<Devfreq> {
        self.devfreq_where(|name| name == "dmc" || name.ends_with(".dmc"))
    }

    fn devfreq_where(&self, pred: impl Fn(&str) -> bool) -> Option<Devfreq> {
        let name = sorted_names(&self.path(DEVFREQ)).into_iter().find(|n| pred(n))?;
        let dir = format!("{DEVFREQ}/{name}");
        Some(Devfreq {
            governor: self.read(&format!("{dir}/governor")),
            cur_hz: self.number(&format!("{dir}/cur_freq")),
            max_hz: self.number(&format!("{dir}/max_freq")),
            name,
        })
    }

    /// Every cpufreq policy, in name order.
    pub fn cpu_policies(&self) -> Vec<CpuPolicy> {
        sorted_names(&self.path(CPUFREQ))
            .into_iter()
            .filter(|n| n.starts_with("policy"))
            .map(|name| {
                let dir = format!("{CPUFREQ}/{name}");
                CpuPolicy {
                    cpus: self.read(&format!("{dir}/related_cpus")).unwrap_or_default(),
                    governor: self.read(&format!("{dir}/scaling_governor")),
                    cur_khz: self.number(&format!("{dir}/scaling_cur_freq")),
                    max_khz: self.number(&format!("{dir}/scaling_max_freq")),
                    name,
                }
            })
            .collect()
    }

    /// How many CPUs are online (`/sys/devices/system/cpu/online`, e.g. `0-7`).
    pub fn cpus_online(&self) -> Option<usize> {
        parse_cpu_list(&self.read("/sys/devices/system/cpu/online")?)
    }

    /// `MemTotal` and `MemAvailable` from `/proc/meminfo`, in bytes.
    pub fn memory(&self) -> Option<(u64, u64)> {
        let text = self.read("/proc/meminfo")?;
        let field = |key: &str| {
            text.lines().find_map(|l| l.strip_prefix(key)?.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        };
        Some((field("MemTotal:")? * 1024, field("MemAvailable:")? * 1024))
    }

    /// Every `thermal_zone*` with a readable `type` and `temp` (milli-°C), in zone order.
    pub fn temperatures(&self) -> Vec<Temperature> {
        let mut zones: Vec<(u32, String)> = sorted_names(&self.path(THERMAL))
            .into_iter()
            .filter_map(|name| Some((name.strip_prefix("thermal_zone")?.parse().ok()?, name)))
            .collect();
        // By number: thermal_zone10 comes after thermal_zone9.
        zones.sort();
        zones
            .into_iter()
            .filter_map(|(_, name)| {
                let zone = self.read(&format!("{THERMAL}/{name}/type"))?;
                let milli: f64 = self.number(&format!("{THERMAL}/{name}/temp"))?;
                Some(Temperature { zone, celsius: milli / 1000.0 })
            })
            .collect()
    }

    /// The 1, 5 and 15-minute load averages.
    pub fn loadavg(&self) -> Option<[f64; 3]> {
        parse_loadavg(&self.read(LOADAVG)?)
    }

    /// The device nodes the runtime opens: `/dev/rknpu` with the DMA heaps
    /// (older kernels), or the NPU's DRM render node (DRM-GEM kernels).
    pub fn npu_nodes(&self) -> NpuNodes {
        let rknpu = self.path("/dev/rknpu");
        let heaps: Vec<PathBuf> =
            sorted_names(&self.path("/dev/dma_heap")).into_iter().map(|n| self.path("/dev/dma_heap").join(n)).collect();
        let render = sorted_names(&self.path("/dev/dri"))
            .into_iter()
            .filter(|n| n.starts_with("renderD"))
            .find(|n| self.is_npu_render_node(n))
            .map(|n| self.path("/dev/dri").join(n));
        NpuNodes { rknpu: rknpu.exists().then_some(rknpu), heaps, render }
    }

    /// The render node's driver is rknpu (its sysfs `uevent` says so); when
    /// sysfs does not tell, `renderD129`, where DRM-GEM kernels put the NPU.
    fn is_npu_render_node(&self, name: &str) -> bool {
        match self.read(&format!("/sys/class/drm/{name}/device/uevent")) {
            Some(uevent) => uevent.to_ascii_lowercase().contains("rknpu"),
            None => name == "renderD129",
        }
    }

    /// Group names by id, from `/etc/group`.
    pub fn group_name(&self, gid: u32) -> Option<String> {
        self.read("/etc/group")?.lines().find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            (fields.nth(1)?.parse::<u32>().ok()? == gid).then(|| name.to_owned())
        })
    }
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// `NPU load:  Core0:  0%, Core1:  0%, Core2:  0%,` (multi-core) or
/// `NPU load:  0%` (single-core). An empty number (`Core0: %,`) means 0.
fn parse_npu_load(text: &str) -> Option<Vec<CoreLoad>> {
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

/// `0.9.8`, `v0.9.8` or `RKNPU driver: v0.9.8` → `0.9.8`; no version without a digit first.
fn parse_driver_version(text: &str) -> Option<String> {
    let word = text.split_whitespace().last()?;
    let version = word.strip_prefix('v').unwrap_or(word);
    version.starts_with(|c: char| c.is_ascii_digit()).then(|| version.to_owned())
}

/// `/proc/loadavg`: `1.52 0.98 0.44 2/311 12345`.
fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut fields = text.split_whitespace().map(|f| f.parse::<f64>().ok());
    Some([fields.next()??, fields.next()??, fields.next()??])
}

/// `0-3,6` → 5.
fn parse_cpu_list(list: &str) -> Option<usize> {
    list.split(',').map(str::trim).filter(|r| !r.is_empty()).try_fold(0, |count, range| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
        (b >= a).then(|| count + b - a + 1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-7"), Some(8));
        assert_eq!(parse_cpu_list("0-3,6"), Some(5));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
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
    fn a_module_file_without_a_version_gives_way_to_debugfs() {
        let dir = tempfile::tempdir().unwrap();
        let board = Board::new(dir.path());
        for (file, text) in [(DRIVER_VERSIONS[0], "unknown\n"), (DRIVER_VERSIONS[1], "RKNPU driver: v0.9.8\n")] {
            std::fs::create_dir_all(board.path(file).parent().unwrap()).unwrap();
            std::fs::write(board.path(file), text).unwrap();
        }
        assert_eq!(board.npu_driver_version(), Some(("0.9.8".to_owned(), DRIVER_VERSIONS[1])));
        std::fs::write(board.path(DRIVER_VERSIONS[0]), "v0.9.7\n").unwrap();
        assert_eq!(board.npu_driver_version(), Some(("0.9.7".to_owned(), DRIVER_VERSIONS[0])));
    }
}
