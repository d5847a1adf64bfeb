//! Gives the allocator's free memory back to the kernel. glibc's malloc keeps the pages
//! of freed chunks inside its arenas (one per thread that allocated, up to eight per
//! core) and returns only what is at the top of the main heap, so after a burst of pods
//! the heap stays near its peak for good: the full churn soak's heap went 13.8 → 31.4
//! MiB over 2,000 pods and 32 idle minutes, with every cache back where it was, and
//! `malloc_trim(0)` took a 150-pod churn's 18.8 MiB back to 13.2. Go's runtime
//! (kubelet's) scavenges freed memory by itself; oxlet asks glibc to, every
//! [`TRIM_EVERY`]. Other C libraries (musl) return freed pages themselves.
//!
//! glibc also gives each thread that allocates an arena of its own, up to eight per
//! core. Each keeps its own partly used pages, and oxlet's threads (two tokio workers,
//! a few blocking-pool threads) do not need that many: at 110 pods the heap was 16.0
//! MiB with six arenas and 13.6 with two. [`limit_arenas`] caps them at start.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::debug;

/// How often the free pages go back: once the churn of a wave of pods is over, well
/// within a settle, and at a cost (a walk of the free lists, a few `madvise` calls)
/// nobody notices.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(30);

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod glibc {
    // SAFETY: glibc's functions, declared with their C signatures. `malloc_trim` takes
    // each arena's lock itself and only releases pages no chunk uses; `mallopt` only
    // sets a tunable under malloc's own lock; `malloc_stats` (tests) prints each arena's
    // figures to stderr. All are safe to call from any thread at any time.
    // (One of the three places oxlet allows `unsafe`: the C library has no Rust interface.)
    #[allow(unsafe_code)]
    unsafe extern "C" {
        pub(super) safe fn malloc_trim(pad: usize) -> std::ffi::c_int;
        pub(super) safe fn mallopt(
            param: std::ffi::c_int,
            value: std::ffi::c_int,
        ) -> std::ffi::c_int;
        #[cfg(test)]
        pub(super) safe fn malloc_stats();
    }

    /// glibc's `M_ARENA_MAX` (malloc.h).
    pub(super) const M_ARENA_MAX: std::ffi::c_int = -8;
}

/// Caps glibc's arenas at `arenas` (`main` passes its tokio worker count; the
/// blocking-pool threads, which allocate little, share them) unless the user chose a
/// number (the `MALLOC_ARENA_MAX` variable or the `glibc.malloc.arena_max` tunable).
/// Called first thing in `main`, before any thread starts; a thread that already has an
/// arena keeps it, and threads after the cap share the ones there are. Returns whether
/// it set it.
pub fn limit_arenas(arenas: usize) -> bool {
    let max = std::env::var_os("MALLOC_ARENA_MAX");
    let tunables = std::env::var("GLIBC_TUNABLES").ok();
    if user_chose_arenas(max.is_some(), tunables.as_deref()) {
        return false;
    }
    set_arena_max(i32::try_from(arenas).unwrap_or(i32::MAX))
}

/// Whether the environment sets the arena count: the variable at all, or the tunable
/// among `GLIBC_TUNABLES`' colon-separated `name=value` pairs.
fn user_chose_arenas(max_set: bool, tunables: Option<&str>) -> bool {
    max_set
        || tunables.is_some_and(|t| {
            t.split(':')
                .any(|kv| kv.split('=').next() == Some("glibc.malloc.arena_max"))
        })
}

fn set_arena_max(n: i32) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        glibc::mallopt(glibc::M_ARENA_MAX, n) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = n;
        false
    }
}

