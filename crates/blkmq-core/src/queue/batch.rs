//! A runner's batch ([`RequestQueue::run_batch`]): a context that holds its CPU alone runs a
//! hardware queue across a batch of completions, and what those completions submit there
//! goes to the driver with less shared state touched per I/O.
//!
//! Inside a batch, on the batch's hardware queue and by the runner's own context:
//! * a direct issue takes no run claim (the batch holds it: `issue_direct`);
//! * the driver tag of a request ended is kept for the next request made
//!   (`queue_tags/kept.rs`), not put back and taken again;
//! * the coarse clock is read once, when the batch begins, for the start stamps and the
//!   accounting of every request the batch makes or ends;
//! * a request ended is counted out of the driver, and its completion seen by the restart,
//!   when the batch ends (as [`end_requests`](RequestQueue::end_requests) does at the end of
//!   its batch); meanwhile a request issued takes the place of one ended, and neither
//!   touches the hardware queue's count.
//!
//! The claim is held from the batch's start to its end, so only the batch's context runs
//! the hardware queue meanwhile: the state above (`held_by`, `kept`, `batch_now`,
//! `deferred`) is written and read by it alone, and settled before the claim goes. The count
//! of requests in the driver reads high until then, never low, and the batch's end is the
//! completion a runner that gave up meanwhile waits for.

use crate::bio::Bio;
use crate::driver::Driver;
use crate::platform::Platform;
use crate::queue_tags::Alloc;
use crate::request::{Request, Rq};
use crate::sync::{AtomicU64, Ordering};

use super::{NOT_HELD, RUNNING, RequestQueue};

/// Requests ended in a batch and not yet counted out of the driver: their number, and how
/// many of them a request issued since has not taken the place of. Written by the batch's
/// context alone (relaxed).
pub(super) struct Deferred(AtomicU64);

/// One ended request, in a [`Deferred`] word.
const ENDED: u64 = 1 << 32;
/// One ended request still to count out of the driver, in a [`Deferred`] word.
const OUT: u64 = 1;

impl Deferred {
    pub(super) fn new() -> Self {
        Self(AtomicU64::new(0))
    }

    /// One request ended.
    #[inline(always)]
    fn ended(&self) {
        let word = self.0.load(Ordering::Relaxed);
        self.0.store(word + ENDED + OUT, Ordering::Relaxed);
    }

    /// A request is going to the driver: whether it takes the place of one ended (which is
    /// then no longer to count out), so that the count of requests in the driver stays.
    #[inline(always)]
    pub(super) fn take_place(&self) -> bool {
        let word = self.0.load(Ordering::Relaxed);
        if word & (ENDED - 1) == 0 {
            return false;
        }
        self.0.store(word - OUT, Ordering::Relaxed);
        true
    }

    /// A request that took a place was turned down: the place is to count out again.
    #[inline(always)]
    pub(super) fn give_place_back(&self) {
        let word = self.0.load(Ordering::Relaxed);
        self.0.store(word + OUT, Ordering::Relaxed);
    }

    /// The requests still to count out of the driver, when any ended; emptied.
    fn take(&self) -> Option<usize> {
        let word = self.0.load(Ordering::Relaxed);
        if word < ENDED {
            return None;
        }
        self.0.store(0, Ordering::Relaxed);
        Some((word & (ENDED - 1)) as usize)
    }
}

