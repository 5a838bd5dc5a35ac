//! Sampling a local server process through /proc: CPU time (utime + stime)
//! around a level, resident memory while it runs.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often VmRSS is read while a level runs.
const RSS_PERIOD: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Serialize)]
pub struct ServerProcess {
    pub pid: u32,
    /// Δ(utime + stime) over the measured requests of the level.
    pub cpu_ms: f64,
    /// cpu_ms × 1000 / Σ completion tokens streamed in the level.
    pub cpu_us_per_token: Option<f64>,
    /// The largest VmRSS seen, read every 20 ms during the level.
    pub rss_peak_kib: u64,
    pub rss_end_kib: u64,
    /// VmHWM at the end: the process's peak since it started.
    pub vm_hwm_kib: u64,
    /// Resolution of cpu_ms (one clock tick).
    pub tick_ms: f64,
}

fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // The command name (field 2) may contain spaces and parentheses: fields are counted after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    field(11).zip(field(12)).map(|(u, s)| u + s).ok_or_else(|| format!("/proc/{pid}/stat: unexpected format"))
}

fn status_kib(pid: u32, key: &str) -> Result<u64, String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/status has no {key}"))
}

fn tick_ms() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1000.0 / if hz > 0 { hz as f64 } else { 100.0 }
}

pub struct Sampler {
    pid: u32,
    ticks_before: u64,
    peak: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    pub fn start(pid: u32) -> Result<Sampler, String> {
        let ticks_before = cpu_ticks(pid)?;
        let peak = Arc::new(AtomicU64::new(status_kib(pid, "VmRSS")?));
        let sink = peak.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(RSS_PERIOD);
            loop {
                every.tick().await;
                if let Ok(rss) = status_kib(pid, "VmRSS") {
                    sink.fetch_max(rss, Ordering::Relaxed);
                }
            }
        });
        Ok(Sampler { pid, ticks_before, peak, task })
    }

    pub fn finish(self, tokens: u64) -> Result<ServerProcess, String> {
        self.task.abort();
        let tick = tick_ms();
        let cpu_ms = cpu_ticks(self.pid)?.saturating_sub(self.ticks_before) as f64 * tick;
        let rss_end_kib = status_kib(self.pid, "VmRSS")?;
        Ok(ServerProcess {
            pid: self.pid,
            cpu_ms,
            cpu_us_per_token: (tokens > 0).then(|| cpu_ms * 1000.0 / tokens as f64),
            rss_peak_kib: self.peak.load(Ordering::Relaxed).max(rss_end_kib),
            rss_end_kib,
            vm_hwm_kib: status_kib(self.pid, "VmHWM")?,
            tick_ms: tick,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(cpu_ticks(me).is_ok());
        let rss = status_kib(me, "VmRSS").unwrap();
        assert!(rss > 0 && status_kib(me, "VmHWM").unwrap() >= rss);
        assert!(status_kib(me, "NoSuchKey").is_err());
        assert!(cpu_ticks(u32::MAX).is_err());
    }
}