/// Returns the allocator's free pages to the kernel; true when some were.
pub(crate) fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        glibc::malloc_trim(0) == 1
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Trims every [`TRIM_EVERY`] until `cancel`.
pub(crate) async fn run_trimmer(cancel: CancellationToken) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(TRIM_EVERY) => {}
        }
        // A walk of every arena's free lists and a few system calls: well under a
        // millisecond at oxlet's heap, so it runs here (a blocking-pool thread would be
        // started for it each time and idle out after 10 s).
        let started = Instant::now();
        let released = trim();
        let took = crate::duration::format_go_duration(started.elapsed());
        debug!(released, took = %took, "gave the heap's free pages back to the kernel");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cap the tests set: `main`'s two tokio workers.
    const ARENAS: i32 = 2;

    /// Set for [`arenas_child`]: "capped" or "uncapped".
    const ARENAS_CHILD_ENV: &str = "OXLET_TEST_ARENAS_CHILD";

    /// The half of `threads_share_the_capped_arenas` that runs in a child process
    /// (the cap is process-wide): eight threads allocate at once, then glibc prints
    /// its arenas to stderr.
    #[test]
    #[ignore = "run by threads_share_the_capped_arenas in a child process"]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn arenas_child() {
        let Ok(mode) = std::env::var(ARENAS_CHILD_ENV) else {
            return;
        };
        if mode == "capped" {
            assert!(set_arena_max(ARENAS));
        }
        let all_in = std::sync::Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let all_in = all_in.clone();
                std::thread::spawn(move || {
                    let held: Vec<Vec<u8>> = (0..100).map(|_| vec![1u8; 512]).collect();
                    // Every thread holds its chunks until all have allocated, so
                    // glibc sees eight threads allocating at once.
                    all_in.wait();
                    held.len()
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        glibc::malloc_stats();
    }

    /// How many arenas a child process with eight allocating threads ended with.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn arenas_in_a_child(mode: &str) -> usize {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "heap::tests::arenas_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ARENAS_CHILD_ENV, mode)
            .env_remove("MALLOC_ARENA_MAX")
            .env_remove("GLIBC_TUNABLES")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "child failed: {stderr}");
        stderr.lines().filter(|l| l.starts_with("Arena ")).count()
    }

    /// With the cap, eight threads allocating at once share two arenas; without
    /// it, glibc gives them more.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn threads_share_the_capped_arenas() {
        let capped = arenas_in_a_child("capped");
        assert!(
            (1..=ARENAS as usize).contains(&capped),
            "{capped} arenas with the cap"
        );
        let uncapped = arenas_in_a_child("uncapped");
        assert!(
            uncapped > ARENAS as usize,
            "{uncapped} arenas without the cap"
        );
    }

    /// A user's own choice of arenas is left alone, in either spelling.
    #[test]
    fn a_users_arena_setting_is_kept() {
        assert!(user_chose_arenas(true, None));
        let both = "glibc.malloc.trim_threshold=1:glibc.malloc.arena_max=4";
        assert!(user_chose_arenas(false, Some(both)));
        assert!(!user_chose_arenas(
            false,
            Some("glibc.malloc.trim_threshold=1")
        ));
        assert!(!user_chose_arenas(false, Some("glibc.malloc.arena_test=1")));
        assert!(!user_chose_arenas(false, None));
    }

    /// Freed memory in a thread's arena is given back: the process's anonymous
    /// resident memory drops once the arena's free pages are released.
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_pages_go_back_to_the_kernel() {
        let rss_anon = || -> u64 {
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            status
                .lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap()
        };
        // A thread of its own allocates in its own arena, where nothing else runs;
        // small chunks (below the mmap threshold) stay in the arena when freed. All
        // are freed but the last, which holds the arena's top, so the arena cannot
        // shrink by itself.
        let (before_trim, after_trim) = std::thread::spawn(move || {
            let mut chunks: Vec<Vec<u8>> = (0..40_000).map(|_| vec![1u8; 1000]).collect();
            let keep = chunks.pop();
            drop(chunks);
            let before = rss_anon();
            assert!(trim(), "there were free pages to give back");
            let after = rss_anon();
            drop(keep);
            (before, after)
        })
        .join()
        .unwrap();
        assert!(
            after_trim + 16 * 1024 < before_trim,
            "RssAnon {before_trim} KiB before the trim, {after_trim} KiB after"
        );
    }
}
