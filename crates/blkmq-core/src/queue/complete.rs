//! Completion: requests the driver ends, and polling.

use crate::bio::{Op, Status};
use crate::driver::Driver;
use crate::error::{Misused, TagError, Unended};
use crate::queue_tags::FreeBatch;
use crate::request::{Request, Rq, RqIo};
use crate::sync::Ordering;

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// Ends a request the driver took: its bios end with `status` (each piece of a split bio
    /// counting towards its parent), its tags and budget go back, and the hardware queues
    /// waiting for that rerun.
    ///
    /// # Errors
    /// [`Misused`] with [`TagError::ForeignRequest`] when `rq` is not this queue's (another
    /// queue's, another host's, or of a queue that is gone): nothing happens, no hook runs,
    /// no count changes, and the token comes back in the error for the queue it belongs to.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// static ENDED: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());
    /// fn done(bio: Bio, status: Status) {
    ///     ENDED.lock().unwrap().push((bio.sector, status));
    /// }
    /// queue.submit(Bio::new(Op::Write, 0, 8).end_io(done)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.end_request(rq, Status::IoErr).unwrap();
    /// assert_eq!(*ENDED.lock().unwrap(), [(0, Status::IoErr)]);
    /// assert_eq!((host.set().busy(), queue.usage()), (0, 0));
    /// ```
    ///
    /// Another queue's request comes back, and its own queue ends it:
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// a.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let misused = b.end_request(rq, Status::Ok).unwrap_err();
    /// assert_eq!(misused.error, TagError::ForeignRequest);
    /// assert_eq!((host.in_driver(), a.usage()), (1, 1)); // nothing changed
    /// a.end_request(misused.rq, Status::Ok).unwrap();
    /// assert_eq!((host.in_driver(), a.usage()), (0, 0));
    /// ```
    #[inline]
    pub fn end_request(&self, rq: Rq, status: Status) -> Result<(), Misused> {
        let (hctx, in_batch) = self.end_one(rq, status, true, None, &mut None)?;
        self.ended_on(hctx, in_batch);
        Ok(())
    }

    /// Ends a batch of requests the driver took (Linux's batched completion): as
    /// [`end_request`](Self::end_request) for each, with one restart pass at the end.
    ///
    /// # Errors
    /// [`Unended`] when a request of the batch is not this queue's: the batch stops there.
    /// The requests before it ended (and their restart pass ran); the refused token, its
    /// status and the rest of the batch, not looked at, come back in the error (see
    /// [`end_request`](Self::end_request) for the refusal).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(host.in_driver(), 2);
    /// let held = host.driver().take();
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert_eq!((host.in_driver(), queue.usage()), (0, 0));
    /// ```
    pub fn end_requests<I>(&self, batch: I) -> Result<(), Unended<I::IntoIter>>
    where
        I: IntoIterator<Item = (Rq, Status)>,
    {
        // Requests ended of one hardware queue, not yet counted out of the driver: each
        // run of one hardware queue's requests is counted out with one operation.
        let mut ended = (0, 0);
        let mut batch = batch.into_iter();
        let mut refused = None;
        // The tags of requests ended one after another, put back a bitmap word at a time
        // (Linux's `blk_mq_flush_tag_batch`); all of them before the restart pass.
        let mut freed = FreeBatch::new();
        // One reading of the coarse clock serves the accounting of the whole batch (Linux's
        // `blk_mq_end_request_batch` reads it once too).
        let mut now = None;
        for (rq, status) in batch.by_ref() {
            match self.end_one(rq, status, true, Some(&mut freed), &mut now) {
                Ok((hctx, _)) if hctx == ended.0 => ended.1 += 1,
                Ok((hctx, _)) => {
                    if ended.1 != 0 {
                        self.host.driver_ended(ended.0, ended.1);
                    }
                    ended = (hctx, 1);
                }
                Err(misused) => {
                    refused = Some((misused, status));
                    break;
                }
            }
        }
        freed.flush();
        if ended.1 != 0 {
            self.host.restart_after(ended.0, ended.1);
        }
        match refused {
            None => Ok(()),
            Some((misused, status)) => Err(Unended {
                misused,
                status,
                rest: batch,
            }),
        }
    }

    /// Ends a request that never reached the driver (an error before issue). A token
    /// refused here is one an elevator dispatched but this queue never gave it: there is
    /// nobody to hand it back to, and nothing of this queue's changes.
    pub(super) fn end_unissued(&self, rq: Rq, status: Status) {
        let _ = self.end_one(rq, status, false, None, &mut None);
        self.host.restart();
    }

    /// Ends one request; returns its hardware queue, and whether the caller runs a batch
    /// there ([`run_batch`](Self::run_batch)). For an `issued` one the budget goes back
    /// here, and the caller counts it out of the driver with the restart
    /// ([`Host::restart_after`], or at the batch's end: [`ended_on`](Self::ended_on)).
    ///
    /// A token not ours comes back before anything happens: no hook, no budget, no count.
    ///
    /// With `freed`, the request's tag, in the common case, goes there rather than back at
    /// once: the caller puts it back with the tags of the requests it ends next. `now` is
    /// the coarse clock's reading the accounting took for an earlier request of the same
    /// batch, if any (see [`account_done`](Self::account_done)).
    #[inline]
    fn end_one<'a>(
        &'a self,
        rq: Rq,
        status: Status,
        issued: bool,
        freed: Option<&mut FreeBatch<'a, D::Payload, D::Platform>>,
        now: &mut Option<u64>,
    ) -> Result<(usize, bool), Misused> {
        let splits = &self.splits;
        let elevated = self.has_elevator.load(Ordering::Relaxed);
        // The driver's hook, the elevator's, the ending and the free share one look-up of
        // the request; a token not ours is refused by that look-up, before any of them.
        let mut hctx = 0;
        // Whether the caller runs a batch on `hctx`, for `keep` (which runs while `first`
        // holds `hctx`) and the caller.
        let in_batch = core::cell::Cell::new(None);
        let first = |rq: &Rq, request: &Request<D::Payload>, io: &RqIo| {
            hctx = request.hctx();
            let batch = self.holds_batch(hctx).map(|_| hctx);
            in_batch.set(batch);
            // In the caller's batch, the batch's reading of the clock (`batch.rs`).
            if let (Some(hctx), None) = (batch, *now) {
                *now = Some(self.batch_now(hctx));
            }
            self.trace_done(request, io, status);
            self.driver().complete(&self.cx(hctx), request);
            // A step of a flush sequence: the sequence goes on, the request stays.
            if io.flush_state() != 0 {
                return false;
            }
            self.account_done(hctx, io, now);
            // Flushes bypass the elevator.
            if elevated && io.op() != Op::Flush {
                self.elevator_done(rq, io, issued);
            }
            true
        };
        // The batch runner of the request's hardware queue keeps its tag for the next
        // request it makes there.
        let keep = |kept| {
            in_batch
                .get()
                .is_some_and(|hctx| self.hctxs[hctx].kept.keep(kept))
        };
        let step = match self.tags().complete_into(
            rq,
            status,
            first,
            |bio, status| splits.end(bio, status),
            freed,
            keep,
        ) {
            Ok(None) => {
                self.put_usage();
                None
            }
            Ok(step) => step,
            Err(misused) if misused.error == TagError::ForeignRequest => return Err(misused),
            // The request was ended and released, then a tag was found free already: a
            // broken invariant, not the caller's misuse. The token names nothing now.
            Err(_) => None,
        };
        if issued {
            self.driver().put_budget(&self.cx(hctx));
        }
        if let Some(rq) = step {
            self.flush_step_ended(rq, status, hctx);
        }
        Ok((hctx, in_batch.get().is_some()))
    }

    /// Frees a request whose bios merged into another (one of ours: the merge looked it up).
    pub(super) fn free_merged(&self, rq: Rq) {
        self.account_request_merge(&rq);
        if self.tags().free(rq).is_ok() {
            self.put_usage();
        }
    }

    /// Polls hardware queue `hctx` for completions ([`Driver::poll`]); returns how many.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Completes requests only when polled.
    /// struct Polled(Mutex<Vec<Rq>>);
    /// impl Driver for Polled {
    ///     type Platform = StdPlatform;
    ///     type Payload = ();
    ///     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.0.lock().unwrap().push(rq);
    ///         Ok(())
    ///     }
    ///     fn poll(&self, cx: &HctxCx<'_, Self>) -> usize {
    ///         let done: Vec<Rq> = self.0.lock().unwrap().drain(..).collect();
    ///         let n = done.len();
    ///         cx.queue().end_requests(done.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    ///         n
    ///     }
    /// }
    ///
    /// let driver = Polled(Mutex::new(Vec::new()));
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(queue.poll(0), 2);
    /// assert_eq!(queue.poll(0), 0);
    /// assert_eq!(queue.poll(3), 0); // no such hardware queue
    /// ```
    pub fn poll(&self, hctx: usize) -> usize {
        if hctx >= self.hctxs.len() {
            return 0;
        }
        self.driver().poll(&self.cx(hctx))
    }
}
