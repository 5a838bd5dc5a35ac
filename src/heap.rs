//! Giving the allocator's free memory back to the system after the
//! daemon's large one-off jobs (a model's load and unload).
//!
//! A load allocates far more than it keeps: a tokenizer.json is parsed
//! through a JSON tree several times its size, a template compiled. glibc's
//! malloc keeps what is freed in the arena of the thread that freed it, and
//! returns to the system only the top of each heap; the rest stays in the
//! process's RSS until the same thread allocates again. `malloc_trim`
//! releases the free pages of every arena (`MADV_DONTNEED`). It walks the
//! arenas under their locks, so it is called only after those jobs, never
//! on a request's path (docs/performance.md, "Memory: the level-1 footprint").

/// Returns the allocator's free pages to the system (glibc); elsewhere a
/// no-op.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers; it only walks the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}
