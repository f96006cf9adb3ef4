//! How the process allocates: Rust's heap through mimalloc, and glibc malloc (which the C code
//! underneath, SQLite, still uses) tuned for a long-running server.
//!
//! [`Allocator`] is the global allocator of the `hiregate` binary and of the benches, which
//! measure what ships. A request makes many small allocations (header maps, JSON values,
//! futures): glibc's malloc and free were 16 % of a paid hire's gateway CPU at c=8 and 6.8 % of
//! an unpaid 402's server time (perf, `--bench official_client`, `--bench unpaid`). With
//! mimalloc, RSS with 10,000 pending contracts was 83.0 MiB, against 79.9 MiB with glibc alone
//! on a faster machine (`--bench scale`).
//!
//! glibc gives each thread that meets contention an arena of its own and keeps what was freed
//! in it for reuse. Two things bound what it holds: fewer arenas, set before any thread starts,
//! and a periodic `malloc_trim`, which hands the free pages inside every arena back to the
//! kernel (freeing only moves the top of each heap). Elsewhere (musl, macOS) both are no-ops.
//!
//! Transparent huge pages are off for the process. mimalloc asks for them on its arenas
//! (`madvise(MADV_HUGEPAGE)`), so a page fault in a growing heap zeroes 2 MiB at once, on the
//! request that touched it (and, where the kernel's THP `defrag` is `madvise`, may compact
//! memory first). Over 300 paid hires at c=8 (`--bench official_client`, perf of the gateway's
//! process) those faults were 5.6 % of the gateway's CPU samples, all of it `clear_page_erms`
//! under `do_huge_pmd_anonymous_page`; without huge pages, faults and mimalloc's purges were
//! 1.8 %. `MIMALLOC_ALLOW_THP` in the environment overrides it, as for mimalloc itself.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The global allocator: `#[global_allocator] static GLOBAL: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// Arenas glibc may create; `MALLOC_ARENA_MAX` in the environment overrides it.
const ARENA_MAX: i32 = 2;

/// How often freed memory is handed back. A trim with little to return costs microseconds.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Set up the process's heaps for a long-running server: glibc's arenas capped and transparent
/// huge pages off. Call first thing in `main`, before the runtime's threads exist: an arena is
/// taken by a thread for good, and pages faulted in before stay huge.
pub fn configure() {
    limit_arenas();
    disable_transparent_huge_pages();
}

/// Arenas capped at [`ARENA_MAX`], unless `MALLOC_ARENA_MAX` says otherwise.
fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; called before other threads exist.
        #[expect(unsafe_code, reason = "libc::mallopt has no safe wrapper")]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
        }
    }
}

/// No transparent huge pages for this process (and the processes it starts), unless
/// `MIMALLOC_ALLOW_THP` says otherwise.
fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        // The arguments are unsigned longs: variadic, so typed here rather than promoted ints.
        let (disable, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
        // SAFETY: PR_SET_THP_DISABLE only sets a flag of the calling process; it touches no
        // memory of ours. A kernel without it refuses with EINVAL, which changes nothing.
        #[expect(unsafe_code, reason = "libc::prctl has no safe wrapper")]
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, disable, unused, unused, unused);
        }
    }
}

/// Hand freed memory back to the kernel every [`TRIM_INTERVAL`] until `shutdown`.
pub async fn release_freed_memory(shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(TRIM_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        // It walks every arena under its lock: off the async workers.
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe; 0 keeps no extra padding at the top of the heap.
    #[expect(unsafe_code, reason = "libc::malloc_trim has no safe wrapper")]
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn configuring_turns_transparent_huge_pages_off() {
        if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
            eprintln!("skipped: MIMALLOC_ALLOW_THP is set, which leaves the choice to mimalloc");
            return;
        }
        super::configure();
        let unused: libc::c_ulong = 0;
        // SAFETY: PR_GET_THP_DISABLE only reads a flag of the calling process.
        #[expect(unsafe_code, reason = "libc::prctl has no safe wrapper")]
        let disabled =
            unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, unused, unused, unused, unused) };
        assert_eq!(disabled, 1);
    }
}
