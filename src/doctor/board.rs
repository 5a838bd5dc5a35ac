//! Readers of the board's facts in sysfs, procfs and /dev, all under a
//! root directory (`/` on a board, a fixture tree in tests).
//!
//! These are small, side-effect-free readers named after what they read, so
//! they can move to `metrics`' NPU/system telemetry readers when the two
//! meet; every file is optional (absent on x86 and without the vendor kernel).

use std::path::{Path, PathBuf};

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

impl Board {
    pub fn new(root: impl Into<PathBuf>) -> Board {
        Board { root: root.into() }
    }

    /// An absolute system path under the root.
    pub fn path(&self, absolute: &str) -> PathBuf {
        self.root.join(absolute.trim_start_matches('/'))
    }

    fn read(&self, absolute: &str) -> Option<String> {
        std::fs::read_to_string(self.path(absolute)).ok().map(|s| s.trim().to_owned()).filter(|s| !s.is_empty())
    }

    fn number(&self, absolute: &str) -> Option<u64> {
        self.read(absolute)?.parse().ok()
    }

    /// The rknpu driver version and the file it came from: the module's
    /// `version` (`0.9.8`), else debugfs (`RKNPU driver: v0.9.8`, root only).
    pub fn npu_driver_version(&self) -> Option<(String, String)> {
        ["/sys/module/rknpu/version", "/sys/kernel/debug/rknpu/version"].into_iter().find_map(|file| {
            let text = self.read(file)?;
            let version = text.split_whitespace().last()?.trim_start_matches('v').to_owned();
            Some((version, file.to_owned()))
        })
    }

    /// The NPU's devfreq device (`fdab0000.npu` on RK3588, `27700000.npu` on RK3576).
    pub fn npu_devfreq(&self) -> Option<Devfreq> {
        self.devfreq_where(|name| name.ends_with(".npu") || name == "npu")
    }

    /// The DDR controller's devfreq device (`dmc`).
    pub fn ddr_devfreq(&self) -> Option<Devfreq> {
        self.devfreq_where(|name| name == "dmc" || name.ends_with(".dmc"))
    }

    fn devfreq_where(&self, pred: impl Fn(&str) -> bool) -> Option<Devfreq> {
        let name = sorted_names(&self.path("/sys/class/devfreq")).into_iter().find(|n| pred(n))?;
        let dir = format!("/sys/class/devfreq/{name}");
        Some(Devfreq {
            governor: self.read(&format!("{dir}/governor")),
            cur_hz: self.number(&format!("{dir}/cur_freq")),
            max_hz: self.number(&format!("{dir}/max_freq")),
            name,
        })
    }

    /// Every cpufreq policy, in name order.
    pub fn cpu_policies(&self) -> Vec<CpuPolicy> {
        let base = "/sys/devices/system/cpu/cpufreq";
        sorted_names(&self.path(base))
            .into_iter()
            .filter(|n| n.starts_with("policy"))
            .map(|name| {
                let dir = format!("{base}/{name}");
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

/// The NPU device nodes found.
#[derive(Debug, Clone, Default)]
pub struct NpuNodes {
    pub rknpu: Option<PathBuf>,
    pub heaps: Vec<PathBuf>,
    pub render: Option<PathBuf>,
}

fn sorted_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// `0-3,6` → 5.
fn parse_cpu_list(list: &str) -> Option<usize> {
    list.split(',').map(str::trim).filter(|r| !r.is_empty()).try_fold(0, |count, range| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let (a, b) = (a.parse::<usize>().ok()?, b.parse::<usize>().ok()?);
        (b >= a).then(|| count + b - a + 1)
    })
}

/// A dotted version as numbers, for comparison (`0.9.8` → [0, 9, 8]).
pub fn version_parts(version: &str) -> Vec<u32> {
    version.split('.').map_while(|p| p.parse().ok()).collect()
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
    fn versions_compare_numerically() {
        assert!(version_parts("0.9.10") > version_parts("0.9.8"));
        assert!(version_parts("0.9.7") < version_parts("0.9.8"));
        assert_eq!(version_parts("0.9.8"), vec![0, 9, 8]);
    }
}
