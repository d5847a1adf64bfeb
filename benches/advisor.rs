//! The metric advisor's cost at 110 pods: the pod/container collector's CPU time per
//! round on real cgroups (110 pod cgroups of 2 container cgroups each, created below a
//! parent of the bench's own and removed after), against a baseline measured in the
//! same run: reading the same files with bare `std::fs::read`, no parsing. Then the
//! metric cache: its memory after 30 min of 1 s rounds at 110 pods in memory, and on
//! disk (koordlet's 12 h and 100 MiB): the CPU an append takes each second (log and
//! blocks included), memory, disk use, write rate and the history the cap leaves.
//!
//! Run as root: `cargo bench --bench advisor`. `OXLET_BENCH_ROUNDS=<n>` changes the
//! rounds measured (default 300).

use std::time::Instant;

use oxlet::advisor_bench::{CollectorBench, FilledCache};

const PODS: usize = 110;
const CONTAINERS: usize = 2;
const RETENTION_SECS: usize = 30 * 60;

/// This thread's CPU time in ns (`/proc/thread-self/schedstat`, ns resolution).
fn thread_cpu_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("schedstat");
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// The process's user + system time in clock ticks (`/proc/self/stat`, a cross-check).
fn process_ticks() -> u64 {
    let text = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = text.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of the whole line are 12 and 13 after the command.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn rss_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb * 1024
}

/// CPU ns per round of `f`, over `rounds` rounds (after 5 warm-up rounds).
fn per_round(rounds: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..5 {
        f();
    }
    let (c0, t0, w0) = (thread_cpu_ns(), process_ticks(), Instant::now());
    for _ in 0..rounds {
        f();
    }
    let cpu = (thread_cpu_ns() - c0) as f64 / rounds as f64;
    let ticks_ns = (process_ticks() - t0) as f64 * 1e9 / 100.0 / rounds as f64;
    let wall = w0.elapsed().as_nanos() as f64 / rounds as f64;
    eprintln!(
        "    wall {:.3} ms/round, utime+stime {:.3} ms/round",
        wall / 1e6,
        ticks_ns / 1e6
    );
    (cpu, wall)
}

fn main() {
    let rounds: usize = std::env::var("OXLET_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let parent = format!("oxlet-bench-advisor-{}", std::process::id());
    let mut bench = match CollectorBench::create(&parent, PODS, CONTAINERS) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("advisor bench: cannot create the test cgroups (run as root): {e}");
            std::process::exit(1);
        }
    };
    let files = bench.files();
    println!(
        "advisor collector at {PODS} pods x {CONTAINERS} containers, {rounds} rounds, {} files a round",
        files.len()
    );

    eprintln!("  baseline (bare reads):");
    let (base, _) = per_round(rounds, || {
        for f in &files {
            let _ = std::hint::black_box(std::fs::read(f));
        }
    });
    // The kernel's floor for the collector's way of reading: every file kept open and
    // read from offset 0 in one `pread` (what `StatReader` does).
    eprintln!("  baseline (kept descriptors, one pread each):");
    let open: Vec<std::fs::File> = files
        .iter()
        .filter_map(|f| std::fs::File::open(f).ok())
        .collect();
    let mut buf = vec![0u8; 64 * 1024];
    let (kept, _) = per_round(rounds, || {
        for f in &open {
            let _ = std::hint::black_box(std::os::unix::fs::FileExt::read_at(f, &mut buf, 0));
        }
    });
    drop(open);
    eprintln!("  collector:");
    let mut samples = 0;
    let (cost, _) = per_round(rounds, || samples = bench.round());
    let (pods, containers) = bench.read_counts();
    assert_eq!(
        (pods, containers),
        (PODS, PODS * CONTAINERS),
        "every cgroup read"
    );
    if let Err(e) = bench.remove() {
        eprintln!("advisor bench: removing {parent}: {e}");
    }
    println!("| what | CPU per round | cores at 1 s |");
    println!("|---|---|---|");
    println!(
        "| baseline: bare std::fs::read of the same files | {:.3} ms | {:.4} |",
        base / 1e6,
        base / 1e9
    );
    println!(
        "| baseline: the same files kept open, one pread each | {:.3} ms | {:.4} |",
        kept / 1e6,
        kept / 1e9
    );
    println!(
        "| pod/container collector ({samples} samples a round) | {:.3} ms | {:.4} |",
        cost / 1e6,
        cost / 1e9
    );
    println!(
        "collector / bare reads: {:.2}x; collector / kept-descriptor reads: {:.2}x; target <= 0.01 core: {}",
        cost / base,
        cost / kept,
        if cost / 1e9 <= 0.01 { "met" } else { "NOT met" }
    );

    let in_memory = cache_in_memory();
    cache_on_disk(in_memory);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn mib(b: f64) -> f64 {
    b / f64::from(1 << 20)
}

