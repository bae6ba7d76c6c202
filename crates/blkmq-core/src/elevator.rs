//! The elevator (I/O scheduler) interface: what a request queue asks of a scheduler, and
//! what it offers the scheduler in return ([`ElvCx`]).

mod cx;
mod shared;

pub use cx::ElvCx;
pub(crate) use cx::{ASK_BACKEND, ElvBackend};
pub use shared::ElvShared;
pub(crate) use shared::ElvSlot;

use alloc::sync::Arc;

use crate::bio::{Bio, BioFlags, Op};
use crate::limits::MergeKind;
use crate::request::{Rq, RqIo};

/// An I/O scheduler (Linux's `elevator_mq_ops`). The request queue calls it under one lock,
/// so `&mut self` is the whole queue's view; it owns the [`Rq`]s inserted into it until it
/// dispatches them or they merge away. Completion may run without that lock: an elevator
/// that hands out a [`shared`](Self::shared) part ([`ElvShared`]) has its completions
/// reported there first, and the locked completion hooks run only when it asks.
///
/// Keys: every request has a dense [key](ElvCx::key) below [`ElvCx::nr_keys`]; an elevator
/// keeps its requests in an array indexed by key and its orders (sorted trees, FIFOs) as
/// keys, which is how its merge hooks name a request
/// ([`request_merge`](Self::request_merge), [`requests_merged`](Self::requests_merged)).
///
/// Merging follows Linux: the queue offers a bio to [`bio_merge`](Self::bio_merge), which
/// merges nothing unless the elevator replaces it. An elevator that merges asks
/// [`request_merge`](Self::request_merge) for a request that `bio` touches, merges it
/// within the limits ([`ElvCx::merge_bio`]), reports
/// [`request_merged`](Self::request_merged), then tries to merge that request with its
/// neighbour ([`ElvCx::merge_requests`]), reporting
/// [`requests_merged`](Self::requests_merged): the `blkmq-sched-index` crate's `bio_merge`
/// runs that sequence over the elevator's storage, for mq-deadline and BFQ alike.
///
/// ```
/// use blkmq_core::{ElvCx, Elevator, Rq};
/// use std::collections::VecDeque;
///
/// /// First in, first out; no merging.
/// struct Fifo(VecDeque<Rq>);
///
/// impl Elevator for Fifo {
///     fn name(&self) -> &'static str { "fifo" }
///     fn insert_requests(
///         &mut self,
///         _: &ElvCx<'_>,
///         rqs: &mut dyn Iterator<Item = Rq>,
///         at_head: bool,
///     ) {
///         for rq in rqs {
///             if at_head { self.0.push_front(rq) } else { self.0.push_back(rq) }
///         }
///     }
///     fn dispatch_request(&mut self, _: &ElvCx<'_>, _hctx: usize) -> Option<Rq> {
///         self.0.pop_front()
///     }
///     fn has_work(&self, _hctx: usize) -> bool { !self.0.is_empty() }
/// }
///
/// let fifo = Fifo(VecDeque::new());
/// assert_eq!(fifo.name(), "fifo");
/// assert!(!fifo.has_work(0));
/// assert!(fifo.next_timer().is_none());
/// ```
pub trait Elevator: core::any::Any + Send {
    /// The scheduler's name (`"mq-deadline"`, `"bfq"`).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// #[derive(Default)]
    /// struct Fifo {
    ///     q: VecDeque<Rq>,
    /// }
    /// impl Elevator for Fifo {
    ///     fn name(&self) -> &'static str {
    ///         "fifo"
    ///     }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Fifo::default()));
    /// let queue = host.add_queue(config).unwrap();
    /// assert_eq!(queue.elevator_name(), Some("fifo"));
    /// ```
    fn name(&self) -> &'static str;

