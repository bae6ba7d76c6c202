//! The service entry point: everything that happens outside a submission or a completion
//! (Linux's kblockd work: `blk_mq_run_work_fn`, `blk_mq_delay_run_hw_queue`,
//! `blk_mq_timeout_work` and the `blk_mq_tag_idle` it does).
//!
//! [`Host::service`] runs kicked hardware queues, delayed reruns whose time came, elevator
//! timers that expired, the timeout check at the tag set's interval and tag idling, and
//! says when it next needs to be called. The std runtime
//! ([`StdPlatform`](crate::StdPlatform)), the simulator and a kernel all drive this one
//! function; a platform with its own model of when its kblockd runs (the simulator) asks
//! it for one part of that work at a time with [`Host::service_only`].

use crate::driver::Driver;
use crate::platform::{Platform, Service};
use crate::sync::{AtomicU64, Ordering};

use super::RequestQueue;
use super::host::Host;

/// How long a queue sharing a tag set may go with nothing in flight before the service
/// marks it idle and its share goes back to the other queues (Linux idles a queue's tags
/// from its timeout work when nothing is busy).
///
/// ```
/// assert_eq!(blkmq_core::IDLE_INTERVAL_NS, 100_000_000);
/// ```
pub const IDLE_INTERVAL_NS: u64 = 100_000_000;

/// The longest interval between two timeout checks while a host has queues (Linux rounds
/// its timeout timer up to a second). Sets with a shorter request timeout are checked at
/// that timeout, but never more often than once a millisecond.
///
/// ```
/// assert_eq!(blkmq_core::TIMEOUT_CHECK_NS, 1_000_000_000);
/// ```
pub const TIMEOUT_CHECK_NS: u64 = 1_000_000_000;

/// Which part of the service's work a call of [`Host::service_only`] does.
///
/// [`All`](Due::All) is what [`Host::service`] does: everything whose time came, as the
/// std runtime and a kernel call it. The other parts are for a platform whose own model
/// says when its kblockd runs each piece (the simulator, on virtual time): the service
/// still decides what each piece runs.
///
/// ```
/// use blkmq_core::Due;
/// assert_ne!(Due::All, Due::Kicked);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Due {
    /// Everything whose time came: kicked queues, delayed reruns due, expired elevator
    /// timers, the timeout check at its interval, tag idling.
    All,
    /// Every kicked hardware queue runs now, delayed reruns too, whatever their delay (the
    /// platform's own model decided that now is their time); nothing else.
    Kicked,
    /// The queues whose elevator timer expired run; nothing else.
    Timers,
    /// Every queue is checked for requests past their deadline now, whatever the check's
    /// interval; nothing else.
    Timeouts,
}

/// What a call of [`Host::service_only`] did, and when it next wants to be called.
///
/// ```
/// use blkmq_core::*;
/// use blkmq_core::testing::Null;
///
/// let host = Host::new(TagSet::builder(8), StdPlatform::manual(), Null::new()).unwrap();
/// let done = host.service_only(Due::Kicked);
/// assert_eq!(done, Serviced::default()); // nothing kicked, nothing pending
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Serviced {
    /// The platform time the work this call covers next needs a call at, or `None` when
    /// none of it is pending.
    pub next: Option<u64>,
    /// Kicked hardware queues that ran.
    pub kicked: usize,
    /// Requests that timed out ([`RequestQueue::check_timeouts`]).
    pub timed_out: usize,
}

/// The periodic work's next times, in platform time (`0`: not armed).
pub(super) struct Ticks {
    timeout_at: AtomicU64,
    idle_at: AtomicU64,
}

impl Ticks {
    pub(super) fn new() -> Self {
        Self {
            timeout_at: AtomicU64::new(0),
            idle_at: AtomicU64::new(0),
        }
    }
}

/// The earliest of two wanted times (`u64::MAX`: none).
#[inline]
fn earliest(next: &mut u64, at: u64) {
    *next = (*next).min(at);
}

