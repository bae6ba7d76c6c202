//! The usage reference and freezing: who is inside a request queue.

use core::fmt;

use crate::driver::Driver;
use crate::platform::Platform;
use crate::queue_tags::QueueTags;
use crate::sync::{Ordering, seqcst_pair};

use super::{RequestQueue, wait_a_little};

impl<D: Driver> RequestQueue<D> {
    /// Requests of the queue allocated and not yet freed, plus callers inside it this moment
    /// (a submission under way, a [`TagsGuard`], a timeout check).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(queue.usage(), 2);
    /// let held = host.driver().take();
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn usage(&self) -> usize {
        self.usage.sum()
    }

    /// Takes a usage reference unless frozen (Linux's `blk_queue_enter`): `None` when the
    /// queue is frozen, and then nothing is held. Writes only the calling CPU's part of the
    /// count (see `percpu.rs`).
    #[inline]
    pub(super) fn enter(&self) -> Option<UsageRef<'_, D>> {
        let (cpu, sole) = self.usage_cpu();
        self.usage.get(cpu, sole).then(|| UsageRef(self))
    }

    /// Lets go of one usage count: a [`UsageRef`]'s drop, or the end of a request that held
    /// one ([`UsageRef::hand_to_request`]).
    #[inline]
    pub(super) fn put_usage(&self) {
        let (cpu, sole) = self.usage_cpu();
        self.usage.put(cpu, sole);
    }

    /// The CPU whose part of the usage count the caller writes, and whether it writes it
    /// as that CPU's sole holder on a platform that fences all (with plain stores; see
    /// `percpu.rs`).
    #[inline(always)]
    fn usage_cpu(&self) -> (usize, bool) {
        if self.fences_all {
            if let Some(cpu) = self.platform().exclusive_cpu() {
                return (cpu, true);
            }
        }
        (self.cpu(), false)
    }

    /// Takes a usage reference even while frozen (a timeout check, a drain check: work on
    /// requests already in), unless the tags are being replaced; `None` then.
    pub(super) fn enter_any(&self) -> Option<UsageRef<'_, D>> {
        self.usage.get_any(self.cpu());
        // The reference counts from here: a switcher that set `switching` after this sees
        // it in its drain wait; one that set it before is seen below, and then it goes.
        let usage = UsageRef(self);
        seqcst_pair();
        if self.switching.load(Ordering::SeqCst) {
            return None;
        }
        Some(usage)
    }

    /// Starts a freeze: new bios are refused (given back by [`submit`](Self::submit)) until
    /// [`unfreeze`](Self::unfreeze). Nests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.freeze_start();
    /// let back = queue.submit(Bio::new(Op::Read, 64, 8)).unwrap_err(); // refused, untouched
    /// assert_eq!(back.sector, 64);
    /// assert!(!queue.is_drained()); // the driver still holds one
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert!(queue.is_drained());
    /// queue.unfreeze();
    /// assert!(queue.submit(back).is_ok());
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn freeze_start(&self) {
        {
            let mut depth = self.freeze_depth.lock();
            if *depth == 0 {
                self.usage.kill();
            }
            *depth += 1;
        }
        // Sole holders count without a fence of their own: theirs is this one, after the
        // kill and before any sum. Every freeze makes it, a nested one too (its sums must
        // not come before the first one's fence), and outside the lock: a kernel's may
        // sleep.
        if self.fences_all {
            self.platform().fence_all();
        }
    }

    /// Whether a started freeze has drained: no request of the queue is left.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.freeze_start();
    /// assert!(!queue.is_drained());
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert!(queue.is_drained());
    /// ```
    pub fn is_drained(&self) -> bool {
        self.usage.sum() == 0
    }

    /// Freezes the queue and waits until every request in it has ended (Linux's
    /// `blk_mq_freeze_queue`). The waiting spins; completions must come from elsewhere (other
    /// threads, or the driver inline).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// std::thread::scope(|s| {
    ///     // The driver completes what it holds on another thread.
    ///     s.spawn(|| {
    ///         let held = host.driver().take();
    ///         queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    ///     });
    ///     queue.freeze(); // returns once that request has ended
    /// });
    /// assert!(queue.is_frozen() && queue.usage() == 0);
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_err());
    /// queue.unfreeze();
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_ok());
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn freeze(&self) {
        self.freeze_start();
        while !self.is_drained() {
            self.kick_requeue_list();
            wait_a_little();
        }
    }

    /// Undoes one freeze; the last one lets bios in again.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.freeze();
    /// queue.freeze();
    /// queue.unfreeze();
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_err()); // still frozen once
    /// queue.unfreeze();
    /// assert!(queue.submit(Bio::new(Op::Read, 0, 8)).is_ok());
    /// ```
    pub fn unfreeze(&self) {
        let mut depth = self.freeze_depth.lock();
        match *depth {
            0 => {}
            1 => {
                *depth = 0;
                self.usage.revive();
                drop(depth);
                // Submitters asleep on the frozen queue try again.
                self.wake_thawed();
            }
            _ => *depth -= 1,
        }
    }

    /// Whether the queue is frozen.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(!queue.is_frozen());
    /// queue.freeze_start();
    /// assert!(queue.is_frozen());
    /// queue.unfreeze();
    /// assert!(!queue.is_frozen());
    /// ```
    pub fn is_frozen(&self) -> bool {
        self.usage.is_dead()
    }

    /// Freezes, waits for the queue to drain and for runners to stop, and marks the tags
    /// as being replaced; the caller holds `change`.
    pub(super) fn lock_out(&self) {
        self.freeze();
        self.quiesce();
        self.switching.store(true, Ordering::SeqCst);
        seqcst_pair();
        // Readers that counted themselves in before seeing the flag leave again.
        while !self.is_drained() {
            wait_a_little();
        }
    }

    pub(super) fn let_in(&self) {
        self.switching.store(false, Ordering::SeqCst);
        self.unquiesce();
        self.unfreeze();
    }

    /// The queue's tags (to read their state: busy counts, the scheduler tags), held in
    /// place while the guard lives: an elevator switch waits for it, so do not hold one
    /// across [`switch_elevator`](Self::switch_elevator) or
    /// [`set_nr_requests`](Self::set_nr_requests) on the same thread.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let mut busy = 0;
    /// queue.queue_tags().for_each_busy(None, |_| {
    ///     busy += 1;
    ///     true
    /// });
    /// assert_eq!(busy, 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn queue_tags(&self) -> TagsGuard<'_, D> {
        loop {
            if let Some(inside) = self.enter_any() {
                return TagsGuard(inside);
            }
            wait_a_little();
        }
    }
}

