//! Deciding the ABI of a library file before loading it.
//!
//! Loading a library with the wrong layouts does not fail loudly (a 1.2.1
//! layout on runtime 1.3.0 initialises and then segfaults in `rkllm_run`), so
//! the version is read from the file itself: every release embeds the text
//! `RKLLM SDK (version: X.Y.Z`. Without it, only the operator's explicit
//! `runtime_abi` decides. We never guess.

use crate::abi::Abi;
use std::path::Path;

/// The text every `librkllmrt.so` release carries before its version.
pub const VERSION_MARKER: &[u8] = b"RKLLM SDK (version: ";

#[derive(Debug, thiserror::Error)]
pub enum SniffError {
    #[error("cannot read runtime library {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("runtime library {path} is version {version}, which rkllmd cannot drive: supported are {}. Install a supported librkllmrt.so", Abi::supported())]
    Unsupported { path: String, version: String },
    #[error("runtime library {path} carries no \"RKLLM SDK (version: …\" marker, so its ABI is unknown. Set runtime_abi to one of {} in the config (or --runtime-abi / RKLLMD_RUNTIME_ABI) to the version of the library you installed", Abi::choices())]
    NoMarker { path: String },
    #[error("runtime library {path} says version {version} (ABI {found}) but runtime_abi is set to {configured}; remove runtime_abi or install the library you meant")]
    Conflict { path: String, version: String, found: Abi, configured: Abi },
}

/// What sniffing found: the version text (if the marker was there) and the ABI to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sniffed {
    pub version: Option<String>,
    pub abi: Abi,
}

/// Finds the version marker in `bytes` and returns the version text after it.
pub fn find_version(bytes: &[u8]) -> Option<String> {
    let start = memchr::memmem::find(bytes, VERSION_MARKER)? + VERSION_MARKER.len();
    let tail = &bytes[start..bytes.len().min(start + 32)];
    let end = tail.iter().position(|b| !(b.is_ascii_digit() || *b == b'.')).unwrap_or(tail.len());
    let version = std::str::from_utf8(&tail[..end]).ok()?.trim_end_matches('.');
    (!version.is_empty()).then(|| version.to_owned())
}

/// Decides the ABI from the bytes of a library file and the optional override.
pub fn sniff_bytes(path: &str, bytes: &[u8], configured: Option<Abi>) -> Result<Sniffed, SniffError> {
    let Some(version) = find_version(bytes) else {
        return match configured {
            Some(abi) => Ok(Sniffed { version: None, abi }),
            None => Err(SniffError::NoMarker { path: path.into() }),
        };
    };
    let Some(found) = Abi::of_version(&version) else {
        return Err(SniffError::Unsupported { path: path.into(), version });
    };
    match configured {
        Some(configured) if configured != found => {
            Err(SniffError::Conflict { path: path.into(), version, found, configured })
        }
        _ => Ok(Sniffed { version: Some(version), abi: found }),
    }
}

/// Reads the library file and decides its ABI (see [`sniff_bytes`]).
pub fn sniff_file(path: &Path, configured: Option<Abi>) -> Result<Sniffed, SniffError> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| SniffError::Read { path: shown.clone(), source })?;
    sniff_bytes(&shown, &bytes, configured)
}
