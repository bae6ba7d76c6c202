//! fio-like jobs: sequential or random I/O of one block size, kept at an iodepth, from one
//! issuer at one priority. Several jobs on one queue are several issuers competing.

use blkmq_core::{BioFlags, IoPrio, IssuerId, Op, SECTOR_SIZE};

use super::{Cx, Done, Io, Workload};
use crate::SimRng;
use crate::sim::sectors_of;

/// The access pattern of a [`FioJob`] (fio's `rw=`).
///
/// ```
/// use blkmq_sim::Pattern;
/// assert!(Pattern::RandRw { read_percent: 70 }.is_random());
/// assert!(!Pattern::Read.is_random());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Random reads and writes, `read_percent` of them reads.
    RandRw {
        /// Out of 100, how many I/Os are reads.
        read_percent: u8,
    },
}

impl Pattern {
    /// Whether offsets are random.
    ///
    /// ```
    /// use blkmq_sim::Pattern;
    /// assert!(Pattern::RandWrite.is_random() && !Pattern::Write.is_random());
    /// ```
    pub fn is_random(self) -> bool {
        !matches!(self, Pattern::Read | Pattern::Write)
    }
}

/// A fio-like job: `ios` I/Os of `block_bytes`, `iodepth` of them in flight, over a region
/// of the device, from one issuer at one priority. Writes are marked synchronous, as
/// direct I/O writes are; the first `iodepth` go in under one plug (one `io_submit`),
/// later ones one by one as earlier ones end.
///
/// ```
/// use blkmq_core::{IoPrio, IoPrioClass, IssuerId};
/// use blkmq_sim::{FioJob, Ideal, IdealParams, Pattern, Sim};
///
/// let params = IdealParams { latency_ns: 100_000, bandwidth: 0, queue_depth: 64, ..Default::default() };
/// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 2, None).unwrap();
/// let rt = IoPrio::new(IoPrioClass::RealTime, 0).unwrap();
/// sim.add_workload(queue, FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 16, 1600).prio(rt));
/// sim.add_workload_on(queue, 1, 0, FioJob::new(IssuerId(2), Pattern::RandWrite, 4096, 16, 1600));
/// let report = sim.run().unwrap();
/// assert_eq!(report.issuers.len(), 2);
/// // 16 in flight, 100 us each: 100 rounds, 10 ms.
/// assert_eq!(report.workloads[0].elapsed_ns(), 10_000_000);
/// assert_eq!(report.issuers[1].bytes_written, 1600 * 4096);
/// ```
#[derive(Clone, Debug)]
pub struct FioJob {
    issuer: IssuerId,
    prio: IoPrio,
    pattern: Pattern,
    sectors: u64,
    iodepth: usize,
    ios: u64,
    start_sector: u64,
    span_sectors: u64,
    flags: BioFlags,
    rng: SimRng,
    issued: u64,
    in_flight: usize,
    next_seq: u64,
}

impl FioJob {
    /// A job of `ios` I/Os of `block_bytes` (rounded up to whole sectors, at most
    /// `u32::MAX` of them), `iodepth` in flight, over the first GiB of the device, seed 1,
    /// default priority.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sim::{FioJob, Pattern, Workload};
    /// let job = FioJob::new(IssuerId(2), Pattern::RandRead, 4000, 32, 100);
    /// assert_eq!(job.claimed_bytes(), 100 * 4096); // 4000 bytes round up to 8 sectors
    /// assert_eq!(job.name(), "fio issuer 2");
    /// ```
    pub fn new(
        issuer: IssuerId,
        pattern: Pattern,
        block_bytes: u64,
        iodepth: usize,
        ios: u64,
    ) -> Self {
        Self {
            issuer,
            prio: IoPrio::default(),
            pattern,
            sectors: sectors_of(block_bytes).clamp(1, u64::from(u32::MAX)),
            iodepth: iodepth.max(1),
            ios,
            start_sector: 0,
            span_sectors: 2 << 20,
            flags: BioFlags::empty(),
            rng: SimRng::new(1),
            issued: 0,
            in_flight: 0,
            next_seq: 0,
        }
    }

    /// At priority `prio`.
    ///
    /// ```
    /// use blkmq_core::{IoPrio, IoPrioClass, IssuerId};
    /// use blkmq_sim::{FioJob, Pattern};
    /// let idle = IoPrio::new(IoPrioClass::Idle, 7).unwrap();
    /// let job = FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 1, 10).prio(idle);
    /// # let _ = job;
    /// ```
    pub fn prio(mut self, prio: IoPrio) -> Self {
        self.prio = prio;
        self
    }

    /// Over `span_sectors` from `start_sector` (random offsets are block-aligned within;
    /// sequential ones wrap around at its end).
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sim::{FioJob, Pattern};
    /// let job = FioJob::new(IssuerId(0), Pattern::Read, 4096, 1, 10).region(1 << 20, 1 << 20);
    /// # let _ = job;
    /// ```
    pub fn region(mut self, start_sector: u64, span_sectors: u64) -> Self {
        self.start_sector = start_sector;
        self.span_sectors = span_sectors;
        self
    }

    /// With random offsets from `seed`.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sim::{FioJob, Pattern};
    /// let job = FioJob::new(IssuerId(0), Pattern::RandRead, 4096, 1, 10).seed(99);
    /// # let _ = job;
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.rng = SimRng::new(seed);
        self
    }

    /// With these bio flags added.
    ///
    /// ```
    /// use blkmq_core::{BioFlags, IssuerId};
    /// use blkmq_sim::{FioJob, Pattern};
    /// let job = FioJob::new(IssuerId(0), Pattern::RandRead, 4096, 1, 10).flags(BioFlags::META);
    /// # let _ = job;
    /// ```
    pub fn flags(mut self, flags: BioFlags) -> Self {
        self.flags = flags;
        self
    }

    fn next_io(&mut self) -> Io {
        let blocks = (self.span_sectors / self.sectors).max(1);
        let op = match self.pattern {
            Pattern::Read | Pattern::RandRead => Op::Read,
            Pattern::Write | Pattern::RandWrite => Op::Write,
            Pattern::RandRw { read_percent } => {
                if self.rng.chance(u64::from(read_percent), 100) {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        };
        let block = if self.pattern.is_random() {
            self.rng.below(blocks)
        } else {
            let b = self.next_seq % blocks;
            self.next_seq += 1;
            b
        };
        let mut flags = self.flags;
        if op == Op::Write {
            flags |= BioFlags::SYNC;
        }
        self.issued += 1;
        Io::new(
            op,
            self.start_sector + block * self.sectors,
            self.sectors as u32,
        )
        .flags(flags)
        .prio(self.prio)
        .issuer(self.issuer)
    }
}

impl Workload for FioJob {
    fn name(&self) -> String {
        format!("fio issuer {}", self.issuer.0)
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        let first = (self.iodepth as u64).min(self.ios);
        let ios: Vec<Io> = (0..first).map(|_| self.next_io()).collect();
        self.in_flight = ios.len();
        cx.submit_plugged(ios);
    }

    fn completed(&mut self, cx: &mut Cx<'_>, _done: &Done) {
        self.in_flight -= 1;
        if self.issued < self.ios {
            let io = self.next_io();
            self.in_flight += 1;
            cx.submit(io);
        }
    }

    fn is_finished(&self) -> bool {
        self.issued == self.ios
    }

    fn claimed_bytes(&self) -> u64 {
        self.ios * self.sectors * SECTOR_SIZE
    }
}
