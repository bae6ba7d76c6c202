//! A first-in, first-out elevator for the tests: no merging of its own, requeued requests
//! first. Not shipped.

use std::collections::VecDeque;

use blkmq_core::{Elevator, ElvCx, Rq};

/// Requests in arrival order; any hardware queue may dispatch any of them (the queue
/// issues each on its own hardware queue).
#[derive(Default)]
pub(crate) struct Fifo {
    rqs: VecDeque<Rq>,
}

impl Fifo {
    /// An empty FIFO elevator.
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

impl Elevator for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn depth_updated(&mut self, nr_requests: usize, _nr_keys: usize) {
        self.rqs.reserve(nr_requests);
    }

    fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, at_head: bool) {
        if at_head {
            let mut n = 0;
            for rq in rqs {
                self.rqs.push_front(rq);
                n += 1;
            }
            // Keep the inserted ones in their own order.
            self.rqs.make_contiguous()[..n].reverse();
        } else {
            self.rqs.extend(rqs);
        }
    }

    fn dispatch_request(&mut self, _: &ElvCx<'_>, _hctx: usize) -> Option<Rq> {
        self.rqs.pop_front()
    }

    fn has_work(&self, _hctx: usize) -> bool {
        !self.rqs.is_empty()
    }
}
