//! mq-deadline for blkmq: a deadline I/O scheduler (Linux's `block/mq-deadline.c`).
//!
//! Requests are kept per priority class (real time, best effort — which "none" counts as —
//! and idle) and direction, each in a sector-sorted tree and a FIFO with a deadline per
//! request. Dispatch serves:
//!
//! 1. a per-class dispatch list first (requeued requests, inserted at its head);
//! 2. with requests of several classes queued, a best-effort or idle request older than
//!    [`Tunables::prio_aging_expire_ns`] (priority aging);
//! 3. otherwise the highest class with requests queued or in flight, strictly: it
//!    continues the current batch in sector order while under [`Tunables::fifo_batch`];
//!    then picks a direction — reads, unless writes wait and reads were preferred
//!    [`Tunables::writes_starved`] times in a row — and takes the FIFO head if its
//!    deadline passed ([`Tunables::read_expire_ns`], [`Tunables::write_expire_ns`]) or
//!    nothing follows in sector order, else the next request by sector.
//!
//! Bios merge at the back and, with [`Tunables::front_merges`], the front of queued
//! requests; two requests that come to touch merge, the survivor keeping the earlier
//! deadline. Everything but reads is limited to [`Tunables::async_depth`] scheduler tags.
//! The structures are arrays made when the queue's depth is set: no allocation per I/O.
//!
//! Completion takes no lock: the queue reports it to the scheduler's shared part
//! ([`Elevator::shared`]), which counts it in an atomic per class, as Linux's
//! `dd_finish_request` does (`atomic_inc(&stats->completed)`); insertion, merging and
//! dispatch count under the elevator's lock. Each request carries what its completion
//! needs (its class, and whether it was counted in) in its `sched_data`, written under the
//! lock when it is inserted.
//!
//! Deadlines and ages are read from the coarse clock ([`ElvCx::coarse_now_ns`]), as Linux
//! counts them in jiffies: its grain (a few milliseconds) is far below the expiries
//! (hundreds of milliseconds and more), and it is cheaper to read than the precise clock.
//!
//! [`ElvCx::coarse_now_ns`]: blkmq_core::ElvCx::coarse_now_ns
//!
//! ```
//! use blkmq_core::{Alloc, Bio, ElvCx, Elevator, Op, QueueLimits, StdPlatform, TagSet};
//! use blkmq_sched_deadline::Deadline;
//!
//! let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
//! let mut tags = set.attach().unwrap();
//! tags.attach_scheduler(None, |_| ()).unwrap();
//! let limits = QueueLimits::new(1 << 20);
//! let mut dd = Deadline::new();
//! dd.depth_updated(tags.nr_requests().unwrap(), tags.nr_keys());
//!
//! let cx = ElvCx::new(&tags, &limits, 0);
//! for sector in [800, 0] {
//!     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
//!     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
//!     dd.insert_requests(&cx, &mut std::iter::once(rq), false);
//! }
//! // A bio touching the request at 0 merges into it.
//! assert!(dd.bio_merge(&cx, Bio::new(Op::Read, 8, 8)).is_ok());
//! // Sector order from the start: 0 (now 16 sectors long), then 800.
//! let first = dd.dispatch_request(&cx, 0).unwrap();
//! assert_eq!((tags.io(&first).unwrap().sector(), tags.io(&first).unwrap().sectors()), (0, 16));
//! let second = dd.dispatch_request(&cx, 0).unwrap();
//! assert_eq!(tags.io(&second).unwrap().sector(), 800);
//! assert!(!dd.has_work(0));
//! for rq in [first, second] {
//!     dd.finish_request(&cx, &rq);
//!     tags.free(rq).unwrap();
//! }
//! assert_eq!(dd.stats(blkmq_core::IoPrioClass::BestEffort).completed, 2);
//! ```

#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]

extern crate alloc;

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use blkmq_core::{Bio, BioFlags, Elevator, ElvCx, ElvShared, IoPrioClass, MergeKind, Op, Rq, RqIo};
use blkmq_sched_index::{HeldRequests, KeyLists, SortedRequests};

