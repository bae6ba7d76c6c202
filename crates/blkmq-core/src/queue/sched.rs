//! Every call into the elevator: insertion, dispatch, completion, switching.

use alloc::boxed::Box;

use crate::bio::{Bio, Status};
use crate::driver::Driver;
use crate::elevator::{Elevator, ElvBackend, ElvCx};
use crate::error::{ConfigError, TagError};
use crate::platform::Platform;
use crate::request::{Rq, RqIo};
use crate::sync::Ordering;

use super::dispatch::Issued;
use super::plug::Plug;
use super::restart::RESOURCE_DELAY_NS;
use super::usage::UsageRef;
use crate::queue_tags::Alloc;

use super::RequestQueue;

/// What a runner's look at the elevator ([`RequestQueue::pick`]) gave.
pub(super) enum Pick {
    /// No work (or none to do now: the hardware queue is halted).
    Empty,
    /// Work, but the driver gave no budget.
    NoBudget,
    /// Work the elevator holds back for now (the budget is still held).
    Held,
    /// A request to issue (the budget held for it), whether the elevator had work left
    /// after it, and the freshest time the elevator read, if it read one (the start
    /// stamp needs only the coarse clock).
    Got {
        rq: Rq,
        more: bool,
        time: Option<u64>,
    },
}

