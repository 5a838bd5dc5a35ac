//! The memory images may take while they are decoded, daemon-wide: each
//! decode holds what it will allocate at its peak (known from the header
//! before decoding) and waits while the others hold the rest. Without it,
//! twelve requests each with a 7,000×7,000 PNG took +1.6 GiB at once — on a
//! 4–8 GB board, the daemon's end. Decoding runs on the blocking pool, so a
//! wait here parks a blocking thread, not the async one.

use super::ImageError;
use std::sync::{Condvar, Mutex};

/// Bytes of decoded images in flight at most: a 50-megapixel RGBA WebP
/// (the largest `max_image_pixels` allows by default) with its RGB copy.
pub const DECODE_BUDGET: u64 = 384 << 20;

static HELD: Mutex<u64> = Mutex::new(0);
static FREED: Condvar = Condvar::new();

/// Bytes held for one decode, given back when dropped.
#[derive(Debug)]
pub(super) struct Held(u64);

/// Waits until `bytes` fit the budget and holds them; an image that could
/// never fit is refused.
pub(super) fn hold(bytes: u64) -> Result<Held, ImageError> {
    if bytes > DECODE_BUDGET {
        return Err(ImageError::TooLarge(format!(
            "The image decodes to {} MiB; this server decodes at most {} MiB of images at once.",
            bytes >> 20,
            DECODE_BUDGET >> 20
        )));
    }
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    while *held + bytes > DECODE_BUDGET {
        held = FREED.wait(held).unwrap_or_else(|e| e.into_inner());
    }
    *held += bytes;
    Ok(Held(bytes))
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
        *held -= self.0;
        FREED.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_waits_for_room_and_a_too_large_one_is_refused() {
        assert!(matches!(hold(DECODE_BUDGET + 1), Err(ImageError::TooLarge(_))));
        let most = hold(DECODE_BUDGET - 10).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            let held = hold(20).unwrap();
            tx.send(()).unwrap();
            drop(held);
        });
        // The waiter cannot have its 20 bytes while 10 are left.
        assert!(rx.recv_timeout(std::time::Duration::from_millis(50)).is_err());
        drop(most);
        rx.recv().expect("held once room was given back");
        waiter.join().unwrap();
    }
}
