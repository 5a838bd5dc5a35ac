//! `rkllmd serve`: bind, register the models (loading the one-model case's
//! at once; the others load on demand), serve until SIGTERM/SIGINT, then
//! shut down gracefully.
//!
//! The socket is bound first so `/health` answers (and `/health/ready` says
//! `loading`) while a large model loads. A model that fails to load ends the
//! process with a non-zero status and the runtime's own lines in the error:
//! a service manager restarts it, and nothing half-working stays up.
//!
//! Under systemd (`Type=notify`) it reports `STATUS=` lines, asks for more
//! start time while the model loads (`EXTEND_TIMEOUT_USEC`), sends
//! `READY=1` once the model is loaded and the socket bound, and, with
//! `WatchdogSec=`, pings the watchdog only while the runtime thread is alive
//! (`Engine::check_alive`).

use crate::api::{self, AppState};
use crate::app;
use crate::config::Config;
use crate::conn_cap::ConnCap;
use crate::engine::ABORT_GRACE;
use crate::listener::Shutdown;
use crate::notify::Notifier;
use crate::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// While the model loads, systemd is asked every `LOAD_EXTEND_EVERY` for
/// `LOAD_EXTEND_BY` more start time: a 6B model takes minutes to load from
/// eMMC, far beyond a unit's usual start time-out.
const LOAD_EXTEND_EVERY: Duration = Duration::from_secs(10);
const LOAD_EXTEND_BY: Duration = Duration::from_secs(30);

pub async fn serve(config: Config) -> Result<(), String> {
    let notify = Notifier::from_env();
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        systemd_notify = notify.is_enabled(),
        watchdog_secs = notify.watchdog_timeout().map(|d| d.as_secs_f64()),
        "rkllmd starting"
    );
    crate::metrics::init(&app::metrics_settings(&config))?;
    let listener = tokio::net::TcpListener::bind((config.host, config.port))
        .await
        .map_err(|e| format!("cannot listen on {}:{}: {e}", config.host, config.port))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let state = AppState::new(app::api_settings(&config));
    let router = api::router(state.clone());
    if let Some(addr) = config.metrics_addr {
        api::serve_metrics_separately(&state, addr).await?;
    }
    let ollama = match config.ollama_listen {
        Some(at) => Some(bind_ollama(at, &state, config.ollama_api_key.as_deref()).await?),
        None => None,
    };
    let grace = Duration::from_secs(config.shutdown_grace_secs);
    // Every listener stops accepting at the signal, and stops waiting for
    // what is only being prepared at the abort.
    let (stop, stopped) = tokio::sync::watch::channel(Shutdown::Serving);
    tokio::spawn(shutdown_signal(state.clone(), notify.clone(), grace, stop));
    // Connections, time-outs, the connection cap and protocol errors live in crate::listener.
    let settings = app::listener_settings(&config);
    let cap = || ConnCap::new(settings.max_connections, settings.client_connection_share);
    let ollama = ollama.map(|(listener, router)| {
        tokio::spawn(crate::listener::serve(listener, router, settings.clone(), cap(), stopped.clone()))
    });
    // Readiness reports the serving address's cap.
    let serving_cap = cap();
    crate::conn_cap::set_serving(&serving_cap);
    let server = tokio::spawn(crate::listener::serve(listener, router, settings, serving_cap, stopped));

    let registry = app::registry(&config).map_err(|e| e.to_string())?;
    tokio::spawn(registry.clone().reap());
    for status in registry.statuses() {
        tracing::info!(model = %status.spec.id, path = %status.spec.path, "model registered");
    }
    // The one-model case is loaded before the daemon reports ready, as ever.
    if let Some(primary) = app::primary_spec(&config, &Default::default()) {
        let loading = format!("loading {}", primary.path);
        notify.extend_timeout(LOAD_EXTEND_BY);
        notify.status(&loading);
        let extender = tokio::spawn(extend_start_while_loading(notify.clone(), loading));
        let loaded = registry.acquire(&primary.id, None).await;
        extender.abort();
        // The registry logged `model loaded`; the lease itself is not needed.
        loaded.map_err(|e| {
            notify.status(&format!("model load failed: {e}"));
            e.to_string()
        })?;
    }
    let ids: Vec<String> = registry.statuses().into_iter().map(|s| s.spec.id.clone()).collect();
    let serving = format!("serving {} on http://{addr}", ids.join(", "));
    state.set_models(registry.clone());
    tokio::spawn(rescan_on_hangup(registry.clone()));
    tracing::info!("listening on http://{addr}");
    notify.ready(&serving);
    if let Some(timeout) = notify.watchdog_timeout() {
        tokio::spawn(watchdog(registry.clone(), notify.clone(), timeout, serving));
    }

    server.await.map_err(|e| e.to_string())?;
    if let Some(ollama) = ollama {
        ollama.await.map_err(|e| e.to_string())?;
    }
    leave_stuck_models(&registry).await;
    tracing::info!("stopped");
    Ok(())
}

