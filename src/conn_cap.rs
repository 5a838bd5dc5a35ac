//! The connection cap, shared fairly: at most `max_connections` open, and
//! one client address at most `client_connection_share` percent of them, so
//! that one address trickling bodies cannot take every connection from the
//! others. Whether the serving listener is turning connections away for
//! capacity is what readiness reports (`api/health.rs`): a balancer should
//! send elsewhere meanwhile.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long readiness stays 503 `connections_refused` after the listener
/// last turned a connection away. Refusals come and go by the millisecond
/// (a place freed, taken again); a balancer probes every few seconds and
/// must see that connections are being refused between its probes, not
/// only in the instant of one.
pub const REFUSED_HOLD: Duration = Duration::from_secs(2);

pub struct ConnCap {
    max: usize,
    per_client: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
    /// When a connection was last refused (the cap full, or its address at its share).
    last_refused: Option<Instant>,
}

/// Why the listener is not taking every new connection, as readiness says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pressure {
    /// Every one of `max_connections` is open: any new connection gets 503.
    Full,
    /// A connection was refused within [`REFUSED_HOLD`] (an address at its
    /// share, or the cap full a moment ago).
    Refusing,
}

/// One open connection's place under the cap, given back when dropped.
pub struct Held {
    cap: Arc<ConnCap>,
    client: IpAddr,
}

impl ConnCap {
    pub fn new(max: usize, share_percent: u8) -> Arc<ConnCap> {
        let per_client = (max * usize::from(share_percent) / 100).max(1);
        Arc::new(ConnCap { max, per_client, open: Mutex::default() })
    }

    /// A place for a connection from `client`; `None` when the cap is full
    /// or the client holds its share already.
    pub fn hold(self: &Arc<Self>, client: IpAddr) -> Option<Held> {
        let mut open = self.lock();
        if open.total >= self.max {
            return None;
        }
        let mine = open.by_client.entry(client).or_default();
        if *mine >= self.per_client {
            return None;
        }
        *mine += 1;
        open.total += 1;
        Some(Held { cap: self.clone(), client })
    }

    /// A connection that [`ConnCap::hold`] gave no place was turned away
    /// (a health probe served over the cap is not).
    pub fn refused(&self) {
        self.lock().last_refused = Some(Instant::now());
    }

    /// Whether the cap is full, or a connection was refused within [`REFUSED_HOLD`].
    pub fn pressure(&self) -> Option<Pressure> {
        let open = self.lock();
        if open.total >= self.max {
            Some(Pressure::Full)
        } else if open.last_refused.is_some_and(|at| at.elapsed() < REFUSED_HOLD) {
            Some(Pressure::Refusing)
        } else {
            None
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        // Plain counts: one a panic interrupted is still right enough.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut open = self.cap.lock();
        open.total = open.total.saturating_sub(1);
        if let Some(mine) = open.by_client.get_mut(&self.client) {
            *mine -= 1;
            if *mine == 0 {
                open.by_client.remove(&self.client);
            }
        }
    }
}

/// The serving listener's cap (set once by `server.rs`).
static SERVING: OnceLock<Arc<ConnCap>> = OnceLock::new();

pub fn set_serving(cap: &Arc<ConnCap>) {
    let _ = SERVING.set(cap.clone());
}

/// The serving listener's [`ConnCap::pressure`].
pub fn serving_pressure() -> Option<Pressure> {
    SERVING.get().and_then(|cap| cap.pressure())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_client_holds_its_share_and_the_cap_is_shared() {
        let cap = ConnCap::new(4, 50);
        let (a, b): (IpAddr, IpAddr) = ("127.0.0.2".parse().unwrap(), "127.0.0.3".parse().unwrap());
        let a1 = cap.hold(a).expect("first");
        let _a2 = cap.hold(a).expect("second");
        assert!(cap.hold(a).is_none(), "past its share of 2");
        let _b1 = cap.hold(b).expect("another address");
        let _b2 = cap.hold(b).expect("another address");
        assert_eq!(cap.pressure(), Some(Pressure::Full));
        drop(a1);
        assert_eq!(cap.pressure(), None, "a refusal is only one once the listener turned the connection away");
        assert!(cap.hold(a).is_some(), "a place given back");
    }

    #[test]
    fn a_refusal_is_pressure_for_the_hold_down_after_it() {
        let cap = ConnCap::new(4, 50);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let _held = [cap.hold(a).unwrap(), cap.hold(a).unwrap()];
        assert_eq!(cap.pressure(), None, "an address at its share, none refused yet");
        cap.refused();
        assert_eq!(cap.pressure(), Some(Pressure::Refusing));
        cap.lock().last_refused = Instant::now().checked_sub(REFUSED_HOLD);
        assert_eq!(cap.pressure(), None, "the hold-down is over");
    }
}
