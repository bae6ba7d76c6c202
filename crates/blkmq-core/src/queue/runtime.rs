//! Run-time changes of a request queue.

use alloc::collections::VecDeque;

use crate::driver::Driver;
use crate::error::ConfigError;
use crate::request::Rq;
use crate::sync::Ordering;

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// Changes the number of scheduler tags (within those made), draining the queue first.
    ///
    /// # Errors
    /// Whatever [`QueueTags::set_nr_requests`](crate::QueueTags::set_nr_requests) refuses ([`ConfigError::NoScheduler`]
    /// without an elevator).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Null;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
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
    /// assert_eq!(queue.set_nr_requests(8), Err(ConfigError::NoScheduler));
    /// queue.switch_elevator(Some(Box::new(Fifo::default())), Some(32)).unwrap();
    /// queue.set_nr_requests(8).unwrap();
    /// assert_eq!(queue.queue_tags().nr_requests(), Some(8));
    /// assert!(queue.set_nr_requests(64).is_err()); // more than were made
    /// ```
    pub fn set_nr_requests(&self, nr: usize) -> Result<(), ConfigError> {
        let _change = self.change_lock.lock();
        if !self.has_elevator.load(Ordering::SeqCst) {
            return Err(ConfigError::NoScheduler);
        }
        self.lock_out();
        let result = self.tags().set_nr_requests(nr);
        if result.is_ok() {
            self.elevator_depth_updated(nr, self.tags().nr_keys());
        }
        self.let_in();
        result
    }

    /// Makes the queue lists hold `capacity` requests without growing.
    pub(super) fn reserve(&self, capacity: usize) {
        let grow = |list: &mut VecDeque<Rq>| {
            let len = list.len();
            list.reserve(capacity.saturating_sub(len));
        };
        grow(&mut self.requeue.lock());
        for h in self.hctxs.iter() {
            grow(&mut h.dispatch.lock());
            grow(&mut h.run_batch.lock());
        }
        for ctx in self.ctxs.iter().filter(|c| c.pos != usize::MAX) {
            grow(&mut ctx.list.lock());
        }
    }
}
