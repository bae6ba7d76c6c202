//! The driver interface (Linux's `blk_mq_ops`): what a request queue asks of the device
//! driver, and the context it hands the driver with each call.

use crate::bio::{Bio, Status};
use crate::platform::Platform;
use crate::queue::RequestQueue;
use crate::queue_map::QueueMaps;
use crate::request::{Request, Rq, RqIo};
use crate::tags::RequestInit;

/// A request the driver did not take, handed back with the reason.
///
/// [`Status::Resource`] and [`Status::DevResource`] mean "not now": the queue keeps the
/// request at the head of the hardware queue and runs it again when a request completes
/// (or, with nothing in flight that could complete, asks the platform for a
/// [`kick`](Platform::kick)). Any other status ends the request with it.
///
/// ```
/// use blkmq_core::{Rejected, Status};
/// fn busy(rq: blkmq_core::Rq) -> Rejected {
///     Rejected { rq, status: Status::Resource }
/// }
/// # let _ = busy;
/// ```
#[derive(Debug)]
pub struct Rejected {
    /// The request, back to the queue.
    pub rq: Rq,
    /// Why.
    pub status: Status,
}

/// A driver's verdict on a request past its deadline.
///
/// ```
/// use blkmq_core::TimeoutAction;
/// assert_ne!(TimeoutAction::Done, TimeoutAction::ResetTimer);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeoutAction {
    /// The driver handles it: it ends the request (typically with [`Status::Timeout`]),
    /// now or later. The timeout does not fire again for this dispatch.
    Done,
    /// Give it another full timeout.
    ResetTimer,
}

/// A block device driver (Linux's `blk_mq_ops`).
///
/// The queue hands the driver requests by value ([`Rq`]): the driver owns each one from
/// an `Ok` of [`queue_rq`](Self::queue_rq) until it ends it with
/// [`RequestQueue::end_request`] (or gives it back with
/// [`RequestQueue::requeue_request`]).
///
/// ```
/// use blkmq_core::{Driver, HctxCx, Rejected, RequestInit, Rq, StdPlatform, Status};
///
/// /// Completes every request at once.
/// struct Null;
///
/// impl Driver for Null {
///     type Platform = StdPlatform;
///     type Payload = ();
///     fn init_request(&self, _: RequestInit) {}
///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
///         cx.queue().end_request(rq, Status::Ok);
///         Ok(())
///     }
/// }
/// # let _ = Null;
/// ```
pub trait Driver: Send + Sync + Sized + 'static {
    /// The environment the driver runs in.
    type Platform: Platform;
    /// The driver's data in every request, made once by
    /// [`init_request`](Self::init_request).
    type Payload: Send + Sync + 'static;

    /// Whether [`queue_rqs`](Self::queue_rqs) takes whole batches (a flushed plug).
    const QUEUE_RQS: bool = false;

    /// The driver's data for the request at `init` (called when tags are created).
    fn init_request(&self, init: RequestInit) -> Self::Payload;

    /// Issue `rq` on the hardware queue of `cx`; `last` says no further request follows in
    /// this batch, so the driver may ring its doorbell (else [`commit_rqs`](Self::commit_rqs)
    /// will). The request is started (in flight) when called.
    ///
    /// # Errors
    /// [`Rejected`] hands the request back: see there.
    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, last: bool) -> Result<(), Rejected>;

    /// A batch ended without a `last` request: ring the doorbell for what was queued.
    fn commit_rqs(&self, cx: &HctxCx<'_, Self>) {
        let _ = cx;
    }

    /// Issue a batch of started requests (only when [`QUEUE_RQS`](Self::QUEUE_RQS)).
    /// Take requests with [`RqBatch::next`]; hand one back with [`RqBatch::reject`], which
    /// ends the batch. A request rejected with [`Status::Resource`] or
    /// [`Status::DevResource`] and whatever is left wait at the head of the hardware queue,
    /// issued later one by one through [`queue_rq`](Self::queue_rq) as with any give-up;
    /// another status ends the rejected request with it.
    fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
        let _ = (cx, batch);
    }

    /// Take one unit of the device's budget (the SCSI device queue depth) before a request
    /// is issued; `false` when none is left, and the queue waits for a completion.
    fn get_budget(&self, cx: &HctxCx<'_, Self>) -> bool {
        let _ = cx;
        true
    }

    /// Give back a unit taken by [`get_budget`](Self::get_budget): when the request it was
    /// for is not issued after all, ends, or is requeued.
    fn put_budget(&self, cx: &HctxCx<'_, Self>) {
        let _ = cx;
    }

    /// `request` is past its deadline. The default gives it another timeout (Linux's
    /// behaviour for drivers without a handler).
    fn timeout(&self, cx: &HctxCx<'_, Self>, request: &Request<Self::Payload>) -> TimeoutAction {
        let _ = (cx, request);
        TimeoutAction::ResetTimer
    }

    /// Reap completions of a polled hardware queue; returns how many.
    fn poll(&self, cx: &HctxCx<'_, Self>) -> usize {
        let _ = cx;
        0
    }

    /// A request is ending: release what the driver holds for it (called before its bios
    /// end).
    fn complete(&self, cx: &HctxCx<'_, Self>, request: &Request<Self::Payload>) {
        let _ = (cx, request);
    }

    /// The CPU to hardware queue maps, when the driver knows better than an even spread
    /// (interrupt affinity); `None` for the default.
    fn map_queues(&self, nr_cpus: usize, nr_hw_queues: usize) -> Option<QueueMaps> {
        let _ = (nr_cpus, nr_hw_queues);
        None
    }
}