    /// The queue's scheduler depth (`nr_requests`) and number of request keys, when the
    /// elevator is attached and whenever `nr_requests` changes. Setup: allocate here.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Keeps per-request data by key (here only notes the sizes it was given).
    /// #[derive(Default)]
    /// struct Keyed {
    ///     q: VecDeque<Rq>,
    ///     sizes: Vec<(usize, usize)>,
    /// }
    /// impl Elevator for Keyed {
    /// #     fn name(&self) -> &'static str { "keyed" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn depth_updated(&mut self, nr_requests: usize, nr_keys: usize) {
    ///         self.sizes.push((nr_requests, nr_keys));
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Keyed::default()));
    /// let queue = host.add_queue(config.nr_requests(16)).unwrap();
    /// queue.set_nr_requests(8).unwrap();
    /// let sizes = queue.with_elevator(|e: &mut Keyed| e.sizes.clone()).unwrap();
    /// assert_eq!(sizes, [(16, 16), (8, 16)]); // keys stay: the tags made are kept
    /// ```
    fn depth_updated(&mut self, nr_requests: usize, nr_keys: usize) {
        let _ = (nr_requests, nr_keys);
    }

    /// The smallest depth [`limit_depth`](Self::limit_depth) ever returns, so the tag wait
    /// queues batch wake-ups for it (Linux's `min_shallow_depth`). `None` when it never
    /// limits.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Declares a minimum it cannot keep.
    /// #[derive(Default)]
    /// struct Broken {
    ///     q: VecDeque<Rq>,
    /// }
    /// impl Elevator for Broken {
    /// #     fn name(&self) -> &'static str { "broken" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn min_shallow_depth(&self) -> Option<usize> {
    ///         Some(0)
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Broken::default()));
    /// let err = host.add_queue(config.nr_requests(16)).unwrap_err();
    /// assert_eq!(err, ConfigError::BadShallowDepth { shallow_depth: 0, depth: 16 });
    /// ```
    fn min_shallow_depth(&self) -> Option<usize> {
        None
    }

    /// How deep into the scheduler tags a request of `op` with `flags` may go (`None`: all
    /// of them). mq-deadline's `async_depth`, BFQ's per-class limits.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Lets writes hold one scheduler tag at most.
    /// #[derive(Default)]
    /// struct FewWrites {
    ///     q: VecDeque<Rq>,
    /// }
    /// impl Elevator for FewWrites {
    /// #     fn name(&self) -> &'static str { "few-writes" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn min_shallow_depth(&self) -> Option<usize> {
    ///         Some(1)
    ///     }
    ///     fn limit_depth(&self, op: Op, _: BioFlags) -> Option<usize> {
    ///         (op == Op::Write).then_some(1)
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let elevator = Box::new(FewWrites::default());
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(elevator);
    /// let queue = host.add_queue(config).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap(); // the driver holds it
    /// assert!(queue.submit(Bio::new(Op::Write, 64, 8)).is_err()); // no write tag free now
    /// assert!(queue.submit(Bio::new(Op::Read, 128, 8)).is_ok());
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    fn limit_depth(&self, op: Op, flags: BioFlags) -> Option<usize> {
        let _ = (op, flags);
        None
    }

    /// A request was allocated for the elevator and holds its first bio.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Notes where each new request starts.
    /// #[derive(Default)]
    /// struct Noting {
    ///     q: VecDeque<Rq>,
    ///     starts: Vec<u64>,
    /// }
    /// impl Elevator for Noting {
    /// #     fn name(&self) -> &'static str { "noting" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn prepare_request(&mut self, cx: &ElvCx<'_>, rq: &mut Rq) {
    ///         self.starts.push(cx.io(rq).unwrap().sector());
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let elevator = Box::new(Noting::default());
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(elevator);
    /// let queue = host.add_queue(config).unwrap();
    /// let mut plug = Plug::new();
    /// for sector in [0, 8, 64] {
    ///     queue.submit_plugged(&mut plug, Bio::new(Op::Read, sector, 8)).unwrap();
    /// }
    /// drop(plug);
    /// // Once per request: the bio at 8 merged into the request at 0.
    /// assert_eq!(queue.with_elevator(|e: &mut Noting| e.starts.clone()).unwrap(), [0, 64]);
    /// ```
    fn prepare_request(&mut self, cx: &ElvCx<'_>, rq: &mut Rq) {
        let _ = (cx, rq);
    }

    /// Takes requests to schedule; `at_head` for requeued ones, to go before the rest.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::collections::VecDeque;
    ///
    /// #[derive(Default)]
    /// struct Fifo {
    ///     q: VecDeque<Rq>,
    /// }
    /// impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    ///     fn insert_requests(
    ///         &mut self,
    ///         _: &ElvCx<'_>,
    ///         rqs: &mut dyn Iterator<Item = Rq>,
    ///         at_head: bool,
    ///     ) {
    ///         for rq in rqs {
    ///             if at_head {
    ///                 self.q.push_front(rq);
    ///             } else {
    ///                 self.q.push_back(rq);
    ///             }
    ///         }
    ///     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    /// }
    ///
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let read = |sector| {
    ///     let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    ///     tags.set_bio(&mut rq, Bio::new(Op::Read, sector, 8)).unwrap();
    ///     rq
    /// };
    /// let mut fifo = Fifo::default();
    /// fifo.insert_requests(&cx, &mut [read(0), read(64)].into_iter(), false);
    /// fifo.insert_requests(&cx, &mut core::iter::once(read(128)), true); // requeued
    /// let mut order = Vec::new();
    /// while let Some(rq) = fifo.dispatch_request(&cx, 0) {
    ///     order.push(cx.io(&rq).unwrap().sector());
    ///     tags.free(rq).unwrap();
    /// }
    /// assert_eq!(order, [128, 0, 64]);
    /// ```
    fn insert_requests(&mut self, cx: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, at_head: bool);

    /// One request to hold, as [`insert_requests`](Self::insert_requests) with a batch of
    /// one (what the queue calls for a single request). Override it to spare the iterator
    /// on the common path; it must do what a batch of one would.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::collections::VecDeque;
    ///
    /// #[derive(Default)]
    /// struct Fifo(VecDeque<Rq>);
    /// impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    ///     fn insert_requests(&mut self, cx: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, at_head: bool) {
    ///         for rq in rqs {
    ///             self.insert_request(cx, rq, at_head);
    ///         }
    ///     }
    ///     fn insert_request(&mut self, _: &ElvCx, rq: Rq, at_head: bool) {
    ///         if at_head { self.0.push_front(rq) } else { self.0.push_back(rq) }
    ///     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// }
    ///
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut fifo = Fifo::default();
    /// fifo.insert_request(&cx, tags.alloc(&Alloc::new(0, 0)).unwrap(), false);
    /// assert!(fifo.has_work(0));
    /// # tags.free(fifo.dispatch_request(&cx, 0).unwrap()).unwrap();
    /// ```
    fn insert_request(&mut self, cx: &ElvCx<'_>, rq: Rq, at_head: bool) {
        self.insert_requests(cx, &mut core::iter::once(rq), at_head);
    }

    /// The next request to issue on hardware queue `hctx`, if any.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::collections::VecDeque;
    ///
    /// /// One FIFO per hardware queue.
    /// #[derive(Default)]
    /// struct PerHctx(Vec<VecDeque<Rq>>);
    /// impl Elevator for PerHctx {
    /// #     fn name(&self) -> &'static str { "per-hctx" }
    ///     fn insert_requests(&mut self, cx: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    ///         for rq in rqs {
    ///             let hctx = cx.hctx(&rq);
    ///             if self.0.len() <= hctx {
    ///                 self.0.resize_with(hctx + 1, VecDeque::new);
    ///             }
    ///             self.0[hctx].push_back(rq);
    ///         }
    ///     }
    ///     fn dispatch_request(&mut self, _: &ElvCx<'_>, hctx: usize) -> Option<Rq> {
    ///         self.0.get_mut(hctx)?.pop_front()
    ///     }
    ///     fn has_work(&self, hctx: usize) -> bool {
    ///         self.0.get(hctx).is_some_and(|q| !q.is_empty())
    ///     }
    /// }
    ///
    /// let set = TagSet::builder(8).hw_queues(2).build(StdPlatform::new(), |_| ()).unwrap();
    /// let mut tags = set.attach().unwrap();
    /// tags.attach_scheduler(None, |_| ()).unwrap();
    /// let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut elv = PerHctx::default();
    /// let rq = tags.alloc(&Alloc::new(1, 0)).unwrap(); // for hardware queue 1
    /// elv.insert_requests(&cx, &mut core::iter::once(rq), false);
    /// assert!(!elv.has_work(0) && elv.has_work(1));
    /// assert!(elv.dispatch_request(&cx, 0).is_none());
    /// let rq = elv.dispatch_request(&cx, 1).unwrap();
    /// tags.free(rq).unwrap();
    /// ```
    fn dispatch_request(&mut self, cx: &ElvCx<'_>, hctx: usize) -> Option<Rq>;

    /// Whether [`dispatch_request`](Self::dispatch_request) for `hctx` would return one
    /// now (or after a timer: see [`next_timer`](Self::next_timer)).
    ///
    /// The queue asks right after each dispatched request, under the same hold of the
    /// lock, and ends the run when the answer is no: so the answer may turn from no to yes
    /// only by an insertion (which runs the hardware queue again) or at
    /// [`next_timer`](Self::next_timer), as with Linux's elevators.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// #[derive(Default)]
    /// struct Fifo {
    ///     q: VecDeque<Rq>,
    /// }
    /// impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    ///     fn has_work(&self, _: usize) -> bool {
    ///         !self.q.is_empty()
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let elevator = Box::new(Fifo::default());
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(elevator);
    /// let queue = host.add_queue(config).unwrap();
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(queue.has_work(0)); // the elevator's word
    /// queue.unquiesce();
    /// assert!(!queue.has_work(0));
    /// ```
    fn has_work(&self, hctx: usize) -> bool;

    /// Whether `bio` may join the request holding `io`, by the scheduler's rules (BFQ
    /// keeps queues apart); the core's rules (contiguity, limits) are checked besides.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Keeps the I/O of different issuers apart.
    /// #[derive(Default)]
    /// struct Apart {
    ///     q: VecDeque<Rq>,
    /// }
    /// impl Elevator for Apart {
    /// #     fn name(&self) -> &'static str { "apart" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn allow_merge(&self, io: &RqIo, bio: &Bio) -> bool {
    ///         io.issuer() == bio.issuer
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let elevator = Box::new(Apart::default());
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(elevator);
    /// let queue = host.add_queue(config).unwrap();
    /// let mut plug = Plug::new();
    /// for (sector, issuer) in [(0, 1), (8, 2), (16, 2)] {
    ///     let bio = Bio::new(Op::Read, sector, 8).issuer(IssuerId(issuer));
    ///     queue.submit_plugged(&mut plug, bio).unwrap();
    /// }
    /// assert_eq!(plug.len(), 2); // 8 did not join 0; 16 joined 8
    /// ```
    fn allow_merge(&self, io: &RqIo, bio: &Bio) -> bool {
        let _ = (io, bio);
        true
    }

    /// A held request that `bio` touches (by key), and at which end: the first step of
    /// the merge sequence a merging [`bio_merge`](Self::bio_merge) runs.
    ///
    /// The `blkmq-sched-index` crate's `bio_merge` runs the sequence through this hook and
    /// the two below; its example implements them.
    fn request_merge(&mut self, cx: &ElvCx<'_>, bio: &Bio) -> Option<(usize, MergeKind)> {
        let _ = (cx, bio);
        None
    }

    /// A bio merged into the request with `key` at the `kind` end (its start may have moved).
    ///
    /// The `blkmq-sched-index` crate's `bio_merge` example implements it.
    fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) {
        let _ = (cx, key, kind);
    }

    /// The request with key `from` (taken out of the elevator's orders) was appended to the
    /// one with key `into` and freed; per-key data of `from` is still the elevator's to
    /// read. mq-deadline keeps the earlier deadline here.
    ///
    /// The `blkmq-sched-index` crate's `bio_merge` example implements it.
    fn requests_merged(&mut self, cx: &ElvCx<'_>, into: usize, from: usize) {
        let _ = (cx, into, from);
    }

    /// Tries to merge `bio` into a held request; gives it back when none takes it. The
    /// provided method merges nothing, as suits an elevator with no merge support; one that
    /// merges replaces it, as mq-deadline and BFQ do with the `blkmq-sched-index` crate's
    /// `bio_merge`, which runs Linux's sequence through the hooks above.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::collections::VecDeque;
    ///
    /// /// First in, first out; merges nothing.
    /// #[derive(Default)]
    /// struct Fifo(VecDeque<Rq>);
    /// impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// }
    ///
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let cx = ElvCx::new(&tags, &limits, 0);
    /// let mut fifo = Fifo::default();
    /// let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// tags.set_bio(&mut rq, Bio::new(Op::Read, 0, 8)).unwrap();
    /// fifo.insert_request(&cx, rq, false);
    /// // 8..16 touches the request held, but this elevator merges nothing: it comes back.
    /// let back = fifo.bio_merge(&cx, Bio::new(Op::Read, 8, 8)).unwrap_err();
    /// assert_eq!((back.sector, back.sectors), (8, 8));
    /// let rq = fifo.dispatch_request(&cx, 0).unwrap();
    /// assert_eq!(cx.io(&rq).unwrap().sectors(), 8);
    /// tags.free(rq).unwrap();
    /// ```
    fn bio_merge(&mut self, cx: &ElvCx<'_>, bio: Bio) -> Result<(), Bio> {
        let _ = cx;
        Err(bio)
    }

    /// Whether [`bio_merge`](Self::bio_merge) could take a bio now. `false` (nothing held
    /// to merge into) lets the queue skip the call, and the bio's trip through it and
    /// back. The provided method says yes, so `bio_merge` is always asked; mq-deadline and
    /// BFQ say whether they hold requests queued.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::collections::VecDeque;
    ///
    /// /// First in, first out; merges into nothing, and says so.
    /// #[derive(Default)]
    /// struct Fifo(VecDeque<Rq>);
    /// impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    ///     fn may_merge(&self) -> bool {
    ///         false
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), testing::Null::new()).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(Box::new(Fifo::default()));
    /// let queue = host.add_queue(config).unwrap();
    /// assert!(!queue.with_elevator(|fifo: &mut Fifo| fifo.may_merge()).unwrap());
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap(); // no merge asked: a request at once
    /// ```
    fn may_merge(&self) -> bool {
        true
    }

    /// A request that went through the elevator is being freed (completed, or ended with
    /// an error before it was dispatched). Under the lock, after
    /// [`completed_request`](Self::completed_request) for one the device completed; with a
    /// [`shared`](Self::shared) part, only when its [`ElvShared::request_done`] asks.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # struct Null;
    /// # impl Driver for Null {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         cx.queue().end_request(rq, Status::Ok).unwrap();
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Counts the requests it lets go.
    /// #[derive(Default)]
    /// struct Counting {
    ///     q: VecDeque<Rq>,
    ///     finished: usize,
    /// }
    /// impl Elevator for Counting {
    /// #     fn name(&self) -> &'static str { "counting" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn finish_request(&mut self, _: &ElvCx<'_>, _: &Rq) {
    ///         self.finished += 1;
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null).unwrap();
    /// let elevator = Box::new(Counting::default());
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(elevator);
    /// let queue = host.add_queue(config).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Write, 64, 8)).unwrap();
    /// assert_eq!(queue.with_elevator(|e: &mut Counting| e.finished), Some(2));
    /// ```
    fn finish_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let _ = (cx, rq);
    }

    /// A dispatched request completed at `now_ns` (accounting: rates, think times). Under
    /// the lock; with a [`shared`](Self::shared) part, only when its
    /// [`ElvShared::request_done`] asks.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Notes how long each request took.
    /// #[derive(Default)]
    /// struct Timing {
    ///     q: VecDeque<Rq>,
    ///     took_ns: Vec<u64>,
    /// }
    /// impl Elevator for Timing {
    /// #     fn name(&self) -> &'static str { "timing" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn completed_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
    ///         self.took_ns.push(cx.now_ns() - cx.io(rq).unwrap().start_ns());
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let elevator = Box::new(Timing::default());
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(elevator);
    /// let queue = host.add_queue(config).unwrap();
    /// // Start stamps come from the coarse clock: the span starts on it too.
    /// let before = queue.platform().coarse_now_ns();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// let spent = queue.platform().now_ns() - before;
    /// let took = queue.with_elevator(|e: &mut Timing| e.took_ns.clone()).unwrap();
    /// assert!(took.len() == 1 && took[0] <= spent); // within the submit-to-end span
    /// ```
    fn completed_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let _ = (cx, rq);
    }

    /// A dispatched request is coming back to be dispatched again (it is re-inserted
    /// through [`insert_requests`](Self::insert_requests) at the head next).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use std::sync::Mutex;
    /// # /// Keeps every request it is given until `take` hands them back.
    /// # struct Hold(Mutex<Vec<Rq>>);
    /// # impl Hold {
    /// #     fn new() -> Self { Hold(Mutex::new(Vec::new())) }
    /// #     fn take(&self) -> Vec<Rq> { self.0.lock().unwrap().drain(..).collect() }
    /// # }
    /// # impl Driver for Hold {
    /// #     type Platform = StdPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.0.lock().unwrap().push(rq);
    /// #         Ok(())
    /// #     }
    /// # }
    /// # use std::collections::VecDeque;
    /// /// Logs what the queue tells it.
    /// #[derive(Default)]
    /// struct Logged {
    ///     q: VecDeque<Rq>,
    ///     log: Vec<&'static str>,
    /// }
    /// impl Elevator for Logged {
    /// #     fn name(&self) -> &'static str { "logged" }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.q.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn insert_requests(
    ///         &mut self,
    ///         _: &ElvCx<'_>,
    ///         rqs: &mut dyn Iterator<Item = Rq>,
    ///         at_head: bool,
    ///     ) {
    ///         self.log.push(if at_head { "insert at head" } else { "insert" });
    ///         self.q.extend(rqs);
    ///     }
    ///     fn requeue_request(&mut self, _: &ElvCx<'_>, _: &Rq) {
    ///         self.log.push("requeue");
    ///     }
    /// }
    ///
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let elevator = Box::new(Logged::default());
    /// let config = QueueConfig::new(QueueLimits::new(1024)).elevator(elevator);
    /// let queue = host.add_queue(config).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.requeue_request(rq, true).unwrap();
    /// let log = queue.with_elevator(|e: &mut Logged| e.log.clone()).unwrap();
    /// assert_eq!(log, ["insert", "requeue", "insert at head"]);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    fn requeue_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let _ = (cx, rq);
    }

    /// When the elevator holds work back (idling), the platform time at which the queue
    /// should be run again.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::collections::VecDeque;
    ///
    /// /// Holds everything back until `until` (waiting for a nearby request, say).
    /// struct Idling {
    ///     q: VecDeque<Rq>,
    ///     until: u64,
    /// }
    /// impl Elevator for Idling {
    /// #     fn name(&self) -> &'static str { "idling" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.q.extend(rqs);
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.q.is_empty() }
    ///     fn dispatch_request(&mut self, cx: &ElvCx<'_>, _: usize) -> Option<Rq> {
    ///         if cx.now_ns() < self.until {
    ///             return None;
    ///         }
    ///         self.q.pop_front()
    ///     }
    ///     fn next_timer(&self) -> Option<u64> {
    ///         (!self.q.is_empty()).then_some(self.until)
    ///     }
    /// }
    ///
    /// # let set = TagSet::builder(8).build(StdPlatform::new(), |_| ()).unwrap();
    /// # let mut tags = set.attach().unwrap();
    /// # tags.attach_scheduler(None, |_| ()).unwrap();
    /// # let limits = QueueLimits::new(1 << 20);
    /// let mut elv = Idling { q: VecDeque::new(), until: 1_000 };
    /// assert_eq!(elv.next_timer(), None);
    /// let rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    /// elv.insert_requests(&ElvCx::new(&tags, &limits, 0), &mut core::iter::once(rq), false);
    /// assert!(elv.dispatch_request(&ElvCx::new(&tags, &limits, 500), 0).is_none());
    /// assert_eq!(elv.next_timer(), Some(1_000)); // run the queue again then
    /// let rq = elv.dispatch_request(&ElvCx::new(&tags, &limits, 1_000), 0).unwrap();
    /// tags.free(rq).unwrap();
    /// ```
    fn next_timer(&self) -> Option<u64> {
        None
    }

    /// The part of the elevator that completion reaches without the lock, if it has one
    /// (see [`ElvShared`], and its module for the contract): asked for once, when the
    /// elevator is attached to a queue; the queue keeps it until the elevator is switched
    /// away. Without one (the default), every completion takes the lock for
    /// [`completed_request`](Self::completed_request) and
    /// [`finish_request`](Self::finish_request).
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::collections::VecDeque;
    ///
    /// struct Fifo(VecDeque<Rq>);
    /// impl Elevator for Fifo {
    /// #     fn name(&self) -> &'static str { "fifo" }
    /// #     fn insert_requests(&mut self, _: &ElvCx, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
    /// #         self.0.extend(rqs);
    /// #     }
    /// #     fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
    /// #         self.0.pop_front()
    /// #     }
    /// #     fn has_work(&self, _: usize) -> bool { !self.0.is_empty() }
    /// }
    /// assert!(Fifo(VecDeque::new()).shared().is_none()); // completes under the lock
    /// ```
    fn shared(&self) -> Option<Arc<dyn ElvShared>> {
        None
    }
}

