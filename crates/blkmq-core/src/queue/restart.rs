//! The set of hardware queues waiting to be run again: what makes a completion rerun exactly
//! the queues that wait, and nothing when none does.
//!
//! # The problem
//!
//! A dispatch that runs out of a shared resource (a driver tag, the driver's budget, room in
//! the hardware) gives up and leaves its requests queued; a later completion must run that
//! hardware queue again, or the requests are stranded. Linux once answered "run every
//! hardware queue on every completion and let each check for work", which with 128 hardware
//! queues sharing one tag space cost a RAID HBA a quarter of its IOPS. Here a completion
//! consults a [`RestartSet`]: O(1) when nobody waits, and otherwise it visits only the words
//! that hold a waiting queue.
//!
//! # The protocol
//!
//! Two sides, each doing its two steps in this order:
//!
//! * **the dispatcher that gives up**: [`mark`](RestartSet::mark) its queue, *then* look at
//!   the resource again (and, if it is there now, run on instead of waiting);
//! * **the completion**: give the resource back (the tag, the budget, its hardware queue's
//!   count of requests in the driver), *then* [`drain`](RestartSet::drain) the set and run
//!   every queue it hands out.
//!
//! Every access is sequentially consistent (and fenced, `sync::seqcst_pair`), and a mark's
//! last write and a drain's first read are on the same word (the root of the tree below).
//! That is Dekker's pattern: either the dispatcher's second look sees the returned resource,
//! or the completion's drain sees the mark, and then runs the queue after the dispatcher
//! queued its requests. No interleaving leaves a marked queue with its resource free and
//! nobody about to run it (checked with loom in `tests/loom.rs` and `tests/loom_queue.rs`).
//!
//! A completion with nobody waiting writes nothing shared but its own hardware queue's
//! count (and the tag it frees) and reads one word, the root: there is no host-wide word
//! that every I/O writes.
//!
//! # Looking again
//!
//! The resource a dispatcher lacked may be the driver's own (`queue_rq` said
//! [`Status::Resource`]), which it cannot look at but by trying again. So the second look
//! is made of what the dispatcher can see without a host-wide word:
//!
//! * **its own hardware queue's completions.** Each hardware queue's word in the host
//!   counts its requests in the driver and its completions (one locked operation at the
//!   completion, on that hardware queue's line). The runner reads its own before the
//!   attempt (`arm_restart`) and again after the mark: changed, a completion of its own
//!   hardware queue came in meanwhile and may have drained before the mark, so it goes
//!   round again (`PENDING`). On a host of one hardware queue that is every completion.
//! * **the mark before the next attempt**: on a host of several hardware queues, a
//!   hardware queue that gave up marks the restart *before* its next attempt (Linux's
//!   `blk_mq_sched_mark_restart_hctx`), so that a failing attempt had the mark set
//!   already, and every completion after the attempt's look at the resource sees it. A
//!   first give-up there (its attempt ran unmarked, and a completion of another hardware
//!   queue would not show above) goes round once more, marked first this time: one more
//!   attempt (a `queue_rq` call, or a budget try) for such a give-up, and no more, as the
//!   second one waits.
//! * **a driver tag**: its lack is looked at directly, right after the mark, by trying for
//!   the tag again (Linux's `blk_mq_mark_tag_wait`).
//! * **nothing in the driver**: after the mark the give-up sums the hardware queues'
//!   counts of requests in the driver (a load per hardware queue, the slow path). Each
//!   count is paired with the mark as above: a count seen above zero belongs to a request
//!   whose completion comes after the mark and sees it. All zero: no completion is coming,
//!   and the platform is asked for a rerun after [`RESOURCE_DELAY_NS`]
//!   ([`Platform::kick_after`]).
//! * **a budget or tag given back without a completion** (`budget_returned`) reruns the
//!   waiting hardware queues that nobody runs now, and leaves the marks of those that run
//!   (the runner that gave it back, or one mid-attempt elsewhere, which marked before its
//!   look): rerunning them would have two runners chase each other's tails while the
//!   resource stays short. As before, a give-up counts on completions and the platform,
//!   not on this rerun.
//!
//! A mark made before an attempt (or a tag's second try) that went through is drained by
//! the next completion, which runs the queue once for nothing: a recovery on a host of
//! several hardware queues costs one rerun, nothing on the fast path.