/// A hardware queue of a request queue, as a driver call sees it.
///
/// ```
/// # use blkmq_core::*;
/// # struct Null;
/// # impl Driver for Null {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
///     let io = cx.io(&rq).unwrap();
///     assert!(io.sectors() > 0 && cx.hctx() == 0);
///     cx.queue().end_request(rq, Status::Ok);
///     Ok(())
/// }
/// # }
/// # let host = Host::new(TagSet::builder(4), StdPlatform::new(), Null).unwrap();
/// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// # queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// ```
pub struct HctxCx<'a, D: Driver> {
    pub(crate) queue: &'a RequestQueue<D>,
    pub(crate) hctx: usize,
}

impl<'a, D: Driver> HctxCx<'a, D> {
    /// The hardware queue's index.
    pub fn hctx(&self) -> usize {
        self.hctx
    }

    /// The request queue (to end requests, look them up, read the time).
    pub fn queue(&self) -> &'a RequestQueue<D> {
        self.queue
    }

    /// The driver.
    pub fn driver(&self) -> &'a D {
        self.queue.driver()
    }

    /// The shared side of a request: its tags, state and the driver's payload.
    pub fn request(&self, rq: &Rq) -> Option<&'a Request<D::Payload>> {
        self.queue.request(rq)
    }

    /// The I/O of a request.
    pub fn io<'b>(&'b self, rq: &'b Rq) -> Option<&'b RqIo> {
        self.queue.io(rq)
    }

    /// Calls `f` with every bio of a request, in order.
    pub fn for_each_bio(&self, rq: &Rq, f: impl FnMut(&Bio)) {
        self.queue.for_each_bio(rq, f);
    }
}

impl<D: Driver> core::fmt::Debug for HctxCx<'_, D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("HctxCx")
            .field("hctx", &self.hctx)
            .finish_non_exhaustive()
    }
}

/// A batch of started requests for [`Driver::queue_rqs`].
///
/// ```
/// use blkmq_core::RqBatch;
/// fn take_all(batch: &mut RqBatch<'_>, issued: &mut Vec<blkmq_core::Rq>) {
///     while let Some(rq) = batch.next() {
///         issued.push(rq);
///     }
/// }
/// # let _ = take_all;
/// ```
pub struct RqBatch<'a> {
    pub(crate) rqs: &'a mut alloc::collections::VecDeque<Rq>,
    pub(crate) rejected: Option<Rejected>,
}

impl RqBatch<'_> {
    /// The next request, unless the batch is empty or ended by a
    /// [`reject`](Self::reject).
    #[allow(clippy::should_implement_trait)] // not an iterator: a reject ends it
    pub fn next(&mut self) -> Option<Rq> {
        if self.rejected.is_some() {
            return None;
        }
        self.rqs.pop_front()
    }

    /// Requests left.
    pub fn len(&self) -> usize {
        if self.rejected.is_some() {
            0
        } else {
            self.rqs.len()
        }
    }

    /// Whether no request is left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands a request back and ends the batch.
    pub fn reject(&mut self, rejected: Rejected) {
        if let Some(earlier) = self.rejected.take() {
            // A second reject: keep order, the earlier one first.
            self.rqs.push_front(rejected.rq);
            self.rejected = Some(earlier);
            return;
        }
        self.rejected = Some(rejected);
    }
}

impl core::fmt::Debug for RqBatch<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RqBatch")
            .field("len", &self.rqs.len())
            .finish_non_exhaustive()
    }
}
