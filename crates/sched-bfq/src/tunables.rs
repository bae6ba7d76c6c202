//! BFQ's tunables, their defaults (Linux's) and their valid ranges, and the calls that set
//! them.

use blkmq_core::TunableError;

use crate::Bfq;

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

impl Bfq {
    /// BFQ with `tunables`.
    ///
    /// # Errors
    /// [`TunableError`] for the first tunable out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, TunableError, Tunables};
    /// let t = Tunables { slice_idle_ns: 0, ..Tunables::default() };
    /// assert_eq!(Bfq::with_tunables(t).unwrap().tunables().slice_idle_ns, 0);
    /// let bad = Tunables { back_seek_penalty: 0, ..Tunables::default() };
    /// let err = Bfq::with_tunables(bad).unwrap_err();
    /// assert_eq!(err, TunableError { name: "back_seek_penalty", value: 0 });
    /// ```
    pub fn with_tunables(tunables: Tunables) -> Result<Self, TunableError> {
        tunables.validate()?;
        let mut bfq = Self::new();
        bfq.tunables = tunables;
        Ok(bfq)
    }

    /// The tunables.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// assert!(Bfq::new().tunables().low_latency);
    /// ```
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Sets all tunables at once.
    ///
    /// # Errors
    /// [`TunableError`] for the first tunable out of range (nothing is changed then).
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, Tunables};
    /// let mut bfq = Bfq::new();
    /// let t = Tunables { low_latency: false, max_budget: 4096, ..Tunables::default() };
    /// bfq.set_tunables(t).unwrap();
    /// assert_eq!(bfq.stats().max_budget, 4096);
    /// let bad = Tunables { timeout_sync_ns: 0, ..t };
    /// assert!(bfq.set_tunables(bad).is_err());
    /// assert_eq!(*bfq.tunables(), t);
    /// ```
    pub fn set_tunables(&mut self, tunables: Tunables) -> Result<(), TunableError> {
        tunables.validate()?;
        let low_latency = tunables.low_latency;
        self.tunables = tunables;
        // Through the one path that also ends raising when it goes off.
        self.set_low_latency(low_latency);
        Ok(())
    }

    /// Sets `slice_idle` (0 to [`MAX_SLICE_IDLE_NS`]; 0 turns idling off).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, TunableError};
    /// let mut bfq = Bfq::new();
    /// bfq.set_slice_idle(0).unwrap();
    /// let err = bfq.set_slice_idle(2_000_000_000).unwrap_err();
    /// assert_eq!(err, TunableError { name: "slice_idle", value: 2_000_000_000 });
    /// ```
    pub fn set_slice_idle(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_slice_idle(ns)?;
        self.tunables.slice_idle_ns = ns;
        Ok(())
    }

    /// Sets `timeout_sync` (1 ms to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_timeout_sync(250_000_000).unwrap();
    /// assert!(bfq.set_timeout_sync(999_999).is_err());
    /// ```
    pub fn set_timeout_sync(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_timeout_sync(ns)?;
        self.tunables.timeout_sync_ns = ns;
        Ok(())
    }

    /// Sets `max_budget` in sectors (up to [`MAX_BUDGET`]; 0: auto-tuned from the peak
    /// rate).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_max_budget(2048).unwrap();
    /// assert_eq!(bfq.stats().max_budget, 2048);
    /// bfq.set_max_budget(0).unwrap(); // auto: the default until the rate is measured
    /// assert_eq!(bfq.stats().max_budget, 16_384);
    /// ```
    pub fn set_max_budget(&mut self, sectors: u64) -> Result<(), TunableError> {
        Tunables::check_max_budget(sectors)?;
        self.tunables.max_budget = sectors;
        Ok(())
    }

    /// Sets `fifo_expire_sync` (0 to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, MAX_EXPIRE_NS};
    /// let mut bfq = Bfq::new();
    /// bfq.set_fifo_expire_sync(10_000_000).unwrap();
    /// assert!(bfq.set_fifo_expire_sync(MAX_EXPIRE_NS + 1).is_err());
    /// ```
    pub fn set_fifo_expire_sync(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_fifo_expire_sync(ns)?;
        self.tunables.fifo_expire_sync_ns = ns;
        Ok(())
    }

    /// Sets `fifo_expire_async` (0 to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, MAX_EXPIRE_NS};
    /// let mut bfq = Bfq::new();
    /// bfq.set_fifo_expire_async(500_000_000).unwrap();
    /// assert!(bfq.set_fifo_expire_async(MAX_EXPIRE_NS + 1).is_err());
    /// ```
    pub fn set_fifo_expire_async(&mut self, ns: u64) -> Result<(), TunableError> {
        Tunables::check_fifo_expire_async(ns)?;
        self.tunables.fifo_expire_async_ns = ns;
        Ok(())
    }

    /// Sets `back_seek_max` in KiB (0 to [`MAX_BACK_SEEK_KIB`]; 0: never seek back while a
    /// request lies ahead).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, MAX_BACK_SEEK_KIB};
    /// let mut bfq = Bfq::new();
    /// bfq.set_back_seek_max(0).unwrap();
    /// assert!(bfq.set_back_seek_max(MAX_BACK_SEEK_KIB + 1).is_err());
    /// ```
    pub fn set_back_seek_max(&mut self, kib: u64) -> Result<(), TunableError> {
        Tunables::check_back_seek_max(kib)?;
        self.tunables.back_seek_max_kib = kib;
        Ok(())
    }

    /// Sets `back_seek_penalty` (1 to [`MAX_BACK_SEEK_PENALTY`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, TunableError};
    /// let mut bfq = Bfq::new();
    /// bfq.set_back_seek_penalty(1).unwrap();
    /// let err = bfq.set_back_seek_penalty(0).unwrap_err();
    /// assert_eq!(err, TunableError { name: "back_seek_penalty", value: 0 });
    /// ```
    pub fn set_back_seek_penalty(&mut self, n: u32) -> Result<(), TunableError> {
        Tunables::check_back_seek_penalty(n)?;
        self.tunables.back_seek_penalty = n;
        Ok(())
    }

    /// Turns low latency (weight raising, burst detection) on or off; off ends every
    /// raising at once.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_low_latency(false);
    /// assert!(!bfq.tunables().low_latency);
    /// ```
    pub fn set_low_latency(&mut self, on: bool) {
        self.tunables.low_latency = on;
        if !on {
            for q in 0..self.queues.len() as u32 {
                if self.queues[q as usize].live && self.queues[q as usize].wr_coeff > 1 {
                    self.end_raising(q, 0);
                }
            }
        }
    }

    /// Turns strict guarantees on or off: with them, every sync queue is idled for when it
    /// empties, and nothing is injected.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// let mut bfq = Bfq::new();
    /// bfq.set_strict_guarantees(true);
    /// assert!(bfq.tunables().strict_guarantees);
    /// ```
    pub fn set_strict_guarantees(&mut self, on: bool) {
        self.tunables.strict_guarantees = on;
    }
}
