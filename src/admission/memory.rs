//! What the allocator keeps of memory the service freed: glibc holds what a thread frees in
//! that thread's arena, so a large run's buffers, and under a flood of small requests the
//! pieces of many threads' arenas, stay with the process unless handed back. Here: the bound
//! on arenas set before the runtime starts (`limits.allocator_arenas`), and the hand-back
//! after large runs and every few seconds. Both are no-ops where the allocator is not
//! glibc's.

/// Hands the memory the allocator holds free back to the system, after a large run: glibc
/// keeps what a thread freed in that thread's arena, and a node that made a 12 MP source
/// into a 3000-pixel AVIF kept 42–111 MB more for good (audit #3). A few milliseconds on
/// the blocking pool; a no-op where the allocator is not glibc's.
#[allow(unsafe_code)]
pub fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes no pointer and only releases pages the allocator holds
        // free; its answer (whether any were released) is not needed.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// Bounds the arenas the allocator keeps (`limits.allocator_arenas`; 0 leaves the
/// allocator's own bound): called before the runtime starts its threads, so that every
/// thread shares these few arenas and what one frees another reuses. `MALLOC_ARENA_MAX` in
/// the environment, read by glibc itself, wins. A no-op where the allocator is not glibc's.
#[allow(unsafe_code)]
pub fn bound_arenas(arenas: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if arenas == 0 || std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let arenas = libc::c_int::try_from(arenas).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt takes two integers and changes only the allocator's tuning; a
        // refusal (0) leaves the allocator's own bound, which is only more memory.
        if unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) } == 0 {
            tracing::debug!("the allocator kept its own arena bound");
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}
