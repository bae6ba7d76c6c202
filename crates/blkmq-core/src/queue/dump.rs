//! State dumps: a host, a request queue, a hardware queue or a request, in a few lines of
//! text, as Linux's blk-mq debugfs shows them (`/sys/kernel/debug/block/*/hctx*/`).
//!
//! Each dump is a value whose [`Display`](fmt::Display) reads the state when it is
//! formatted: atomics as they stand, and each list (a dispatch list, a software queue, the
//! requeue list) under its own lock, taken briefly, one at a time, while that list's lines
//! are written. A dump is a debugging aid, not for the I/O path: format it into a `String`
//! when the sink is slow (a terminal, a pipe), so no lock is held while the sink blocks.
//! The figures of one dump are not one atomic picture: what runs meanwhile may move.
//!
//! | dump | what | Linux's debugfs |
//! |---|---|---|
//! | [`HostDump`] | completions, requests in the driver, the host's restart and kick sets, each queue | — |
//! | [`QueueDump`] | elevator, usage, freeze, quiesce, restart marks, the requeue list, each hardware queue | `requeue_list`, `state` |
//! | [`HctxDump`] | state bits, the dispatch list, the software queues, tags and scheduler tags, the requests in the driver | `hctx*/state`, `dispatch`, `ctx_map`, `cpu*/rq_list`, `tags`, `tags_bitmap`, `sched_tags`, `sched_tags_bitmap`, `busy` |
//! | [`RequestDump`] | state, tag, generation, deadline, I/O and bios | `blk_mq_debugfs_rq_show` |

use alloc::vec::Vec;
use core::fmt;

use crate::bio::{Bio, BioFlags, Op};
use crate::driver::Driver;
use crate::queue_map::QueueType;
use crate::queue_tags::QueueTags;
use crate::request::{BioPool, NO_TAG, Request, Rq, RqIo, RqState};
use crate::sync::Ordering;
use crate::tags::TagMap;

use super::{Host, PENDING, RUNNING, RequestQueue};

/// A picture of a [`Host`]: its completions, the requests its driver holds, the queue
/// slots marked for a restart or kicked, then each live queue's [`QueueDump`]. Made by
/// [`Host::dump`].
///
/// Every dump ([`HostDump`], [`QueueDump`], [`HctxDump`], [`RequestDump`]) reads the state
/// when it is formatted: atomics as they stand, and each list (a dispatch list, a software
/// queue, the requeue list) under its own lock, taken briefly, one at a time, while that
/// list's lines are written. A dump is a debugging aid, not for the I/O path: format it
/// into a `String` when the sink is slow (a terminal, a pipe), so that no lock is held
/// while the sink blocks. The figures of one dump are not one atomic picture: what runs
/// meanwhile may move.
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Hold;
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// let text = host.dump().to_string();
/// assert!(text.starts_with("host: in_driver=1 "));
/// assert!(text.contains("hctx 0 of queue"));
/// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
/// ```
pub struct HostDump<'a, D: Driver> {
    host: &'a Host<D>,
}

/// A picture of a [`RequestQueue`]: its elevator, usage, freeze and quiesce, the hardware
/// queues marked for a restart or kicked, its requeue list, then each hardware queue's
/// [`HctxDump`]. Made by [`RequestQueue::dump_queue`].
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Hold;
/// let host = Host::new(TagSet::builder(8).hw_queues(2), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// let text = queue.dump_queue().to_string();
/// assert!(text.contains("elevator=none"));
/// assert!(text.contains("hctx 0 of queue") && text.contains("hctx 1 of queue"));
/// ```
pub struct QueueDump<'a, D: Driver> {
    queue: &'a RequestQueue<D>,
}

/// A picture of one hardware queue (Linux's `hctx*` directory): its state bits (stopped,
/// inactive, the run claim and a pending rerun, one at a time, restart mark, kick and due
/// time), its dispatch list (requests put back), its software queues' lists (one per CPU
/// and queue type mapped to it), its driver tags and scheduler tags (which are set, their
/// counts and waiters) and the requests in the driver. Made by [`RequestQueue::dump`].
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Hold;
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
/// let text = queue.dump(0).to_string();
/// assert!(text.contains("restart: marked=false"));
/// assert!(text.contains(" busy=1 ")); // one driver tag taken
/// assert!(text.contains("in driver (1), "));
/// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
/// ```
pub struct HctxDump<'a, D: Driver> {
    queue: &'a RequestQueue<D>,
    hctx: usize,
}