//! # Layout
//!
//! A tree of 64-bit words: a bit per hardware queue in the leaves, and in each level above a
//! bit per word below that may hold a mark, up to a single root word (one level for up to 64
//! queues, two up to 4096, three up to 65536). A mark sets its bit in every level, leaf
//! first, root last — even bits already set, since that last write is what a drain's first
//! read must see. A drain reads the root (zero: done, one load) and descends, clearing each
//! parent bit before it looks below it and taking each leaf word whole. A mark racing a
//! drain either lands below a bit the drain has not cleared yet (and is taken now) or sets
//! its parents again after the drain cleared them (and is taken by the next drain); a parent
//! bit over an empty word costs the next drain a look, nothing more.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;

use crate::bio::Status;
use crate::driver::Driver;
use crate::error::ConfigError;
use crate::platform::Platform;
use crate::request::Rq;
use crate::sync::{AtomicU64, Ordering, seqcst_pair};
use crate::tagset::TagSetFlags;

use super::host::Host;
use crate::tagset::MAX_HW_QUEUES;

use super::{ARMED, GAVE_UP, PENDING, RUNNING, RequestQueue};

/// How long a dispatch that ran short with nothing in flight waits for the platform's
/// rerun (Linux's `BLK_MQ_RESOURCE_DELAY`, 3 ms), through [`Platform::kick_after`].
///
/// ```
/// assert_eq!(blkmq_core::RESOURCE_DELAY_NS, 3_000_000);
/// ```
pub const RESOURCE_DELAY_NS: u64 = 3_000_000;

impl<D: Driver> Host<D> {
    /// Runs every hardware queue kicked since the last call, delayed ones at once: for a
    /// platform stepped by hand (a test in manual mode). [`Host::service`] is what a
    /// platform's runtime calls. Returns how many ran.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    ///
    /// /// Turns down the first request ("not now"), then completes everything.
    /// struct Busy(AtomicBool);
    /// impl Driver for Busy {
    ///     type Platform = StdPlatform;
    ///     type Payload = ();
    ///     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         if !self.0.swap(true, Ordering::Relaxed) {
    ///             return Err(Rejected { rq, status: Status::Resource });
    ///         }
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let platform = StdPlatform::manual();
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Busy(AtomicBool::new(false)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// // Turned down with nothing in flight to complete: the queue asked for a kick.
    /// assert_eq!(platform.take_kicks(), vec![0]);
    /// assert_eq!(queue.usage(), 1);
    /// assert_eq!(host.run_kicked(), 1);
    /// assert_eq!(queue.usage(), 0);
    /// assert_eq!(host.run_kicked(), 0);
    /// ```
    pub fn run_kicked(&self) -> usize {
        // Every kicked queue is due at the end of time: delayed reruns run now too.
        let mut next = u64::MAX;
        self.run_due(u64::MAX, &mut next)
    }

    /// After a completion or requeue: rerun exactly the hardware queues that wait. The
    /// resource was given back before: this is the completion's look at the marks.
    #[inline]
    pub(super) fn restart(&self) {
        // `is_empty` is one SeqCst load of the root, fenced: nothing written.
        if self.restart.is_empty() {
            return;
        }
        self.restart_slow();
    }

    /// [`restart`](Self::restart) after `out` requests of hardware queue `hctx` left the
    /// driver: its count goes down first (the count is a resource a give-up looks at).
    #[inline]
    pub(super) fn restart_after(&self, hctx: usize, out: usize) {
        self.driver_ended(hctx, out);
        seqcst_pair();
        self.restart();
    }

    #[cold]
    fn restart_slow(&self) {
        self.rerun_waiting();
    }

    /// Reruns every hardware queue waiting for a completion, and clears the marks.
    fn rerun_waiting(&self) {
        self.restart.drain(|slot| {
            if let Some(queue) = self.queue_at(slot) {
                queue.restart.drain(|hctx| queue.rerun(hctx));
            }
        });
    }
}

impl<D: Driver> RequestQueue<D> {
    /// Asks the platform to run `hctx` soon, from another context.
    fn kick(&self, hctx: usize) {
        self.kicked.mark(hctx);
        self.host.kicked.mark(self.slot);
        // Due at once, whatever delay was asked for before.
        self.host.due[self.slot].store(0, Ordering::SeqCst);
        self.platform().kick(hctx);
    }