const READ: usize = 0;
const WRITE: usize = 1;
/// Classes, highest first: real time, best effort, idle.
const NR_CLASSES: usize = 3;
/// Lists: a FIFO per class and direction, then a dispatch list per class.
const DISPATCH: usize = NR_CLASSES * 2;

const MS: u64 = 1_000_000;
/// The largest expiry accepted (one hour).
pub const MAX_EXPIRE_NS: u64 = 3_600_000 * MS;
/// The largest `fifo_batch` and `writes_starved` accepted.
pub const MAX_BATCH: u32 = 1 << 16;

/// mq-deadline's tunables, with Linux's defaults.
///
/// ```
/// use blkmq_sched_deadline::Tunables;
/// let t = Tunables::default();
/// assert_eq!((t.read_expire_ns, t.write_expire_ns), (500_000_000, 5_000_000_000));
/// assert_eq!((t.writes_starved, t.fifo_batch, t.front_merges), (2, 16, true));
/// assert_eq!(t.prio_aging_expire_ns, 10_000_000_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tunables {
    /// How long a read may wait before it is served ahead of sector order (500 ms).
    pub read_expire_ns: u64,
    /// The same for writes (5 s).
    pub write_expire_ns: u64,
    /// Read batches in a row while writes wait, before a write batch (2).
    pub writes_starved: u32,
    /// Whether bios merge at the front of requests (on).
    pub front_merges: bool,
    /// Requests per batch in one direction, in sector order (16).
    pub fifo_batch: u32,
    /// Scheduler tags for everything but reads (default: 3/4 of `nr_requests`, set when
    /// the depth is).
    pub async_depth: usize,
    /// How long a best-effort or idle request waits behind a higher class before it goes
    /// first (10 s).
    pub prio_aging_expire_ns: u64,
}

impl Default for Tunables {
    fn default() -> Self {
        Self {
            read_expire_ns: 500 * MS,
            write_expire_ns: 5_000 * MS,
            writes_starved: 2,
            front_merges: true,
            fifo_batch: 16,
            async_depth: 1,
            prio_aging_expire_ns: 10_000 * MS,
        }
    }
}

/// A tunable refused (shared by every scheduler).
///
/// ```
/// use blkmq_sched_deadline::{Deadline, TunableError};
/// let mut dd = Deadline::new();
/// assert_eq!(dd.set_fifo_batch(0), Err(TunableError { name: "fifo_batch", value: 0 }));
/// ```
pub use blkmq_core::TunableError;

/// Counters of one priority class.
///
/// ```
/// use blkmq_sched_deadline::ClassStats;
/// assert_eq!(ClassStats::default().in_flight, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Requests inserted (a requeued one counts once).
    pub inserted: u64,
    /// Bios and requests merged into queued requests.
    pub merged: u64,
    /// Dispatches (a requeued request dispatched again counts again).
    pub dispatched: u64,
    /// Requests finished (completed, or merged away).
    pub completed: u64,
    /// Requests dispatched and not yet finished or requeued.
    pub in_flight: u64,
}

/// What the scheduler knows of one request key, under the lock. A request finished by the
/// shared part leaves its key's entry as it was; the next request of that key starts a
/// fresh one when first inserted (its `sched_data` says it was not counted in).
#[derive(Clone, Copy, Default)]
struct KeyInfo {
    class: u8,
    dir: u8,
    /// The FIFO deadline.
    fifo_time: u64,
    /// When it was first inserted (priority aging).
    insert_ns: u64,
    /// Counted in `inserted`, and not merged away since.
    counted: bool,
    /// Dispatched and not back.
    dispatched: bool,
}

/// In a request's `sched_data[0]`: it was counted in `inserted` (set at its first insertion,
/// under the lock; zero when the request is allocated).
const SD_COUNTED: u64 = 1;
/// In a request's `sched_data[0]`: where its class (as counted) starts.
const SD_CLASS_SHIFT: u32 = 1;

/// The counts that completion writes: mq-deadline's shared part ([`ElvShared`]), written
/// without the lock, read by the locked part (`Relaxed`: see [`ElvShared`]'s module for
/// why a count is never seen early). Aligned to its own cache line, so that completions
/// write nothing that the locked part writes.
#[derive(Default)]
#[repr(align(128))]
struct Finished {
    /// Requests of each class counted in and finished (completed, or ended with an error
    /// after dispatch). They were dispatched: a request the scheduler holds cannot end.
    by_class: [AtomicU64; NR_CLASSES],
}