/// A picture of one request on one line: its tag and driver tag, hardware queue, state,
/// generation and deadline, then its I/O (operation, first sector, sectors, flags) and each
/// bio's sector, sectors, operation and flags. Made by [`RequestQueue::dump_request`] for a
/// request the caller holds; the other dumps print one for each request on their lists.
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Hold;
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// queue.submit(Bio::new(Op::Write, 16, 8).flags(BioFlags::SYNC)).unwrap();
/// let rq = host.driver().take().pop().unwrap();
/// let line = queue.dump_request(&rq).unwrap().to_string();
/// assert!(line.starts_with("tag=0 driver_tag=0 hctx=0 state=in_flight "));
/// assert!(line.ends_with("op=write sector=16 sectors=8 flags=SYNC bios=1: [16+8 write SYNC]"));
/// queue.end_request(rq, Status::Ok).unwrap();
/// ```
pub struct RequestDump<'a, T> {
    request: &'a Request<T>,
    io: &'a RqIo,
    pool: &'a BioPool,
}

impl<D: Driver> Host<D> {
    /// A picture of the host and every live queue on it, for debugging (a stall, a hang):
    /// see [`HostDump`]. Formatting it takes each list's lock briefly; not for the I/O path.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let text = host.dump().to_string();
    /// assert!(text.contains(&format!("queue {} (slot 0)", a.id())));
    /// assert!(text.contains(&format!("queue {} (slot 1)", b.id())));
    /// ```
    pub fn dump(&self) -> HostDump<'_, D> {
        HostDump { host: self }
    }
}

impl<D: Driver> RequestQueue<D> {
    /// A picture of hardware queue `hctx`, for debugging: see [`HctxDump`]. Formatting it
    /// takes the dispatch list's and each software queue's lock briefly, and a usage
    /// reference; not for the I/O path. The driver may take one from its `queue_rq` or
    /// `timeout`: the runner's batch and the elevator, which a runner may hold there, are
    /// read only when their locks are free. A hardware queue that does not exist prints
    /// one line saying so.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let text = queue.dump(0).to_string();
    /// assert!(text.contains("state: stopped=false inactive=false running=false"));
    /// assert_eq!(queue.dump(5).to_string(), "hctx 5: no such hardware queue\n");
    /// ```
    pub fn dump(&self, hctx: usize) -> HctxDump<'_, D> {
        HctxDump { queue: self, hctx }
    }

    /// A picture of the queue and each of its hardware queues, for debugging: see
    /// [`QueueDump`]. Not for the I/O path.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.freeze();
    /// assert!(queue.dump_queue().to_string().contains("frozen=true"));
    /// queue.unfreeze();
    /// ```
    pub fn dump_queue(&self) -> QueueDump<'_, D> {
        QueueDump { queue: self }
    }

    /// A picture of a request the caller holds, on one line: see [`RequestDump`]. `None`
    /// when `rq` is not this queue's.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let other = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// assert!(queue.dump_request(&rq).unwrap().to_string().contains("op=read sector=0"));
    /// assert!(other.dump_request(&rq).is_none());
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn dump_request<'a>(&'a self, rq: &'a Rq) -> Option<RequestDump<'a, D::Payload>> {
        RequestDump::new(self.tags(), rq)
    }
}

impl<'a, T> RequestDump<'a, T> {
    /// The dump of `rq`, one of `tags`' requests whose I/O nobody changes meanwhile (its
    /// holder's, or on a list whose lock the caller holds).
    fn new<P: crate::Platform>(tags: &'a QueueTags<T, P>, rq: &'a Rq) -> Option<Self> {
        Some(Self {
            request: tags.request(rq).ok()?,
            io: tags.io(rq).ok()?,
            pool: &tags.set().bios,
        })
    }
}

