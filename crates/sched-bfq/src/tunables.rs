//! BFQ's tunables, their defaults (Linux's) and their valid ranges.

use blkmq_core::TunableError;

pub(crate) const MS: u64 = 1_000_000;

/// The largest `slice_idle` accepted (1 s).
///
/// ```
/// use blkmq_sched_bfq::{Bfq, MAX_SLICE_IDLE_NS};
/// let mut bfq = Bfq::new();
/// assert!(bfq.set_slice_idle(MAX_SLICE_IDLE_NS).is_ok());
/// assert!(bfq.set_slice_idle(MAX_SLICE_IDLE_NS + 1).is_err());
/// ```
pub const MAX_SLICE_IDLE_NS: u64 = 1_000 * MS;

/// The largest `timeout_sync` and FIFO expiry accepted (one hour).
///
/// ```
/// use blkmq_sched_bfq::{Bfq, MAX_EXPIRE_NS};
/// let mut bfq = Bfq::new();
/// assert!(bfq.set_fifo_expire_async(MAX_EXPIRE_NS).is_ok());
/// assert!(bfq.set_timeout_sync(MAX_EXPIRE_NS + 1).is_err());
/// ```
pub const MAX_EXPIRE_NS: u64 = 3_600_000 * MS;

/// The largest `max_budget` accepted, in sectors (1 GiB).
///
/// ```
/// use blkmq_sched_bfq::{Bfq, MAX_BUDGET};
/// let mut bfq = Bfq::new();
/// assert!(bfq.set_max_budget(MAX_BUDGET).is_ok());
/// assert!(bfq.set_max_budget(MAX_BUDGET + 1).is_err());
/// ```
pub const MAX_BUDGET: u64 = 1 << 21;

/// The largest `back_seek_max` accepted, in KiB (1 TiB).
///
/// ```
/// use blkmq_sched_bfq::{Bfq, MAX_BACK_SEEK_KIB};
/// let mut bfq = Bfq::new();
/// assert!(bfq.set_back_seek_max(MAX_BACK_SEEK_KIB + 1).is_err());
/// ```
pub const MAX_BACK_SEEK_KIB: u64 = 1 << 30;

/// The largest `back_seek_penalty` accepted.
///
/// ```
/// use blkmq_sched_bfq::{Bfq, MAX_BACK_SEEK_PENALTY};
/// let mut bfq = Bfq::new();
/// assert!(bfq.set_back_seek_penalty(MAX_BACK_SEEK_PENALTY).is_ok());
/// assert!(bfq.set_back_seek_penalty(MAX_BACK_SEEK_PENALTY + 1).is_err());
/// ```
pub const MAX_BACK_SEEK_PENALTY: u32 = 1 << 16;

/// BFQ's tunables, with Linux's defaults.
///
/// ```
/// use blkmq_sched_bfq::Tunables;
/// let t = Tunables::default();
/// assert_eq!((t.slice_idle_ns, t.timeout_sync_ns), (8_000_000, 125_000_000));
/// assert_eq!((t.fifo_expire_sync_ns, t.fifo_expire_async_ns), (125_000_000, 250_000_000));
/// assert_eq!((t.max_budget, t.back_seek_max_kib, t.back_seek_penalty), (0, 16_384, 2));
/// assert!(t.low_latency && !t.strict_guarantees);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// How long the device may be idled for the queue in service when it runs out of
    /// requests, waiting for its next one (8 ms; 0: never idle).
    pub slice_idle_ns: u64,
    /// How long a sync queue may be served in one turn: its budget timeout (125 ms).
    pub timeout_sync_ns: u64,
    /// The largest budget of a queue in sectors; 0 (the default) tunes it from the measured
    /// peak rate as `peak_rate x timeout_sync`.
    pub max_budget: u64,
    /// How long a sync request may wait before it is served ahead of sector order within
    /// its queue (125 ms).
    pub fifo_expire_sync_ns: u64,
    /// The same for async requests (250 ms).
    pub fifo_expire_async_ns: u64,
    /// How far back from the head the next request of a queue may lie and still be chosen
    /// in sector order, in KiB (16384).
    pub back_seek_max_kib: u64,
    /// How many times a backward seek counts against a forward one of the same length (2).
    pub back_seek_penalty: u32,
    /// Weight raising for interactive and soft real-time queues, and burst detection (on).
    pub low_latency: bool,
    /// Idle for every sync queue that empties, whatever the scenario: strongest service
    /// guarantees, lowest throughput (off).
    pub strict_guarantees: bool,
}

impl Default for Tunables {
    fn default() -> Self {
        Self {
            slice_idle_ns: 8 * MS,
            timeout_sync_ns: 125 * MS,
            max_budget: 0,
            fifo_expire_sync_ns: 125 * MS,
            fifo_expire_async_ns: 250 * MS,
            back_seek_max_kib: 16 * 1024,
            back_seek_penalty: 2,
            low_latency: true,
            strict_guarantees: false,
        }
    }
}

impl Tunables {
    pub(crate) fn check_slice_idle(ns: u64) -> Result<(), TunableError> {
        TunableError::check("slice_idle", ns, ns <= MAX_SLICE_IDLE_NS)
    }

    pub(crate) fn check_timeout_sync(ns: u64) -> Result<(), TunableError> {
        TunableError::check("timeout_sync", ns, (MS..=MAX_EXPIRE_NS).contains(&ns))
    }

    pub(crate) fn check_max_budget(sectors: u64) -> Result<(), TunableError> {
        TunableError::check("max_budget", sectors, sectors <= MAX_BUDGET)
    }

    pub(crate) fn check_fifo_expire_sync(ns: u64) -> Result<(), TunableError> {
        TunableError::check("fifo_expire_sync", ns, ns <= MAX_EXPIRE_NS)
    }

    pub(crate) fn check_fifo_expire_async(ns: u64) -> Result<(), TunableError> {
        TunableError::check("fifo_expire_async", ns, ns <= MAX_EXPIRE_NS)
    }

    pub(crate) fn check_back_seek_max(kib: u64) -> Result<(), TunableError> {
        TunableError::check("back_seek_max", kib, kib <= MAX_BACK_SEEK_KIB)
    }

    pub(crate) fn check_back_seek_penalty(n: u32) -> Result<(), TunableError> {
        TunableError::check(
            "back_seek_penalty",
            n.into(),
            (1..=MAX_BACK_SEEK_PENALTY).contains(&n),
        )
    }

    /// Checks every field, reporting the first out of range.
    pub(crate) fn validate(&self) -> Result<(), TunableError> {
        Self::check_slice_idle(self.slice_idle_ns)?;
        Self::check_timeout_sync(self.timeout_sync_ns)?;
        Self::check_max_budget(self.max_budget)?;
        Self::check_fifo_expire_sync(self.fifo_expire_sync_ns)?;
        Self::check_fifo_expire_async(self.fifo_expire_async_ns)?;
        Self::check_back_seek_max(self.back_seek_max_kib)?;
        Self::check_back_seek_penalty(self.back_seek_penalty)
    }
}
