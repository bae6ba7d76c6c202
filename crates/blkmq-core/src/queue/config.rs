//! How a request queue is made: its limits, elevator, scheduler tags and maps.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::fmt;

use crate::elevator::Elevator;
use crate::limits::QueueLimits;
use crate::queue_map::QueueMaps;
use crate::trace::Tracer;

/// How to make a [`RequestQueue`](crate::RequestQueue).
///
/// ```
/// use blkmq_core::{QueueConfig, QueueLimits};
/// let config = QueueConfig::new(QueueLimits::new(1 << 20)).nr_requests(64);
/// assert_eq!(config.nr_requests, Some(64));
/// assert!(config.elevator.is_none());
/// ```
pub struct QueueConfig {
    /// The device's limits.
    pub limits: QueueLimits,
    /// The I/O scheduler, if any (requests then come from scheduler tags).
    pub elevator: Option<Box<dyn Elevator>>,
    /// Scheduler tags (default 2 x the queue depth, at most 128 x 2).
    pub nr_requests: Option<usize>,
    /// The CPU -> hardware queue maps (default: the driver's, else an even spread).
    pub maps: Option<QueueMaps>,
    /// What the queue reports its trace events to, if anything ([`Tracer`]); set for the
    /// queue's life. Without one, each trace point is one branch on this field, not taken.
    pub tracer: Option<Arc<dyn Tracer>>,
    /// Whether the queue keeps I/O statistics (default off; see [`accounting`](Self::accounting)).
    pub accounting: bool,
}

impl QueueConfig {
    /// A queue with `limits`, no elevator, default maps.
    ///
    /// ```
    /// use blkmq_core::{QueueConfig, QueueLimits};
    /// let config = QueueConfig::new(QueueLimits::new(64));
    /// assert_eq!(config.limits.capacity, 64);
    /// assert!(config.elevator.is_none() && config.nr_requests.is_none() && config.maps.is_none());
    /// assert!(config.tracer.is_none());
    /// ```
    pub fn new(limits: QueueLimits) -> Self {
        Self {
            limits,
            elevator: None,
            nr_requests: None,
            maps: None,
            tracer: None,
            accounting: false,
        }
    }

    /// With I/O accounting on or off (Linux's `QUEUE_FLAG_IO_STAT`, sysfs `iostats`): the
    /// counters of `/proc/diskstats` and latency histograms, read with
    /// [`RequestQueue::stats`](crate::RequestQueue::stats). Off (the default), the queue
    /// reads no clock for them and pays one predictable branch where it would count.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64)).accounting(true)).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// let stats = queue.stats().unwrap();
    /// assert_eq!((stats.op(OpGroup::Write).ios, stats.op(OpGroup::Write).sectors), (1, 8));
    /// assert_eq!(stats.in_flight_total(), 0);
    /// let off = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// assert!(off.stats().is_none());
    /// ```
    pub fn accounting(mut self, on: bool) -> Self {
        self.accounting = on;
        self
    }

    /// With an elevator.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
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
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Fifo::default()));
    /// let queue = host.add_queue(config).unwrap();
    /// assert_eq!(queue.elevator_name(), Some("fifo"));
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap(); // through the elevator to `Null`
    /// assert_eq!(queue.usage(), 0);
    /// ```
    pub fn elevator(mut self, elevator: Box<dyn Elevator>) -> Self {
        self.elevator = Some(elevator);
        self
    }

    /// With `nr` scheduler tags (used only with an [`elevator`](Self::elevator)).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
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
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).nr_requests(16);
    /// let plain = host.add_queue(config).unwrap();
    /// assert_eq!(plain.queue_tags().nr_requests(), None); // no elevator: no scheduler tags
    /// let config = QueueConfig::new(QueueLimits::new(64)).elevator(Box::new(Fifo::default()));
    /// let queue = host.add_queue(config.nr_requests(16)).unwrap();
    /// assert_eq!(queue.queue_tags().nr_requests(), Some(16));
    /// ```
    pub fn nr_requests(mut self, nr: usize) -> Self {
        self.nr_requests = Some(nr);
        self
    }

    /// With these queue maps.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// // Two CPUs; reads go to hardware queue 1, everything else to 0.
    /// let maps = QueueMaps::new(
    ///     QueueMap::spread(2, 1, 0).unwrap(),
    ///     Some(QueueMap::spread(2, 1, 1).unwrap()),
    ///     None,
    /// )
    /// .unwrap();
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, StdPlatform::with_cpus(2), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64)).maps(maps)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Write, 32, 8)).unwrap();
    /// let held = host.driver().take();
    /// let hctxs: Vec<usize> = held.iter().map(|rq| queue.request(rq).unwrap().hctx()).collect();
    /// assert_eq!(hctxs, [1, 0]);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn maps(mut self, maps: QueueMaps) -> Self {
        self.maps = Some(maps);
        self
    }
}

impl QueueConfig {
    /// With a tracer: the queue reports its trace events to it (see [`Tracer`]).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// use std::sync::Arc;
    /// let rings = Arc::new(RingTracer::new(1, 16));
    /// let host = Host::new(TagSet::builder(8), StdPlatform::with_cpus(1), Hold::new()).unwrap();
    /// let config = QueueConfig::new(QueueLimits::new(64)).tracer(rings.clone());
    /// let queue = host.add_queue(config).unwrap();
    /// queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    /// let letters: String = rings.drain_sorted().iter().map(|e| e.action.letter()).collect();
    /// assert_eq!(letters, "QGD"); // queued, allocated, issued: `Hold` holds it
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn tracer(mut self, tracer: Arc<dyn Tracer>) -> Self {
        self.tracer = Some(tracer);
        self
    }
}

impl fmt::Debug for QueueConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueConfig")
            .field("limits", &self.limits)
            .field("elevator", &self.elevator.as_ref().map(|e| e.name()))
            .field("nr_requests", &self.nr_requests)
            .field("traced", &self.tracer.is_some())
            .field("accounting", &self.accounting)
            .finish_non_exhaustive()
    }
}