impl<T> fmt::Display for RequestDump<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (r, io) = (self.request, self.io);
        write!(f, "tag={} driver_tag=", r.tag())?;
        tag_or_none(f, r.driver_tag())?;
        write!(
            f,
            " hctx={} state={} gen={:#x} deadline={} op={} sector={} sectors={} flags={} bios={}:",
            r.hctx(),
            state_name(r.state()),
            r.generation(),
            r.deadline_ns(),
            op_name(io.op()),
            io.sector(),
            io.sectors(),
            Flags(io.flags()),
            io.nr_bios(),
        )?;
        let mut result = Ok(());
        io.for_each_bio(self.pool, |bio: &Bio| {
            if result.is_ok() {
                result = write!(
                    f,
                    " [{}+{} {} {}]",
                    bio.sector,
                    bio.sectors,
                    op_name(bio.op),
                    Flags(bio.flags)
                );
            }
        });
        result
    }
}

impl<D: Driver> fmt::Display for HostDump<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = self.host;
        // Completions (and requeues) so far, over the hardware queues (each counts its own).
        let completions: u64 = (0..host.nr_hw_queues())
            .map(|hctx| u64::from(host.driver_ends(hctx)))
            .sum();
        write!(
            f,
            "host: in_driver={} completions={} quiesced={} tags: depth={} reserved={} hw_queues={} maps={} queues={} busy={} bio_slots_in_use={} restart=",
            host.in_driver(),
            completions,
            host.is_quiesced(),
            host.set.depth(),
            host.set.reserved(),
            host.set.nr_hw_queues(),
            host.set.nr_maps(),
            host.set.nr_queues(),
            host.set.busy(),
            host.set.bio_slots_in_use(),
        )?;
        marked(f, &host.restart)?;
        f.write_str(" kicked=")?;
        marked(f, &host.kicked)?;
        writeln!(f)?;
        let mut result = Ok(());
        host.for_each_queue(|queue| {
            if result.is_ok() {
                result = write!(f, "{}", queue.dump_queue());
            }
        });
        result
    }
}

impl<D: Driver> fmt::Display for QueueDump<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let q = self.queue;
        let elevator = match q.elevator.try_lock() {
            Some(e) => e.as_ref().map_or("none", |e| e.name()),
            None => "(locked)",
        };
        write!(
            f,
            "queue {} (slot {}): elevator={} usage={} frozen={} quiesced={} hw_queues={} timed_out={} restart=",
            q.id,
            q.slot,
            elevator,
            q.usage(),
            q.is_frozen(),
            q.is_quiesced(),
            q.hctxs.len(),
            q.timed_out.load(Ordering::Relaxed),
        )?;
        marked(f, &q.restart)?;
        f.write_str(" kicked=")?;
        marked(f, &q.kicked)?;
        writeln!(f)?;
        match q.enter_any() {
            Some(_inside) => {
                let tags = q.tags();
                let list = q.requeue.lock();
                writeln!(f, "  requeue ({}):", list.len())?;
                for rq in list.iter() {
                    request_line(f, tags, rq)?;
                }
            }
            None => writeln!(f, "  requeue: (tags being replaced)")?,
        }
        for hctx in 0..q.hctxs.len() {
            write!(f, "{}", q.dump(hctx))?;
        }
        Ok(())
    }
}

