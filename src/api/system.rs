//! `GET /v1/system`: the machine and runtime facts people otherwise collect
//! by hand next to their benchmarks. Every item that cannot be read here is
//! `null`. Field names are stable (the bench tool embeds this in reports).

use super::error::ApiError;
use super::runtime_info::Runtime;
use super::state::AppState;
use crate::engine::BackendKind;
use crate::metrics::init_log::InitFacts;
use crate::metrics::process::ProcessStats;
use crate::metrics::telemetry::{CoreLoad, Temperature};
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Debug, Serialize, ToSchema)]
pub struct SystemInfo {
    /// rkllmd's version.
    pub version: &'static str,
    /// The most recently used loaded model, whose runtime `runtime` describes (`null` when none is loaded).
    pub model: Option<String>,
    /// Every loaded model, most recently used first.
    pub loaded_models: Vec<String>,
    /// The loaded runtime (`null` while no model is loaded).
    pub runtime: Option<Runtime>,
    /// The loaded runtime is the simulator: what it would print about the
    /// board (platform, driver, NPU cores) is not reported (`null`), and no
    /// figure here or in a timing describes an NPU.
    pub simulated: bool,
    /// SoC as the runtime reported it at init (`RK3588`, …); `null` on the simulator.
    pub platform: Option<String>,
    /// rknpu driver version: sysfs/debugfs, else what the (real) runtime printed at init.
    pub driver_version: Option<String>,
    pub npu: Npu,
    /// Every thermal zone with a readable temperature.
    pub temperatures: Option<Vec<Temperature>>,
    pub memory: Memory,
    pub cpu: Cpu,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Npu {
    /// NPU cores: from the load file, else the (real) runtime's `npu_core_num`.
    pub cores: Option<u32>,
    /// Per-core load over the driver's 1-s window (debugfs; needs root).
    pub load: Option<Vec<CoreLoad>>,
    /// Current NPU clock (devfreq `cur_freq`).
    pub frequency_hz: Option<u64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Memory {
    /// This process's resident memory now (VmRSS).
    pub rss_bytes: Option<u64>,
    /// This process's peak resident memory (VmHWM).
    pub peak_rss_bytes: Option<u64>,
    /// The runtime's `memory_usage_mb` of the last run, in bytes.
    pub runtime_peak_bytes: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Cpu {
    /// CPUs this process may use.
    pub count: Option<usize>,
    /// 1, 5 and 15-minute load averages.
    pub load_average: Option<[f64; 3]>,
    /// CPU time this process has used (user + system).
    pub process_seconds: Option<f64>,
}

impl SystemInfo {
    pub fn gather(state: &AppState) -> SystemInfo {
        let observer = crate::metrics::observer();
        let snapshot = observer.telemetry.get();
        let models = state.models().map(|r| r.loaded()).unwrap_or_default();
        let engine = models.first().map(|l| &l.engine);
        let facts = engine.map(|e| InitFacts::parse(e.init_log())).unwrap_or_default();
        let simulated = facts.simulated || engine.is_some_and(|e| e.info().backend == BackendKind::Sim);
        // The simulator's banner names a board it does not run on.
        let facts = if simulated { InitFacts::default() } else { facts };
        let process = ProcessStats::read();
        SystemInfo {
            version: env!("CARGO_PKG_VERSION"),
            model: models.first().map(|m| m.model_id.clone()),
            loaded_models: models.iter().map(|m| m.model_id.clone()).collect(),
            runtime: engine.map(|e| Runtime::from(&**e)),
            simulated,
            platform: facts.platform,
            driver_version: snapshot.driver_version.clone().or(facts.driver_version),
            npu: Npu {
                cores: snapshot.npu_load.as_ref().map(|l| l.len() as u32).or(facts.npu_cores),
                load: snapshot.npu_load.clone(),
                frequency_hz: snapshot.npu_frequency_hz,
            },
            temperatures: (!snapshot.temperatures.is_empty()).then(|| snapshot.temperatures.clone()),
            memory: Memory {
                rss_bytes: process.rss_bytes,
                peak_rss_bytes: process.peak_rss_bytes,
                runtime_peak_bytes: observer.metrics.runtime_peak_memory_bytes(),
            },
            cpu: Cpu {
                count: std::thread::available_parallelism().ok().map(|n| n.get()),
                load_average: snapshot.loadavg,
                process_seconds: process.cpu_seconds,
            },
        }
    }

    /// Labels of the `rkllmd_runtime_info` metric: the versions that are known.
    pub fn info_labels(&self) -> Vec<(&'static str, String)> {
        let runtime = self.runtime.as_ref();
        [
            ("version", Some(self.version.to_owned())),
            ("backend", runtime.map(|r| r.backend.to_owned())),
            ("runtime_version", runtime.and_then(|r| r.version.clone())),
            ("abi", runtime.map(|r| r.abi.to_string())),
            ("simulated", self.simulated.then(|| "true".to_owned())),
            ("driver_version", self.driver_version.clone()),
            ("platform", self.platform.clone()),
        ]
        .into_iter()
        .filter_map(|(k, v)| Some((k, v?)))
        .collect()
    }
}

/// Runtime, NPU, memory and CPU facts of this machine (`null` = not available here).
#[utoipa::path(
    get,
    path = "/v1/system",
    tag = "observability",
    responses((status = 200, body = SystemInfo)),
    security(("bearer" = []))
)]
pub async fn get(State(state): State<AppState>) -> Result<Json<SystemInfo>, ApiError> {
    off_the_async_thread(move || SystemInfo::gather(&state)).await.map(Json).map_err(ApiError::runtime)
}

/// Runs `read` on the blocking pool. Reading the board's files (sysfs,
/// debugfs, /proc) can block — a debugfs read waits on the NPU driver — and
/// the daemon serves on one async thread, which every stream's tokens share.
pub(super) async fn off_the_async_thread<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(read).await.map_err(|e| format!("reading the system's state failed: {e}"))
}