impl Finished {
    fn get(&self, class: usize) -> u64 {
        self.by_class[class].load(Ordering::Relaxed)
    }

    /// Counts the request with `io` finished, if it was counted in.
    #[inline]
    fn finish(&self, io: &RqIo) {
        let data = io.sched_data[0];
        if data & SD_COUNTED != 0 {
            let class = ((data >> SD_CLASS_SHIFT) as usize).min(NR_CLASSES - 1);
            self.by_class[class].fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl ElvShared for Finished {
    fn request_done(&self, _: &ElvCx<'_>, _: &Rq, io: &RqIo, _issued: bool) -> bool {
        self.finish(io);
        false
    }
}

/// What the lock keeps of one class's counters; completions are in [`Finished`].
#[derive(Clone, Copy, Default)]
struct LockedStats {
    inserted: u64,
    merged: u64,
    dispatched: u64,
    /// Requests merged away, counted finished.
    merged_away: u64,
    /// Dispatches not given back by a requeue (completions are taken off when read).
    out: u64,
}

/// The mq-deadline elevator. See the crate documentation.
pub struct Deadline {
    tunables: Tunables,
    nr_requests: usize,
    /// The requests held, by key: sorted in a tree per class and direction.
    sorted: SortedRequests,
    info: Vec<KeyInfo>,
    lists: KeyLists,
    /// Where the last dispatch of each class and direction ended.
    latest_pos: [[u64; 2]; NR_CLASSES],
    /// The end of the request the dispatch in progress took out of the orders.
    dispatch_end: Option<u64>,
    last_dir: usize,
    batching: u32,
    starved: u32,
    stats: [LockedStats; NR_CLASSES],
    /// Completions, counted without the lock.
    finished: Arc<Finished>,
}

impl Default for Deadline {
    fn default() -> Self {
        Self::new()
    }
}

/// The classes, highest first (as [`class_index`] numbers them).
const CLASSES: [IoPrioClass; NR_CLASSES] = [
    IoPrioClass::RealTime,
    IoPrioClass::BestEffort,
    IoPrioClass::Idle,
];

fn class_index(class: IoPrioClass) -> usize {
    match class {
        IoPrioClass::RealTime => 0,
        IoPrioClass::BestEffort => 1,
        IoPrioClass::Idle => 2,
    }
}

fn dir_of(op: Op) -> usize {
    if op.is_write() { WRITE } else { READ }
}

impl Deadline {
    /// mq-deadline with the default tunables; its arrays are made by
    /// [`Elevator::depth_updated`], which the queue calls when attaching it.
    pub fn new() -> Self {
        Self::with_tunables(Tunables::default())
    }

    /// mq-deadline with `tunables` (`async_depth` is reset when the depth is set).
    pub fn with_tunables(tunables: Tunables) -> Self {
        Self {
            tunables,
            nr_requests: 0,
            sorted: SortedRequests::new(NR_CLASSES * 2, 0),
            info: Vec::new(),
            lists: KeyLists::new(DISPATCH + NR_CLASSES, 0),
            latest_pos: [[0; 2]; NR_CLASSES],
            dispatch_end: None,
            last_dir: READ,
            batching: 0,
            starved: 0,
            stats: [LockedStats::default(); NR_CLASSES],
            finished: Arc::new(Finished::default()),
        }
    }

    /// The tunables.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// The counters of `class`.
    pub fn stats(&self, class: IoPrioClass) -> ClassStats {
        let class = class_index(class);
        let s = &self.stats[class];
        let finished = self.finished.get(class);
        ClassStats {
            inserted: s.inserted,
            merged: s.merged,
            dispatched: s.dispatched,
            completed: s.merged_away + finished,
            in_flight: s.out.saturating_sub(finished),
        }
    }

    /// Requests held (queued, not dispatched).
    pub fn queued(&self) -> usize {
        self.lists.total()
    }

    /// Sets `read_expire` (0 to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    pub fn set_read_expire(&mut self, ns: u64) -> Result<(), TunableError> {
        TunableError::check("read_expire", ns, ns <= MAX_EXPIRE_NS)?;
        self.tunables.read_expire_ns = ns;
        Ok(())
    }

    /// Sets `write_expire` (0 to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    pub fn set_write_expire(&mut self, ns: u64) -> Result<(), TunableError> {
        TunableError::check("write_expire", ns, ns <= MAX_EXPIRE_NS)?;
        self.tunables.write_expire_ns = ns;
        Ok(())
    }

    /// Sets `writes_starved` (0 to [`MAX_BATCH`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    pub fn set_writes_starved(&mut self, n: u32) -> Result<(), TunableError> {
        TunableError::check("writes_starved", n.into(), n <= MAX_BATCH)?;
        self.tunables.writes_starved = n;
        Ok(())
    }