impl<D: Driver> fmt::Display for HctxDump<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (q, hctx) = (self.queue, self.hctx);
        let Some(h) = q.hctxs.get(hctx) else {
            return writeln!(f, "hctx {hctx}: no such hardware queue");
        };
        let claim = h.run_claim.load(Ordering::Relaxed);
        writeln!(f, "hctx {hctx} of queue {} (slot {}):", q.id, q.slot)?;
        writeln!(
            f,
            "  state: stopped={} inactive={} running={} pending={} one_at_a_time={} quiesced={}",
            h.stopped.load(Ordering::Relaxed),
            h.inactive.load(Ordering::Relaxed),
            claim & RUNNING != 0,
            claim & PENDING != 0,
            h.one_at_a_time.load(Ordering::Relaxed),
            q.is_quiesced(),
        )?;
        let due = q.host.due[q.slot].load(Ordering::Relaxed);
        write!(
            f,
            "  restart: marked={} queue_marked_in_host={} kicked={} due=",
            q.restart.is_marked(hctx),
            q.host.restart.is_marked(q.slot),
            q.kicked.is_marked(hctx),
        )?;
        match due {
            u64::MAX => writeln!(f, "-")?,
            0 => writeln!(f, "now")?,
            at => writeln!(f, "{at}")?,
        }
        let Some(_inside) = q.enter_any() else {
            return writeln!(f, "  (tags being replaced)");
        };
        let tags = q.tags();
        {
            let list = h.dispatch.lock();
            writeln!(f, "  dispatch ({}):", list.len())?;
            for rq in list.iter() {
                request_line(f, tags, rq)?;
            }
        }
        // The runner holds its batch across the driver's `queue_rq`: not waited for.
        match h.run_batch.try_lock() {
            Some(batch) if !batch.is_empty() => writeln!(f, "  runner's batch: {}", batch.len())?,
            Some(_) => {}
            None => writeln!(f, "  runner's batch: held by the runner")?,
        }
        self.ctxs(f, tags)?;
        if let Some(e) = q.elevator.try_lock() {
            if let Some(e) = e.as_ref() {
                writeln!(f, "  elevator: {} has_work={}", e.name(), e.has_work(hctx))?;
            }
        }
        let set = tags.set();
        if let Some(m) = set.map_of(hctx) {
            let map = &set.maps[m];
            write!(f, "  tags: map {m}")?;
            if set.nr_maps() == 1 && set.nr_hw_queues() > 1 {
                f.write_str(" (shared host tags)")?;
            }
            write!(
                f,
                " queues={} active_queues={} active={} counted={} ",
                set.nr_queues(),
                map.active_queues.load(Ordering::Relaxed),
                tags.is_active(hctx),
                tags.in_flight(hctx),
            )?;
            map_line(f, map)?;
            if let Some(sched) = tags.sched_map(m) {
                f.write_str("  sched_tags: ")?;
                map_line(f, sched)?;
            }
        }
        self.in_driver(f, tags)
    }
}

impl<D: Driver> HctxDump<'_, D> {
    /// The software queues mapped to the hardware queue, then each that holds requests or
    /// has its bit set in `ctx_has_work` (Linux's `ctx_map`), with its requests.
    fn ctxs(
        &self,
        f: &mut fmt::Formatter<'_>,
        tags: &QueueTags<D::Payload, D::Platform>,
    ) -> fmt::Result {
        let (q, h) = (self.queue, &self.queue.hctxs[self.hctx]);
        f.write_str("  ctxs:")?;
        for &c in h.ctxs.iter() {
            write!(f, " {}", CtxName(c))?;
        }
        writeln!(f)?;
        for (pos, &c) in h.ctxs.iter().enumerate() {
            let work = h.ctx_has_work[pos / 64].load(Ordering::Relaxed) >> (pos % 64) & 1 != 0;
            let list = q.ctxs[c].list.lock();
            if list.is_empty() && !work {
                continue;
            }
            writeln!(f, "  ctx {} ({}) has_work={work}:", CtxName(c), list.len())?;
            for rq in list.iter() {
                request_line(f, tags, rq)?;
            }
        }
        Ok(())
    }

    /// The queue's requests holding a driver tag of the hardware queue and started
    /// (Linux's `busy`), and how many hold one not started.
    fn in_driver(
        &self,
        f: &mut fmt::Formatter<'_>,
        tags: &QueueTags<D::Payload, D::Platform>,
    ) -> fmt::Result {
        // Gathered first, written after: the walk holds the set's iteration lock.
        let mut started: Vec<(u32, u32, u64, u64)> = Vec::new();
        let mut idle = 0;
        tags.for_each_busy(Some(self.hctx), |busy| {
            if busy.state == RqState::InFlight {
                let r = busy.request;
                started.push((r.tag(), busy.tag, busy.generation, r.deadline_ns()));
            } else {
                idle += 1;
            }
            true
        });
        writeln!(
            f,
            "  in driver ({}), driver tags held not started: {idle}:",
            started.len()
        )?;
        for (tag, driver_tag, generation, deadline) in started {
            writeln!(
                f,
                "    tag={tag} driver_tag={driver_tag} state=in_flight gen={generation:#x} deadline={deadline}"
            )?;
        }
        Ok(())
    }
}

/// One request of a list, indented.
fn request_line<T, P: crate::Platform>(
    f: &mut fmt::Formatter<'_>,
    tags: &QueueTags<T, P>,
    rq: &Rq,
) -> fmt::Result {
    match RequestDump::new(tags, rq) {
        Some(dump) => writeln!(f, "    {dump}"),
        None => writeln!(f, "    tag={}: not this queue's", rq.tag()),
    }
}

