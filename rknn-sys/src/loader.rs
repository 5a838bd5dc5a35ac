//! Finding and loading `librknnrt.so` at run time.
//!
//! Search order (first hit wins): an explicit path (`--vision-lib`,
//! `RKLLMD_VISION_LIB`, `vision_lib`: the daemon resolves those three into
//! one), then `librknnrt.so` in each directory of `LD_LIBRARY_PATH`, then
//! the same system directories as `librkllmrt.so`. Without a hit the caller
//! falls back to the simulated encoder (`rknn-sim`).

use crate::types::*;
use libloading::Library;
use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};

/// The file name the vendor ships.
pub const LIBRARY_NAME: &str = "librknnrt.so";
/// Directories searched after `LD_LIBRARY_PATH`.
pub const SYSTEM_DIRS: [&str; 4] = ["/usr/lib", "/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/lib"];

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("vision runtime library {0} does not exist")]
    Missing(String),
    #[error("cannot load vision runtime library {path}: {message}")]
    Open { path: String, message: String },
    #[error("vision runtime library {path} has no symbol {symbol}: it is not a usable librknnrt.so")]
    Symbol { path: String, symbol: &'static str },
}

/// Every `rknn_*` function the encoder uses.
#[derive(Clone, Copy)]
pub struct Functions {
    pub init: unsafe extern "C" fn(*mut RknnContext, *mut c_void, u32, u32, *mut RknnInitExtend) -> c_int,
    pub destroy: unsafe extern "C" fn(RknnContext) -> c_int,
    pub query: unsafe extern "C" fn(RknnContext, c_int, *mut c_void, u32) -> c_int,
    pub set_core_mask: unsafe extern "C" fn(RknnContext, c_int) -> c_int,
    pub inputs_set: unsafe extern "C" fn(RknnContext, u32, *mut RknnInput) -> c_int,
    pub run: unsafe extern "C" fn(RknnContext, *mut RknnRunExtend) -> c_int,
    pub outputs_get: unsafe extern "C" fn(RknnContext, u32, *mut RknnOutput, *mut RknnOutputExtend) -> c_int,
    pub outputs_release: unsafe extern "C" fn(RknnContext, u32, *mut RknnOutput) -> c_int,
}

/// The symbol names resolved by the loader, in the order of [`Functions`]'
/// fields. A missing one is an error naming it.
pub const SYMBOLS: [&str; 8] = [
    "rknn_init",
    "rknn_destroy",
    "rknn_query",
    "rknn_set_core_mask",
    "rknn_inputs_set",
    "rknn_run",
    "rknn_outputs_get",
    "rknn_outputs_release",
];

/// Where the functions of a [`Runtime`] come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Library(PathBuf),
    /// Linked into the process (the simulated encoder).
    InProcess(&'static str),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Library(p) => write!(f, "{}", p.display()),
            Origin::InProcess(name) => write!(f, "in-process {name}"),
        }
    }
}

/// A usable vision runtime; a loaded library stays open as long as this
/// value lives, so the table's pointers stay valid.
pub struct Runtime {
    functions: Functions,
    origin: Origin,
    _library: Option<Library>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("origin", &self.origin).finish()
    }
}

impl Runtime {
    pub fn in_process(functions: Functions, name: &'static str) -> Runtime {
        Runtime { functions, origin: Origin::InProcess(name), _library: None }
    }

    /// Loads the library and resolves every symbol. The version is read per
    /// context (`rknn_query(RKNN_QUERY_SDK_VERSION)`), not from the file.
    pub fn load(path: &Path) -> Result<Runtime, LoadError> {
        let shown = path.display().to_string();
        if !path.exists() {
            return Err(LoadError::Missing(shown));
        }
        // SAFETY: loading runs the library's initialisers; this is the
        // operator's vision runtime.
        let library = unsafe { Library::new(path) }
            .map_err(|e| LoadError::Open { path: shown.clone(), message: e.to_string() })?;
        fn get<T: Copy>(library: &Library, path: &str, symbol: &'static str) -> Result<T, LoadError> {
            let mut name = symbol.as_bytes().to_vec();
            name.push(0);
            // SAFETY: `T` is the C signature of `symbol` in rknn_api.h.
            unsafe { library.get::<T>(&name) }
                .map(|s| *s)
                .map_err(|_| LoadError::Symbol { path: path.to_owned(), symbol })
        }
        let [init, destroy, query, set_core_mask, inputs_set, run, outputs_get, outputs_release] = SYMBOLS;
        let functions = Functions {
            init: get(&library, &shown, init)?,
            destroy: get(&library, &shown, destroy)?,
            query: get(&library, &shown, query)?,
            set_core_mask: get(&library, &shown, set_core_mask)?,
            inputs_set: get(&library, &shown, inputs_set)?,
            run: get(&library, &shown, run)?,
            outputs_get: get(&library, &shown, outputs_get)?,
            outputs_release: get(&library, &shown, outputs_release)?,
        };
        Ok(Runtime { functions, origin: Origin::Library(path.to_owned()), _library: Some(library) })
    }

    pub fn functions(&self) -> &Functions {
        &self.functions
    }
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

/// `librknnrt.so` in `LD_LIBRARY_PATH`'s directories, then [`SYSTEM_DIRS`]:
/// the first that exists.
pub fn find_library() -> Option<PathBuf> {
    let ld_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let found = ld_path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(SYSTEM_DIRS)
        .map(|dir| Path::new(dir).join(LIBRARY_NAME))
        .find(|p| p.is_file());
    found
}
