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
/// use blkmq_core::*;
/// use std::sync::Mutex;
///
/// /// Has room for one command: "not now" while it holds one.
/// struct One(Mutex<Option<Rq>>);
/// impl Driver for One {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
///         let mut slot = self.0.lock().unwrap();
///         if slot.is_some() {
///             return Err(Rejected { rq, status: Status::Resource });
///         }
///         *slot = Some(rq);
///         Ok(())
///     }
/// }
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::new(), One(Mutex::new(None))).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
/// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap(); // turned down: waits
/// assert!(queue.has_work(0));
/// let first = host.driver().0.lock().unwrap().take().unwrap();
/// queue.end_request(first, Status::Ok).unwrap(); // the completion reruns the queue
/// let second = host.driver().0.lock().unwrap().take().unwrap();
/// assert_eq!(queue.io(&second).unwrap().sector(), 64);
/// queue.end_request(second, Status::Ok).unwrap();
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
/// use blkmq_core::*;
/// use std::sync::Mutex;
///
/// /// Holds its requests; answers every timeout with `action`.
/// struct Slow {
///     action: TimeoutAction,
///     held: Mutex<Vec<Rq>>,
/// }
/// impl Driver for Slow {
/// #     type Platform = StdPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
/// #         self.held.lock().unwrap().push(rq);
/// #         Ok(())
/// #     }
///     fn timeout(&self, _: &HctxCx<'_, Self>, _: &Request<()>) -> TimeoutAction {
///         self.action
///     }
/// }
///
/// for (action, fires_again) in [(TimeoutAction::ResetTimer, 1), (TimeoutAction::Done, 0)] {
///     let driver = Slow { action, held: Mutex::new(Vec::new()) };
///     let host = Host::new(TagSet::builder(4), StdPlatform::new(), driver).unwrap();
///     let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
///     queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
///     let late = queue.platform().now_ns() + DEFAULT_TIMEOUT_NS;
///     assert_eq!(queue.check_timeouts(late), 1);
///     assert_eq!(queue.check_timeouts(late + DEFAULT_TIMEOUT_NS), fires_again);
///     let rq = host.driver().held.lock().unwrap().pop().unwrap();
///     queue.end_request(rq, Status::Timeout).unwrap();
/// }
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
/// use blkmq_core::*;
///
/// /// Completes every request at once.
/// struct Null;
///
/// impl Driver for Null {
///     type Platform = StdPlatform;
///     type Payload = ();
///     fn init_request(&self, _: RequestInit) {}
///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
///         cx.queue().end_request(rq, Status::Ok).unwrap();
///         Ok(())
///     }
/// }
///
/// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Null).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// assert_eq!(queue.usage(), 0); // ended inside `queue_rq`
/// ```
pub trait Driver: Send + Sync + Sized + 'static {
    /// The environment the driver runs in.
    type Platform: Platform;
    /// The driver's data in every request, made once by
    /// [`init_request`](Self::init_request).
    type Payload: Send + Sync + 'static;

    /// Whether [`queue_rqs`](Self::queue_rqs) takes whole batches (a flushed plug).
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// /// Counts the batches it takes whole.
    /// struct Batched(AtomicUsize);
    /// impl Driver for Batched {
    ///     const QUEUE_RQS: bool = true;
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    ///     fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
    ///         self.0.fetch_add(1, Ordering::Relaxed);
    ///         while let Some(rq) = batch.next() {
    ///             cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         }
    ///     }
    /// }
    ///
    /// fn flush_two(queue: &RequestQueue<Batched>) {
    ///     let mut plug = Plug::new();
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, 64, 8)).unwrap();
    /// } // the plug flushes as it goes
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Batched(AtomicUsize::new(0)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// flush_two(&queue);
    /// assert_eq!(host.driver().0.load(Ordering::Relaxed), 1);
    /// let _other = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// flush_two(&queue); // the tag set is shared now: one by one through `queue_rq`
    /// assert_eq!(host.driver().0.load(Ordering::Relaxed), 1);
    /// assert_eq!(queue.usage(), 0);
    /// ```
    const QUEUE_RQS: bool = false;

    /// The driver's data for the request at `init` (called when tags are created).
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// /// Counts the requests it initialises; each one's payload is its tag.
    /// struct Disk(AtomicUsize);
    /// impl Driver for Disk {
    ///     type Platform = StdPlatform;
    ///     type Payload = usize;
    ///     fn init_request(&self, init: RequestInit) -> usize {
    ///         self.0.fetch_add(1, Ordering::Relaxed);
    ///         init.tag
    ///     }
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// }
    ///
    /// let tags = TagSet::builder(4).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::new(), Disk(AtomicUsize::new(0))).unwrap();
    /// assert_eq!(host.driver().0.load(Ordering::Relaxed), 8); // 4 tags on each hardware queue
    /// ```
    fn init_request(&self, init: RequestInit) -> Self::Payload;

    /// Issue `rq` on the hardware queue of `cx`; `last` says no further request follows in
    /// this batch, so the driver may ring its doorbell (else [`commit_rqs`](Self::commit_rqs)
    /// will). The request is started (in flight) when called.
    ///
    /// # Errors
    /// [`Rejected`] hands the request back: see there.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// A read-only device: reads complete at once, writes fail.
    /// struct ReadOnly;
    /// impl Driver for ReadOnly {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
    ///         if cx.io(&rq).is_some_and(|io| io.op() == Op::Write) {
    ///             return Err(Rejected { rq, status: Status::IoErr });
    ///         }
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// static ENDED: Mutex<Vec<Status>> = Mutex::new(Vec::new());
    /// fn done(_: Bio, status: Status) {
    ///     ENDED.lock().unwrap().push(status);
    /// }
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), ReadOnly).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8).end_io(done)).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8).end_io(done)).unwrap();
    /// assert_eq!(*ENDED.lock().unwrap(), [Status::Ok, Status::IoErr]);
    /// ```
    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, last: bool) -> Result<(), Rejected>;

    /// A batch ended without a `last` request: ring the doorbell for what was queued.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// /// Takes one request at a time; rings its doorbell after the last of a batch.
    /// struct Doorbell {
    ///     held: Mutex<Vec<Rq>>,
    ///     rings: AtomicUsize,
    /// }
    /// impl Driver for Doorbell {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, last: bool) -> Result<(), Rejected> {
    ///         let mut held = self.held.lock().unwrap();
    ///         if !held.is_empty() {
    ///             return Err(Rejected { rq, status: Status::Resource });
    ///         }
    ///         held.push(rq);
    ///         if last {
    ///             self.rings.fetch_add(1, Ordering::Relaxed);
    ///         }
    ///         Ok(())
    ///     }
    ///     fn commit_rqs(&self, _: &HctxCx<'_, Self>) {
    ///         self.rings.fetch_add(1, Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// let driver = Doorbell { held: Mutex::new(Vec::new()), rings: AtomicUsize::new(0) };
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// // One batch of two: the first goes in as not `last`, the second is turned down.
    /// queue.unquiesce();
    /// assert_eq!(host.driver().rings.load(Ordering::Relaxed), 1); // by `commit_rqs`
    /// # let first = host.driver().held.lock().unwrap().pop().unwrap();
    /// # queue.end_request(first, Status::Ok).unwrap();
    /// # let second = host.driver().held.lock().unwrap().pop().unwrap();
    /// # queue.end_request(second, Status::Ok).unwrap();
    /// ```
    fn commit_rqs(&self, cx: &HctxCx<'_, Self>) {
        let _ = cx;
    }

    /// Issue a batch of started requests: a flushed [`Plug`](crate::Plug)'s, when
    /// [`QUEUE_RQS`](Self::QUEUE_RQS) is set, the queue has no elevator and its tag set
    /// serves no other queue (else they go one by one through [`queue_rq`](Self::queue_rq)).
    /// Take requests with [`RqBatch::next`]; hand one back with [`RqBatch::reject`], which
    /// ends the batch. A request rejected with [`Status::Resource`] or
    /// [`Status::DevResource`] and whatever is left wait at the head of the hardware queue,
    /// issued later one by one through [`queue_rq`](Self::queue_rq) as with any give-up;
    /// another status ends the rejected request with it.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Takes whole batches from a flushed plug, recording their sizes.
    /// struct Batched(Mutex<Vec<usize>>);
    /// impl Driver for Batched {
    ///     const QUEUE_RQS: bool = true;
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    ///     fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
    ///         let mut n = 0;
    ///         while let Some(rq) = batch.next() {
    ///             cx.queue().end_request(rq, Status::Ok).unwrap();
    ///             n += 1;
    ///         }
    ///         self.0.lock().unwrap().push(n);
    ///     }
    /// }
    ///
    /// let driver = Batched(Mutex::new(Vec::new()));
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// for sector in [0, 64, 128] {
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, sector, 8)).unwrap();
    /// }
    /// plug.flush();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [3]);
    /// assert_eq!(queue.usage(), 0);
    /// ```
    fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
        let _ = (cx, batch);
    }

    /// Take one unit of the device's budget (the SCSI device queue depth) before a request
    /// is issued; `false` when none is left, and the queue waits for a completion. It may be
    /// called with the elevator's lock held: it must not call back into the queue.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// /// A device that takes one command at a time, holding it until the test ends it.
    /// struct OneAtATime {
    ///     budget: AtomicUsize,
    ///     held: Mutex<Vec<Rq>>,
    /// }
    /// impl Driver for OneAtATime {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.held.lock().unwrap().push(rq);
    ///         Ok(())
    ///     }
    ///     fn get_budget(&self, _: &HctxCx<'_, Self>) -> bool {
    ///         let take = |n: usize| n.checked_sub(1);
    ///         self.budget.fetch_update(Ordering::AcqRel, Ordering::Acquire, take).is_ok()
    ///     }
    ///     fn put_budget(&self, _: &HctxCx<'_, Self>) {
    ///         self.budget.fetch_add(1, Ordering::AcqRel);
    ///     }
    /// }
    ///
    /// let driver = OneAtATime { budget: AtomicUsize::new(1), held: Mutex::new(Vec::new()) };
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// assert_eq!(host.in_driver(), 1); // the second waits for budget
    /// let first = host.driver().held.lock().unwrap().pop().unwrap();
    /// queue.end_request(first, Status::Ok).unwrap(); // gives the budget back: the second goes in
    /// let second = host.driver().held.lock().unwrap().pop().unwrap();
    /// assert_eq!(queue.io(&second).unwrap().sector(), 64);
    /// queue.end_request(second, Status::Ok).unwrap();
    /// assert_eq!(host.driver().budget.load(Ordering::Relaxed), 1);
    /// ```
    fn get_budget(&self, cx: &HctxCx<'_, Self>) -> bool {
        let _ = cx;
        true
    }

    /// Give back a unit taken by [`get_budget`](Self::get_budget): when the request it was
    /// for is not issued after all, ends, or is requeued.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    /// use std::sync::atomic::{AtomicIsize, Ordering};
    ///
    /// /// Counts the budget out; turns down its first request ("not now").
    /// struct Counted {
    ///     out: AtomicIsize,
    ///     held: Mutex<Vec<Rq>>,
    /// }
    /// impl Driver for Counted {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         let mut held = self.held.lock().unwrap();
    ///         if held.is_empty() {
    ///             held.push(rq);
    ///             return Ok(());
    ///         }
    ///         Err(Rejected { rq, status: Status::Resource })
    ///     }
    ///     fn get_budget(&self, _: &HctxCx<'_, Self>) -> bool {
    ///         self.out.fetch_add(1, Ordering::Relaxed);
    ///         true
    ///     }
    ///     fn put_budget(&self, _: &HctxCx<'_, Self>) {
    ///         self.out.fetch_sub(1, Ordering::Relaxed);
    ///     }
    /// }
    ///
    /// let driver = Counted { out: AtomicIsize::new(0), held: Mutex::new(Vec::new()) };
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap(); // turned down: its budget came back
    /// let out = || host.driver().out.load(Ordering::Relaxed);
    /// assert_eq!(out(), 1);
    /// let first = host.driver().held.lock().unwrap().pop().unwrap();
    /// queue.end_request(first, Status::Ok).unwrap(); // back, and taken again by the second
    /// assert_eq!(out(), 1);
    /// let second = host.driver().held.lock().unwrap().pop().unwrap();
    /// queue.requeue_request(second, false).unwrap(); // a requeued request's comes back too
    /// assert_eq!(out(), 0);
    /// # queue.kick_requeue_list();
    /// # while let Some(rq) = host.driver().held.lock().unwrap().pop() {
    /// #     queue.end_request(rq, Status::Ok).unwrap();
    /// # }
    /// ```
    fn put_budget(&self, cx: &HctxCx<'_, Self>) {
        let _ = cx;
    }

    /// `request` is past its deadline. The default gives it another timeout (Linux's
    /// behaviour for drivers without a handler).
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Holds its requests; on a timeout, notes the tag for its error handling to end.
    /// struct Slow {
    ///     held: Mutex<Vec<Rq>>,
    ///     expired: Mutex<Vec<u32>>,
    /// }
    /// impl Driver for Slow {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.held.lock().unwrap().push(rq);
    ///         Ok(())
    ///     }
    ///     fn timeout(&self, _: &HctxCx<'_, Self>, request: &Request<()>) -> TimeoutAction {
    ///         self.expired.lock().unwrap().push(request.tag());
    ///         TimeoutAction::Done
    ///     }
    /// }
    ///
    /// let driver = Slow { held: Mutex::new(Vec::new()), expired: Mutex::new(Vec::new()) };
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let late = queue.platform().now_ns() + DEFAULT_TIMEOUT_NS;
    /// assert_eq!(queue.check_timeouts(late), 1);
    /// assert_eq!(queue.check_timeouts(late + DEFAULT_TIMEOUT_NS), 0); // `Done`: not again
    /// let rq = host.driver().held.lock().unwrap().pop().unwrap();
    /// assert_eq!(*host.driver().expired.lock().unwrap(), [rq.tag()]);
    /// queue.end_request(rq, Status::Timeout).unwrap();
    /// ```
    fn timeout(&self, cx: &HctxCx<'_, Self>, request: &Request<Self::Payload>) -> TimeoutAction {
        let _ = (cx, request);
        TimeoutAction::ResetTimer
    }

    /// Reap completions of a polled hardware queue; returns how many.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Completes what reaches its poll queue (hardware queue 1) only when polled.
    /// struct Polled(Mutex<Vec<Rq>>);
    /// impl Driver for Polled {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         if cx.hctx() == 1 {
    ///             self.0.lock().unwrap().push(rq);
    ///         } else {
    ///             cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         }
    ///         Ok(())
    ///     }
    ///     fn poll(&self, cx: &HctxCx<'_, Self>) -> usize {
    ///         let done: Vec<Rq> = self.0.lock().unwrap().drain(..).collect();
    ///         let n = done.len();
    ///         cx.queue().end_requests(done.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    ///         n
    ///     }
    ///     fn map_queues(&self, nr_cpus: usize, _: usize) -> Option<QueueMaps> {
    ///         let default = QueueMap::spread(nr_cpus, 1, 0).ok()?;
    ///         QueueMaps::new(default, None, Some(QueueMap::spread(nr_cpus, 1, 1).ok()?)).ok()
    ///     }
    /// }
    ///
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::new(), Polled(Mutex::new(Vec::new()))).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8).flags(BioFlags::POLLED)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap(); // not polled: ends at once
    /// assert_eq!(queue.usage(), 1);
    /// assert_eq!(queue.poll(1), 1);
    /// assert_eq!(queue.usage(), 0);
    /// ```
    fn poll(&self, cx: &HctxCx<'_, Self>) -> usize {
        let _ = cx;
        0
    }

    /// A request is ending: release what the driver holds for it (called before its bios
    /// end).
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// static EVENTS: Mutex<Vec<&str>> = Mutex::new(Vec::new());
    ///
    /// /// Completes at once, noting when it releases a request.
    /// struct Disk;
    /// impl Driver for Disk {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    ///     fn complete(&self, _: &HctxCx<'_, Self>, _: &Request<()>) {
    ///         EVENTS.lock().unwrap().push("complete");
    ///     }
    /// }
    ///
    /// fn done(_: Bio, _: Status) {
    ///     EVENTS.lock().unwrap().push("end_io");
    /// }
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Disk).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8).end_io(done)).unwrap();
    /// assert_eq!(*EVENTS.lock().unwrap(), ["complete", "end_io"]);
    /// ```
    fn complete(&self, cx: &HctxCx<'_, Self>, request: &Request<Self::Payload>) {
        let _ = (cx, request);
    }

    /// The CPU to hardware queue maps, when the driver knows better than an even spread
    /// (interrupt affinity); `None` for the default.
    ///
    /// ```
    /// use blkmq_core::*;
    ///
    /// /// Serves even CPUs from hardware queue 1, odd ones from 0.
    /// struct Affine;
    /// impl Driver for Affine {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    ///     fn map_queues(&self, nr_cpus: usize, nr_hw_queues: usize) -> Option<QueueMaps> {
    ///         let table: Vec<usize> = (0..nr_cpus).map(|cpu| (cpu + 1) % 2).collect();
    ///         let map = QueueMap::from_table(&table, nr_hw_queues, 0).ok()?;
    ///         QueueMaps::new(map, None, None).ok()
    ///     }
    /// }
    ///
    /// let tags = TagSet::builder(4).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::with_cpus(4), Affine).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let map = queue.maps().map(QueueType::Default).unwrap();
    /// assert_eq!((map.hctx(0), map.hctx(1), map.hctx(2)), (1, 0, 1));
    /// ```
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
///     cx.queue().end_request(rq, Status::Ok).unwrap();
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
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Notes the hardware queue of each request.
    /// struct Seen(Mutex<Vec<usize>>);
    /// impl Driver for Seen {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.0.lock().unwrap().push(cx.hctx());
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let platform = StdPlatform::with_cpus(2);
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, platform.clone(), Seen(Mutex::new(Vec::new()))).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// for cpu in [1, 0] {
    ///     platform.pin_current_thread(cpu); // CPU `cpu` is served by hardware queue `cpu`
    ///     queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// }
    /// assert_eq!(*host.driver().0.lock().unwrap(), [1, 0]);
    /// ```
    pub fn hctx(&self) -> usize {
        self.hctx
    }

    /// The request queue (to end requests, look them up, read the time).
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Notes the capacity of each request's queue.
    /// struct Seen(Mutex<Vec<u64>>);
    /// impl Driver for Seen {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.0.lock().unwrap().push(cx.queue().limits().capacity);
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Seen(Mutex::new(Vec::new())))
    ///     .unwrap();
    /// let small = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let large = host.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
    /// large.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// small.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [1 << 20, 64]);
    /// ```
    pub fn queue(&self) -> &'a RequestQueue<D> {
        self.queue
    }

    /// The driver.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// struct Disk {
    ///     done: AtomicUsize,
    /// }
    /// impl Driver for Disk {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         finish(cx, rq);
    ///         Ok(())
    ///     }
    /// }
    ///
    /// /// A completion path that has only the context.
    /// fn finish(cx: &HctxCx<'_, Disk>, rq: Rq) {
    ///     cx.driver().done.fetch_add(1, Ordering::Relaxed);
    ///     cx.queue().end_request(rq, Status::Ok).unwrap();
    /// }
    ///
    /// let driver = Disk { done: AtomicUsize::new(0) };
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(host.driver().done.load(Ordering::Relaxed), 1);
    /// ```
    pub fn driver(&self) -> &'a D {
        self.queue.driver()
    }

    /// The shared side of a request: its tags, state and the driver's payload.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Each request's payload is a command slot number, made once per tag.
    /// struct Disk(Mutex<Vec<(u32, RqState)>>);
    /// impl Driver for Disk {
    ///     type Platform = StdPlatform;
    ///     type Payload = u32;
    ///     fn init_request(&self, init: RequestInit) -> u32 {
    ///         100 + init.tag as u32
    ///     }
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         let request = cx.request(&rq).unwrap();
    ///         self.0.lock().unwrap().push((*request.payload() - request.tag(), request.state()));
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Disk(Mutex::new(Vec::new())))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [(100, RqState::InFlight)]);
    /// ```
    pub fn request(&self, rq: &Rq) -> Option<&'a Request<D::Payload>> {
        self.queue.request(rq)
    }

    /// The I/O of a request.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Notes what each request asks for.
    /// struct Seen(Mutex<Vec<(Op, u64, u64)>>);
    /// impl Driver for Seen {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.0.lock().unwrap().push({
    ///             let io = cx.io(&rq).unwrap();
    ///             (io.op(), io.sector(), io.sectors())
    ///         });
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Seen(Mutex::new(Vec::new())))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Write, 16, 8)).unwrap();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [(Op::Write, 16, 8)]);
    /// ```
    pub fn io<'b>(&'b self, rq: &'b Rq) -> Option<&'b RqIo> {
        self.queue.io(rq)
    }

    /// Calls `f` with every bio of a request, in order.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Notes the bios of each request, as (sector, sectors).
    /// struct Seen(Mutex<Vec<Vec<(u64, u32)>>>);
    /// impl Driver for Seen {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         let mut bios = Vec::new();
    ///         cx.for_each_bio(&rq, |bio| bios.push((bio.sector, bio.sectors)));
    ///         self.0.lock().unwrap().push(bios);
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Seen(Mutex::new(Vec::new())))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let mut plug = Plug::new();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit_plugged(&mut plug, Bio::new(Op::Read, 8, 16)).unwrap(); // merges
    /// plug.flush();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [vec![(0, 8), (8, 16)]]);
    /// ```
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
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Notes where each request of a batch starts.
    /// struct Batched(Mutex<Vec<u64>>);
    /// impl Driver for Batched {
    ///     const QUEUE_RQS: bool = true;
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    ///     fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
    ///         while let Some(rq) = batch.next() {
    ///             self.0.lock().unwrap().push(cx.io(&rq).unwrap().sector());
    ///             cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         }
    ///     }
    /// }
    ///
    /// # let driver = Batched(Mutex::new(Vec::new()));
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// for sector in [0, 64, 128] {
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, sector, 8)).unwrap();
    /// }
    /// plug.flush();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [0, 64, 128]); // in order
    /// ```
    pub fn next(&mut self) -> Option<Rq> {
        if self.rejected.is_some() {
            return None;
        }
        self.rqs.pop_front()
    }

    /// Requests left.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Notes how many requests are left, before and after taking one.
    /// struct Batched(Mutex<Vec<usize>>);
    /// impl Driver for Batched {
    ///     const QUEUE_RQS: bool = true;
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    ///     fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
    ///         self.0.lock().unwrap().push(batch.len());
    ///         let first = batch.next().unwrap();
    ///         self.0.lock().unwrap().push(batch.len());
    ///         cx.queue().end_request(first, Status::Ok).unwrap();
    ///         while let Some(rq) = batch.next() {
    ///             cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         }
    ///     }
    /// }
    ///
    /// # let driver = Batched(Mutex::new(Vec::new()));
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// for sector in [0, 64, 128] {
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, sector, 8)).unwrap();
    /// }
    /// plug.flush();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [3, 2]);
    /// ```
    pub fn len(&self) -> usize {
        if self.rejected.is_some() {
            0
        } else {
            self.rqs.len()
        }
    }

    /// Whether no request is left.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Notes the size of each batch.
    /// struct Batched(Mutex<Vec<usize>>);
    /// impl Driver for Batched {
    ///     const QUEUE_RQS: bool = true;
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    ///     fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
    ///         let mut n = 0;
    ///         while !batch.is_empty() {
    ///             let rq = batch.next().unwrap();
    ///             cx.queue().end_request(rq, Status::Ok).unwrap();
    ///             n += 1;
    ///         }
    ///         self.0.lock().unwrap().push(n);
    ///     }
    /// }
    ///
    /// # let driver = Batched(Mutex::new(Vec::new()));
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), driver).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// for sector in [0, 64, 128] {
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, sector, 8)).unwrap();
    /// }
    /// plug.flush();
    /// assert_eq!(*host.driver().0.lock().unwrap(), [3]);
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands a request back and ends the batch. A second reject (of a request taken before
    /// the first) puts its request right after the first one's, to be issued again later
    /// whatever its status.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::Mutex;
    ///
    /// /// Takes one request of a batch and turns the next down ("not now").
    /// struct Picky(Mutex<Vec<(&'static str, u64)>>);
    /// impl Driver for Picky {
    ///     const QUEUE_RQS: bool = true;
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         self.0.lock().unwrap().push(("one", cx.io(&rq).unwrap().sector()));
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    ///     fn queue_rqs(&self, cx: &HctxCx<'_, Self>, batch: &mut RqBatch<'_>) {
    ///         let first = batch.next().unwrap();
    ///         self.0.lock().unwrap().push(("batch", cx.io(&first).unwrap().sector()));
    ///         cx.queue().end_request(first, Status::Ok).unwrap();
    ///         let second = batch.next().unwrap();
    ///         batch.reject(Rejected { rq: second, status: Status::Resource });
    ///         assert!(batch.next().is_none() && batch.is_empty());
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Picky(Mutex::new(Vec::new())))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let mut plug = Plug::new();
    /// for sector in [0, 64, 128] {
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, sector, 8)).unwrap();
    /// }
    /// plug.flush();
    /// // The rejected request and the one after it went in later, one by one.
    /// let seen = host.driver().0.lock().unwrap().clone();
    /// assert_eq!(seen, [("batch", 0), ("one", 64), ("one", 128)]);
    /// ```
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