    /// Asks the platform to run `hctx` after `delay_ns`: [`Host::service`] runs it once
    /// that time came ([`Host::run_kicked`], stepping by hand, runs it at once).
    fn kick_after(&self, hctx: usize, delay_ns: u64) {
        let at = self.platform().now_ns().saturating_add(delay_ns);
        self.kicked.mark(hctx);
        self.host.kicked.mark(self.slot);
        // After the marks: a service that clears the time after this runs the marks (early
        // at worst); one that cleared it before sees this time.
        self.host.due[self.slot].fetch_min(at, Ordering::SeqCst);
        self.platform().kick_after(hctx, delay_ns);
    }

    /// A completion found `hctx` waiting: run it here, or (blocking drivers) kick it.
    fn rerun(&self, hctx: usize) {
        if self.host.set.flags().contains(TagSetFlags::BLOCKING) {
            self.kick(hctx);
        } else {
            self.run_hw_queue(hctx);
        }
    }

    /// A runner gave back a budget or a driver tag without a completion: the hardware
    /// queues waiting for one that nobody runs now run again. Not the runner itself, nor
    /// any other mid-attempt (rerunning them here would have two runners chase each
    /// other's tails while the resource stays short); their marks stay for the
    /// completions. As before, a give-up does not count on this rerun: it waits for a
    /// completion or the platform.
    pub(super) fn budget_returned(&self) {
        if self.host.restart.is_empty() {
            return;
        }
        let host = &self.host;
        // Every queue with a waiting hardware queue: its bit in the host's set stays (the
        // next completion's drain clears it), its waiting hardware queues run.
        host.restart.take_where(
            |slot| {
                if slot == self.slot {
                    self.rerun_resting();
                } else if let Some(queue) = host.queue_at(slot) {
                    queue.rerun_resting();
                }
                false
            },
            |_| {},
        );
    }

    /// Reruns the marked hardware queues that nobody runs now, unmarking them; a marked one
    /// that is running (the runner that gave something back, or one mid-attempt elsewhere)
    /// keeps its mark for the completions to come: it marked before its look, and its own
    /// give-up settles whether it goes round.
    fn rerun_resting(&self) {
        self.restart.take_where(
            |hctx| self.hctxs[hctx].run_claim.load(Ordering::SeqCst) & RUNNING == 0,
            |hctx| self.rerun(hctx),
        );
    }

    /// Before an attempt to issue on `hctx` (as its runner): notes the hardware queue's
    /// completions so far, and when the last attempt gave up on a host of several hardware
    /// queues, marks the restart *first*
    /// (Linux's `blk_mq_sched_mark_restart_hctx`), so that a failing attempt had the mark
    /// set already and no completion after it can miss it. The common case reads the
    /// runner's own line and the hardware queue's count, and writes only the runner's line.
    #[inline]
    pub(super) fn arm_restart(&self, hctx: usize) {
        let h = &self.hctxs[hctx];
        // The runner's alone (written under the run claim only).
        let state = h.look.load(Ordering::Relaxed);
        let mut next = u64::from(self.host.driver_ends(hctx));
        // With one hardware queue its completions are all of them, and the compare after
        // the mark sees every one: no mark needed before.
        if state & GAVE_UP != 0 && self.host.nr_hw_queues() > 1 {
            self.mark_restart(hctx);
            next |= ARMED;
        }
        h.look.store(next, Ordering::Relaxed);
    }

    /// As `hctx`'s runner, before a look at what it lacks: marks `hctx` waiting, and notes
    /// that the look to come is after the mark.
    pub(super) fn mark_restart_before(&self, hctx: usize) {
        self.mark_restart(hctx);
        let h = &self.hctxs[hctx];
        h.look
            .store(h.look.load(Ordering::Relaxed) | ARMED, Ordering::Relaxed);
    }

