//! `find`: a walk of a file system's metadata — small synchronous reads, one at a time, at
//! scattered places, with some processor time after each.

use blkmq_core::{BioFlags, IssuerId, SECTOR_SIZE};

use super::{Cx, Done, Io, Workload};
use crate::SimRng;
use crate::report::real_line;
use crate::sim::sectors_of;

/// The parameters of a [`Find`].
///
/// The defaults come from the seed's `find` (3.60 s real, of which 0.25 s user and
/// 1.58 s system time) on a card whose 4 KiB reads at queue depth 1 take 0.66 ms (the
/// seed's iozone, 6052 kB/s): `(3.60 - 1.83) s / 0.66 ms` ≈ 2680 reads, and
/// `1.83 s / 2680` ≈ 683 µs of processor time after each. A quarter of the reads follow
/// the previous one (the next block of a directory or inode table); the others land
/// anywhere in the first 2 GiB.
///
/// ```
/// use blkmq_sim::FindParams;
/// let p = FindParams::default();
/// assert_eq!((p.reads, p.read_bytes, p.think_ns), (2680, 4096, 683_000));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FindParams {
    /// Where the file system starts.
    pub start_sector: u64,
    /// How far the metadata is spread, in sectors (default 2 GiB).
    pub span_sectors: u64,
    /// Metadata reads (default 2680).
    pub reads: u64,
    /// Bytes per read (default 4 KiB, a file system block).
    pub read_bytes: u64,
    /// Processor time after each read (default 683 µs).
    pub think_ns: u64,
    /// Out of 100, how many reads follow the previous one (default 25).
    pub near_percent: u64,
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
            reads: 2680,
            read_bytes: 4096,
            think_ns: 683_000,
            near_percent: 25,
            seed: 1,
            issuer: IssuerId(0),
        }
    }
}

/// A `find`-like walk: [`FindParams::reads`] synchronous metadata reads at queue depth 1,
/// each followed by [`FindParams::think_ns`] of processor time.
///
/// ```
/// use blkmq_sim::{Find, FindParams, Ideal, IdealParams, Sim};
///
/// let params = IdealParams { latency_ns: 500_000, bandwidth: 0, ..Default::default() };
/// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
/// let find = sim.add_workload(queue, Find::new(FindParams { reads: 100, think_ns: 100_000, ..Default::default() }));
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
    done: u64,
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
    /// let find = sim.add_workload(queue, Find::new(FindParams { reads: 3, think_ns: 0, ..Default::default() }));
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
    /// let walk = FindParams { reads: 1000, think_ns: 2_600_000, ..Default::default() };
    /// let find = sim.add_workload(queue, Find::new(walk));
    /// sim.run().unwrap();
    /// assert_eq!(sim.workload(find).real_line().unwrap(), "real    0m 3.60s");
    /// ```
    pub fn real_line(&self) -> Option<String> {
        self.elapsed_ns().map(real_line)
    }

    fn next_read(&mut self, cx: &mut Cx<'_>) {
        let p = &self.params;
        let slots = (p.span_sectors / self.sectors).max(1);
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
        cx.submit(
            Io::read(sector, self.sectors as u32)
                .flags(BioFlags::SYNC | BioFlags::META)
                .issuer(p.issuer),
        );
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
        self.next_read(cx);
    }

    fn completed(&mut self, cx: &mut Cx<'_>, _done: &Done) {
        self.done += 1;
        if self.params.think_ns == 0 {
            self.woken(cx, 0);
        } else {
            cx.wake_after(self.params.think_ns, 0);
        }
    }

    fn woken(&mut self, cx: &mut Cx<'_>, _token: u64) {
        if self.done < self.params.reads {
            self.next_read(cx);
        } else {
            self.finished_ns = Some(cx.now_ns());
        }
    }

    fn is_finished(&self) -> bool {
        self.finished_ns.is_some()
    }

    fn claimed_bytes(&self) -> u64 {
        self.params.reads * self.sectors * SECTOR_SIZE
    }
}
