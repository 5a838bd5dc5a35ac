//! Deciding the ABI of a runtime library from its file (`rkllm_sys::sniff`)
//! and finding the file (`rkllm_sys::loader`), per docs/runtime.md,
//! "Detecting the version before calling anything".
//!
//! Environment variables are process-global: only
//! `find_library_follows_the_search_order` reads or sets them.

use rkllm_sys::abi::Abi;
use rkllm_sys::loader::{find_library, search_paths, LoadError, Runtime, LIBRARY_NAME, SYSTEM_DIRS};
use rkllm_sys::sniff::{find_version, sniff_bytes, sniff_file, SniffError, Sniffed, VERSION_MARKER};
use std::path::{Path, PathBuf};

/// The marker as the library carries it, followed by `version`.
fn marked(version: &str) -> Vec<u8> {
    format!("RKLLM SDK (version: {version}").into_bytes()
}

/// `len` bytes of deterministic binary junk (xorshift64), NULs included.
fn junk(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect()
}

/// `base` with `insert` written over it at `offset`.
fn with_at(base: &[u8], offset: usize, insert: &[u8]) -> Vec<u8> {
    let mut bytes = base.to_vec();
    bytes[offset..offset + insert.len()].copy_from_slice(insert);
    bytes
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn ok(version: &str, abi: Abi) -> Sniffed {
    Sniffed { version: Some(version.to_owned()), abi }
}

// ---------------------------------------------------------------------------
// find_version
// ---------------------------------------------------------------------------

#[test]
fn marker_constant_is_the_documented_text() {
    assert_eq!(VERSION_MARKER, b"RKLLM SDK (version: ");
}

#[test]
fn find_version_reads_the_version_after_the_marker() {
    assert_eq!(find_version(&marked("1.3.0")).as_deref(), Some("1.3.0"));
    assert_eq!(find_version(&marked("1.2.3)\0")).as_deref(), Some("1.2.3"));
    assert_eq!(find_version(&marked("1.2.1, built 2025-04-01)")).as_deref(), Some("1.2.1"));
    assert_eq!(find_version(&marked("1.1.4 ")).as_deref(), Some("1.1.4"));
    assert_eq!(find_version(&marked("1.2.3.")).as_deref(), Some("1.2.3"), "a trailing dot is not part of it");
}

#[test]
fn find_version_without_a_version_after_the_marker() {
    assert_eq!(find_version(b""), None);
    assert_eq!(find_version(b"rkllm-runtime version: 1.3.0"), None, "not the marker");
    assert_eq!(find_version(b"RKLLM SDK (version: "), None, "marker at the very end");
    assert_eq!(find_version(&marked("unknown)")), None);
    assert_eq!(find_version(&marked(".)")), None);
}

#[test]
fn find_version_in_binary_junk_at_any_offset() {
    let len = 4 << 20; // the size of a real librkllmrt.so, roughly
    let base = junk(len, 1);
    assert_eq!(find_version(&base), None, "junk alone has no marker");
    for offset in [0, 1, 4093, 3_141_593, len - 40] {
        let mut insert = marked("1.2.3");
        insert.push(0);
        let bytes = with_at(&base, offset, &insert);
        assert_eq!(find_version(&bytes).as_deref(), Some("1.2.3"), "marker at offset {offset}");
    }
}

// ---------------------------------------------------------------------------
// Abi::of_version
// ---------------------------------------------------------------------------

#[test]
fn abi_of_supported_versions() {
    assert_eq!(Abi::of_version("1.3.0"), Some(Abi::V1_3));
    assert_eq!(Abi::of_version("1.2.1"), Some(Abi::V1_2));
    assert_eq!(Abi::of_version("1.2.2"), Some(Abi::V1_2));
    assert_eq!(Abi::of_version("1.2.3"), Some(Abi::V1_2));
}

#[test]
fn abi_of_unsupported_versions() {
    for version in
        ["1.2.0", "1.1.4", "1.1.0", "1.0.1", "0.9.8", "2.0.0", "1.2", "1", "", "x.y.z", "1.3.", "1.3.foo", "1.3.0.9"]
    {
        assert_eq!(Abi::of_version(version), None, "version {version:?}");
    }
}

// ---------------------------------------------------------------------------
// sniff_bytes: the decision
// ---------------------------------------------------------------------------

#[test]
fn marker_decides_the_abi() {
    assert_eq!(sniff_bytes("lib.so", &marked("1.3.0"), None).unwrap(), ok("1.3.0", Abi::V1_3));
    assert_eq!(sniff_bytes("lib.so", &marked("1.2.3"), None).unwrap(), ok("1.2.3", Abi::V1_2));
    assert_eq!(sniff_bytes("lib.so", &marked("1.2.1"), None).unwrap(), ok("1.2.1", Abi::V1_2));
}

#[test]
fn marker_and_matching_override_agree() {
    assert_eq!(sniff_bytes("lib.so", &marked("1.3.0"), Some(Abi::V1_3)).unwrap(), ok("1.3.0", Abi::V1_3));
    assert_eq!(sniff_bytes("lib.so", &marked("1.2.2"), Some(Abi::V1_2)).unwrap(), ok("1.2.2", Abi::V1_2));
}

#[test]
fn old_versions_are_refused_naming_found_and_supported_versions() {
    for version in ["1.1.4", "1.2.0"] {
        let err = sniff_bytes("/opt/librkllmrt.so", &marked(version), None).unwrap_err();
        assert!(matches!(&err, SniffError::Unsupported { version: v, .. } if v == version), "{version}: {err:?}");
        let message = err.to_string();
        assert!(message.contains(version), "names the version found: {message}");
        assert!(message.contains("/opt/librkllmrt.so"), "names the file: {message}");
        assert!(message.contains(&Abi::supported()), "names the supported versions: {message}");
    }
    let supported = Abi::supported();
    assert!(supported.contains("1.3.x (ABI 1.3)") && supported.contains("1.2.1-1.2.3 (ABI 1.2)"), "{supported}");
}

#[test]
fn an_override_does_not_make_an_old_version_acceptable() {
    let err = sniff_bytes("lib.so", &marked("1.2.0"), Some(Abi::V1_2)).unwrap_err();
    assert!(matches!(err, SniffError::Unsupported { .. }), "{err:?}");
    let err = sniff_bytes("lib.so", &marked("1.1.4"), Some(Abi::V1_3)).unwrap_err();
    assert!(matches!(err, SniffError::Unsupported { .. }), "{err:?}");
}

#[test]
fn no_marker_is_refused_saying_how_to_set_runtime_abi() {
    let err = sniff_bytes("/opt/librkllmrt.so", b"\x7fELF no version here", None).unwrap_err();
    assert!(matches!(&err, SniffError::NoMarker { path } if path == "/opt/librkllmrt.so"), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("/opt/librkllmrt.so"), "{message}");
    assert!(message.contains("runtime_abi"), "{message}");
    assert!(message.contains("\"1.3\"") && message.contains("\"1.2\""), "{message}");
}

#[test]
fn no_marker_is_accepted_with_an_override() {
    for abi in [Abi::V1_2, Abi::V1_3] {
        assert_eq!(
            sniff_bytes("lib.so", b"\x7fELF no version here", Some(abi)).unwrap(),
            Sniffed { version: None, abi }
        );
    }
}

#[test]
fn marker_and_conflicting_override_is_an_error() {
    let err = sniff_bytes("/opt/librkllmrt.so", &marked("1.3.0"), Some(Abi::V1_2)).unwrap_err();
    match &err {
        SniffError::Conflict { version, found, configured, .. } => {
            assert_eq!((version.as_str(), *found, *configured), ("1.3.0", Abi::V1_3, Abi::V1_2));
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("1.3.0") && message.contains("runtime_abi is set to 1.2"), "{message}");

    let err = sniff_bytes("lib.so", &marked("1.2.3"), Some(Abi::V1_3)).unwrap_err();
    assert!(matches!(err, SniffError::Conflict { found: Abi::V1_2, configured: Abi::V1_3, .. }), "{err:?}");
}

// ---------------------------------------------------------------------------
// sniff_file: the same decisions, from files
// ---------------------------------------------------------------------------

#[test]
fn sniff_file_finds_the_marker_in_a_binary_file() {
    let dir = tempfile::tempdir().unwrap();
    let base = junk(3 << 20, 2);
    let cases = [("1.3.0", Abi::V1_3, 1_000_003), ("1.2.3", Abi::V1_2, 17), ("1.2.1", Abi::V1_2, 2_097_151)];
    for (version, abi, offset) in cases {
        let mut insert = marked(version);
        insert.extend_from_slice(b")\0");
        let path = write_file(dir.path(), &format!("librkllmrt-{version}.so"), &with_at(&base, offset, &insert));
        assert_eq!(sniff_file(&path, None).unwrap(), ok(version, abi), "{version} at offset {offset}");
    }
}

#[test]
fn sniff_file_refuses_old_and_unmarked_libraries() {
    let dir = tempfile::tempdir().unwrap();
    let old = write_file(dir.path(), "old.so", &with_at(&junk(65536, 5), 999, &marked("1.1.4)")));
    let err = sniff_file(&old, None).unwrap_err();
    assert!(matches!(err, SniffError::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains(&old.display().to_string()), "{err}");

    let unmarked = write_file(dir.path(), "unmarked.so", &junk(65536, 7));
    let err = sniff_file(&unmarked, None).unwrap_err();
    assert!(matches!(err, SniffError::NoMarker { .. }), "{err:?}");
    assert_eq!(sniff_file(&unmarked, Some(Abi::V1_3)).unwrap(), Sniffed { version: None, abi: Abi::V1_3 });

    let marked_13 = write_file(dir.path(), "marked.so", &with_at(&junk(65536, 5), 5, &marked("1.3.0")));
    let err = sniff_file(&marked_13, Some(Abi::V1_2)).unwrap_err();
    assert!(matches!(err, SniffError::Conflict { .. }), "{err:?}");
}

#[test]
fn sniff_file_of_a_missing_file_is_a_read_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-librkllmrt.so");
    let err = sniff_file(&missing, Some(Abi::V1_3)).unwrap_err();
    let shown = missing.display().to_string();
    assert!(
        matches!(&err, SniffError::Read { path, source } if *path == shown
        && source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(err.to_string().contains(&shown), "{err}");
}

#[test]
fn sniff_file_of_an_unreadable_file_is_a_read_error_naming_the_path() {
    // A directory cannot be read as a file, even by root (CI runs as root,
    // so file permissions would not do).
    let dir = tempfile::tempdir().unwrap();
    let err = sniff_file(dir.path(), None).unwrap_err();
    let shown = dir.path().display().to_string();
    assert!(matches!(&err, SniffError::Read { path, .. } if *path == shown), "{err:?}");
    assert!(err.to_string().contains(&shown), "{err}");
}

// ---------------------------------------------------------------------------
// Loading: the version is sniffed before anything is loaded
// ---------------------------------------------------------------------------

#[test]
fn load_of_a_missing_file_says_it_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join(LIBRARY_NAME);
    let err = Runtime::load(&missing, Some(Abi::V1_3)).unwrap_err();
    assert!(matches!(&err, LoadError::Missing(p) if *p == missing.display().to_string()), "{err:?}");
}

#[test]
fn load_refuses_before_loading_when_sniffing_refuses() {
    // Not ELF files: had they been passed to dlopen, the error would be Open.
    let dir = tempfile::tempdir().unwrap();
    let old = write_file(dir.path(), "old.so", &with_at(&junk(4096, 5), 100, &marked("1.2.0)")));
    let err = Runtime::load(&old, None).unwrap_err();
    assert!(matches!(err, LoadError::Sniff(SniffError::Unsupported { .. })), "{err:?}");

    let unmarked = write_file(dir.path(), "unmarked.so", &junk(4096, 3));
    let err = Runtime::load(&unmarked, None).unwrap_err();
    assert!(matches!(err, LoadError::Sniff(SniffError::NoMarker { .. })), "{err:?}");
}

#[test]
fn load_of_a_marked_file_that_is_no_library_is_an_open_error() {
    let dir = tempfile::tempdir().unwrap();
    let fake = write_file(dir.path(), LIBRARY_NAME, &with_at(&junk(4096, 5), 100, &marked("1.3.0)")));
    let err = Runtime::load(&fake, None).unwrap_err();
    assert!(matches!(&err, LoadError::Open { path, .. } if *path == fake.display().to_string()), "{err:?}");
}

// ---------------------------------------------------------------------------
// Finding the library
// ---------------------------------------------------------------------------

#[test]
fn an_explicit_path_is_returned_as_given() {
    // Returned even if it does not exist, so that loading reports it missing.
    for given in ["/nonexistent/librkllmrt.so", "relative/lib.so", "librkllmrt.so"] {
        assert_eq!(find_library(Some(Path::new(given))).unwrap(), PathBuf::from(given));
    }
}

/// Restores environment variables when dropped (also when a check fails).
struct EnvGuard(Vec<(&'static str, Option<std::ffi::OsString>)>);

impl EnvGuard {
    fn save(names: &[&'static str]) -> EnvGuard {
        EnvGuard(names.iter().map(|&n| (n, std::env::var_os(n))).collect())
    }
}

impl Drop for EnvGuard {
    fn drop(&mut self) {
        for (name, value) in &self.0 {
            match value {
                Some(v) => std::env::set_var(name, v),
                None => std::env::remove_var(name),
            }
        }
    }
}

/// The only test that touches the environment (see the module comment).
#[test]
fn find_library_follows_the_search_order() {
    let _restore = EnvGuard::save(&["RKLLM_LIB", "LD_LIBRARY_PATH"]);
    let found_dir = tempfile::tempdir().unwrap();
    let empty_dir = tempfile::tempdir().unwrap();
    let in_ld_path = write_file(found_dir.path(), LIBRARY_NAME, b"not really a library");
    let system: Vec<PathBuf> = SYSTEM_DIRS.iter().map(|d| Path::new(d).join(LIBRARY_NAME)).collect();

    // search_paths: each LD_LIBRARY_PATH directory (empty entries skipped), then the system directories.
    std::env::set_var("LD_LIBRARY_PATH", format!("{}::{}", empty_dir.path().display(), found_dir.path().display()));
    let mut expected = vec![empty_dir.path().join(LIBRARY_NAME), in_ld_path.clone()];
    expected.extend(system.iter().cloned());
    assert_eq!(search_paths(), expected);
    std::env::remove_var("LD_LIBRARY_PATH");
    assert_eq!(search_paths(), system);

    // Without RKLLM_LIB: the first search path holding the file.
    std::env::remove_var("RKLLM_LIB");
    std::env::set_var("LD_LIBRARY_PATH", format!("{}:{}", empty_dir.path().display(), found_dir.path().display()));
    assert_eq!(find_library(None).unwrap(), in_ld_path);

    // An empty RKLLM_LIB counts as unset.
    std::env::set_var("RKLLM_LIB", "");
    assert_eq!(find_library(None).unwrap(), in_ld_path);

    // RKLLM_LIB is returned as given (even if missing), before the search.
    std::env::set_var("RKLLM_LIB", "/nonexistent/from-env.so");
    assert_eq!(find_library(None).unwrap(), PathBuf::from("/nonexistent/from-env.so"));

    // An explicit path wins over RKLLM_LIB.
    assert_eq!(find_library(Some(Path::new("/explicit.so"))).unwrap(), PathBuf::from("/explicit.so"));

    // Nothing found: the error lists where it looked and how to point at the file.
    std::env::remove_var("RKLLM_LIB");
    std::env::set_var("LD_LIBRARY_PATH", empty_dir.path());
    if system.iter().all(|p| !p.is_file()) {
        let err = find_library(None).unwrap_err();
        assert!(matches!(err, LoadError::NotFound(_)), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&empty_dir.path().join(LIBRARY_NAME).display().to_string()), "{message}");
        assert!(message.contains("/usr/lib/librkllmrt.so"), "{message}");
        assert!(message.contains("--lib") && message.contains("RKLLM_LIB"), "{message}");
    }
}