    /// Marks `hctx` waiting, in its queue's set and the queue in its host's (the host's
    /// root written last, fenced).
    fn mark_restart(&self, hctx: usize) {
        self.restart.mark(hctx);
        self.host.restart.mark(self.slot);
    }

    /// The dispatch gives up: requests back, restart marked, and the second look (see the
    /// module documentation): a completion of its hardware queue since the attempt began,
    /// or a first give-up on a host of several hardware queues, goes round again; with
    /// nothing in the driver the platform reruns it.
    pub(super) fn give_up(&self, hctx: usize, batch: &mut VecDeque<Rq>, status: Status) {
        self.give_up_for(hctx, batch, status, RESOURCE_DELAY_NS);
    }

    /// [`give_up`](Self::give_up), with the delay of the platform's rerun should nothing be
    /// in flight.
    pub(super) fn give_up_for(
        &self,
        hctx: usize,
        batch: &mut VecDeque<Rq>,
        status: Status,
        delay_ns: u64,
    ) {
        self.put_back(hctx, batch);
        let h = &self.hctxs[hctx];
        h.one_at_a_time.store(true, Ordering::Relaxed);
        // What this attempt saw; the next one marks before it tries.
        let state = h.look.load(Ordering::Relaxed);
        h.look.store(GAVE_UP, Ordering::Relaxed);
        self.mark_restart(hctx);
        // The mark is fenced: each count read now pairs with its completion's look at the
        // marks (a count seen above zero completes after the mark and reruns us).
        if self.host.driver_ends(hctx) != state as u32 {
            // A completion of this hardware queue came in since the attempt began; it may
            // have drained before our mark. Go round again ourselves.
            h.run_claim.fetch_or(PENDING, Ordering::SeqCst);
        } else if self.host.driver_idle() {
            // Nothing in flight can complete and restart us: have the platform run us.
            let _ = status;
            self.kick_after(hctx, delay_ns);
        } else if state & ARMED == 0 && self.host.nr_hw_queues() > 1 {
            // Marked only after the attempt, and a completion of another hardware queue
            // between the two would not show above: it may have looked at the marks before
            // ours. Go round again, marked first this time.
            h.run_claim.fetch_or(PENDING, Ordering::SeqCst);
        }
    }
}

const BITS: usize = 64;

/// A set of hardware queue indices waiting to be run again, for the completion path.
///
/// # Invariants
///
/// * A marked index has its bit set in its leaf word and, above it, a bit set in every
///   level up to the root, or a drain has taken it (cleared its leaf bit) since the mark.
///   A mark writes the root last, so a drain that reads the root after a mark's last write
///   finds the mark.
/// * A parent bit may be set over a word that holds none (a drain cleared below it after
///   a mark set it again): that costs a look, never a lost mark.
///
/// ```
/// use blkmq_core::RestartSet;
///
/// let waiting = RestartSet::new(128).unwrap();
/// assert!(waiting.is_empty());
/// assert!(waiting.mark(5));
/// assert!(waiting.mark(100));
/// assert!(!waiting.mark(5), "already waiting");
///
/// let mut rerun = Vec::new();
/// waiting.drain(|hctx| rerun.push(hctx));
/// assert_eq!(rerun, [5, 100]);
/// assert!(waiting.is_empty());
/// ```
pub struct RestartSet {
    /// `levels[0]` has a bit per hardware queue; each level above a bit per word of the one
    /// below; the last has one word, the root.
    levels: Box<[Box<[AtomicU64]>]>,
    nr_hctx: usize,
}

impl RestartSet {
    /// A set for hardware queues `0..nr_hctx`, all not waiting.
    ///
    /// # Errors
    /// [`ConfigError::ZeroHwQueues`] for 0, [`ConfigError::TooManyHwQueues`] above
    /// [`MAX_HW_QUEUES`].
    ///
    /// ```
    /// use blkmq_core::{ConfigError, RestartSet};
    /// assert!(RestartSet::new(65536).is_ok());
    /// assert_eq!(RestartSet::new(0).unwrap_err(), ConfigError::ZeroHwQueues);
    /// ```
    pub fn new(nr_hctx: usize) -> Result<Self, ConfigError> {
        if nr_hctx == 0 {
            return Err(ConfigError::ZeroHwQueues);
        }
        if nr_hctx > MAX_HW_QUEUES {
            return Err(ConfigError::TooManyHwQueues {
                nr_hw_queues: nr_hctx,
                max: MAX_HW_QUEUES,
            });
        }
        let mut levels = Vec::new();
        let mut bits = nr_hctx;
        loop {
            let words = bits.div_ceil(BITS);
            levels.push((0..words).map(|_| AtomicU64::new(0)).collect());
            if words == 1 {
                break;
            }
            bits = words;
        }
        Ok(Self {
            levels: levels.into_boxed_slice(),
            nr_hctx,
        })
    }

