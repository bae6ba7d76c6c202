//! What BFQ reports: the state of an issuer's queue, and scheduler-wide counters.

use blkmq_core::{IoPrio, IssuerId};

use crate::Bfq;
use crate::queue::{NO_QUEUE, prio_weight};

/// The state of an issuer's sync queue.
///
/// ```
/// use blkmq_sched_bfq::QueueStats;
/// assert!(!QueueStats::default().raised);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The weight in use, raising included.
    pub weight: u32,
    /// Whether it is weight-raised.
    pub raised: bool,
    /// Whether more than 4 of its last 32 requests were far (> 8 MiB) seeks.
    pub seeky: bool,
    /// The budget of its current turn, or of its next one when it is not backlogged
    /// (sectors).
    pub budget: u64,
    /// Sectors dispatched, as charged (lifetime).
    pub service_sectors: u64,
    /// Requests dispatched (lifetime).
    pub dispatched: u64,
    /// Turns its budget timeout ended (lifetime).
    pub budget_timeouts: u64,
}

/// Scheduler-wide counters and estimates.
///
/// ```
/// use blkmq_sched_bfq::Bfq;
/// let stats = Bfq::new().stats();
/// assert_eq!((stats.peak_rate, stats.max_budget), (0, 16_384));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BfqStats {
    /// The estimated peak rate in sectors per second; 0 until measured.
    pub peak_rate: u64,
    /// The maximum budget in use (sectors).
    pub max_budget: u64,
    /// Times the device was idled for the queue in service.
    pub idle_waits: u64,
    /// Requests dispatched from another queue while idling.
    pub injected: u64,
    /// Turns ended by the budget timeout.
    pub budget_timeouts: u64,
    /// Queues weight-raised now.
    pub raised_queues: usize,
    /// Bursts of queue creations that became large.
    pub large_bursts: u64,
}

impl Bfq {
    /// The state of an issuer's sync queue, once it has issued sync I/O.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::Bfq;
    /// assert!(Bfq::new().issuer_stats(IssuerId(9)).is_none());
    /// ```
    pub fn issuer_stats(&self, issuer: IssuerId) -> Option<QueueStats> {
        let entry = self.issuers.get(&issuer)?;
        let mut stats = QueueStats {
            weight: entry
                .weight
                .unwrap_or(prio_weight(IoPrio::default().level())),
            raised: false,
            seeky: false,
            budget: 0,
            service_sectors: entry.service,
            dispatched: entry.dispatched,
            budget_timeouts: entry.budget_timeouts,
        };
        if entry.queue != NO_QUEUE {
            let q = &self.queues[entry.queue as usize];
            // Its queue's counts, not yet folded into the issuer's.
            stats.service_sectors += q.total_service;
            stats.dispatched += q.total_dispatched;
            stats.budget_timeouts += q.budget_timeouts;
            stats.weight = q.weight();
            stats.raised = q.wr_coeff > 1;
            stats.seeky = q.seeky();
            stats.budget = if self.sched.is_active(q.entity) {
                q.budget
            } else {
                q.max_budget
            };
        } else if entry.dispatched == 0 {
            return None;
        }
        Some(stats)
    }

    /// Scheduler-wide counters.
    ///
    /// ```
    /// use blkmq_sched_bfq::Bfq;
    /// assert_eq!(Bfq::new().stats().idle_waits, 0);
    /// ```
    pub fn stats(&self) -> BfqStats {
        BfqStats {
            peak_rate: self.rate.rate,
            max_budget: self.max_budget_now(),
            raised_queues: self.nr_raised,
            ..self.stats
        }
    }
}
