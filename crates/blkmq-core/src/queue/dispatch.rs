//! Running and dispatch: one runner per hardware queue hands requests to the driver.

use alloc::collections::VecDeque;

use crate::bio::Status;
use crate::driver::{Driver, HctxCx, Rejected};
use crate::platform::Platform;
use crate::request::{Request, Rq};
use crate::sync::Ordering;

use super::{HwCtx, PENDING, RUNNING, RequestQueue};

/// What issuing one request came to.
pub(super) enum Issued {
    /// The driver took it.
    Queued,
    /// It ended (with an error).
    Ended,
    /// Not now: the request, and why.
    GaveUp(Rq, Status),
}

impl<D: Driver> RequestQueue<D> {
    /// Runs hardware queue `hctx`: dispatches what it holds to the driver, unless someone
    /// else is doing so (who then goes round again).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::atomic::{AtomicBool, Ordering};
    /// # struct Busy(AtomicBool);
    /// # impl Driver for Busy {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         if !self.0.swap(true, Ordering::Relaxed) {
    /// #             return Err(Rejected { rq, status: Status::Resource });
    /// #         }
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// // `Busy` turns down its first request ("not now"), then completes everything.
    /// let platform = StdPlatform::manual(); // kicks recorded, run by hand
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Busy(AtomicBool::new(false)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(queue.usage(), 1); // turned down; nothing in flight, so a kick was asked for
    /// for hctx in platform.take_kicks() {
    ///     queue.run_hw_queue(hctx); // what a platform's kick handler does
    /// }
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn run_hw_queue(&self, hctx: usize) {
        self.run_hw_queue_at(hctx, None);
    }

    /// [`run_hw_queue`](Self::run_hw_queue), the first dispatch taking `now` as the time
    /// when the caller read it a moment ago (a submission through the elevator).
    pub(super) fn run_hw_queue_at(&self, hctx: usize, now: Option<u64>) {
        let Some(h) = self.hctxs.get(hctx) else {
            return;
        };
        // Nobody running and no run asked for: claim the runner at once (the common case,
        // one operation instead of asking and then claiming).
        let claimed = h
            .run_claim
            .compare_exchange(0, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if !claimed && !self.claim_asked(h) {
            return;
        }
        self.dispatch(hctx, now);
        self.finish_run(hctx);
    }

    /// Asks for a run of `h` and claims its runner unless somebody runs it: whether the
    /// caller is now the runner (if not, the runner sees the request and runs again).
    fn claim_asked(&self, h: &HwCtx<D>) -> bool {
        if h.run_claim.fetch_or(PENDING, Ordering::SeqCst) & RUNNING != 0 {
            return false;
        }
        loop {
            let cur = h.run_claim.load(Ordering::SeqCst);
            if cur & RUNNING != 0 || cur & PENDING == 0 {
                return false;
            }
            if h.run_claim
                .compare_exchange(cur, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return true;
            }
        }
    }

    /// Claims `hctx`'s runner for a direct issue when the hardware queue is idle: nothing
    /// on its dispatch list, the hardware not busy, and nobody running it. The claimer
    /// checks [`halted`](Self::halted) next and ends with [`finish_run`](Self::finish_run).
    pub(super) fn claim_idle(&self, hctx: usize) -> bool {
        self.nothing_ahead(hctx)
            && self.hctxs[hctx]
                .run_claim
                .compare_exchange(0, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// Nothing on `hctx`'s dispatch list and the hardware not busy: a request may go to
    /// the driver now, ahead of nothing (for its runner, or one about to claim it).
    #[inline(always)]
    pub(super) fn nothing_ahead(&self, hctx: usize) -> bool {
        let h = &self.hctxs[hctx];
        !h.one_at_a_time.load(Ordering::Relaxed) && h.dispatch_len.load(Ordering::SeqCst) == 0
    }

    /// Claims `hctx`'s runner when nothing is on its dispatch list and nobody runs it or
    /// asked for a run.
    #[inline(always)]
    pub(super) fn claim_unqueued(&self, hctx: usize) -> bool {
        let h = &self.hctxs[hctx];
        h.dispatch_len.load(Ordering::SeqCst) == 0
            && h.run_claim
                .compare_exchange(0, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
    }

    /// As the runner: stop, unless a run was asked for meanwhile — then dispatch again.
    /// The common case, no run asked for, inline.
    #[inline(always)]
    pub(super) fn finish_run(&self, hctx: usize) {
        // INVARIANT: the claim goes only when no run was asked for since the last look;
        // otherwise this runner looks again, so the run asked for is not lost.
        if self.hctxs[hctx]
            .run_claim
            .compare_exchange(RUNNING, 0, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.run_again(hctx);
        }
    }

    /// [`finish_run`](Self::finish_run) when a run was asked for: dispatches until the
    /// claim goes with none asked for.
    #[inline(never)]
    fn run_again(&self, hctx: usize) {
        let h = &self.hctxs[hctx];
        loop {
            h.run_claim.fetch_and(!PENDING, Ordering::SeqCst);
            self.dispatch(hctx, None);
            if h.run_claim
                .compare_exchange(RUNNING, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Runs every hardware queue with work (after unquiesce, unfreeze, a start).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::atomic::{AtomicBool, Ordering};
    /// # struct Busy(AtomicBool);
    /// # impl Driver for Busy {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         if !self.0.swap(true, Ordering::Relaxed) {
    /// #             return Err(Rejected { rq, status: Status::Resource });
    /// #         }
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// // `Busy` turns down its first request ("not now"), then completes everything.
    /// let platform = StdPlatform::manual(); // kicks left to the caller
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Busy(AtomicBool::new(false)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(queue.has_work(0));
    /// queue.run_hw_queues();
    /// assert!(!queue.has_work(0));
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn run_hw_queues(&self) {
        for hctx in 0..self.hctxs.len() {
            if self.has_work(hctx) {
                self.run_hw_queue(hctx);
            }
        }
    }

    /// Whether `hctx` holds requests to dispatch.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(!queue.has_work(0));
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(queue.has_work(0));
    /// assert!(!queue.has_work(5)); // no such hardware queue
    /// queue.unquiesce();
    /// assert!(!queue.has_work(0));
    /// ```
    pub fn has_work(&self, hctx: usize) -> bool {
        if hctx >= self.hctxs.len() {
            return false;
        }
        if !self.hctx_is_empty(hctx) {
            return true;
        }
        self.has_elevator.load(Ordering::SeqCst) && self.elevator_has_work(hctx)
    }

    /// The runner's work: the dispatch list, then the elevator or the software queues.
    fn dispatch(&self, hctx: usize, now: Option<u64>) {
        if self.halted(hctx) {
            return;
        }
        self.arm_restart(hctx);
        let h = &self.hctxs[hctx];
        if h.dispatch_len.load(Ordering::SeqCst) != 0 {
            let mut batch = h.run_batch.lock();
            {
                let mut list = h.dispatch.lock();
                batch.extend(list.drain(..));
                // INVARIANT: `dispatch_len` follows the list, stored under its lock.
                h.dispatch_len.store(0, Ordering::SeqCst);
            }
            if !self.issue_batch(hctx, &mut batch, None, false) {
                return;
            }
        }
        if self.has_elevator.load(Ordering::SeqCst) {
            // The batch is needed only to give requests back: locked then.
            self.dispatch_elevator(hctx, now);
            return;
        }
        let mut batch = h.run_batch.lock();
        if h.one_at_a_time.load(Ordering::Relaxed) {
            // One at a time, round robin over the CPUs, while the hardware is busy.
            loop {
                if !self.take_one(hctx, &mut batch) {
                    h.one_at_a_time.store(false, Ordering::Relaxed);
                    return;
                }
                if !self.issue_batch(hctx, &mut batch, None, false) {
                    return;
                }
            }
        }
        self.take_all(hctx, &mut batch);
        if !batch.is_empty() {
            self.issue_batch(hctx, &mut batch, None, false);
        }
    }

    /// Moves every request of `hctx`'s software queues into `batch`.
    fn take_all(&self, hctx: usize, batch: &mut VecDeque<Rq>) {
        let h = &self.hctxs[hctx];
        for (w, word) in h.ctx_has_work.iter().enumerate() {
            let mut bits = word.swap(0, Ordering::SeqCst);
            while bits != 0 {
                let pos = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                batch.extend(self.ctxs[h.ctxs[pos]].list.lock().drain(..));
            }
        }
    }

    /// Moves one request, from the next software queue with work, into `batch`.
    fn take_one(&self, hctx: usize, batch: &mut VecDeque<Rq>) -> bool {
        let h = &self.hctxs[hctx];
        let n = h.ctxs.len();
        let start = h.next_ctx.load(Ordering::Relaxed);
        for i in 0..n {
            let pos = (start + i) % n;
            let bit = 1u64 << (pos % 64);
            if h.ctx_has_work[pos / 64].load(Ordering::SeqCst) & bit == 0 {
                continue;
            }
            h.ctx_has_work[pos / 64].fetch_and(!bit, Ordering::SeqCst);
            let mut list = self.ctxs[h.ctxs[pos]].list.lock();
            if let Some(rq) = list.pop_front() {
                if !list.is_empty() {
                    // INVARIANT: what is left on the list has its bit set again.
                    h.ctx_has_work[pos / 64].fetch_or(bit, Ordering::SeqCst);
                }
                drop(list);
                batch.push_back(rq);
                h.next_ctx.store(pos + 1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Issues `batch` in order; on a give-up puts the rest back and arranges the restart.
    /// Returns whether all of it went.
    ///
    /// `now`, when given, is the start of every request of the batch. `all_own`: every
    /// request of the batch is known to be `hctx`'s, so none needs looking up.
    pub(super) fn issue_batch(
        &self,
        hctx: usize,
        batch: &mut VecDeque<Rq>,
        now: Option<u64>,
        all_own: bool,
    ) -> bool {
        // The hardware queue with a request issued as not `last`, owed a `commit_rqs`. A
        // batch may hold requests of other hardware queues (an elevator hands any runner
        // any request): `last` and the commit follow each request's own.
        let mut owed: Option<usize> = None;
        let commit = |owed: &mut Option<usize>| {
            if let Some(h) = owed.take() {
                self.driver().commit_rqs(&self.cx(h));
            }
        };
        // The hardware queue of the request at the front, when the one before looked.
        let mut front_own: Option<usize> = None;
        while let Some(rq) = batch.pop_front() {
            if self.halted(hctx) {
                batch.push_front(rq);
                self.put_back(hctx, batch);
                commit(&mut owed);
                return false;
            }
            let own = front_own.take().unwrap_or_else(|| {
                if all_own {
                    hctx
                } else {
                    self.rq_hctx(&rq, hctx)
                }
            });
            if owed.is_some_and(|h| h != own) {
                commit(&mut owed);
            }
            front_own = batch.front().map(|next| {
                if all_own {
                    hctx
                } else {
                    self.rq_hctx(next, hctx)
                }
            });
            let last = front_own.is_none_or(|next| next != own);
            match self.issue_one(hctx, own, rq, last, None, now) {
                Issued::Queued => owed = (!last).then_some(own),
                Issued::Ended => {}
                Issued::GaveUp(rq, status) => {
                    batch.push_front(rq);
                    commit(&mut owed);
                    self.give_up(hctx, batch, status);
                    return false;
                }
            }
        }
        commit(&mut owed);
        true
    }

    /// The hardware queue `rq` was made for (`default` if it cannot be told).
    pub(super) fn rq_hctx(&self, rq: &Rq, default: usize) -> usize {
        self.tags().request(rq).map_or(default, |r| r.hctx())
    }

    /// Issues one request: budget (unless `budget` says which hardware queue's context
    /// holds one), driver tag, start, `queue_rq` — on `hctx`, the request's own hardware
    /// queue, which need not be the `runner`'s (an elevator may hand any runner any
    /// request).
    #[inline]
    pub(super) fn issue_one(
        &self,
        runner: usize,
        hctx: usize,
        rq: Rq,
        last: bool,
        budget: Option<usize>,
        now: Option<u64>,
    ) -> Issued {
        self.issue_one_at(runner, hctx, rq, last, budget, now, None)
    }

    /// [`issue_one`](Self::issue_one), its D stamped with `stamp` when it holds a trace
    /// clock reading (see [`trace_stamp`](Self::trace_stamp)), with the Q and G it says
    /// are untold; a way out before the D tells those first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn issue_one_at(
        &self,
        runner: usize,
        hctx: usize,
        mut rq: Rq,
        last: bool,
        budget: Option<usize>,
        now: Option<u64>,
        stamp: super::trace::TraceStamp,
    ) -> Issued {
        let tags = self.tags();
        let cx = self.cx(hctx);
        let driver = self.driver();
        match budget {
            Some(held) if held == hctx => {}
            Some(held) => {
                // Taken on the runner's context: move it to the request's.
                driver.put_budget(&self.cx(held));
                if !driver.get_budget(&cx) {
                    self.trace_untold(&rq, stamp);
                    self.budget_returned();
                    return Issued::GaveUp(rq, Status::Resource);
                }
            }
            None => {
                if !driver.get_budget(&cx) {
                    self.trace_untold(&rq, stamp);
                    return Issued::GaveUp(rq, Status::Resource);
                }
            }
        }
        // The start stamp, and so the timeout deadline, needs only the coarse clock; the
        // elevator's dispatch may have read the clock a moment ago, and one read serves.
        let now = now.unwrap_or_else(|| self.platform().coarse_now_ns());
        // Without scheduler tags a request holds its driver tag from its allocation; the
        // request its start looks up serves its D.
        let mut known = None;
        let mut started = if tags.has_scheduler() {
            tags.tag_and_start(&mut rq, now)
        } else {
            tags.start_resolving(&mut rq, now).map(|request| {
                known = Some(request);
                true
            })
        };
        if matches!(started, Ok(false)) {
            // No driver tag: mark the restart, then look at the tags again (Linux's
            // `blk_mq_mark_tag_wait`). A tag freed before the mark is found now; one freed
            // after it, its completion sees the mark.
            self.mark_restart_before(runner);
            started = tags.tag_and_start(&mut rq, now);
        }
        match started {
            Ok(true) => {}
            Ok(false) => {
                self.trace_untold(&rq, stamp);
                driver.put_budget(&cx);
                self.budget_returned();
                return Issued::GaveUp(rq, Status::Resource);
            }
            Err(_) => {
                self.trace_untold(&rq, stamp);
                driver.put_budget(&cx);
                self.budget_returned();
                self.end_unissued(rq, Status::IoErr);
                return Issued::Ended;
            }
        }
        self.queue_started(&cx, rq, known, last, stamp)
    }

    /// [`issue_one`](Self::issue_one) on the request's own hardware queue `hctx`, as its
    /// runner, for `rq` and `request`, the request it names, known to the caller, which
    /// has no scheduler tags to take: the budget, the start without a look-up of the
    /// token, `queue_rq`.
    #[inline]
    pub(super) fn issue_known(
        &self,
        hctx: usize,
        mut rq: Rq,
        request: &Request<D::Payload>,
        last: bool,
        now: Option<u64>,
    ) -> Issued {
        let tags = self.tags();
        debug_assert!(
            !tags.has_scheduler(),
            "a driver tag held from the allocation"
        );
        let cx = self.cx(hctx);
        let driver = self.driver();
        if !driver.get_budget(&cx) {
            return Issued::GaveUp(rq, Status::Resource);
        }
        let now = now.unwrap_or_else(|| self.platform().coarse_now_ns());
        if tags.start_known(&mut rq, request, now).is_err() {
            driver.put_budget(&cx);
            self.budget_returned();
            self.end_unissued(rq, Status::IoErr);
            return Issued::Ended;
        }
        self.queue_started(&cx, rq, Some(request), last, None)
    }

    /// Hands `rq`, started with a budget held, to the driver on `cx`'s hardware queue (its
    /// D made from `request`, the request it names, when the caller has it, and stamped
    /// with `stamp` when it holds a trace clock reading); a request the driver turns down
    /// goes back to idle (to be given back) or ends.
    #[inline(always)]
    fn queue_started(
        &self,
        cx: &HctxCx<'_, D>,
        rq: Rq,
        request: Option<&Request<D::Payload>>,
        last: bool,
        stamp: super::trace::TraceStamp,
    ) -> Issued {
        let tags = self.tags();
        let driver = self.driver();
        let hctx = cx.hctx();
        self.trace_issue(&rq, request, stamp);
        // In a batch (only its context runs `hctx` then), a request ended there leaves
        // its place to this one: the count stays as it is.
        let placed = self.hctxs[hctx].deferred.take_place();
        if !placed {
            self.driver_in(hctx);
        }
        match driver.queue_rq(cx, rq, last) {
            Ok(()) => Issued::Queued,
            Err(Rejected { mut rq, status }) => {
                if placed {
                    self.hctxs[hctx].deferred.give_place_back();
                } else {
                    self.driver_out(hctx);
                }
                driver.put_budget(cx);
                if matches!(status, Status::Resource | Status::DevResource) {
                    let _ = tags.requeue(&mut rq);
                    self.trace_rq(crate::trace::Action::Requeue, &rq);
                    if self.has_elevator.load(Ordering::Relaxed) {
                        // Back to waiting without a driver tag, as Linux's requeue.
                        let _ = tags.put_driver_tag(&mut rq);
                    }
                    self.budget_returned();
                    Issued::GaveUp(rq, status)
                } else {
                    let status = if status.is_ok() {
                        Status::IoErr
                    } else {
                        status
                    };
                    self.end_unissued(rq, status);
                    Issued::Ended
                }
            }
        }
    }

    /// One more request of hardware queue `hctx` in the driver.
    #[inline]
    pub(super) fn driver_in(&self, hctx: usize) {
        self.host.driver_in(hctx);
    }

    /// One request of hardware queue `hctx` fewer in the driver (it never got there).
    #[inline]
    pub(super) fn driver_out(&self, hctx: usize) {
        self.host.driver_out(hctx, 1);
    }

    /// Puts `batch` back at the head of `hctx`'s dispatch list, in order.
    pub(super) fn put_back(&self, hctx: usize, batch: &mut VecDeque<Rq>) {
        let h = &self.hctxs[hctx];
        let mut list = h.dispatch.lock();
        while let Some(rq) = batch.pop_back() {
            list.push_front(rq);
        }
        // INVARIANT: `dispatch_len` follows the list, stored under its lock; the batch is
        // empty again, as it is whenever nobody holds the run claim.
        h.dispatch_len.store(list.len(), Ordering::SeqCst);
    }
}