    fn root(&self) -> &AtomicU64 {
        &self.levels[self.levels.len() - 1][0]
    }

    /// How many hardware queues the set covers.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// assert_eq!(RestartSet::new(9).unwrap().nr_hctx(), 9);
    /// ```
    pub fn nr_hctx(&self) -> usize {
        self.nr_hctx
    }

    /// Marks `hctx` as waiting to be run again. Returns whether it was not marked already.
    ///
    /// The caller must look at the resource it lacked again *after* this returns (see the
    /// module documentation), whatever it returns.
    ///
    /// # Panics
    /// When `hctx` is not below [`nr_hctx`](Self::nr_hctx): the caller's own hardware queue
    /// index is always in range, so this is a broken invariant, not bad input.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(4).unwrap();
    /// assert!(waiting.mark(3));
    /// assert!(waiting.is_marked(3));
    /// ```
    pub fn mark(&self, hctx: usize) -> bool {
        assert!(hctx < self.nr_hctx, "hardware queue {hctx} out of range");
        let mut index = hctx;
        let mut new = false;
        for (level, words) in self.levels.iter().enumerate() {
            let bit = 1u64 << (index % BITS);
            // SeqCst, and every level even when the bit is set: the root write is the mark's
            // half of the Dekker pair (see the module documentation).
            // INVARIANT: a bit in every level above the leaf, the root last.
            let before = words[index / BITS].fetch_or(bit, Ordering::SeqCst);
            if level == 0 {
                new = before & bit == 0;
            }
            index /= BITS;
        }
        seqcst_pair();
        new
    }

    /// Whether `hctx` is marked now (false for an index out of range).
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(4).unwrap();
    /// assert!(!waiting.is_marked(2));
    /// assert!(!waiting.is_marked(99));
    /// ```
    pub fn is_marked(&self, hctx: usize) -> bool {
        hctx < self.nr_hctx
            && self.levels[0][hctx / BITS].load(Ordering::Acquire) & (1 << (hctx % BITS)) != 0
    }

    /// Whether no queue waits: one load, the completion path's cost when nobody waits. It
    /// may say "not empty" for a moment after the last mark was drained or unmarked.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(128).unwrap();
    /// assert!(waiting.is_empty());
    /// waiting.mark(64);
    /// assert!(!waiting.is_empty());
    /// ```
    #[inline]
    pub fn is_empty(&self) -> bool {
        // SeqCst: the completion's half of the Dekker pair, after it gave the resource back.
        seqcst_pair();
        self.root().load(Ordering::SeqCst) == 0
    }

    /// Unmarks every waiting queue and calls `rerun` with each, in increasing order. Costs
    /// one load when none waits; otherwise it visits only the words on the way to a mark.
    /// Returns how many queues it handed out.
    ///
    /// Call it after giving the resource back (see the module documentation).
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(1000).unwrap();
    /// assert_eq!(waiting.drain(|_| unreachable!()), 0);
    /// waiting.mark(999);
    /// waiting.mark(0);
    /// let mut seen = Vec::new();
    /// assert_eq!(waiting.drain(|h| seen.push(h)), 2);
    /// assert_eq!(seen, [0, 999]);
    /// ```
    #[inline]
    pub fn drain(&self, mut rerun: impl FnMut(usize)) -> usize {
        if self.is_empty() {
            return 0;
        }
        self.drain_below(self.levels.len() - 1, 0, &mut rerun)
    }

