//! Quiesce (no call of the driver's `queue_rq`) and stopping single hardware queues.

use crate::driver::Driver;
use crate::sync::{Ordering, seqcst_pair};

use super::host::Host;

use super::{RUNNING, RequestQueue, wait_a_little};

impl<D: Driver> Host<D> {
    /// Stops every queue of the host from calling [`Driver::queue_rq`] and waits for calls
    /// under way (tag-set wide quiesce). Nests.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// host.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(host.driver().take().is_empty()); // queued, not issued
    /// assert!(queue.is_quiesced() && queue.has_work(0));
    /// host.unquiesce();
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn quiesce(&self) {
        self.quiesced.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        self.for_each_queue(|queue| queue.wait_runs());
    }

    /// Undoes one [`quiesce`](Self::quiesce); the last one reruns every queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// host.quiesce();
    /// host.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// host.unquiesce();
    /// assert!(host.is_quiesced() && host.driver().take().is_empty());
    /// host.unquiesce(); // the last one runs the queue
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn unquiesce(&self) {
        if self.quiesced.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.for_each_queue(|queue| queue.run_hw_queues());
        }
    }

    /// Whether the host is quiesced.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(!host.is_quiesced());
    /// host.quiesce();
    /// assert!(host.is_quiesced() && queue.is_quiesced());
    /// host.unquiesce();
    /// assert!(!host.is_quiesced());
    /// ```
    pub fn is_quiesced(&self) -> bool {
        self.quiesced.load(Ordering::SeqCst) != 0
    }
}

impl<D: Driver> RequestQueue<D> {
    /// Stops calls of [`Driver::queue_rq`] on this queue and waits for those under way.
    /// Requests keep queueing. Nests. Not to be called from the driver's `queue_rq`.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap(); // taken, not issued
    /// assert!(host.driver().take().is_empty());
    /// assert!(queue.has_work(0));
    /// queue.unquiesce();
    /// assert_eq!(queue.usage(), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn quiesce(&self) {
        self.quiesced.fetch_add(1, Ordering::SeqCst);
        seqcst_pair();
        self.wait_runs();
    }

    fn wait_runs(&self) {
        for hctx in self.hctxs.iter() {
            while hctx.run_claim.load(Ordering::SeqCst) & RUNNING != 0 {
                wait_a_little();
            }
        }
    }

    /// Undoes one [`quiesce`](Self::quiesce); the last one runs the queue.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.quiesce();
    /// queue.quiesce();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.unquiesce();
    /// assert!(queue.is_quiesced() && host.driver().take().is_empty());
    /// queue.unquiesce();
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn unquiesce(&self) {
        if self.quiesced.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.run_hw_queues();
        }
    }

    /// Whether the queue (or its host) is quiesced.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.quiesce();
    /// assert!(queue.is_quiesced() && !host.is_quiesced());
    /// queue.unquiesce();
    /// host.quiesce();
    /// assert!(queue.is_quiesced()); // by its host
    /// host.unquiesce();
    /// assert!(!queue.is_quiesced());
    /// ```
    pub fn is_quiesced(&self) -> bool {
        self.quiesced.load(Ordering::SeqCst) != 0 || self.host.is_quiesced()
    }

    /// Whether dispatch must not call the driver on `hctx` now.
    #[inline(always)]
    pub(super) fn halted(&self, hctx: usize) -> bool {
        self.quiesced.load(Ordering::SeqCst) != 0
            || self.host.quiesced.load(Ordering::SeqCst) != 0
            || self.hctxs[hctx].stopped.load(Ordering::SeqCst)
    }

    /// Stops dispatch on one hardware queue (a driver out of resources for a while).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.stop_hw_queue(0);
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(host.driver().take().is_empty() && queue.has_work(0));
    /// queue.start_hw_queue(0);
    /// assert_eq!(queue.usage(), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn stop_hw_queue(&self, hctx: usize) {
        if let Some(h) = self.hctxs.get(hctx) {
            h.stopped.store(true, Ordering::SeqCst);
        }
    }

    /// Lets a stopped hardware queue dispatch again, and runs it.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.stop_hw_queue(0);
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.start_hw_queue(0); // the queued request goes to the driver
    /// let held = host.driver().take();
    /// assert_eq!(held.len(), 1);
    /// assert!(!queue.has_work(0));
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn start_hw_queue(&self, hctx: usize) {
        if let Some(h) = self.hctxs.get(hctx) {
            h.stopped.store(false, Ordering::SeqCst);
            self.run_hw_queue(hctx);
        }
    }
}
