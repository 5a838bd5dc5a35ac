//! Finding and loading `librkllmrt.so` at run time.
//!
//! Search order (first hit wins):
//! 1. an explicit path (`--lib` / `lib` in the config);
//! 2. the `RKLLM_LIB` environment variable;
//! 3. `librkllmrt.so` where the dynamic loader would look for it: each
//!    directory of `LD_LIBRARY_PATH`, then `/usr/lib`,
//!    `/usr/lib/aarch64-linux-gnu`, `/usr/local/lib`, `/lib`.
//!
//! The file is found by path (not by letting `dlopen` search) because its
//! version must be sniffed from the file before it is loaded.

use crate::abi::{Abi, AbiTypes, ForAbi, Functions, Listed, Table, SYMBOLS};
use crate::sniff::{sniff_file, SniffError};
use libloading::Library;
use std::path::{Path, PathBuf};

/// The file name the vendor ships.
pub const LIBRARY_NAME: &str = "librkllmrt.so";
/// Directories searched after `LD_LIBRARY_PATH`.
pub const SYSTEM_DIRS: [&str; 4] = ["/usr/lib", "/usr/lib/aarch64-linux-gnu", "/usr/local/lib", "/lib"];

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("runtime library {0} does not exist")]
    Missing(String),
    #[error("no {LIBRARY_NAME} found (looked in: {0}); pass --lib PATH or set RKLLM_LIB")]
    NotFound(String),
    #[error(transparent)]
    Sniff(#[from] SniffError),
    #[error("cannot load runtime library {path}: {message}")]
    Open { path: String, message: String },
    #[error("runtime library {path} has no symbol {symbol}: it is not a usable librkllmrt.so (or too old)")]
    Symbol { path: String, symbol: &'static str },
}

/// Where the functions of a [`Runtime`] come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Loaded with `dlopen` from this file.
    Library(PathBuf),
    /// Linked into the process (the simulated runtime used in-process).
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

/// A usable runtime: its function table, its version and where it came from.
/// For a loaded library, the library stays open as long as this value lives,
/// so the function pointers in the table stay valid.
pub struct Runtime {
    table: Table,
    version: Option<String>,
    origin: Origin,
    _library: Option<Library>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("abi", &self.table.abi())
            .field("version", &self.version)
            .field("origin", &self.origin)
            .finish()
    }
}

impl Runtime {
    /// A runtime whose functions are linked into this process.
    pub fn in_process(table: Table, version: &str, name: &'static str) -> Runtime {
        Runtime { table, version: Some(version.to_owned()), origin: Origin::InProcess(name), _library: None }
    }

    /// Sniffs the file's version, loads it and resolves every symbol.
    ///
    /// The path is resolved once, to the absolute path of the file it names
    /// (symbolic links followed), and that one path is both sniffed and
    /// loaded: given a bare name (`librkllmrt.so`), `dlopen` would search the
    /// library path instead of the working directory the version was read
    /// from, and could load another runtime than the one checked.
    pub fn load(path: &Path, configured: Option<Abi>) -> Result<Runtime, LoadError> {
        let Ok(path) = std::fs::canonicalize(path) else {
            return Err(LoadError::Missing(path.display().to_string()));
        };
        let path = path.as_path();
        let shown = path.display().to_string();
        let sniffed = sniff_file(path, configured)?;
        // SAFETY: loading runs the library's initialisers; this is the
        // operator's runtime library, whose version we have just checked.
        let library = unsafe { Library::new(path) }
            .map_err(|e| LoadError::Open { path: shown.clone(), message: e.to_string() })?;
        let table = sniffed.abi.dispatch(Resolve { library: &library, path: &shown })?;
        Ok(Runtime {
            table,
            version: sniffed.version,
            origin: Origin::Library(path.to_owned()),
            _library: Some(library),
        })
    }

    pub fn table(&self) -> &Table {
        &self.table
    }
    pub fn abi(&self) -> Abi {
        self.table.abi()
    }
    /// The version text from the library's marker, if it had one.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }
    pub fn origin(&self) -> &Origin {
        &self.origin
    }
}

/// Resolving every symbol with the sniffed ABI's signatures.
struct Resolve<'a> {
    library: &'a Library,
    path: &'a str,
}

impl ForAbi for Resolve<'_> {
    type Output = Result<Table, LoadError>;
    fn call<A: Listed>(self) -> Self::Output {
        resolve::<A>(self.library, self.path).map(A::table)
    }
}

fn resolve<A: AbiTypes>(library: &Library, path: &str) -> Result<Functions<A>, LoadError> {
    // Each symbol is resolved with the type of the field it fills; the
    // types come from the ABI marker, so a 1.3 table cannot be filled with
    // 1.2 signatures by mistake.
    fn get<T: Copy>(library: &Library, path: &str, symbol: &'static str) -> Result<T, LoadError> {
        let mut name = symbol.as_bytes().to_vec();
        name.push(0);
        // SAFETY: `T` is the exact C signature of `symbol` for the sniffed ABI.
        unsafe { library.get::<T>(&name) }.map(|s| *s).map_err(|_| LoadError::Symbol { path: path.to_owned(), symbol })
    }
    let [create_default_param, init, run, abort, is_running, destroy, clear_kv_cache, get_kv_cache_size, set_chat_template, set_function_tools, load_lora, load_prompt_cache, release_prompt_cache] =
        SYMBOLS;
    Ok(Functions {
        create_default_param: get(library, path, create_default_param)?,
        init: get(library, path, init)?,
        run: get(library, path, run)?,
        abort: get(library, path, abort)?,
        is_running: get(library, path, is_running)?,
        destroy: get(library, path, destroy)?,
        clear_kv_cache: get(library, path, clear_kv_cache)?,
        get_kv_cache_size: get(library, path, get_kv_cache_size)?,
        set_chat_template: get(library, path, set_chat_template)?,
        set_function_tools: get(library, path, set_function_tools)?,
        load_lora: get(library, path, load_lora)?,
        load_prompt_cache: get(library, path, load_prompt_cache)?,
        release_prompt_cache: get(library, path, release_prompt_cache)?,
    })
}

/// Where `librkllmrt.so` is looked for when neither an explicit path nor
/// `RKLLM_LIB` is given: `LD_LIBRARY_PATH`, then [`SYSTEM_DIRS`].
pub fn search_paths() -> Vec<PathBuf> {
    let ld_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    ld_path
        .split(':')
        .filter(|d| !d.is_empty())
        .chain(SYSTEM_DIRS)
        .map(|dir| Path::new(dir).join(LIBRARY_NAME))
        .collect()
}

/// The library to load, in the documented search order. An explicit path or
/// `RKLLM_LIB` is returned as given, so that its absence is reported as such.
pub fn find_library(explicit: Option<&Path>) -> Result<PathBuf, LoadError> {
    if let Some(path) = explicit {
        return Ok(path.to_owned());
    }
    if let Some(path) = std::env::var_os("RKLLM_LIB").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let searched = search_paths();
    searched.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        LoadError::NotFound(searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))
    })
}