/// The in-memory cache (no log, no blocks): its memory after 30 min, and the CPU an
/// append takes, the baseline the on-disk cache's cost is measured against.
fn cache_in_memory() -> f64 {
    let rss0 = rss_bytes();
    let t = Instant::now();
    let mut cache =
        FilledCache::in_memory(PODS, CONTAINERS, now_ms() - RETENTION_SECS as i64 * 1000);
    let c0 = thread_cpu_ns();
    cache.append_seconds(RETENTION_SECS);
    let cpu = (thread_cpu_ns() - c0) as f64 / RETENTION_SECS as f64;
    let filled = t.elapsed();
    let rss1 = rss_bytes();
    println!(
        "metric cache in memory after {} min of 1 s rounds at {PODS} pods: {} series, approx_bytes {:.1} MiB, RSS growth {:.1} MiB, {:.3} ms CPU per round (filled in {:.1} s)",
        RETENTION_SECS / 60,
        cache.series(),
        mib(cache.approx_bytes() as f64),
        mib(rss1.saturating_sub(rss0) as f64),
        cpu / 1e6,
        filled.as_secs_f64()
    );
    cpu
}

/// 13 hours of sample time at 110 pods into the on-disk cache (a temporary directory),
/// as fast as it goes; the CPU per round is the cache's share of the advisor's second.
fn cache_on_disk(in_memory_cpu_ns: f64) {
    const HOURS: usize = 13;
    let dir = std::env::temp_dir().join(format!("oxlet-bench-cache-{}", std::process::id()));
    let rss0 = rss_bytes();
    let start = now_ms() - (HOURS * 3600 * 1000) as i64;
    let mut cache = FilledCache::on_disk(&dir, PODS, CONTAINERS, start).expect("opening the cache");
    let (c0, w0) = (thread_cpu_ns(), Instant::now());
    let mut rss_max = 0;
    for _ in 0..HOURS * 6 {
        cache.append_seconds(600);
        rss_max = rss_max.max(rss_bytes());
    }
    let rounds = (HOURS * 3600) as f64;
    let cpu = (thread_cpu_ns() - c0) as f64 / rounds;
    let wall = w0.elapsed();
    let (disk, blocks, written) = cache.disk();
    println!("| metric cache on disk, {HOURS} h of 1 s rounds at {PODS} pods | value |");
    println!("|---|---|");
    println!("| series | {} |", cache.series());
    println!(
        "| CPU per round (append, log, blocks, GC; building the samples included) | {:.3} ms = {:.4} core |",
        cpu / 1e6,
        cpu / 1e9
    );
    println!(
        "| ... against the in-memory cache's append, same run | {:.2}x |",
        cpu / in_memory_cpu_ns
    );
    println!(
        "| head in memory (approx_bytes) | {:.1} MiB |",
        mib(cache.approx_bytes() as f64)
    );
    println!(
        "| RSS growth, most over the run | {:.1} MiB |",
        mib(rss_max.saturating_sub(rss0) as f64)
    );
    println!(
        "| disk use (cap 100 MiB) | {:.1} MiB in {blocks} blocks |",
        mib(disk as f64)
    );
    println!(
        "| history the cap leaves | {:.1} h |",
        cache.held_seconds() / 3600.0
    );
    println!(
        "| written | {:.1} KiB per second of samples |",
        written as f64 / 1024.0 / rounds
    );
    println!("(filled in {:.1} s)", wall.as_secs_f64());
    let _ = std::fs::remove_dir_all(&dir);
}
