//! This process's own resource use, from `/proc/self` (always the real one,
//! not below `telemetry_root`: it describes the running daemon).

use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, ToSchema)]
pub struct ProcessStats {
    /// Resident memory now (VmRSS).
    pub rss_bytes: Option<u64>,
    /// Peak resident memory (VmHWM) — what the runtime reports as `memory_usage_mb`.
    pub peak_rss_bytes: Option<u64>,
    /// User + system CPU time consumed so far.
    pub cpu_seconds: Option<f64>,
}

impl ProcessStats {
    pub fn read() -> ProcessStats {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        ProcessStats {
            rss_bytes: status_kib(&status, "VmRSS:").map(|k| k * 1024),
            peak_rss_bytes: status_kib(&status, "VmHWM:").map(|k| k * 1024),
            cpu_seconds: cpu_ticks(&stat).zip(clock_ticks_per_second()).map(|(t, hz)| t as f64 / hz as f64),
        }
    }
}

/// A `Key:   1234 kB` line of `/proc/self/status`, in KiB.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix(key))?.split_whitespace().next()?.parse().ok()
}

/// utime + stime (fields 14 and 15) of `/proc/self/stat`, in clock ticks.
/// The command name (field 2) may contain spaces, so count after its `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    Some(fields.next()?.parse::<u64>().ok()? + fields.next()?.parse::<u64>().ok()?)
}

fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&hz| hz > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_proc_formats() {
        let status = "Name:\trkllmd\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(10240));
        assert_eq!(status_kib(status, "VmHWM:"), Some(20480));
        let stat = "42 (rk llmd) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(cpu_ticks(stat), Some(300), "utime 250 + stime 50, name with a space");
    }

    #[test]
    fn reads_this_process() {
        let s = ProcessStats::read();
        let (rss, peak) = (s.rss_bytes.unwrap(), s.peak_rss_bytes.unwrap());
        assert!(rss > 0 && peak >= rss, "rss {rss}, peak {peak}");
        assert!(s.cpu_seconds.unwrap() >= 0.0);
    }
}
