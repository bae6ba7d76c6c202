//! Requeue: requests the driver hands back, issued again.

use crate::driver::Driver;
use crate::error::Misused;
use crate::request::Rq;
use crate::sync::Ordering;

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// Hands a request the driver took back, to be issued again (after a device reset, a
    /// path change): it waits on the requeue list until
    /// [`kick_requeue_list`](Self::kick_requeue_list), which `kick` asks for at once.
    ///
    /// # Errors
    /// [`Misused`] with [`TagError::ForeignRequest`](crate::TagError::ForeignRequest) when
    /// `rq` is not this queue's: nothing is requeued, no count changes, and the token comes
    /// back in the error for the queue it belongs to.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.requeue_request(rq, false).unwrap();
    /// assert_eq!((queue.requeued(), host.in_driver()), (1, 0));
    /// queue.kick_requeue_list(); // issued again
    /// let rq = host.driver().take().pop().unwrap();
    /// queue.requeue_request(rq, true).unwrap(); // issued again at once
    /// assert_eq!(queue.requeued(), 0);
    /// let rq = host.driver().take().pop().unwrap();
    /// assert_eq!(queue.io(&rq).unwrap().sector(), 0);
    /// queue.end_request(rq, Status::Ok).unwrap();
    /// ```
    ///
    /// Another queue's request comes back, still in flight:
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// let a = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// let b = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// a.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let rq = host.driver().take().pop().unwrap();
    /// let misused = b.requeue_request(rq, true).unwrap_err();
    /// assert_eq!((b.requeued(), host.in_driver()), (0, 1));
    /// a.end_request(misused.rq, Status::Ok).unwrap();
    /// ```
    pub fn requeue_request(&self, mut rq: Rq, kick: bool) -> Result<(), Misused> {
        let tags = self.tags();
        let Ok(request) = tags.request(&rq) else {
            return Err(Misused::foreign(rq));
        };
        let hctx = request.hctx();
        let _ = tags.requeue(&mut rq);
        self.trace_rq(crate::trace::Action::Requeue, &rq);
        if self.has_elevator.load(Ordering::Relaxed) {
            let _ = tags.put_driver_tag(&mut rq);
            // Flushes bypass the elevator: it never saw this one.
            if tags.io(&rq).is_ok_and(|io| !io.bypasses_elevator()) {
                self.elevator_requeued(&rq);
            }
        }
        self.driver().put_budget(&self.cx(hctx));
        self.requeue.lock().push_back(rq);
        self.host.restart_after(hctx, 1);
        if kick {
            self.kick_requeue_list();
        }
        Ok(())
    }

    /// Sends every requeued request back to dispatch (ahead of new ones) and runs the
    /// hardware queues.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// queue.submit(Bio::new(Op::Read, 64, 8)).unwrap();
    /// for rq in host.driver().take() {
    ///     queue.requeue_request(rq, false).unwrap();
    /// }
    /// assert!(host.driver().take().is_empty());
    /// queue.kick_requeue_list();
    /// let held = host.driver().take();
    /// let sectors: Vec<u64> = held.iter().map(|rq| queue.io(rq).unwrap().sector()).collect();
    /// assert_eq!(sectors, [0, 64]); // in the order they came back
    /// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn kick_requeue_list(&self) {
        loop {
            let Some(rq) = self.requeue.lock().pop_front() else {
                return;
            };
            let tags = self.tags();
            let hctx = tags.request(&rq).map_or(0, |r| r.hctx());
            let elevated = self.has_elevator.load(Ordering::Relaxed)
                && tags.io(&rq).is_ok_and(|io| !io.bypasses_elevator());
            // Ahead of what the elevator holds: it was issued once already.
            self.insert(rq, hctx, elevated, true);
            self.run_hw_queue(hctx);
        }
    }

    /// Requests waiting on the requeue list.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// assert_eq!(queue.requeued(), 0);
    /// queue.requeue_request(host.driver().take().pop().unwrap(), false).unwrap();
    /// assert_eq!(queue.requeued(), 1);
    /// queue.kick_requeue_list();
    /// assert_eq!(queue.requeued(), 0);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn requeued(&self) -> usize {
        self.requeue.lock().len()
    }
}
