//! Hardware queue deactivation: a hardware queue whose CPUs went away.

use crate::driver::Driver;
use crate::sync::Ordering;

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// The CPUs of `hctx` went away: no request is made for it any more (its CPUs' bios
    /// go to another active hardware queue); what it holds still dispatches and completes.
    /// Returns whether it has drained already (see [`is_hctx_drained`](Self::is_hctx_drained)).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let platform = StdPlatform::with_cpus(2);
    /// platform.pin_current_thread(0); // this thread is CPU 0, served by hardware queue 0
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, platform, Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(!queue.deactivate_hctx(0)); // it holds a request
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap(); // goes to hardware queue 1
    /// let held = host.driver().take();
    /// let hctxs: Vec<usize> = held.iter().map(|rq| queue.request(rq).unwrap().hctx()).collect();
    /// assert_eq!(hctxs, [0, 1]);
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert!(queue.is_hctx_drained(0));
    /// ```
    pub fn deactivate_hctx(&self, hctx: usize) -> bool {
        let Some(h) = self.hctxs.get(hctx) else {
            return true;
        };
        h.inactive.store(true, Ordering::SeqCst);
        self.run_hw_queue(hctx);
        self.is_hctx_drained(hctx)
    }

    /// Whether no request of this queue is allocated on `hctx`.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert!(!queue.is_hctx_drained(0));
    /// queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// assert!(queue.is_hctx_drained(0));
    /// assert!(queue.is_hctx_drained(7)); // no such hardware queue
    /// ```
    pub fn is_hctx_drained(&self, hctx: usize) -> bool {
        if hctx >= self.hctxs.len() {
            return true;
        }
        let Some(_inside) = self.enter_any() else {
            // The tags are being replaced: the queue is drained.
            return true;
        };
        let mut busy = false;
        self.tags().for_each_busy(Some(hctx), |_| {
            busy = true;
            false
        });
        !busy && self.hctx_is_empty(hctx)
    }

    /// Its CPUs are back.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let platform = StdPlatform::with_cpus(2);
    /// platform.pin_current_thread(0); // this thread is CPU 0, served by hardware queue 0
    /// let tags = TagSet::builder(8).hw_queues(2);
    /// let host = Host::new(tags, platform, Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// assert!(queue.deactivate_hctx(0));
    /// queue.activate_hctx(0);
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// assert_eq!(queue.request(&rq).unwrap().hctx(), 0);
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    pub fn activate_hctx(&self, hctx: usize) {
        if let Some(h) = self.hctxs.get(hctx) {
            h.inactive.store(false, Ordering::SeqCst);
        }
    }

    pub(super) fn hctx_is_empty(&self, hctx: usize) -> bool {
        let h = &self.hctxs[hctx];
        h.dispatch_len.load(Ordering::SeqCst) == 0
            && h.ctx_has_work.iter().all(|w| w.load(Ordering::SeqCst) == 0)
    }
}