    /// Turns front merges on or off.
    pub fn set_front_merges(&mut self, on: bool) {
        self.tunables.front_merges = on;
    }

    /// Sets `fifo_batch` (1 to [`MAX_BATCH`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    pub fn set_fifo_batch(&mut self, n: u32) -> Result<(), TunableError> {
        TunableError::check("fifo_batch", n.into(), (1..=MAX_BATCH).contains(&n))?;
        self.tunables.fifo_batch = n;
        Ok(())
    }

    /// Sets `async_depth` (1 to `nr_requests`).
    ///
    /// # Errors
    /// [`TunableError`] out of range (before the depth is known, any value but 0).
    pub fn set_async_depth(&mut self, depth: usize) -> Result<(), TunableError> {
        let max = if self.nr_requests == 0 {
            usize::MAX
        } else {
            self.nr_requests
        };
        TunableError::check("async_depth", depth as u64, (1..=max).contains(&depth))?;
        self.tunables.async_depth = depth;
        Ok(())
    }

    /// Sets `prio_aging_expire` (0 to [`MAX_EXPIRE_NS`]).
    ///
    /// # Errors
    /// [`TunableError`] out of range.
    pub fn set_prio_aging_expire(&mut self, ns: u64) -> Result<(), TunableError> {
        TunableError::check("prio_aging_expire", ns, ns <= MAX_EXPIRE_NS)?;
        self.tunables.prio_aging_expire_ns = ns;
        Ok(())
    }

    fn tree(class: usize, dir: usize) -> usize {
        class * 2 + dir
    }

    fn expire(&self, dir: usize) -> u64 {
        if dir == READ {
            self.tunables.read_expire_ns
        } else {
            self.tunables.write_expire_ns
        }
    }

    /// Requests of `class` inserted and not finished: queued or in flight.
    fn class_busy(&self, class: usize) -> bool {
        let s = &self.stats[class];
        s.inserted > s.merged_away + self.finished.get(class)
    }

    /// Takes `key` out of the sorted tree, the FIFO or dispatch list and the end hash.
    fn unlink(&mut self, key: usize) -> Option<u64> {
        self.lists.remove(key);
        self.sorted.unlink(key)
    }

    /// Queues `rq` in sector order and FIFO order (or at the head of its class's dispatch
    /// list), first trying to append it to a queued request it continues.
    fn insert_one(&mut self, cx: &ElvCx<'_>, mut rq: Rq, at_head: bool) {
        let key = cx.key(&rq);
        let Ok(io) = cx.io_mut(&mut rq) else {
            // Not a request of this queue: nothing to schedule it by. Keep it anyway, at
            // the head of best effort, so it is not lost.
            self.keep(key, rq, 1, READ, cx.coarse_now_ns(), true);
            return;
        };
        let (class, dir) = (class_index(io.prio().class()), dir_of(io.op()));
        let (sector, end) = (io.sector(), io.end_sector());
        // A reinsert (a merge refused, a requeue) was counted in already.
        let first = io.sched_data[0] & SD_COUNTED == 0;
        if first {
            io.sched_data[0] = SD_COUNTED | ((class as u64) << SD_CLASS_SHIFT);
        }
        let now = cx.coarse_now_ns();
        if key >= self.sorted.forest().nr_keys() {
            // Keys come from the queue's arrays, sized by `depth_updated`; be safe anyway.
            self.grow(key + 1);
        }
        if first {
            self.count_in(key, class, dir, now.saturating_add(self.expire(dir)), now);
        } else {
            // A reinsert (a merge refused, a requeue) may still be on a list; a request
            // inserted for the first time is on none (what the scheduler gives up, it
            // unlinked first).
            self.unlink(key);
        }
        if at_head {
            self.keep(key, rq, class, dir, now, false);
            return;
        }
        // An insert merge: a queued request ending where this one starts takes it.
        let info = &self.info;
        let same = |k: usize, _| info[k].class as usize == class && info[k].dir as usize == dir;
        let rq = match self.sorted.insert_merge(cx, rq, sector, same) {
            Ok(into) => return self.requests_merged(cx, into, key),
            Err(rq) => rq,
        };
        let t = Self::tree(class, dir);
        self.sorted.hold_sorted(t, key, rq, sector, end);
        self.lists.push_back(t, key);
    }

    /// Holds `rq` at the head of its class's dispatch list; `first`: its first insertion,
    /// to count in.
    fn keep(&mut self, key: usize, rq: Rq, class: usize, dir: usize, now: u64, first: bool) {
        if key >= self.sorted.forest().nr_keys() {
            self.grow(key + 1);
        }
        if first {
            self.count_in(key, class, dir, now, now);
        }
        let class = self.info[key].class as usize;
        self.lists.push_front(DISPATCH + class, key);
        self.sorted.hold(key, rq);
    }

    /// Records `key`'s first insertion (a requeued or re-inserted request keeps what it
    /// had): its class, direction, FIFO deadline and insertion time.
    fn count_in(&mut self, key: usize, class: usize, dir: usize, fifo_time: u64, now: u64) {
        self.info[key] = KeyInfo {
            class: class as u8,
            dir: dir as u8,
            fifo_time,
            insert_ns: now,
            counted: true,
            dispatched: false,
        };
        self.stats[class].inserted += 1;
    }

    /// The request `from` merged into `into`: `into` keeps the earlier deadline, `from` is
    /// gone (counted finished).
    fn finish_merged(&mut self, into: usize, from: usize) {
        let (fi, ii) = (self.info[from], self.info[into]);
        if fi.counted && fi.fifo_time < ii.fifo_time && self.lists.contains(into) {
            // Take `from`'s place in the FIFO, and its deadline.
            if self.lists.contains(from) {
                self.lists.remove(into);
                self.lists.insert_before(from, into);
            }
            self.info[into].fifo_time = fi.fifo_time;
        }
        self.unlink(from);
        let _ = self.sorted.take(from);
        let class = ii.class as usize;
        self.stats[class].merged += 1;
        if fi.counted {
            self.stats[fi.class as usize].merged_away += 1;
            self.info[from].counted = false;
        }
    }

    /// [`Elevator::bio_merge`] with requests held: the merge sequence, kept out of line so
    /// that the common call, with none held, is a test and a return.
    #[inline(never)]
    fn bio_merge_held(&mut self, cx: &ElvCx<'_>, bio: Bio) -> Result<(), Bio> {
        blkmq_sched_index::bio_merge(self, cx, bio)
    }

    fn grow(&mut self, nr_keys: usize) {
        self.sorted.resize(NR_CLASSES * 2, nr_keys);
        let nr_keys = self.sorted.forest().nr_keys();
        self.info.resize(nr_keys, KeyInfo::default());
        self.lists = KeyLists::new(DISPATCH + NR_CLASSES, nr_keys);
        // Held requests (none, when the queue resizes us frozen) are re-queued in order.
        for key in self.sorted.held_keys() {
            let class = self.info[key].class as usize;
            self.lists.push_back(DISPATCH + class, key);
        }
    }

    /// The next request of `class` in `dir` by sector from where the last one ended.
    fn next_by_sector(&self, class: usize, dir: usize) -> Option<usize> {
        self.sorted
            .forest()
            .lower_bound(Self::tree(class, dir), self.latest_pos[class][dir])
    }

    fn fifo_expired(&self, class: usize, dir: usize, now: u64) -> bool {
        self.lists
            .front(Self::tree(class, dir))
            .is_some_and(|k| self.info[k].fifo_time <= now)
    }

    /// One request of `class`, not inserted after `latest_start` (Linux's
    /// `__dd_dispatch_request`).
    fn dispatch_class(&mut self, cx: &ElvCx<'_>, class: usize, latest_start: u64) -> Option<usize> {
        if let Some(key) = self.lists.front(DISPATCH + class) {
            if self.info[key].insert_ns > latest_start {
                return None;
            }
            self.lists.remove(key);
            return Some(key);
        }
        let reads = self.lists.len(Self::tree(class, READ)) != 0;
        let writes = self.lists.len(Self::tree(class, WRITE)) != 0;
        // Continue the batch in sector order.
        let mut pick = self
            .next_by_sector(class, self.last_dir)
            .filter(|_| self.batching < self.tunables.fifo_batch);
        if pick.is_none() {
            let dir = if reads {
                if writes {
                    let starved = self.starved;
                    self.starved += 1;
                    if starved >= self.tunables.writes_starved {
                        self.starved = 0;
                        WRITE
                    } else {
                        READ
                    }
                } else {
                    READ
                }
            } else if writes {
                self.starved = 0;
                WRITE
            } else {
                return None;
            };
            let next = self.next_by_sector(class, dir);
            // The time is read only here, between batches, where expiry is checked.
            let key = if next.is_none() || self.fifo_expired(class, dir, cx.coarse_now_ns()) {
                self.lists.front(Self::tree(class, dir))
            } else {
                next
            }?;
            self.last_dir = dir;
            self.batching = 0;
            pick = Some(key);
        }
        let key = pick?;
        if self.info[key].insert_ns > latest_start {
            return None;
        }
        self.batching += 1;
        self.dispatch_end = self.unlink(key);
        Some(key)
    }

    /// With several classes queued (`busy`: which are): a lower-class request that waited
    /// past the aging expiry.
    fn dispatch_aged(&mut self, cx: &ElvCx<'_>, busy: [bool; NR_CLASSES]) -> Option<usize> {
        if busy.iter().filter(|&&b| b).count() < 2 {
            return None;
        }
        let latest = cx
            .coarse_now_ns()
            .checked_sub(self.tunables.prio_aging_expire_ns)?;
        (1..NR_CLASSES).find_map(|class| self.dispatch_class(cx, class, latest))
    }
}