/// A model whose runtime has not returned from the shutdown's abort after
/// [`ABORT_GRACE`] cannot be destroyed: its runtime thread is inside
/// `rkllm_run`, and dropping the model would wait for that thread for good.
/// Such a model is left to the process's exit (the kernel frees its NPU
/// memory), so the daemon still exits, with 0: it shut down as asked.
async fn leave_stuck_models(registry: &Arc<Registry>) {
    let in_run = || -> Vec<String> {
        registry.loaded().into_iter().filter(|m| m.engine.in_run()).map(|m| m.model_id.clone()).collect()
    };
    let grace_end = tokio::time::Instant::now() + ABORT_GRACE;
    let mut every = tokio::time::interval(PRODUCING_POLL);
    while !in_run().is_empty() && tokio::time::Instant::now() < grace_end {
        every.tick().await;
    }
    let stuck = in_run();
    if !stuck.is_empty() {
        tracing::warn!(models = ?stuck, "the runtime has not returned from an aborted run: exiting without destroying the model");
        std::mem::forget(registry.clone());
    }
}

/// Binds `ollama_listen`: the Ollama clients' address, with its own key
/// (`api::ollama_router`). Its line is logged before the main listener's
/// "listening on", which says the daemon is ready.
async fn bind_ollama(
    at: std::net::SocketAddr,
    state: &AppState,
    key: Option<&str>,
) -> Result<(tokio::net::TcpListener, axum::Router), String> {
    let listener = tokio::net::TcpListener::bind(at)
        .await
        .map_err(|e| format!("cannot listen for Ollama clients on {at} (ollama_listen): {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let keyed = if key.is_some() { "ollama_api_key" } else { "no key" };
    tracing::info!(
        "Ollama clients' address: http://{bound} (Ollama routes, /v1/chat/completions, /v1/models; {keyed})"
    );
    Ok((listener, api::ollama_router(state.clone(), key)))
}

/// Repeats `EXTEND_TIMEOUT_USEC` (and a status with the time spent) until
/// aborted when the load ends. `rkllm_init` gives no progress to judge, so a
/// load is trusted for as long as it takes; a failed one ends the process.
async fn extend_start_while_loading(notify: Notifier, loading: String) {
    let started = tokio::time::Instant::now();
    let mut tick = tokio::time::interval_at(started + LOAD_EXTEND_EVERY, LOAD_EXTEND_EVERY);
    loop {
        tick.tick().await;
        notify.extend_timeout(LOAD_EXTEND_BY);
        notify.status(&format!("{loading} ({} s)", started.elapsed().as_secs()));
    }
}

/// Pings the systemd watchdog twice per `WatchdogSec`, but only while every
/// loaded model's runtime thread is alive; a hung runtime stops the pings
/// and systemd restarts the service.
async fn watchdog(registry: Arc<Registry>, notify: Notifier, timeout: Duration, serving: String) {
    let every = timeout / 2;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut healthy = true;
    loop {
        tick.tick().await;
        let mut alive = Ok(());
        for model in registry.loaded() {
            if let Err(why) = model.engine.check_alive(every / 2).await {
                alive = Err(format!("{}: {why}", model.model_id));
                break;
            }
        }
        match alive {
            Ok(()) => {
                if !healthy {
                    tracing::warn!("the runtime shows progress again; watchdog pings resume");
                    notify.status(&serving);
                    healthy = true;
                }
                notify.watchdog_ping();
            }
            Err(why) if healthy => {
                tracing::error!("runtime stalled: {why}; no more watchdog pings, systemd will restart rkllmd");
                notify.status(&format!("runtime stalled: {why}"));
                healthy = false;
            }
            Err(_) => {}
        }
    }
}

/// SIGHUP (`systemctl reload rkllmd`): models put into `models_dir` since
/// the start (`rkllmd pull`, a copy) are registered and served without a
/// restart; those registered stay as they are.
async fn rescan_on_hangup(registry: Arc<Registry>) {
    let Ok(mut hangups) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else { return };
    while hangups.recv().await.is_some() {
        match registry.rescan().await {
            Ok(added) => tracing::info!(added = ?added, "models_dir read again (SIGHUP)"),
            Err(e) => tracing::warn!("models_dir read again (SIGHUP): {e}"),
        }
    }
}

/// Waits for SIGTERM or SIGINT, then stops admitting requests; running
/// generations get the grace period, while any run is producing, before
/// they are aborted. With nothing producing (idle, only requests being
/// prepared, or a runtime stuck in an aborted run) the abort comes at once.
async fn shutdown_signal(state: AppState, notify: Notifier, grace: Duration, stop: watch::Sender<Shutdown>) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    tracing::info!(grace_secs = grace.as_secs(), "shutting down: no new requests; waiting for running ones");
    notify.stopping("shutting down: finishing running requests");
    state.begin_shutdown();
    stop.send_replace(Shutdown::Draining);
    exit_after(grace + ABORT_ALLOWANCE);
    let producing = || state.models().is_ok_and(|r| r.loaded().iter().any(|m| m.engine.is_producing()));
    let grace_end = tokio::time::Instant::now() + grace;
    let mut every = tokio::time::interval(PRODUCING_POLL);
    while producing() && tokio::time::Instant::now() < grace_end {
        every.tick().await;
    }
    if let Ok(registry) = state.models() {
        if producing() {
            tracing::warn!("grace period over: aborting the running generation");
        } else {
            tracing::info!("no run is producing: aborting what is queued or being prepared");
        }
        for model in registry.loaded() {
            model.engine.abort_all();
        }
    }
    stop.send_replace(Shutdown::Cancelled);
    // The listeners watch `stop` until the process ends.
    std::future::pending::<()>().await
}

/// How often the grace period looks whether a run still produces.
const PRODUCING_POLL: Duration = Duration::from_millis(50);

/// Time for an abort to land and the process to wind down after the grace
/// period (the rest of the stream, closing connections, `rkllm_destroy`).
const ABORT_ALLOWANCE: Duration = Duration::from_secs(10);

/// Exits the process with status 1 if it is still alive after `deadline`.
/// A wedged runtime never returns from `rkllm_run`, even when aborted: the
/// connection waiting for its tokens never ends, and the model's destructor
/// would wait for the runtime thread forever. A plain thread, so that a
/// stuck async runtime cannot hold it up either.
fn exit_after(deadline: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        tracing::error!(
            "shutdown did not finish within the grace period and {} s after it (the runtime did not return from an aborted run?); exiting without destroying the model",
            ABORT_ALLOWANCE.as_secs()
        );
        std::process::exit(1);
    });
}