impl<D: Driver> RequestQueue<D> {
    /// The elevator's name, if there is one.
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
    /// assert_eq!(queue.elevator_name(), None);
    /// queue.switch_elevator(Some(Box::new(Fifo::default())), None).unwrap();
    /// assert_eq!(queue.elevator_name(), Some("fifo"));
    /// ```
    pub fn elevator_name(&self) -> Option<&'static str> {
        self.elevator.lock().as_ref().map(|e| e.name())
    }

    /// Runs `f` on the elevator, if the queue has one of type `E` (to read its counters or
    /// change its tunables at run time), under the elevator's lock.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// struct Noop(u32);
    /// impl Elevator for Noop {
    ///     fn name(&self) -> &'static str { "noop" }
    ///     fn insert_requests(&mut self, _: &ElvCx, _: &mut dyn Iterator<Item = Rq>, _: bool) {}
    ///     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { None }
    ///     fn has_work(&self, _: usize) -> bool { false }
    /// }
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Null::new()).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Noop(7)));
    /// let queue = host.add_queue(config).unwrap();
    /// assert_eq!(queue.with_elevator(|e: &mut Noop| e.0), Some(7));
    /// ```
    pub fn with_elevator<E: Elevator, R>(&self, f: impl FnOnce(&mut E) -> R) -> Option<R> {
        let mut guard = self.elevator.lock();
        let e: &mut dyn Elevator = guard.as_deref_mut()?;
        let any: &mut dyn core::any::Any = e;
        any.downcast_mut::<E>().map(f)
    }

    /// When the elevator holds work back (idling), the platform time to run the queue
    /// again at ([`Elevator::next_timer`]).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// /// Would hold work back until 5 ms into the platform's time.
    /// struct Idling;
    /// impl Elevator for Idling {
    ///     fn name(&self) -> &'static str { "idling" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, _: &mut dyn Iterator<Item = Rq>, _: bool) {}
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> { None }
    /// #     fn has_work(&self, _: usize) -> bool { false }
    ///     fn next_timer(&self) -> Option<u64> { Some(5_000_000) }
    /// }
    /// assert_eq!(queue.next_timer(), None); // no elevator
    /// queue.switch_elevator(Some(Box::new(Idling)), None).unwrap();
    /// assert_eq!(queue.next_timer(), Some(5_000_000));
    /// ```
    pub fn next_timer(&self) -> Option<u64> {
        self.elevator.lock().as_ref().and_then(|e| e.next_timer())
    }

    pub(super) fn elv_cx(&self) -> ElvCx<'_> {
        // The clock is read only if the elevator asks (many calls never do).
        ElvCx::with_backend(self, &self.limits, crate::elevator::ASK_BACKEND)
    }

    /// Under the elevator's lock `e`, just after an insertion for `hctx`: when nothing is
    /// on `hctx`'s dispatch list and nobody runs it, claims its runner and makes the run's
    /// first pick under the same hold (none, [`Pick::Empty`], on a halted hardware queue).
    /// Returns the pick (made after [`arm_restart`](Self::arm_restart)), or `None` when the
    /// hardware queue is to be run the ordinary way.
    #[inline(always)]
    pub(super) fn claim_and_pick(
        &self,
        e: &mut dyn Elevator,
        cx: &ElvCx<'_>,
        hctx: usize,
    ) -> Option<Pick> {
        if hctx >= self.hctxs.len() || !self.claim_unqueued(hctx) {
            return None;
        }
        if self.halted(hctx) {
            return Some(Pick::Empty);
        }
        self.arm_restart(hctx);
        Some(self.pick(e, cx, hctx))
    }

    /// After an insertion for `hctx`, with the elevator's lock let go: the run that
    /// [`claim_and_pick`](Self::claim_and_pick) began, or an ordinary run sharing the
    /// time the insertion read, if it read one.
    #[inline(always)]
    pub(super) fn run_after_insert(&self, hctx: usize, claim: Option<Pick>, cx: &ElvCx<'_>) {
        match claim {
            Some(pick) => {
                if self.serve_pick(hctx, pick) {
                    self.dispatch_elevator(hctx, None);
                }
                self.finish_run(hctx);
            }
            None => self.run_hw_queue_at(hctx, cx.time_read()),
        }
    }

    /// The elevator's part of a submission: with the usage reference `usage` held for
    /// `bio` (`segments` data segments; `mergeable`: it may merge), under one hold of the
    /// elevator's lock, the elevator merges it, or a request is allocated for it (without
    /// waiting: a scheduler tag is a bit taken from a bitmap), prepared and inserted, the
    /// hardware queue's runner claimed and its first pick made on an idle one; then, the
    /// lock let go, `hctx` runs. With a `plug`, the prepared request goes there instead.
    ///
    /// What came of the bio; or `usage` back, for the submission to go on as without an
    /// elevator, when the elevator is gone.
    ///
    /// Never inlined: the common submission, which has no elevator, keeps its frame small.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) fn elevator_submit<'q>(
        &'q self,
        usage: UsageRef<'q, D>,
        bio: &Bio,
        segments: crate::segment::SegSpan,
        mergeable: bool,
        cpu: usize,
        hctx: usize,
        plug: Option<&mut Plug<'q, D>>,
    ) -> Result<Result<(), Bio>, UsageRef<'q, D>> {
        let tags = self.tags();
        let cx = self.elv_cx();
        let mut guard = self.elevator.lock();
        let Some(e) = guard.as_mut() else {
            return Err(usage);
        };
        let mut bio = *bio;
        if mergeable && e.may_merge() {
            match e.bio_merge(&cx, bio) {
                Ok(()) => {
                    drop(guard);
                    self.account_bio_merge(&bio, hctx);
                    drop(usage);
                    return Ok(Ok(()));
                }
                Err(back) => bio = back,
            }
        }
        let mut alloc = Alloc::new(hctx, cpu);
        alloc.shallow_depth = e.limit_depth(bio.op, bio.flags);
        let start = self.account_stamp(None);
        let op = bio.op;
        let mut rq = match tags.alloc_with_bio(&alloc, bio, segments, start) {
            Ok(rq) => self.traced(crate::trace::Action::GetRq, rq),
            Err((error, bio)) => {
                drop(guard);
                return Ok(self.alloc_failed(usage, error, bio));
            }
        };
        // INVARIANT: the request holds the usage reference until it is freed.
        usage.hand_to_request();
        let _ = self.account_start(&mut rq, op, cpu, hctx, start, true);
        e.prepare_request(&cx, &mut rq);
        if let Some(plug) = plug {
            drop(guard);
            plug.add(self, rq);
            return Ok(Ok(()));
        }
        // Prepared, inserted and, on an idle hardware queue, dispatched under one hold.
        self.trace_rq(crate::trace::Action::Insert, &rq);
        e.insert_request(&cx, rq, false);
        let claim = self.claim_and_pick(&mut **e, &cx, hctx);
        drop(guard);
        self.run_after_insert(hctx, claim, &cx);
        Ok(Ok(()))
    }

    /// Whether the elevator lets `bio` merge into `rq` ([`Elevator::allow_merge`]); with
    /// no elevator, yes.
    pub(super) fn elevator_allows_merge(&self, rq: &Rq, bio: &Bio) -> bool {
        match self.elevator.lock().as_ref() {
            Some(e) => self.tags().io(rq).is_ok_and(|io| e.allow_merge(io, bio)),
            None => true,
        }
    }

    /// Whether the elevator holds work for `hctx`.
    pub(super) fn elevator_has_work(&self, hctx: usize) -> bool {
        self.elevator
            .lock()
            .as_ref()
            .is_some_and(|e| e.has_work(hctx))
    }

    /// Tells the elevator that `rq`, which it dispatched, came back to be issued again.
    pub(super) fn elevator_requeued(&self, rq: &Rq) {
        let cx = self.elv_cx();
        if let Some(e) = self.elevator.lock().as_mut() {
            e.requeue_request(&cx, rq);
        }
    }

    /// Tells the elevator the scheduler depth is now `nr`, over `nr_keys` request keys.
    pub(super) fn elevator_depth_updated(&self, nr: usize, nr_keys: usize) {
        if let Some(e) = self.elevator.lock().as_mut() {
            e.depth_updated(nr, nr_keys);
        }
    }

    /// Inserts `rq`, made for `hctx`, where it waits for dispatch (Linux's
    /// `blk_mq_sched_insert_request`): into the elevator when `elevated` (the queue has one
    /// and `rq` is no flush; `at_head`: ahead of what it holds, for a requeued request),
    /// else, or should the elevator be gone, at the tail of `hctx`'s dispatch list. The
    /// caller runs `hctx`.
    pub(super) fn insert(&self, rq: Rq, hctx: usize, elevated: bool, at_head: bool) {
        self.trace_rq(crate::trace::Action::Insert, &rq);
        if elevated {
            let cx = self.elv_cx();
            let mut guard = self.elevator.lock();
            if let Some(e) = guard.as_mut() {
                e.insert_request(&cx, rq, at_head);
                return;
            }
            // The elevator went away under us (it cannot: switching drains the queue
            // first): the request still waits, on the dispatch list.
        }
        self.push_dispatch(hctx, rq, false);
    }

    /// The elevator's part of a run of `hctx`: requests one at a time, each taken under one
    /// hold of the elevator's lock with the budget and the check for more work.
    ///
    /// `now`: the time the caller read, for the first pick.
    pub(super) fn dispatch_elevator(&self, hctx: usize, mut now: Option<u64>) {
        loop {
            if self.halted(hctx) {
                return;
            }
            // The first dispatch may take the caller's time; later ones read their own.
            let elv_cx = match now.take() {
                Some(t) => ElvCx::with_backend(self, &self.limits, t),
                None => self.elv_cx(),
            };
            let pick = {
                let mut guard = self.elevator.lock();
                let Some(e) = guard.as_mut() else {
                    return;
                };
                self.pick(&mut **e, &elv_cx, hctx)
            };
            if !self.serve_pick(hctx, pick) {
                return;
            }
        }
    }

    /// As `hctx`'s runner, with the elevator's lock let go: issues what
    /// [`pick`](Self::pick) gave, or gives up. Returns whether to pick again: the
    /// elevator had work left after the request it gave. With none left the run is done:
    /// work inserted since then asked for a run of its own, which this runner's
    /// [`finish_run`](Self::finish_run) sees.
    #[inline(always)]
    fn serve_pick(&self, hctx: usize, pick: Pick) -> bool {
        let h = &self.hctxs[hctx];
        let cx = self.cx(hctx);
        let driver = self.driver();
        let (rq, more, time) = match pick {
            Pick::Empty => return false,
            Pick::NoBudget => {
                self.give_up(hctx, &mut h.run_batch.lock(), Status::Resource);
                return false;
            }
            Pick::Held => {
                // Work held back (a higher class in flight, idling): wait for a completion
                // like any give-up, or for the platform when nothing is in flight.
                driver.put_budget(&cx);
                self.budget_returned();
                let now = self.platform().now_ns();
                let delay = self
                    .next_timer()
                    .map_or(RESOURCE_DELAY_NS, |at| at.saturating_sub(now));
                self.give_up_for(hctx, &mut h.run_batch.lock(), Status::Resource, delay);
                return false;
            }
            Pick::Got { rq, more, time } => (rq, more, time),
        };
        // With one hardware queue every request is its own: no look-up to tell.
        let own = if self.hctxs.len() == 1 {
            hctx
        } else {
            self.rq_hctx(&rq, hctx)
        };
        if own != hctx {
            // Another hardware queue's request: its own runner issues it (and checks
            // whether that queue may dispatch), so `last` and commits stay per queue.
            driver.put_budget(&cx);
            self.budget_returned();
            self.push_dispatch(own, rq, false);
            self.run_hw_queue(own);
            return more;
        }
        match self.issue_one(hctx, hctx, rq, true, Some(hctx), time) {
            Issued::Queued | Issued::Ended => more,
            Issued::GaveUp(rq, status) => {
                let mut batch = h.run_batch.lock();
                batch.push_back(rq);
                self.give_up(hctx, &mut batch, status);
                false
            }
        }
    }

    /// Under the elevator's lock, as `hctx`'s runner: whether the elevator has work, the
    /// driver's budget for it, the request, and whether work remains after it.
    #[inline(always)]
    fn pick(&self, e: &mut dyn Elevator, elv_cx: &ElvCx<'_>, hctx: usize) -> Pick {
        if !e.has_work(hctx) {
            return Pick::Empty;
        }
        if !self.driver().get_budget(&self.cx(hctx)) {
            return Pick::NoBudget;
        }
        match e.dispatch_request(elv_cx, hctx) {
            Some(rq) => Pick::Got {
                rq,
                more: e.has_work(hctx),
                time: elv_cx.stamp_read(),
            },
            None => Pick::Held,
        }
    }

    /// Tells the elevator that `rq` (with `io`) ended: `issued` ones completed on the
    /// device first.
    /// Its shared part hears of it without the lock; the locked hooks run only when that
    /// asks for them, or when the elevator has no shared part.
    #[inline]
    pub(super) fn elevator_done(&self, rq: &Rq, io: &RqIo, issued: bool) {
        let elv_cx = self.elv_cx();
        // The shared part is replaced only frozen: this completion holds a usage count.
        if let Some(shared) = self.elevator.shared() {
            if !shared.request_done(&elv_cx, rq, io, issued) {
                return;
            }
        }
        if let Some(e) = self.elevator.lock().as_mut() {
            if issued {
                e.completed_request(&elv_cx, rq);
            }
            e.finish_request(&elv_cx, rq);
        }
    }

    /// Switches the elevator (or to none) at run time: freezes (draining every request),
    /// quiesces, swaps the scheduler tags and the elevator, and lets I/O in again.
    /// Not to be called with requests of this queue in a plug of the calling thread.
    ///
    /// # Errors
    /// [`ConfigError::NoScheduler`] on a `NO_SCHED` set, bad `nr_requests`.
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
    /// queue.switch_elevator(Some(Box::new(Fifo::default())), Some(16)).unwrap();
    /// assert_eq!(queue.elevator_name(), Some("fifo"));
    /// assert_eq!(queue.queue_tags().nr_requests(), Some(16));
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.switch_elevator(None, None).unwrap();
    /// assert_eq!(queue.elevator_name(), None);
    /// assert_eq!(queue.queue_tags().nr_requests(), None);
    ///
    /// let tags = TagSet::builder(8).flags(TagSetFlags::NO_SCHED);
    /// let host = Host::new(tags, StdPlatform::new(), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let fifo = Box::new(Fifo::default());
    /// assert_eq!(queue.switch_elevator(Some(fifo), None), Err(ConfigError::NoScheduler));
    /// ```
    pub fn switch_elevator(
        &self,
        elevator: Option<Box<dyn Elevator>>,
        nr_requests: Option<usize>,
    ) -> Result<(), ConfigError> {
        let _change = self.change_lock.lock();
        self.lock_out();
        // SAFETY: the change lock makes us the only changer; frozen with no usage left,
        // quiesced with no runner and `switching` set (all waited for in `lock_out`),
        // nothing else reaches the tags until `let_in`.
        let tags = unsafe { &mut *self.tags.get() };
        let result = match &elevator {
            Some(e) => tags
                .attach_scheduler(nr_requests, |init| self.host.driver.init_request(init))
                .and_then(|()| match e.min_shallow_depth() {
                    Some(depth) => tags.set_min_shallow_depth(depth),
                    None => Ok(()),
                }),
            None if tags.has_scheduler() => tags
                .detach_scheduler()
                .map_err(|_| ConfigError::SchedulerBusy),
            None => Ok(()),
        };
        if result.is_ok() {
            let mut elevator = elevator;
            if let (Some(e), Some(nr)) = (elevator.as_mut(), tags.nr_requests()) {
                e.depth_updated(nr, tags.nr_keys());
            }
            self.has_elevator
                .store(elevator.is_some(), Ordering::SeqCst);
            // SAFETY: frozen with no usage left (`lock_out`): no completion, the only
            // reader of the shared part, runs or holds it.
            unsafe { self.elevator.replace(elevator) };
            // Room for every request the queue may now hold, made here, not per I/O.
            let capacity = self.host.set.depth() + tags.nr_requests().unwrap_or(0);
            self.reserve(capacity);
        }
        self.let_in();
        result
    }
}

