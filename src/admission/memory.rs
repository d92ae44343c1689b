//! What the allocators keep of memory the service freed. Two allocators share the process:
//! the binary's own heap is jemalloc (`main.rs`), and the C codecs (libaom, libavif,
//! libheif, libjpeg-turbo, libwebp) allocate from glibc's malloc, which holds what a thread frees in
//! that thread's arena, so a large run's buffers stay with the process unless handed back.
//! Here: the bound on glibc's arenas set before the runtime starts
//! (`limits.allocator_arenas`), and the hand-back of both allocators' free pages after large
//! runs and every few seconds. Each step is a no-op where its allocator is not present.

/// Hands the memory both allocators hold free back to the system, after a large run: glibc
/// keeps what a thread freed in that thread's arena, and a node that made a 12 MP source
/// into a 3000-pixel AVIF kept 42–111 MB more for good (audit #3); jemalloc returns pages
/// it kept dirty only when an arena is next used, so an idle node would keep them too. A
/// few milliseconds on the blocking pool.
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
    #[cfg(all(target_os = "linux", not(target_env = "musl")))]
    {
        // "arena.4096.purge": every arena's unused dirty pages (4096 is jemalloc's
        // MALLCTL_ARENAS_ALL).
        const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
        // SAFETY: the name is NUL-terminated; a purge reads and writes no value, so every
        // pointer is null and both lengths 0. A refusal only leaves the pages with jemalloc.
        let refused = unsafe {
            tikv_jemalloc_sys::mallctl(
                PURGE_ALL.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if refused != 0 {
            tracing::debug!(code = refused, "jemalloc did not purge its arenas");
        }
    }
}

/// Bounds the arenas glibc's malloc keeps, the C codecs' allocator (`limits.allocator_arenas`;
/// 0 leaves glibc's own bound): called before the runtime starts its threads, so that every
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
