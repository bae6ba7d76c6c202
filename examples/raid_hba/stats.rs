//! What a run measured ([`Stats`]), several rounds of it as one, and the targets the
//! example judges the modes by.

use std::time::Duration;

use super::setup::Mode;

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stats {
    /// Reads completed.
    pub(crate) ios: u64,
    /// Reads submitted.
    pub(crate) submitted: u64,
    /// Wall time from the common start until the last completion.
    pub(crate) wall: Duration,
    /// Time the submitters spent inside `submit` (their busy time).
    pub(crate) submit_busy: Duration,
    /// Time the completion threads spent handling due commands: checking, ending, scanning.
    pub(crate) complete_busy: Duration,
    /// Of that, time in the naive scan of every hardware queue.
    pub(crate) scan: Duration,
    /// Submissions turned back (no tag free) and retried.
    pub(crate) submit_retries: u64,
    /// Latency percentiles, submit to completion, in ns: p50 and p99.
    pub(crate) p50_ns: u64,
    /// See `p50_ns`.
    pub(crate) p99_ns: u64,
    /// Verification failures: wrong data or member, wrong sector, status not Ok,
    /// duplicated or lost reads.
    pub(crate) errors: u64,
    /// Reads the completion found completed twice.
    pub(crate) duplicates: u64,
    /// Reads never completed.
    pub(crate) lost: u64,
    /// Rounds summed into these figures (one for a single run).
    pub(crate) rounds: usize,
    /// The median of the rounds' IOPS.
    pub(crate) median_iops: f64,
}

impl Stats {
    /// Reads per second: the median over the rounds.
    pub(crate) fn iops(&self) -> f64 {
        self.median_iops
    }

    /// Several runs of one rig as one: counts and wall time summed; IOPS, latency
    /// percentiles and busy times per read the medians of the runs' (the busy times are
    /// those medians times the reads, so a round slowed by the machine's other load does not
    /// weigh more than the others).
    pub(crate) fn combine(runs: &[Stats]) -> Stats {
        fn median(mut v: Vec<f64>) -> f64 {
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        }
        let mut out = Stats {
            rounds: runs.len(),
            median_iops: median(runs.iter().map(|r| r.median_iops).collect()),
            p50_ns: median(runs.iter().map(|r| r.p50_ns as f64).collect()) as u64,
            p99_ns: median(runs.iter().map(|r| r.p99_ns as f64).collect()) as u64,
            ..Stats::default()
        };
        for r in runs {
            out.ios += r.ios;
            out.submitted += r.submitted;
            out.wall += r.wall;
            out.submit_busy += r.submit_busy;
            out.complete_busy += r.complete_busy;
            out.scan += r.scan;
            out.submit_retries += r.submit_retries;
            out.errors += r.errors;
            out.duplicates += r.duplicates;
            out.lost += r.lost;
        }
        let per_read = |f: fn(&Stats) -> Duration| {
            let ns = median(
                runs.iter()
                    .map(|r| f(r).as_nanos() as f64 / r.ios.max(1) as f64)
                    .collect(),
            );
            Duration::from_nanos((ns * out.ios as f64) as u64)
        };
        out.submit_busy = per_read(|r| r.submit_busy);
        out.complete_busy = per_read(|r| r.complete_busy);
        out.scan = per_read(|r| r.scan);
        out
    }

    /// Busy CPU time per read, in ns, submission and completion together.
    pub(crate) fn cpu_ns_per_io(&self) -> f64 {
        (self.submit_busy + self.complete_busy).as_nanos() as f64 / self.ios.max(1) as f64
    }

    /// Completion busy time per read, in ns.
    pub(crate) fn complete_ns_per_io(&self) -> f64 {
        self.complete_busy.as_nanos() as f64 / self.ios.max(1) as f64
    }

    /// Naive scan time per read, in ns.
    pub(crate) fn scan_ns_per_io(&self) -> f64 {
        self.scan.as_nanos() as f64 / self.ios.max(1) as f64
    }
}

/// The targets the example prints, each with its measured ratio and whether it passes.
pub(crate) fn targets(results: &[(Mode, Stats)]) -> Vec<(String, f64, bool)> {
    let get = |m: Mode| results.iter().find(|(r, _)| *r == m).map(|(_, s)| s);
    let mut out = Vec::new();
    if let (Some(single), Some(shared)) = (get(Mode::Single), get(Mode::Shared)) {
        let r = shared.iops() / single.iops();
        out.push((
            "shared IOPS / single IOPS >= 0.97".to_string(),
            r,
            r >= 0.97,
        ));
        let c = shared.complete_ns_per_io() / single.complete_ns_per_io();
        out.push((
            "shared completion CPU per I/O / single <= 1.10".to_string(),
            c,
            c <= 1.10,
        ));
    }
    if let (Some(single), Some(naive)) = (get(Mode::Single), get(Mode::Naive)) {
        let r = naive.iops() / single.iops();
        out.push(("naive IOPS / single IOPS <= 0.90".to_string(), r, r <= 0.90));
    }
    out
}