/// A tag map's counts and bitmap (Linux's `tags` and `tags_bitmap`): `depth=8 reserved=0
/// busy=2 waiters=0 bitmap=0-1`.
fn map_line<T, R: lock_api::RawMutex>(
    f: &mut fmt::Formatter<'_>,
    map: &TagMap<T, R>,
) -> fmt::Result {
    let waiters = map.normal.waiters() + map.reserved.as_ref().map_or(0, |r| r.waiters());
    write!(
        f,
        "depth={} reserved={} busy={} waiters={waiters} bitmap=",
        map.depth(),
        map.nr_reserved,
        map.busy(),
    )?;
    let mut ranges = Ranges::new(f);
    map.for_each_busy_tag(|tag| {
        ranges.push(tag);
        true
    });
    ranges.finish()?;
    writeln!(f)
}

/// The hardware queues (or queue slots) marked in `set`, as ranges.
fn marked(f: &mut fmt::Formatter<'_>, set: &super::RestartSet) -> fmt::Result {
    let mut ranges = Ranges::new(f);
    for i in (0..set.nr_hctx()).filter(|&i| set.is_marked(i)) {
        ranges.push(i);
    }
    ranges.finish()
}

fn tag_or_none(f: &mut fmt::Formatter<'_>, tag: u32) -> fmt::Result {
    if tag == NO_TAG {
        f.write_str("-")
    } else {
        write!(f, "{tag}")
    }
}

fn state_name(state: RqState) -> &'static str {
    match state {
        RqState::Free => "free",
        RqState::Idle => "idle",
        RqState::InFlight => "in_flight",
        RqState::Complete => "complete",
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
        Op::Flush => "flush",
        Op::Discard => "discard",
        Op::WriteZeroes => "write_zeroes",
    }
}

/// Flags by name, `|` between them; `-` for none.
struct Flags(BioFlags);

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("-");
        }
        for (i, (name, _)) in self.0.iter_names().enumerate() {
            if i > 0 {
                f.write_str("|")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

/// A software context by its CPU and queue type: `cpu0/default`.
struct CtxName(usize);

impl fmt::Display for CtxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kinds = QueueType::ALL.len();
        let kind = match QueueType::ALL[self.0 % kinds] {
            QueueType::Default => "default",
            QueueType::Read => "read",
            QueueType::Poll => "poll",
        };
        write!(f, "cpu{}/{kind}", self.0 / kinds)
    }
}

/// Increasing numbers written as ranges, `0-3,7,9-10`, or `-` for none.
struct Ranges<'f, 'g> {
    f: &'f mut fmt::Formatter<'g>,
    run: Option<(usize, usize)>,
    written: bool,
    result: fmt::Result,
}

impl<'f, 'g> Ranges<'f, 'g> {
    fn new(f: &'f mut fmt::Formatter<'g>) -> Self {
        Self {
            f,
            run: None,
            written: false,
            result: Ok(()),
        }
    }

    fn push(&mut self, n: usize) {
        match self.run {
            Some((start, end)) if n == end + 1 => self.run = Some((start, n)),
            Some(run) => {
                self.emit(run);
                self.run = Some((n, n));
            }
            None => self.run = Some((n, n)),
        }
    }

    fn emit(&mut self, (start, end): (usize, usize)) {
        if self.result.is_err() {
            return;
        }
        let sep = if self.written { "," } else { "" };
        self.written = true;
        self.result = if start == end {
            write!(self.f, "{sep}{start}")
        } else {
            write!(self.f, "{sep}{start}-{end}")
        };
    }

    fn finish(mut self) -> fmt::Result {
        match self.run.take() {
            Some(run) => self.emit(run),
            None if !self.written => self.result = self.result.and(self.f.write_str("-")),
            None => {}
        }
        self.result
    }
}

impl<D: Driver> fmt::Debug for HostDump<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostDump").finish_non_exhaustive()
    }
}

impl<D: Driver> fmt::Debug for QueueDump<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueDump")
            .field("slot", &self.queue.slot)
            .finish_non_exhaustive()
    }
}

impl<D: Driver> fmt::Debug for HctxDump<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HctxDump")
            .field("hctx", &self.hctx)
            .finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for RequestDump<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestDump")
            .field("tag", &self.request.tag())
            .finish_non_exhaustive()
    }
}
