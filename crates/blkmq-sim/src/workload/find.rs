//! `find`: a walk of a file system's metadata — small synchronous reads, one at a time, at
//! scattered places, now and then a burst of adjacent blocks read ahead together, with some
//! processor time after each.

use blkmq_core::{BioFlags, IssuerId, SECTOR_SIZE};

use super::{Cx, Done, Io, Workload};
use crate::SimRng;
use crate::report::real_line;
use crate::sim::sectors_of;

/// The parameters of a [`Find`].
///
/// The defaults come from the seed's `find`: 3.60 s real before the switch to blk-mq, of
/// which 1.83 s user and system time, and 4.42 s after it, of which 2.05 s.
///
/// * Of the 0.82 s lost, 0.22 s is processor time; the other 0.60 s is I/O. The naive switch
///   merged nothing, and a file system reads ahead: ext4 reads 32 blocks of an inode table
///   at once (`inode_readahead_blks`). Merged, such a burst is one 128 KiB read (7.15 ms at
///   the seed's 17899 kB/s); unmerged, 32 reads of 4 KiB (0.661 ms each at 6052 kB/s,
///   21.15 ms). So 0.60 s / 14.0 ms ≈ 43 bursts.
/// * `(3.60 - 1.83 - 43 × 7.15 ms) s / 0.661 ms` ≈ 2213 single reads: 2256 steps, one burst in
///   every 52.
/// * `1.83 s / 2256` ≈ 811 µs of processor time after each step.
///
/// A quarter of the single reads follow the previous block (the next block of a directory
/// or inode table); the others, and the bursts, land anywhere in the first 2 GiB.
///
/// ```
/// use blkmq_sim::FindParams;
/// let p = FindParams::default();
/// assert_eq!((p.reads, p.read_bytes, p.think_ns), (2256, 4096, 811_000));
/// assert_eq!((p.burst_every, p.burst_blocks, p.bursts()), (52, 32, 43));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FindParams {
    /// Where the file system starts.
    pub start_sector: u64,
    /// How far the metadata is spread, in sectors (default 2 GiB).
    pub span_sectors: u64,
    /// Steps of the walk, each a read of one block or a burst (default 2256).
    pub reads: u64,
    /// Bytes per block (default 4 KiB, a file system block).
    pub read_bytes: u64,
    /// Processor time after each step (default 811 µs).
    pub think_ns: u64,
    /// Out of 100, how many single reads follow the previous one (default 25).
    pub near_percent: u64,
    /// Every this many steps, the step is a burst (default 52; 0 for none).
    pub burst_every: u64,
    /// Adjacent blocks a burst reads, submitted together under one plug (default 32).
    pub burst_blocks: u64,
    /// The flags of every read (default `SYNC | META`).
    pub flags: BioFlags,
    /// The seed of the places read.
    pub seed: u64,
    /// Who issues the reads.
    pub issuer: IssuerId,
}

impl Default for FindParams {
    fn default() -> Self {
        Self {
            start_sector: 0,
            span_sectors: 4 << 20,
            reads: 2256,
            read_bytes: 4096,
            think_ns: 811_000,
            near_percent: 25,
            burst_every: 52,
            burst_blocks: 32,
            flags: BioFlags::SYNC.union(BioFlags::META),
            seed: 1,
            issuer: IssuerId(0),
        }
    }
}

impl FindParams {
    /// Whether step `step` (from 0) is a burst.
    ///
    /// ```
    /// use blkmq_sim::FindParams;
    /// let p = FindParams { burst_every: 3, ..FindParams::default() };
    /// assert_eq!((0..6).filter(|&s| p.is_burst(s)).collect::<Vec<_>>(), [2, 5]);
    /// ```
    pub fn is_burst(&self, step: u64) -> bool {
        self.has_bursts() && (step + 1) % self.burst_every == 0
    }

    /// How many of the steps are bursts.
    ///
    /// ```
    /// use blkmq_sim::FindParams;
    /// let p = FindParams { reads: 10, burst_every: 4, ..FindParams::default() };
    /// assert_eq!(p.bursts(), 2);
    /// assert_eq!(FindParams { burst_every: 0, ..p }.bursts(), 0);
    /// ```
    pub fn bursts(&self) -> u64 {
        if self.has_bursts() {
            self.reads / self.burst_every
        } else {
            0
        }
    }

    /// Whether the walk has bursts at all.
    fn has_bursts(&self) -> bool {
        self.burst_every != 0 && self.burst_blocks != 0
    }

    /// Blocks read in all: one per single read, `burst_blocks` per burst (a burst reads no
    /// more blocks than the span holds).
    ///
    /// ```
    /// use blkmq_sim::FindParams;
    /// let p = FindParams { reads: 10, burst_every: 4, burst_blocks: 8, ..FindParams::default() };
    /// assert_eq!(p.blocks(), 8 + 2 * 8);
    /// ```
    pub fn blocks(&self) -> u64 {
        let per_burst = self.burst_blocks.min(self.span_blocks());
        self.reads - self.bursts() + self.bursts() * per_burst
    }

    /// Blocks the span holds (at least one).
    fn span_blocks(&self) -> u64 {
        (self.span_sectors / sectors_of(self.read_bytes).max(1)).max(1)
    }
}