impl<D: Driver> RequestQueue<D> {
    /// Calls `f` as `hctx`'s runner, where the platform says the caller holds its CPU
    /// alone ([`Platform::exclusive_cpu`](crate::Platform::exclusive_cpu)) and nobody runs
    /// the hardware queue now; else just calls `f`.
    ///
    /// A driver's completion loop ends a batch of requests this way. What their
    /// completions submit to `hctx` is issued without claiming and letting go of the
    /// runner each time; with no elevator, the driver tag of a request ended in the batch
    /// is kept for the next request made there rather than put back and taken again (one
    /// left over goes back when `f` returns); the coarse clock is read once, when the batch
    /// begins; and the requests ended there count out of the driver, with one restart
    /// pass, when `f` returns ([`Host::in_driver`](crate::Host::in_driver) counts them
    /// until then), a request issued meanwhile taking the place of one ended.
    ///
    /// Runs asked for meanwhile (by anyone: another CPU's submission finds the runner
    /// taken) happen when `f` returns, and what `f` submits while one is asked for is
    /// queued for it too, as beside any runner at work. `f` must not quiesce the queue or
    /// wait for a run of `hctx`, as the driver's `queue_rq` must not; a bio's end called
    /// inside `f` (the usual case) is under the same rule.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let platform = StdPlatform::with_cpus(1);
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// platform.pin_current_thread(0);
    /// let issued = queue.run_batch(0, || {
    ///     queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    ///     queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    ///     host.driver().len()
    /// });
    /// assert_eq!(issued, 2); // issued at once, as outside a batch
    /// let held = host.driver().take();
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn run_batch<R>(&self, hctx: usize, f: impl FnOnce() -> R) -> R {
        let Some(h) = self.hctxs.get(hctx) else {
            return f();
        };
        let Some(cpu) = self.platform().exclusive_cpu() else {
            return f();
        };
        // Somebody runs it, or asked for a run (this thread too, inside a batch or a run):
        // no batch, just `f`.
        if h.run_claim
            .compare_exchange(0, RUNNING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return f();
        }
        /// Lets the claim go however `f` leaves.
        struct Release<'a, D: Driver>(&'a RequestQueue<D>, usize);
        impl<D: Driver> Drop for Release<'_, D> {
            fn drop(&mut self) {
                let (queue, hctx) = (self.0, self.1);
                let h = &queue.hctxs[hctx];
                h.held_by.store(NOT_HELD, Ordering::Relaxed);
                if let Some(kept) = h.kept.take() {
                    queue.tags().put_kept(kept);
                }
                // What the batch ended counts out now, and the restart's pass sees it; a
                // hardware queue it reruns is this one (the claim still held: it runs in
                // `finish_run`) or another.
                if let Some(out) = h.deferred.take() {
                    queue.host.restart_after(hctx, out);
                }
                queue.finish_run(hctx);
            }
        }
        h.batch_now
            .store(self.platform().coarse_now_ns(), Ordering::Relaxed);
        h.held_by.store(cpu, Ordering::Relaxed);
        let _release = Release(self, hctx);
        f()
    }

    /// The CPU whose context holds `hctx`'s claim across a batch
    /// ([`run_batch`](Self::run_batch)), when it is the caller's.
    #[inline(always)]
    pub(super) fn holds_batch(&self, hctx: usize) -> Option<usize> {
        let held = self.hctxs[hctx].held_by.load(Ordering::Relaxed);
        if held == NOT_HELD || self.platform().exclusive_cpu() != Some(held) {
            return None;
        }
        Some(held)
    }

    /// A request carrying `bio` (with its data segments `segments`) made on the tag the
    /// caller keeps as `hctx`'s batch runner (see [`run_batch`](Self::run_batch): the
    /// caller runs one there), and the request its token names; `None` when the caller
    /// keeps none there. A kept tag that cannot serve this allocation stays kept.
    #[inline(always)]
    pub(super) fn take_kept(
        &self,
        bio: &Bio,
        segments: crate::segment::SegSpan,
        cpu: usize,
        hctx: usize,
    ) -> Option<(Rq, &Request<D::Payload>)> {
        let slot = &self.hctxs[hctx].kept;
        let kept = slot.take()?;
        match self
            .tags()
            .alloc_kept(kept, &Alloc::new(hctx, cpu), *bio, segments)
        {
            Ok(made) => Some(made),
            Err(kept) => {
                slot.keep(kept);
                None
            }
        }
    }

    /// The coarse clock's reading of the batch on `hctx`, taken when it began,
    /// microseconds ago (the coarse clock itself lags by up to a kernel tick); for its
    /// runner.
    #[inline(always)]
    pub(super) fn batch_now(&self, hctx: usize) -> u64 {
        self.hctxs[hctx].batch_now.load(Ordering::Relaxed)
    }

    /// The end of a request of `hctx`: counted out of the driver, and the restart's pass
    /// made, at once, or `in_batch` (the caller's batch on `hctx`), at its end (see the
    /// module).
    #[inline(always)]
    pub(super) fn ended_on(&self, hctx: usize, in_batch: bool) {
        if in_batch {
            self.hctxs[hctx].deferred.ended();
        } else {
            self.host.restart_after(hctx, 1);
        }
    }
}
