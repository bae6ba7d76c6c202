//! An ideal device: every command takes a fixed latency plus its bytes at a bandwidth, in
//! parallel with every other, up to a queue depth. No state, so tests can predict it.

use blkmq_core::QueueLimits;

use super::{CmdId, Command, DeviceModel, DeviceStats, ParamError, Running, require, transfer_ns};

/// The parameters of an [`Ideal`] device. The defaults are round numbers, not a product.
///
/// ```
/// use blkmq_sim::IdealParams;
/// let p = IdealParams::default();
/// assert_eq!((p.latency_ns, p.bandwidth, p.queue_depth), (100_000, 1_000_000_000, 32));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdealParams {
    /// Capacity in sectors (default 2^31: 1 TiB).
    pub capacity_sectors: u64,
    /// Fixed time of every command (default 100 µs).
    pub latency_ns: u64,
    /// Bytes per second added per command (default 1 GB/s; 0: no transfer cost).
    pub bandwidth: u64,
    /// Commands at once, all in parallel (default 32).
    pub queue_depth: usize,
    /// Largest request, in sectors (default Linux's 2560).
    pub max_sectors: u32,
}

impl Default for IdealParams {
    fn default() -> Self {
        Self {
            capacity_sectors: 1 << 31,
            latency_ns: 100_000,
            bandwidth: 1_000_000_000,
            queue_depth: 32,
            max_sectors: 2560,
        }
    }
}

/// A device with a fixed cost per command and no state.
///
/// ```
/// use blkmq_core::Op;
/// use blkmq_sim::{Command, DeviceModel, Ideal, IdealParams};
///
/// let mut dev = Ideal::new(IdealParams { latency_ns: 50, bandwidth: 0, ..Default::default() }).unwrap();
/// dev.submit(0, 1, Command::new(Op::Read, 0, 8)).unwrap();
/// dev.submit(10, 2, Command::new(Op::Read, 8, 8)).unwrap();
/// let mut done = Vec::new();
/// dev.complete(60, &mut done);
/// assert_eq!(done, [1, 2]); // in parallel: ends at 50 and 60
/// ```
#[derive(Debug)]
pub struct Ideal {
    params: IdealParams,
    /// (end, arrival number, id) of each command in progress.
    running: Running,
    stats: DeviceStats,
}

impl Ideal {
    /// An ideal device with `params`.
    ///
    /// # Errors
    /// A zero queue depth or capacity.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams};
    /// assert!(Ideal::new(IdealParams::default()).is_ok());
    /// assert!(Ideal::new(IdealParams { queue_depth: 0, ..Default::default() }).is_err());
    /// ```
    pub fn new(params: IdealParams) -> Result<Self, ParamError> {
        require(params.queue_depth > 0, "queue_depth", "must be at least 1")?;
        require(
            params.capacity_sectors > 0,
            "capacity_sectors",
            "must not be 0",
        )?;
        Ok(Self {
            params,
            running: Running::default(),
            stats: DeviceStats::default(),
        })
    }

    /// The parameters.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams};
    /// assert_eq!(Ideal::new(IdealParams::default()).unwrap().params().latency_ns, 100_000);
    /// ```
    pub fn params(&self) -> &IdealParams {
        &self.params
    }
}

impl DeviceModel for Ideal {
    fn name(&self) -> &'static str {
        "ideal"
    }

    fn capacity(&self) -> u64 {
        self.params.capacity_sectors
    }

    fn queue_depth(&self) -> usize {
        self.params.queue_depth
    }

    fn limits(&self) -> QueueLimits {
        QueueLimits {
            max_discard_sectors: 1 << 22,
            ..super::base_limits(self.params.capacity_sectors, self.params.max_sectors, 128)
        }
    }

    fn service_ns(&self, _start_ns: u64, cmd: &Command) -> u64 {
        self.params.latency_ns + transfer_ns(cmd.bytes(), self.params.bandwidth)
    }

    fn submit(&mut self, now_ns: u64, id: CmdId, cmd: Command) -> Result<(), Command> {
        if self.running.len() >= self.params.queue_depth {
            return Err(cmd);
        }
        let service = self.service_ns(now_ns, &cmd);
        self.stats.count(&cmd);
        self.stats.busy_ns += service;
        self.running.push(now_ns + service, id);
        Ok(())
    }

    fn next_completion(&self) -> Option<u64> {
        self.running.next_end()
    }

    fn complete(&mut self, now_ns: u64, done: &mut Vec<CmdId>) {
        self.running.complete(now_ns, done);
    }

    fn in_flight(&self) -> usize {
        self.running.len()
    }

    fn stats(&self) -> DeviceStats {
        self.stats
    }
}
