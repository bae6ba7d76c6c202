//! What the benches share: starting threads together, paired comparisons, and reading
//! criterion's medians back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, SystemTime};

use criterion::Criterion;

/// The settings every bench runs with (before the command line's).
pub(crate) fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
}

/// Whether to run the paired comparisons: in a benchmark run (not `--test`, `--list` or
/// `--profile-time`) with no filter, or with the filter `paired`, which names no criterion
/// benchmark and so runs the paired comparisons alone.
pub(crate) fn paired_wanted() -> bool {
    /// Criterion's options that take a value as the next argument.
    const WITH_VALUE: [&str; 20] = [
        "-c",
        "--color",
        "--colour",
        "-s",
        "--save-baseline",
        "-b",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--format",
        "--profile-time",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--output-format",
    ];
    let mut bench = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bench" => bench = true,
            "--test" | "--list" | "--profile-time" => return false,
            a if a.starts_with("--profile-time=") => return false,
            a if WITH_VALUE.contains(&a) => {
                args.next();
            }
            "paired" => {}
            a if !a.starts_with('-') => return false,
            _ => {}
        }
    }
    bench
}

/// Rounds of each paired comparison.
pub(crate) const PAIRED_ROUNDS: usize = 41;

/// Binds the calling thread to CPU `cpu` of the machine (taken modulo the CPUs it may run
/// on), so that two threads measured together each have a CPU of their own from their
/// first step: left to the scheduler, a thread spawned while the last round's threads are
/// still exiting starts on its parent's CPU and shares it until a load balance moves it,
/// which can take longer than a round. Where the machine does not allow it, nothing
/// changes.
pub(crate) fn bind_to_cpu(cpu: usize) {
    #[cfg(target_os = "linux")]
    {
        // The machine's CPUs, not the calling thread's: a thread spawned by a bound one
        // inherits its single CPU.
        // SAFETY: `sysconf` only reads the system's configuration.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        let cpus = usize::try_from(online)
            .unwrap_or(1)
            .clamp(1, libc::CPU_SETSIZE as usize);
        // SAFETY: `set` is a plain bit set, zeroed and then filled by `CPU_SET` with one
        // CPU below its size; `sched_setaffinity` only reads it, for the calling thread (0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu % cpus, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}

/// Waits until `count` threads have arrived at `arrived`.
pub(crate) fn rendezvous(arrived: &AtomicUsize, count: usize) {
    arrived.fetch_add(1, Ordering::AcqRel);
    wait_for(arrived, count);
}

/// Spins, yielding now and then in case the other thread is not running, until `counter`
/// reaches `count`.
pub(crate) fn wait_for(counter: &AtomicUsize, count: usize) {
    let mut spins = 0u32;
    while counter.load(Ordering::Acquire) < count {
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 {
            thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The median over [`PAIRED_ROUNDS`] rounds of `time(a) / time(b)`, the two run back to
/// back in each round (in alternating order). A shared virtual machine has slow phases
/// lasting seconds, which move criterion's separate medians by a third; within one round
/// they hit both sides.
pub(crate) fn paired_ratio(
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> f64 {
    a();
    b();
    let mut ratios: Vec<f64> = (0..PAIRED_ROUNDS)
        .map(|round| {
            let (ta, tb) = if round % 2 == 0 {
                let ta = a();
                (ta, b())
            } else {
                let tb = b();
                (a(), tb)
            };
            ta.as_secs_f64() / tb.as_secs_f64()
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    ratios[ratios.len() / 2]
}

/// The median of one benchmark from criterion's saved estimates, in ns, if this process
/// (which started at `started`) measured it: estimates of an earlier run would mix other
/// conditions into the ratios.
pub(crate) fn criterion_median(started: SystemTime, group: &str, function: &str) -> Option<f64> {
    let home = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
            Path::new(&target).join("criterion")
        });
    let path = home
        .join(group.replace('/', "_"))
        .join(function)
        .join("new/estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < started {
        return None;
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["median"]["point_estimate"].as_f64()
}