impl Elevator for Deadline {
    fn name(&self) -> &'static str {
        "mq-deadline"
    }

    fn depth_updated(&mut self, nr_requests: usize, nr_keys: usize) {
        self.nr_requests = nr_requests;
        self.tunables.async_depth = (3 * nr_requests / 4).max(1);
        if nr_keys != self.sorted.forest().nr_keys() {
            self.grow(nr_keys);
        }
    }

    fn min_shallow_depth(&self) -> Option<usize> {
        // `async_depth` may be set as low as 1 at run time.
        Some(1)
    }

    fn limit_depth(&self, op: Op, _flags: BioFlags) -> Option<usize> {
        (op != Op::Read).then_some(self.tunables.async_depth)
    }

    fn insert_requests(
        &mut self,
        cx: &ElvCx<'_>,
        rqs: &mut dyn Iterator<Item = Rq>,
        at_head: bool,
    ) {
        // A batch at the head keeps its own order within each class: each request goes
        // behind the batch's previous one of its class.
        let mut prev: [Option<usize>; NR_CLASSES] = [None; NR_CLASSES];
        for rq in rqs {
            if !at_head {
                self.insert_one(cx, rq, false);
                continue;
            }
            let key = cx.key(&rq);
            self.insert_one(cx, rq, at_head);
            if self.lists.contains(key) {
                let class = self.info[key].class as usize;
                if let Some(p) = prev[class] {
                    if self.lists.same_list(p, key) {
                        self.lists.remove(key);
                        self.lists.insert_after(p, key);
                    }
                }
                prev[class] = Some(key);
            }
        }
    }

    fn insert_request(&mut self, cx: &ElvCx<'_>, rq: Rq, at_head: bool) {
        self.insert_one(cx, rq, at_head);
    }

    fn dispatch_request(&mut self, cx: &ElvCx<'_>, _hctx: usize) -> Option<Rq> {
        self.dispatch_end = None;
        // The classes with requests queued or in flight, read once for both looks.
        let busy: [bool; NR_CLASSES] = core::array::from_fn(|c| self.class_busy(c));
        let key = self.dispatch_aged(cx, busy).or_else(|| {
            // The highest class with requests queued or in flight, strictly (a class with
            // none has nothing to dispatch either).
            let class = busy.iter().position(|&b| b)?;
            self.dispatch_class(cx, class, u64::MAX)
        })?;
        let rq = self.sorted.take(key)?;
        // Where it ends, as it was filed (a request off a dispatch list was not: ask).
        let end = match self.dispatch_end.take() {
            Some(end) => end,
            None => cx.io(&rq).map_or(0, |io| io.end_sector()),
        };
        let info = &mut self.info[key];
        let class = info.class as usize;
        let dir = info.dir as usize;
        info.dispatched = true;
        self.latest_pos[class][dir] = end;
        self.stats[class].dispatched += 1;
        self.stats[class].out += 1;
        Some(rq)
    }

    fn has_work(&self, _hctx: usize) -> bool {
        self.queued() != 0
    }

    fn request_merge(&mut self, cx: &ElvCx<'_>, bio: &Bio) -> Option<(usize, MergeKind)> {
        if self.queued() == 0 {
            // Nothing queued to merge into (an idle device's common case).
            return None;
        }
        let (class, dir) = (class_index(bio.prio.class()), dir_of(bio.op));
        let info = &self.info;
        let same = |k: usize, _| info[k].class as usize == class && info[k].dir as usize == dir;
        let t = Self::tree(class, dir);
        self.sorted
            .request_merge(cx, bio, t, self.tunables.front_merges, same)
    }

    fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) {
        if self.sorted.request_merged(cx, key, kind).is_some() {
            self.stats[self.info[key].class as usize].merged += 1;
        }
    }

    fn requests_merged(&mut self, cx: &ElvCx<'_>, into: usize, from: usize) {
        self.sorted.requests_merged(cx, into);
        self.finish_merged(into, from);
    }

    fn bio_merge(&mut self, cx: &ElvCx<'_>, bio: Bio) -> Result<(), Bio> {
        if self.queued() == 0 {
            // Nothing queued to merge into (an idle device's common case): the bio is
            // not moved through the merge sequence only to come back.
            return Err(bio);
        }
        self.bio_merge_held(cx, bio)
    }

    fn may_merge(&self) -> bool {
        // As `bio_merge`: only a queued request takes a bio.
        self.queued() != 0
    }

    fn finish_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        // What the queue has the shared part do without the lock, plus tidying the key's
        // entry (which the next insertion of the key would start afresh anyway).
        if let Ok(io) = cx.io(rq) {
            self.finished.finish(io);
        }
        let key = cx.key(rq);
        let Some(info) = self.info.get_mut(key) else {
            return;
        };
        info.dispatched = false;
        info.counted = false;
        // Ended before dispatch (an error): no trace may stay in the orders.
        self.unlink(key);
    }

    fn requeue_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        if let Some(info) = self.info.get_mut(key) {
            if info.dispatched {
                info.dispatched = false;
                self.stats[info.class as usize].out -= 1;
            }
        }
    }

    fn shared(&self) -> Option<Arc<dyn ElvShared>> {
        Some(self.finished.clone())
    }
}

impl HeldRequests for Deadline {
    fn request(&self, key: usize) -> Option<&Rq> {
        self.sorted.request(key)
    }

    fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
        self.sorted.request_mut(key)
    }

    fn next_request(&mut self, _cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<usize> {
        self.sorted.next_request(key, kind)
    }

    fn take_request(&mut self, key: usize) -> Option<Rq> {
        // Out of the sector order, but kept in the FIFO until `requests_merged` has
        // handed its place to the survivor (or the merge fails and it is inserted again).
        self.sorted.take_request(key)
    }
}

impl fmt::Debug for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deadline")
            .field("tunables", &self.tunables)
            .field("queued", &self.queued())
            .field("stats", &CLASSES.map(|c| self.stats(c)))
            .finish_non_exhaustive()
    }
}