impl<D: Driver> ElvBackend for RequestQueue<D> {
    fn io<'a>(&'a self, rq: &'a Rq) -> Option<&'a RqIo> {
        self.tags().elv_io(rq)
    }
    fn io_mut<'a>(&'a self, rq: &'a mut Rq) -> Option<&'a mut RqIo> {
        self.tags().elv_io_mut(rq)
    }
    fn append(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        let merged = self.tags().append_bio(rq, bio);
        self.trace_merged(rq, &bio, &merged);
        merged
    }
    fn prepend(&self, rq: &mut Rq, bio: Bio) -> Result<Result<(), Bio>, TagError> {
        let merged = self.tags().prepend_bio(rq, bio);
        self.trace_merged(rq, &bio, &merged);
        merged
    }
    fn absorb(&self, into: &mut Rq, from: &mut Rq) -> Result<bool, TagError> {
        self.tags().merge_requests(into, from)
    }
    fn key(&self, rq: &Rq) -> usize {
        self.tags().key_of(rq)
    }
    fn hctx(&self, rq: &Rq) -> usize {
        self.tags().request(rq).map_or(0, |r| r.hctx())
    }
    fn now_ns(&self) -> u64 {
        self.platform().now_ns()
    }
    fn coarse_now_ns(&self) -> u64 {
        self.platform().coarse_now_ns()
    }
    fn nr_keys(&self) -> usize {
        self.tags().nr_keys()
    }
    fn free_merged(&self, rq: Rq) {
        RequestQueue::free_merged(self, rq);
    }
}