    /// Drains word `word` of level `level` and everything below it.
    #[cold]
    fn drain_below(&self, level: usize, word: usize, rerun: &mut dyn FnMut(usize)) -> usize {
        let here = &self.levels[level][word];
        if level == 0 {
            let mut taken = here.swap(0, Ordering::SeqCst);
            let n = taken.count_ones() as usize;
            while taken != 0 {
                let bit = taken.trailing_zeros() as usize;
                taken &= taken - 1;
                rerun(word * BITS + bit);
            }
            return n;
        }
        let mut handed = 0;
        let mut pending = here.load(Ordering::SeqCst);
        while pending != 0 {
            let bit = pending.trailing_zeros() as usize;
            pending &= pending - 1;
            // Clear the parent bit before looking below it: a mark that lands below after
            // our look sets it again after our clear.
            here.fetch_and(!(1 << bit), Ordering::SeqCst);
            handed += self.drain_below(level - 1, word * BITS + bit, rerun);
        }
        handed
    }

    /// Calls `take` with each marked index, in increasing order, and unmarks those it says
    /// yes to, then calls `rerun` with each of them it unmarked. No bit above the leaves
    /// is cleared, so every mark left stays as visible to a drain as before: a parent bit
    /// over an emptied word costs the next drain a look. Returns how many it unmarked.
    pub(crate) fn take_where(
        &self,
        mut take: impl FnMut(usize) -> bool,
        mut rerun: impl FnMut(usize),
    ) -> usize {
        if self.is_empty() {
            return 0;
        }
        self.take_below(self.levels.len() - 1, 0, &mut take, &mut rerun)
    }

    #[cold]
    fn take_below(
        &self,
        level: usize,
        word: usize,
        take: &mut dyn FnMut(usize) -> bool,
        rerun: &mut dyn FnMut(usize),
    ) -> usize {
        let here = &self.levels[level][word];
        let mut marked = here.load(Ordering::SeqCst);
        if level > 0 {
            let mut handed = 0;
            while marked != 0 {
                let bit = marked.trailing_zeros() as usize;
                marked &= marked - 1;
                handed += self.take_below(level - 1, word * BITS + bit, take, rerun);
            }
            return handed;
        }
        let mut mask = 0u64;
        while marked != 0 {
            let bit = marked.trailing_zeros() as usize;
            marked &= marked - 1;
            if word * BITS + bit < self.nr_hctx && take(word * BITS + bit) {
                mask |= 1 << bit;
            }
        }
        if mask == 0 {
            return 0;
        }
        // Only what is still marked is ours: a drain may have taken some meanwhile.
        let mut taken = here.fetch_and(!mask, Ordering::SeqCst) & mask;
        let n = taken.count_ones() as usize;
        while taken != 0 {
            let bit = taken.trailing_zeros() as usize;
            taken &= taken - 1;
            rerun(word * BITS + bit);
        }
        n
    }

    /// Unmarks `hctx` (it was run for another reason). Returns whether it was marked.
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(4).unwrap();
    /// waiting.mark(1);
    /// assert!(waiting.unmark(1));
    /// assert!(!waiting.unmark(1));
    /// assert_eq!(waiting.len(), 0);
    /// ```
    pub fn unmark(&self, hctx: usize) -> bool {
        if hctx >= self.nr_hctx {
            return false;
        }
        let bit = 1u64 << (hctx % BITS);
        // The parents stay set: the next drain finds nothing below them and clears them.
        self.levels[0][hctx / BITS].fetch_and(!bit, Ordering::SeqCst) & bit != 0
    }

    /// Queues marked now (a snapshot; exact when nothing runs concurrently).
    ///
    /// ```
    /// use blkmq_core::RestartSet;
    /// let waiting = RestartSet::new(200).unwrap();
    /// waiting.mark(7);
    /// waiting.mark(150);
    /// assert_eq!(waiting.len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        self.levels[0]
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
            .sum()
    }
}

impl fmt::Debug for RestartSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let marked: Vec<usize> = (0..self.nr_hctx).filter(|&h| self.is_marked(h)).collect();
        f.debug_struct("RestartSet")
            .field("nr_hctx", &self.nr_hctx)
            .field("marked", &marked)
            .finish()
    }
}
