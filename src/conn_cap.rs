//! The connection cap, shared fairly: at most `max_connections` open, and
//! one client address at most `client_connection_share` percent of them, so
//! that one address trickling bodies cannot take every connection from the
//! others. Whether the serving listener's cap is full is what readiness
//! reports (`api/health.rs`): a balancer should send elsewhere meanwhile.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

pub struct ConnCap {
    max: usize,
    per_client: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    total: usize,
    by_client: HashMap<IpAddr, usize>,
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

    pub fn is_full(&self) -> bool {
        self.lock().total >= self.max
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

/// The serving listener's cap is full: a new connection would get 503.
pub fn serving_full() -> bool {
    SERVING.get().is_some_and(|cap| cap.is_full())
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
        assert!(cap.is_full());
        drop(a1);
        assert!(!cap.is_full());
        assert!(cap.hold(a).is_some(), "a place given back");
    }
}
