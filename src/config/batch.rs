//! The `batch` setting: `auto` (the default) or a number of slots, 1–8.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The most slots a runtime is opened with: the manual recommends `n_batch`
/// ≤ 8, and the simulator refuses more.
pub const MAX_BATCH: u8 = 8;

/// How many sequences a model's runs take (`n_batch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSetting {
    /// Chosen at load from the model's KV size per slot, the board's free
    /// memory and the short-batch probe (`engine/slot_count.rs`).
    Auto,
    /// Exactly this many (1: one request at a time).
    Slots(u8),
}

impl FromStr for BatchSetting {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        if text == "auto" {
            return Ok(BatchSetting::Auto);
        }
        match text.parse::<u8>() {
            Ok(n) if (1..=MAX_BATCH).contains(&n) => Ok(BatchSetting::Slots(n)),
            _ => Err(format!("batch must be `auto` or a number from 1 to {MAX_BATCH}, got `{text}`")),
        }
    }
}

impl fmt::Display for BatchSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchSetting::Auto => f.write_str("auto"),
            BatchSetting::Slots(n) => write!(f, "{n}"),
        }
    }
}

impl BatchSetting {
    /// Whether more than one slot was configured (not chosen by `auto`).
    pub fn configured_above_one(self) -> bool {
        matches!(self, BatchSetting::Slots(n) if n > 1)
    }
}

/// In the TOML file: `batch = "auto"` or `batch = 4`.
impl Serialize for BatchSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BatchSetting::Auto => s.serialize_str("auto"),
            BatchSetting::Slots(n) => s.serialize_u8(*n),
        }
    }
}

impl<'de> Deserialize<'de> for BatchSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Given {
            Number(i64),
            Text(String),
        }
        let text = match Given::deserialize(d)? {
            Given::Number(n) => n.to_string(),
            Given::Text(t) => t,
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}