/// A scheduler tunable refused: its name and the value given (what every elevator's setters
/// answer for a value out of range).
///
/// ```
/// use blkmq_core::TunableError;
/// assert_eq!(TunableError::check("fifo_batch", 16, (1..=65536).contains(&16)), Ok(()));
/// let err = TunableError::check("fifo_batch", 0, false).unwrap_err();
/// assert_eq!(err, TunableError { name: "fifo_batch", value: 0 });
/// assert_eq!(err.to_string(), "fifo_batch = 0 is out of range");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TunableError {
    /// The tunable.
    pub name: &'static str,
    /// The value refused.
    pub value: u64,
}

impl TunableError {
    /// `Ok` when `ok`, else the error for `name` set to `value`.
    ///
    /// ```
    /// use blkmq_core::TunableError;
    /// let slice_idle = 9_000_000u64;
    /// assert!(TunableError::check("slice_idle", slice_idle, slice_idle <= 1_000_000_000).is_ok());
    /// ```
    pub fn check(name: &'static str, value: u64, ok: bool) -> Result<(), TunableError> {
        if ok {
            Ok(())
        } else {
            Err(TunableError { name, value })
        }
    }
}

impl core::fmt::Display for TunableError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} = {} is out of range", self.name, self.value)
    }
}

impl core::error::Error for TunableError {}
