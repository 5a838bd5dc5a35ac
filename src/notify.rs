//! The systemd notification protocol (`sd_notify(3)`): datagrams such as
//! `READY=1` or `STATUS=…` sent to the socket named by `$NOTIFY_SOCKET`.
//!
//! A few lines over a Unix datagram socket, no library: outside systemd
//! (no `NOTIFY_SOCKET`) every call does nothing. Sending is best effort;
//! a failure is logged at debug level and never stops the daemon.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Default)]
pub struct Notifier {
    socket: Option<Arc<(UnixDatagram, SocketAddr)>>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// Reads `NOTIFY_SOCKET` (a path, or `@name` for the abstract namespace)
    /// and `WATCHDOG_USEC` (honoured only when `WATCHDOG_PID` is unset or
    /// ours, as `sd_watchdog_enabled(3)` does).
    pub fn from_env() -> Notifier {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        let socket = var("NOTIFY_SOCKET").and_then(|path| match connect(&path) {
            Ok(pair) => Some(Arc::new(pair)),
            Err(e) => {
                tracing::warn!("NOTIFY_SOCKET={path} is not usable ({e}); not notifying systemd");
                None
            }
        });
        let ours = var("WATCHDOG_PID").is_none_or(|pid| pid.trim() == std::process::id().to_string());
        let watchdog = var("WATCHDOG_USEC")
            .filter(|_| ours)
            .and_then(|usec| usec.trim().parse::<u64>().ok())
            .filter(|usec| *usec > 0)
            .map(Duration::from_micros);
        let watchdog = watchdog.filter(|_| socket.is_some());
        Notifier { socket, watchdog }
    }

    /// The watchdog time-out systemd expects pings within (`WatchdogSec=`), if enabled.
    pub fn watchdog_timeout(&self) -> Option<Duration> {
        self.watchdog
    }

    pub fn is_enabled(&self) -> bool {
        self.socket.is_some()
    }

    /// Sends one notification (newline-separated `KEY=value` assignments).
    pub fn send(&self, state: &str) {
        let Some(socket) = &self.socket else { return };
        let (sock, addr) = &**socket;
        if let Err(e) = sock.send_to_addr(state.as_bytes(), addr) {
            tracing::debug!("sd_notify {state:?} failed: {e}");
        }
    }

    pub fn status(&self, text: &str) {
        self.send(&format!("STATUS={}", one_line(text)));
    }

    /// The service is up: systemd ends `activating` and starts the watchdog.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// Asks systemd for `by` more time to start (a long model load).
    pub fn extend_timeout(&self, by: Duration) {
        self.send(&format!("EXTEND_TIMEOUT_USEC={}", by.as_micros()));
    }

    pub fn watchdog_ping(&self) {
        self.send("WATCHDOG=1");
    }

    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }
}

fn connect(path: &str) -> std::io::Result<(UnixDatagram, SocketAddr)> {
    let addr = match path.strip_prefix('@') {
        Some(name) => <SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(path)?,
    };
    Ok((UnixDatagram::unbound()?, addr))
}

/// A newline would start a new assignment.
fn one_line(text: &str) -> String {
    text.replace('\n', " ")
}
