//! The supported ABIs and the table of runtime functions.
//!
//! The daemon never calls a runtime function by name: it calls through a
//! [`Functions`] table, filled either by `dlsym` on `librkllmrt.so`
//! ([`crate::loader`]) or, in-process, with the simulator's functions. So the
//! simulated runtime exercises exactly the FFI code that runs on a board.
//!
//! Each ABI is one module (`v1_N.rs`: its `repr(C)` structs, its [`AbiInfo`]
//! and its [`Marshal`] impl) and one line in the list in `lib.rs`
//! (`runtime_abis!`), which makes [`Abi`], [`Table`] and the dispatch from a
//! run-time value to the code generic over the ABI ([`ForAbi`],
//! [`WithFunctions`]). Nothing else names a version.

use crate::common::*;
pub use crate::marshal::Marshal;
pub use crate::{Abi, Table};
use std::ffi::{c_char, c_int, c_void};

/// What an ABI's module says of itself (`INFO` in `v1_N.rs`).
pub struct AbiInfo {
    /// Its name as `runtime_abi` takes it, e.g. "1.3".
    pub name: &'static str,
    /// The runtime versions it drives, as messages show them, e.g. "1.2.1-1.2.3".
    pub runtimes: &'static str,
    /// Whether it drives the runtime version `major.minor.patch`.
    pub drives: fn(u32, u32, u32) -> bool,
    /// The newest runtime version it drives (the version the simulator reports).
    pub newest: &'static str,
    /// Whether sampling parameters and `max_new_tokens` can be set per run.
    pub per_run_sampling: bool,
}

/// The per-ABI types, implemented by each module's marker type (`V1_2`, `V1_3`).
pub trait AbiTypes: Sized + Send + Sync + 'static {
    const INFO: AbiInfo;
    type Param: Copy;
    type Input: Copy;
    type InferParam: Copy;
    /// The third argument of `rkllm_init`: a bare function pointer on 1.2,
    /// a pointer to an `RKLLMCallback` struct on 1.3.
    type InitCallback: Copy;
}

/// What the list (`runtime_abis!`) gives each ABI: its [`Abi`] value and its
/// place in a [`Table`]. Implemented by the list only.
pub trait Listed: Marshal {
    const ABI: Abi;
    fn table(fns: Functions<Self>) -> Table;
    /// The table's functions, if it is this ABI's.
    fn functions(table: &Table) -> Option<Functions<Self>>;
}

/// Code generic over the ABI, run for one chosen at run time ([`Abi::dispatch`]).
pub trait ForAbi {
    type Output;
    fn call<A: Listed>(self) -> Self::Output;
}

/// Code generic over the ABI, run with a table's functions ([`Table::dispatch`]).
pub trait WithFunctions {
    type Output;
    fn call<A: Listed>(self, fns: Functions<A>) -> Self::Output;
}

/// Declares the ABIs (in `lib.rs`): for each `module::Marker`, the module,
/// the marker's [`Abi`] variant and [`Table`] variant, and its [`Listed`] impl.
macro_rules! runtime_abis {
    ($($module:ident :: $marker:ident),+ $(,)?) => {
        $(pub mod $module;)+
        $(pub use $module::$marker;)+

        /// A supported runtime ABI: one per module in the list.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Abi {
            $($marker,)+
        }

        impl Abi {
            /// Every supported ABI, oldest first.
            pub const ALL: &'static [Abi] = &[$(Abi::$marker),+];

            /// What its module says of it.
            pub fn info(self) -> &'static $crate::abi::AbiInfo {
                match self {
                    $(Abi::$marker => &<$marker as $crate::abi::AbiTypes>::INFO,)+
                }
            }

            /// Runs `f` with this ABI's types.
            pub fn dispatch<F: $crate::abi::ForAbi>(self, f: F) -> F::Output {
                match self {
                    $(Abi::$marker => f.call::<$marker>(),)+
                }
            }
        }

        /// A function table of one ABI.
        #[derive(Clone, Copy)]
        pub enum Table {
            $($marker($crate::abi::Functions<$marker>),)+
        }

        impl Table {
            pub fn abi(&self) -> Abi {
                match self {
                    $(Table::$marker(_) => Abi::$marker,)+
                }
            }

            /// Runs `f` with this table's functions.
            pub fn dispatch<F: $crate::abi::WithFunctions>(&self, f: F) -> F::Output {
                match *self {
                    $(Table::$marker(fns) => f.call(fns),)+
                }
            }

            /// The functions, if the table is ABI `A`'s.
            pub fn functions<A: $crate::abi::Listed>(&self) -> Option<$crate::abi::Functions<A>> {
                A::functions(self)
            }
        }

        $(
            impl $crate::abi::Listed for $marker {
                const ABI: Abi = Abi::$marker;
                fn table(fns: $crate::abi::Functions<Self>) -> Table {
                    Table::$marker(fns)
                }
                fn functions(table: &Table) -> Option<$crate::abi::Functions<Self>> {
                    #[allow(unreachable_patterns)] // with one ABI listed
                    match *table {
                        Table::$marker(fns) => Some(fns),
                        _ => None,
                    }
                }
            }
        )+
    };
}
pub(crate) use runtime_abis;

