//! What the served file has done: operations, bytes, errors and a latency histogram, kept
//! with relaxed counters a reader takes snapshots of.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two in the latency histogram.
const SUB: u32 = 8;
/// Buckets: the values below `SUB`, then `SUB` per power of two up to 2^63 ns.
const BUCKETS: usize = (64 - 1) * SUB as usize;

/// The kinds of operation counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A read of the file.
    Read,
    /// A write to the file.
    Write,
    /// An `fsync` or a `flush` (close), sent as a cache flush.
    Flush,
    /// An `fallocate` that punched a hole or zeroed a range.
    Discard,
}

impl OpKind {
    fn index(self) -> usize {
        self as usize
    }
}

/// Counters of the I/O a served file has seen, shared by every thread serving it.
///
/// ```
/// use std::time::Duration;
/// use blkmq_fuse::{OpKind, Stats};
///
/// let stats = Stats::new();
/// stats.record(OpKind::Read, 4096, Duration::from_micros(10), true);
/// stats.record(OpKind::Write, 8192, Duration::from_micros(30), false);
/// let now = stats.snapshot();
/// assert_eq!((now.ops(), now.bytes(), now.errors), (2, 12288, 1));
/// assert_eq!(now.count[OpKind::Read as usize], 1);
/// ```
#[derive(Debug)]
pub struct Stats {
    count: [AtomicU64; 4],
    bytes: [AtomicU64; 4],
    errors: AtomicU64,
    latency_ns: AtomicU64,
    histogram: Box<[AtomicU64]>,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl Stats {
    /// Counters at zero.
    ///
    /// ```
    /// use blkmq_fuse::Stats;
    /// assert_eq!(Stats::new().snapshot().ops(), 0);
    /// ```
    pub fn new() -> Self {
        Self {
            count: Default::default(),
            bytes: Default::default(),
            errors: AtomicU64::new(0),
            latency_ns: AtomicU64::new(0),
            histogram: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one operation of `kind` that moved `bytes` and took `latency`; `ok` is false
    /// when it ended with an error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use blkmq_fuse::{OpKind, Stats};
    ///
    /// let stats = Stats::new();
    /// stats.record(OpKind::Flush, 0, Duration::from_millis(2), true);
    /// assert_eq!(stats.snapshot().mean_latency_ns(), Some(2_000_000));
    /// ```
    pub fn record(&self, kind: OpKind, bytes: u64, latency: std::time::Duration, ok: bool) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.count[kind.index()].fetch_add(1, Ordering::Relaxed);
        self.bytes[kind.index()].fetch_add(bytes, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        self.latency_ns.fetch_add(ns, Ordering::Relaxed);
        self.histogram[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters now.
    ///
    /// ```
    /// use std::time::Duration;
    /// use blkmq_fuse::{OpKind, Stats};
    ///
    /// let stats = Stats::new();
    /// let before = stats.snapshot();
    /// stats.record(OpKind::Read, 512, Duration::from_micros(5), true);
    /// let delta = stats.snapshot().since(&before);
    /// assert_eq!((delta.ops(), delta.bytes()), (1, 512));
    /// ```
    pub fn snapshot(&self) -> Snapshot {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot {
            count: self.count.each_ref().map(load),
            bytes: self.bytes.each_ref().map(load),
            errors: load(&self.errors),
            latency_ns: load(&self.latency_ns),
            histogram: self.histogram.iter().map(load).collect(),
        }
    }
}

/// The counters of a [`Stats`] at one moment, or the difference of two such moments.
///
/// ```
/// use std::time::Duration;
/// use blkmq_fuse::{OpKind, Stats};
///
/// let stats = Stats::new();
/// for us in 1..=100 {
///     stats.record(OpKind::Read, 4096, Duration::from_micros(us), true);
/// }
/// let now = stats.snapshot();
/// let p99 = now.percentile_ns(0.99).unwrap();
/// assert!((90_000..=120_000).contains(&p99), "{p99}");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Operations, by [`OpKind`] (as `usize`).
    pub count: [u64; 4],
    /// Bytes moved, by [`OpKind`] (as `usize`); for discards, the bytes discarded.
    pub bytes: [u64; 4],
    /// Operations that ended with an error.
    pub errors: u64,
    /// Sum of every operation's latency, in nanoseconds.
    pub latency_ns: u64,
    histogram: Vec<u64>,
}

impl Snapshot {
    /// Operations of every kind.
    ///
    /// ```
    /// assert_eq!(blkmq_fuse::Snapshot::default().ops(), 0);
    /// ```
    pub fn ops(&self) -> u64 {
        self.count.iter().sum()
    }

    /// Bytes read and written (discards not counted).
    ///
    /// ```
    /// assert_eq!(blkmq_fuse::Snapshot::default().bytes(), 0);
    /// ```
    pub fn bytes(&self) -> u64 {
        self.bytes[OpKind::Read.index()] + self.bytes[OpKind::Write.index()]
    }

    /// The mean latency, `None` with no operation.
    ///
    /// ```
    /// assert_eq!(blkmq_fuse::Snapshot::default().mean_latency_ns(), None);
    /// ```
    pub fn mean_latency_ns(&self) -> Option<u64> {
        self.latency_ns.checked_div(self.ops())
    }

    /// The latency below which a fraction `q` (0 to 1) of the operations ended, as the top
    /// of its histogram bucket (within 12.5% of the real value); `None` with no operation.
    ///
    /// ```
    /// assert_eq!(blkmq_fuse::Snapshot::default().percentile_ns(0.99), None);
    /// ```
    pub fn percentile_ns(&self, q: f64) -> Option<u64> {
        let total: u64 = self.histogram.iter().sum();
        if total == 0 {
            return None;
        }
        let want = ((total as f64) * q.clamp(0.0, 1.0)).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.histogram.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Some(bucket_top(i));
            }
        }
        Some(bucket_top(BUCKETS - 1))
    }

    /// What happened between `earlier` and this snapshot.
    ///
    /// ```
    /// use blkmq_fuse::Snapshot;
    /// assert_eq!(Snapshot::default().since(&Snapshot::default()), Snapshot::default());
    /// ```
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let sub = |a: &[u64; 4], b: &[u64; 4]| core::array::from_fn(|i| a[i].saturating_sub(b[i]));
        let histogram = if earlier.histogram.is_empty() {
            self.histogram.clone()
        } else {
            self.histogram
                .iter()
                .zip(&earlier.histogram)
                .map(|(a, b)| a.saturating_sub(*b))
                .collect()
        };
        Snapshot {
            count: sub(&self.count, &earlier.count),
            bytes: sub(&self.bytes, &earlier.bytes),
            errors: self.errors.saturating_sub(earlier.errors),
            latency_ns: self.latency_ns.saturating_sub(earlier.latency_ns),
            histogram,
        }
    }
}

/// log2 of `SUB`.
const SUB_BITS: u32 = SUB.trailing_zeros();

/// The histogram bucket of `ns`: below `SUB` one bucket per value, then `SUB` buckets per
/// power of two.
fn bucket(ns: u64) -> usize {
    if ns < u64::from(SUB) {
        return ns as usize;
    }
    let log = 63 - ns.leading_zeros(); // at least SUB_BITS
    let frac = (ns >> (log - SUB_BITS)) as u32 & (SUB - 1);
    ((log - SUB_BITS + 1) * SUB + frac) as usize
}

/// The largest latency in bucket `i`.
fn bucket_top(i: usize) -> u64 {
    let i = i as u32;
    if i < SUB {
        return u64::from(i);
    }
    let (log, frac) = (i / SUB + SUB_BITS - 1, i % SUB);
    let shift = log - SUB_BITS;
    let base = (u64::from(SUB) + u64::from(frac)) << shift;
    base.saturating_add((1u64 << shift) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values() {
        for ns in [0u64, 1, 3, 4, 5, 7, 8, 100, 1000, 12345, 1 << 40, u64::MAX] {
            let b = bucket(ns);
            assert!(bucket_top(b) >= ns, "{ns} in {b}");
            if b > 0 {
                assert!(bucket_top(b - 1) < ns, "{ns} in {b}");
            }
        }
    }
}
