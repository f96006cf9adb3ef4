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

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The global allocator: `#[global_allocator] static GLOBAL: Allocator = Allocator;`.
pub use mimalloc::MiMalloc as Allocator;

/// Arenas glibc may create; `MALLOC_ARENA_MAX` in the environment overrides it.
const ARENA_MAX: i32 = 2;

/// How often freed memory is handed back. A trim with little to return costs microseconds.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Cap the allocator's arenas. Call first thing in `main`, before the runtime's threads exist:
/// an arena is taken by a thread for good.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a malloc parameter; called before other threads exist.
        #[expect(unsafe_code, reason = "libc::mallopt has no safe wrapper")]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX);
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