/// A `find`-like walk of [`FindParams::reads`] steps, each followed by
/// [`FindParams::think_ns`] of processor time: a synchronous metadata read of one block, or
/// (every [`FindParams::burst_every`] steps) a burst of [`FindParams::burst_blocks`] adjacent
/// blocks submitted together under a plug, waited for together. A burst merges into one
/// request where merging is allowed, and is that many requests where it is not.
///
/// ```
/// use blkmq_sim::{Find, FindParams, Ideal, IdealParams, Sim};
///
/// let params = IdealParams { latency_ns: 500_000, bandwidth: 0, ..Default::default() };
/// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
/// let walk = FindParams { reads: 100, think_ns: 100_000, burst_every: 0, ..Default::default() };
/// let find = sim.add_workload(queue, Find::new(walk));
/// sim.run().unwrap();
/// assert_eq!(sim.workload(find).elapsed_ns(), Some(100 * 600_000));
/// assert_eq!(sim.workload(find).real_line().unwrap(), "real    0m 0.06s");
/// ```
#[derive(Clone, Debug)]
pub struct Find {
    params: FindParams,
    sectors: u64,
    rng: SimRng,
    last: u64,
    /// Steps done.
    done: u64,
    /// Reads of the current step not yet completed.
    pending: u64,
    started_ns: Option<u64>,
    finished_ns: Option<u64>,
}

impl Find {
    /// A walk with `params`.
    ///
    /// ```
    /// use blkmq_sim::{Find, FindParams, Workload};
    /// let find = Find::new(FindParams { reads: 10, read_bytes: 1024, ..FindParams::default() });
    /// assert_eq!(find.claimed_bytes(), 10 * 1024);
    /// ```
    pub fn new(params: FindParams) -> Self {
        let sectors = sectors_of(params.read_bytes).max(1);
        Self {
            params,
            sectors,
            rng: SimRng::new(params.seed),
            last: params.start_sector,
            done: 0,
            pending: 0,
            started_ns: None,
            finished_ns: None,
        }
    }

    /// The time from the first read to the end of the processing after the last, once done.
    ///
    /// ```
    /// use blkmq_sim::{Find, FindParams, Ideal, IdealParams, Sim};
    /// let params = IdealParams { latency_ns: 1_000, bandwidth: 0, ..Default::default() };
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let walk = FindParams { reads: 3, think_ns: 0, burst_every: 0, ..Default::default() };
    /// let find = sim.add_workload(queue, Find::new(walk));
    /// assert_eq!(sim.workload(find).elapsed_ns(), None);
    /// sim.run().unwrap();
    /// assert_eq!(sim.workload(find).elapsed_ns(), Some(3_000));
    /// ```
    pub fn elapsed_ns(&self) -> Option<u64> {
        Some(self.finished_ns? - self.started_ns?)
    }

    /// The elapsed time as `time` prints it (`real    0m 3.60s`), once done.
    ///
    /// ```
    /// use blkmq_sim::{Find, FindParams, Ideal, IdealParams, Sim};
    /// let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let walk = FindParams { reads: 1000, think_ns: 2_600_000, burst_every: 0, ..Default::default() };
    /// let find = sim.add_workload(queue, Find::new(walk));
    /// sim.run().unwrap();
    /// assert_eq!(sim.workload(find).real_line().unwrap(), "real    0m 3.60s");
    /// ```
    pub fn real_line(&self) -> Option<String> {
        self.elapsed_ns().map(real_line)
    }

    fn next_step(&mut self, cx: &mut Cx<'_>) {
        let p = self.params;
        let slots = p.span_blocks();
        let read = |sector| {
            Io::read(sector, self.sectors as u32)
                .flags(p.flags)
                .issuer(p.issuer)
        };
        if p.is_burst(self.done) {
            let blocks = p.burst_blocks.min(slots);
            let first = p.start_sector + self.rng.below(slots - blocks + 1) * self.sectors;
            self.last = first + (blocks - 1) * self.sectors;
            self.pending = blocks;
            cx.submit_plugged((0..blocks).map(|b| read(first + b * self.sectors)));
            return;
        }
        let sector = if self.done > 0 && self.rng.chance(p.near_percent, 100) {
            let next = self.last + self.sectors;
            if next + self.sectors <= p.start_sector + slots * self.sectors {
                next
            } else {
                p.start_sector
            }
        } else {
            p.start_sector + self.rng.below(slots) * self.sectors
        };
        self.last = sector;
        self.pending = 1;
        cx.submit(read(sector));
    }
}

impl Workload for Find {
    fn name(&self) -> String {
        "find".into()
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        self.started_ns = Some(cx.now_ns());
        if self.params.reads == 0 {
            self.finished_ns = Some(cx.now_ns());
            return;
        }
        self.next_step(cx);
    }

    fn completed(&mut self, cx: &mut Cx<'_>, _done: &Done) {
        self.pending = self.pending.saturating_sub(1);
        if self.pending > 0 {
            return;
        }
        self.done += 1;
        if self.params.think_ns == 0 {
            self.woken(cx, 0);
        } else {
            cx.wake_after(self.params.think_ns, 0);
        }
    }

    fn woken(&mut self, cx: &mut Cx<'_>, _token: u64) {
        if self.done < self.params.reads {
            self.next_step(cx);
        } else {
            self.finished_ns = Some(cx.now_ns());
        }
    }

    fn is_finished(&self) -> bool {
        self.finished_ns.is_some()
    }

    fn claimed_bytes(&self) -> u64 {
        self.params.blocks() * self.sectors * SECTOR_SIZE
    }
}
