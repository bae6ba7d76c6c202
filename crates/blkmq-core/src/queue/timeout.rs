//! Timeouts: requests in flight past their deadline.

use alloc::vec::Vec;

use crate::driver::{Driver, TimeoutAction};
use crate::request::RqState;
use crate::sync::Ordering;

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// Timeouts fired so far.
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let late = queue.platform().now_ns() + DEFAULT_TIMEOUT_NS + 1;
    /// assert_eq!(queue.check_timeouts(late), 1); // `Hold` keeps the default: another timeout
    /// assert_eq!(queue.timed_out(), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }

    /// Checks every request in flight against its deadline at `now_ns`: an expired one is
    /// claimed (once per dispatch) and the driver decides ([`Driver::timeout`]). Returns
    /// how many timed out. Call it periodically (Linux: each second or so).
    ///
    /// ```
    /// # use blkmq_core::*;
    /// # use blkmq_core::testing::Hold;
    /// # let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    /// # let queue = host.add_queue(QueueConfig::new(QueueLimits::new(1024))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let now = queue.platform().now_ns();
    /// assert_eq!(queue.check_timeouts(now), 0);
    /// let late = now + DEFAULT_TIMEOUT_NS;
    /// assert_eq!(queue.check_timeouts(late), 1); // `Hold` resets the timer (the default)
    /// assert_eq!(queue.check_timeouts(late), 0);
    /// assert_eq!(queue.check_timeouts(late + DEFAULT_TIMEOUT_NS), 1);
    /// # queue.end_requests(host.driver().take().into_iter().map(|rq| (rq, Status::Ok))).unwrap();
    /// ```
    pub fn check_timeouts(&self, now_ns: u64) -> usize {
        let Some(_inside) = self.enter_any() else {
            return 0;
        };
        if self.usage() <= 1 {
            return 0; // only ourselves
        }
        // Claim the expired ones under the iteration lock; ask the driver outside it (its
        // handler may iterate, or end requests).
        let mut expired: Vec<(usize, u32, u64, u64)> = Vec::new();
        self.tags().for_each_busy(None, |busy| {
            let request = busy.request;
            let (generation, state) = request.snapshot();
            let deadline = request.deadline_ns();
            if state == RqState::InFlight
                && deadline <= now_ns
                && deadline != u64::MAX
                && request.swap_deadline(deadline, u64::MAX)
            {
                expired.push((busy.hctx, busy.tag, generation, deadline));
            }
            true
        });
        let mut fired = 0;
        let timeout = self.host.set.timeout_ns();
        let driver = self.driver();
        for (hctx, tag, generation, deadline) in expired {
            let Some(request) = self.tags().tag_to_rq(hctx, tag) else {
                continue;
            };
            if request.snapshot() != (generation, RqState::InFlight) {
                // Ended or restarted meanwhile; a new start set its own deadline, so this
                // puts ours back only if nobody moved it since.
                request.swap_deadline(u64::MAX, deadline);
                continue;
            }
            fired += 1;
            match driver.timeout(&self.cx(hctx), request) {
                TimeoutAction::Done => {}
                TimeoutAction::ResetTimer => {
                    request.swap_deadline(u64::MAX, now_ns.saturating_add(timeout));
                }
            }
        }
        self.timed_out.fetch_add(fired as u64, Ordering::Relaxed);
        fired
    }
}