impl<D: Driver> Host<D> {
    /// Does everything due now outside a submission or a completion, and returns the
    /// platform time ([`Platform::now_ns`](crate::Platform::now_ns)) it next needs to be
    /// called at, or `None` when nothing is pending. In order:
    ///
    /// * kicked hardware queues ([`Platform::kick`](crate::Platform::kick)) run;
    /// * delayed reruns ([`Platform::kick_after`](crate::Platform::kick_after)) run once
    ///   their time came, never sooner; a later one is returned;
    /// * elevators whose timer ([`RequestQueue::next_timer`]) expired have their queues run;
    /// * every [`TIMEOUT_CHECK_NS`] (or the set's timeout, if shorter) while the host has
    ///   queues, requests past their deadline are checked ([`RequestQueue::check_timeouts`]);
    /// * every [`IDLE_INTERVAL_NS`] while queues share a tag set, a queue with nothing in
    ///   flight is marked idle ([`QueueTags::mark_idle`](crate::QueueTags::mark_idle)), so
    ///   the others get its share back; its next allocation makes it active again.
    ///
    /// Call it from a thread (it runs hardware queues, so the driver's `queue_rq`), never
    /// from inside a [`kick`](crate::Platform::kick) or an interrupt. Calls may overlap.
    /// The std runtime calls it by itself; in manual mode a test calls it by hand.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use blkmq_core::testing::Null;
    ///
    /// let platform = StdPlatform::manual_with_cpus(1);
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Null::new()).unwrap();
    /// assert_eq!(host.service(), None); // no queue: nothing to check, ever
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// let now = platform.now_ns();
    /// let next = host.service().unwrap(); // the first timeout check is armed
    /// assert!(next >= now + 1_000_000 && next <= platform.now_ns() + TIMEOUT_CHECK_NS);
    /// # drop(queue);
    /// ```
    pub fn service(&self) -> Option<u64> {
        self.service_only(Due::All).next
    }

    /// Does the part `due` names of what [`service`](Self::service) does, and says what
    /// it did and when that part next needs a call: for a platform with its own model of
    /// when its kblockd runs each piece (the simulator runs kicks after its own latency,
    /// elevator timers at their time, timeout checks at its own interval). Call it from
    /// where [`service`](Self::service) is called.
    ///
    /// ```
    /// use blkmq_core::*;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    ///
    /// /// Turns down the first request ("not now"), then completes everything.
    /// struct Busy(AtomicBool);
    /// impl Driver for Busy {
    ///     type Platform = StdPlatform;
    ///     type Payload = ();
    ///     fn init_request(&self, _: RequestInit) {}
    ///     fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    ///         if !self.0.swap(true, Ordering::Relaxed) {
    ///             return Err(Rejected { rq, status: Status::Resource });
    ///         }
    ///         cx.queue().end_request(rq, Status::Ok).unwrap();
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let platform = StdPlatform::manual_with_cpus(1);
    /// let host = Host::new(TagSet::builder(8), platform.clone(), Busy(AtomicBool::new(false)))
    ///     .unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// assert_eq!(host.service_only(Due::Timeouts).timed_out, 0); // nothing in flight
    /// assert_eq!(host.service_only(Due::Timers).next, None); // no elevator
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// // Turned down with nothing in flight: a rerun asked for after the resource delay,
    /// // which this caller says is now.
    /// let done = host.service_only(Due::Kicked);
    /// assert_eq!((done.kicked, done.next, queue.usage()), (1, None, 0));
    /// assert!(host.service_only(Due::All).next.is_some()); // the timeout check, armed
    /// ```
    pub fn service_only(&self, due: Due) -> Serviced {
        let now = self.set.platform().now_ns();
        let mut next = u64::MAX;
        let mut done = Serviced::default();
        match due {
            Due::All => {
                done.kicked = self.run_due(now, &mut next);
                let queues = self.run_timers(now, &mut next);
                if queues > 0 {
                    done.timed_out = self.tick_timeouts(now, &mut next);
                }
                self.tick_idle(now, &mut next);
            }
            // Nothing is later than `u64::MAX`: every kicked queue is due.
            Due::Kicked => done.kicked = self.run_due(u64::MAX, &mut next),
            Due::Timers => {
                self.run_timers(now, &mut next);
            }
            Due::Timeouts => done.timed_out = self.check_timeouts_now(now),
        }
        done.next = (next != u64::MAX).then_some(next);
        done
    }

    /// Every queue checked for timeouts at `now`; how many timed out.
    fn check_timeouts_now(&self, now: u64) -> usize {
        let mut fired = 0;
        self.for_each_queue(|queue| fired += queue.check_timeouts(now));
        fired
    }

    /// Kicked hardware queues whose time came run; the others stay marked. Returns how
    /// many ran.
    pub(super) fn run_due(&self, now: u64, next: &mut u64) -> usize {
        let mut ran = 0;
        self.kicked.drain(|slot| {
            let due = self.due[slot].load(Ordering::SeqCst);
            if due != u64::MAX && due > now {
                // A delayed rerun, not yet: stays marked for a later call.
                self.kicked.mark(slot);
                earliest(next, due);
                return;
            }
            // Cleared before the queue's marks are taken: a delay set after this is
            // kept; one set before is taken early at worst, never lost.
            self.due[slot].store(u64::MAX, Ordering::SeqCst);
            if let Some(queue) = self.queue_at(slot) {
                queue.kicked.drain(|hctx| {
                    queue.run_hw_queue(hctx);
                    ran += 1;
                });
            }
        });
        ran
    }

    /// Queues whose elevator timer expired run. Returns how many live queues there are.
    fn run_timers(&self, now: u64, next: &mut u64) -> usize {
        let mut queues = 0;
        self.for_each_queue(|queue| {
            queues += 1;
            if !queue.has_elevator.load(Ordering::Relaxed) {
                return;
            }
            let Some(at) = queue.next_timer() else {
                return;
            };
            if at > now {
                earliest(next, at);
                return;
            }
            queue.run_hw_queues();
            // A timer still in the past is not wanted again at once (the elevator holds
            // work for a completion); a later one is.
            if let Some(at) = queue.next_timer().filter(|&at| at > now) {
                earliest(next, at);
            }
        });
        queues
    }

    /// The timeout check, at its interval. Returns how many timed out.
    fn tick_timeouts(&self, now: u64, next: &mut u64) -> usize {
        let mut fired = 0;
        let interval = self.set.timeout_ns().clamp(1_000_000, TIMEOUT_CHECK_NS);
        let ticks = &self.ticks;
        let at = ticks.timeout_at.load(Ordering::Acquire);
        if at == 0 || now >= at {
            let then = now.saturating_add(interval);
            // One caller of overlapping ones does the check.
            if ticks
                .timeout_at
                .compare_exchange(at, then, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
                && at != 0
            {
                fired = self.check_timeouts_now(now);
            }
        }
        earliest(next, ticks.timeout_at.load(Ordering::Acquire));
        fired
    }

    /// Tag idling, at its interval, while queues are active on a shared tag set.
    fn tick_idle(&self, now: u64, next: &mut u64) {
        let ticks = &self.ticks;
        let at = ticks.idle_at.load(Ordering::Acquire);
        if at != 0
            && now >= at
            && ticks
                .idle_at
                .compare_exchange(at, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.for_each_queue(RequestQueue::idle_tags);
        }
        let nr_hw = self.set.nr_hw_queues();
        if !(0..nr_hw).any(|hctx| self.set.active_queues(hctx) > 0) {
            return; // nobody holds a share: nothing to give back
        }
        let then = now.saturating_add(IDLE_INTERVAL_NS);
        let _ = ticks
            .idle_at
            .compare_exchange(0, then, Ordering::AcqRel, Ordering::Acquire);
        earliest(next, ticks.idle_at.load(Ordering::Acquire));
    }
}

impl<D: Driver> Service for Host<D> {
    fn service(&self) -> Option<u64> {
        Host::service(self)
    }
}

impl<D: Driver> RequestQueue<D> {
    /// Marks this queue idle on every map where it has nothing in flight.
    fn idle_tags(&self) {
        let Some(_inside) = self.enter_any() else {
            return;
        };
        for hctx in 0..self.nr_hw_queues() {
            self.tags().mark_idle(hctx);
        }
    }
}