impl Abi {
    pub fn as_str(self) -> &'static str {
        self.info().name
    }

    /// Whether sampling parameters and `max_new_tokens` can be set per run.
    pub fn per_run_sampling(self) -> bool {
        self.info().per_run_sampling
    }

    /// The ABI that drives runtime `version` ("X.Y.Z"), if any: the listed ABI
    /// whose module says it drives it (`AbiInfo::drives`).
    pub fn of_version(version: &str) -> Option<Abi> {
        // Exactly major.minor.patch, all numbers: "1.3.", "1.3.foo" or "1.3.0.9" is no version.
        let parts: Vec<u32> = version.split('.').map(|p| p.parse().ok()).collect::<Option<_>>()?;
        let [major, minor, patch] = parts[..] else { return None };
        Abi::ALL.iter().copied().find(|abi| (abi.info().drives)(major, minor, patch))
    }

    /// The supported runtime versions, newest first, e.g.
    /// "1.3.x (ABI 1.3) and 1.2.1-1.2.3 (ABI 1.2)".
    pub fn supported() -> String {
        listing(|info| format!("{} (ABI {})", info.runtimes, info.name), " and ")
    }

    /// What `runtime_abi` may be set to, e.g. "\"1.3\" (runtime 1.3.x) or \"1.2\" (runtime 1.2.1-1.2.3)".
    pub fn choices() -> String {
        listing(|info| format!("\"{}\" (runtime {})", info.name, info.runtimes), " or ")
    }
}

/// Each ABI's `item`, newest first, joined by `last` before the last one and ", " elsewhere.
fn listing(item: impl Fn(&AbiInfo) -> String, last: &str) -> String {
    let items: Vec<String> = Abi::ALL.iter().rev().map(|abi| item(abi.info())).collect();
    match items.split_last() {
        Some((tail, [])) => tail.clone(),
        Some((tail, rest)) => format!("{}{last}{tail}", rest.join(", ")),
        None => String::new(),
    }
}

impl std::fmt::Display for Abi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Abi {
    type Err = String;
    /// An ABI's name ("1.3") or a runtime version it drives ("1.3.0").
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let named = Abi::ALL.iter().copied().find(|abi| abi.as_str() == s);
        named
            .or_else(|| Abi::of_version(s))
            .ok_or_else(|| format!("unsupported runtime ABI {s:?}: use {}", Abi::choices()))
    }
}

/// Every runtime function the daemon uses, for one ABI.
pub struct Functions<A: AbiTypes> {
    pub create_default_param: unsafe extern "C" fn() -> A::Param,
    pub init: unsafe extern "C" fn(*mut LLMHandle, *mut A::Param, A::InitCallback) -> c_int,
    pub run: unsafe extern "C" fn(LLMHandle, *mut A::Input, *mut A::InferParam, *mut c_void) -> c_int,
    pub abort: unsafe extern "C" fn(LLMHandle) -> c_int,
    pub is_running: unsafe extern "C" fn(LLMHandle) -> c_int,
    pub destroy: unsafe extern "C" fn(LLMHandle) -> c_int,
    pub clear_kv_cache: unsafe extern "C" fn(LLMHandle, c_int, *mut c_int, *mut c_int) -> c_int,
    pub get_kv_cache_size: unsafe extern "C" fn(LLMHandle, *mut c_int) -> c_int,
    pub set_chat_template: unsafe extern "C" fn(LLMHandle, *const c_char, *const c_char, *const c_char) -> c_int,
    pub set_function_tools: unsafe extern "C" fn(LLMHandle, *const c_char, *const c_char, *const c_char) -> c_int,
    pub load_lora: unsafe extern "C" fn(LLMHandle, *mut RKLLMLoraAdapter) -> c_int,
    pub load_prompt_cache: unsafe extern "C" fn(LLMHandle, *const c_char) -> c_int,
    pub release_prompt_cache: unsafe extern "C" fn(LLMHandle) -> c_int,
}

impl<A: AbiTypes> Clone for Functions<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: AbiTypes> Copy for Functions<A> {}

/// The symbol names resolved by the loader, in the order of [`Functions`]'
/// fields. A missing one is an error naming it.
pub const SYMBOLS: [&str; 13] = [
    "rkllm_createDefaultParam",
    "rkllm_init",
    "rkllm_run",
    "rkllm_abort",
    "rkllm_is_running",
    "rkllm_destroy",
    "rkllm_clear_kv_cache",
    "rkllm_get_kv_cache_size",
    "rkllm_set_chat_template",
    "rkllm_set_function_tools",
    "rkllm_load_lora",
    "rkllm_load_prompt_cache",
    "rkllm_release_prompt_cache",
];