/// A usage reference: one count in a request queue's usage, held while this lives and let
/// go when it drops (Linux's `q_usage_counter` reference).
///
/// Submitters, timeout and drain checks and [`TagsGuard`]s hold one while they are inside
/// the queue; a request holds one from its allocation until it is freed, handed over by
/// [`hand_to_request`](Self::hand_to_request).
///
/// # Invariants
///
/// * While a `UsageRef` lives, the queue's usage counts it: a freeze does not drain and
///   the tags are not replaced ([`RequestQueue::switch_elevator`] waits for a usage of
///   zero with `switching` set), so the holder may read the tags.
/// * Each count is let go exactly once: by this guard's drop, or, once handed to a
///   request, when that request is freed or ends (`end_one`, `free_merged`), which is
///   where the tags say the request was ours.
pub(super) struct UsageRef<'a, D: Driver>(&'a RequestQueue<D>);

impl<'a, D: Driver> UsageRef<'a, D> {
    /// The queue the reference is held on.
    #[inline(always)]
    pub(super) fn queue(&self) -> &'a RequestQueue<D> {
        self.0
    }

    /// Hands the count to the request just allocated under it: from now on the request
    /// holds it, and it is let go when the request is freed.
    #[inline(always)]
    pub(super) fn hand_to_request(self) {
        core::mem::forget(self);
    }
}

/// A request queue's tags, kept from being replaced while this lives
/// ([`RequestQueue::queue_tags`]).
///
/// ```
/// # use blkmq_core::*;
/// # use blkmq_core::testing::Null;
/// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
/// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// # use std::collections::VecDeque;
/// # /// First in, first out.
/// # #[derive(Default)]
/// # struct Fifo(VecDeque<Rq>);
/// # impl Elevator for Fifo {
/// #     fn name(&self) -> &'static str { "fifo" }
/// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
/// #         self.0.extend(rqs);
/// #     }
/// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
/// #         self.0.pop_front()
/// #     }
/// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
/// # }
/// let tags: TagsGuard<'_, Null<StdPlatform>> = queue.queue_tags();
/// assert!(!tags.has_scheduler());
/// assert_eq!(tags.set().depth(), 8);
/// drop(tags); // before the tags may change
/// queue.switch_elevator(Some(Box::new(Fifo::default())), None).unwrap();
/// assert!(queue.queue_tags().has_scheduler());
/// ```
pub struct TagsGuard<'a, D: Driver>(UsageRef<'a, D>);

impl<D: Driver> core::ops::Deref for TagsGuard<'_, D> {
    type Target = QueueTags<D::Payload, D::Platform>;

    fn deref(&self) -> &Self::Target {
        self.0.queue().tags()
    }
}

impl<D: Driver> fmt::Debug for TagsGuard<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TagsGuard").finish_non_exhaustive()
    }
}

impl<D: Driver> Drop for UsageRef<'_, D> {
    #[inline]
    fn drop(&mut self) {
        self.0.put_usage();
    }
}
