//! One BFQ queue: an issuer's sync queue or a shared async queue, its budget, its think
//! time and seekiness, and its weight raising.

use blkmq_core::IoPrioClass;

use crate::tunables::MS;
use crate::wf2q::{Class, EntityId};

/// No queue (an index meaning "none").
pub(crate) const NO_QUEUE: u32 = u32::MAX;

/// The budget every queue starts from until the peak rate is known (sectors).
pub(crate) const DEFAULT_MAX_BUDGET: u64 = 16 * 1024;
/// Async service is charged this many times its size (unless the queue is raised).
pub(crate) const ASYNC_CHARGE_FACTOR: u64 = 3;
/// Queue selections after which budgets follow the measured peak rate (Linux's
/// `bfq_stats_min_budgets`, on the same x256 scale as `budgets_assigned`).
pub(crate) const STATS_MIN_BUDGETS: u32 = 194;

/// A request farther than this from the previous one of its queue is a seek (sectors).
pub(crate) const SEEK_THRESHOLD: u64 = 8 * 1024;
/// On non-rotational devices only small requests count as seeks (sectors).
pub(crate) const SEEK_SECTORS_NONROT: u64 = 2 * 32;
/// A queue is seeky when more than this many of its last 32 requests were seeks.
pub(crate) const SEEKY_LIMIT: u32 = 4;

/// Think-time samples are kept x256; an estimate is trusted past this weight.
const TTIME_VALID: u64 = 80;

/// The think-time sample count that the decay `(7 * n + 256) / 8` settles at from 0.
const TTIME_SETTLED: u64 = 249;
const _: () = assert!((7 * TTIME_SETTLED + 256) / 8 == TTIME_SETTLED);

/// The idle wait of a seeky queue is capped at this (Linux's `BFQ_MIN_TT`).
pub(crate) const SEEKY_IDLE_NS: u64 = 2 * MS;
/// A raised queue is idled for at least this long.
pub(crate) const RAISED_IDLE_NS: u64 = 20 * MS;

/// The weight factor of interactive raising.
pub(crate) const WR_COEFF: u32 = 30;
/// Soft real-time raising multiplies the interactive factor by this.
pub(crate) const SOFT_RT_FACTOR: u32 = 100;
/// How long soft real-time raising lasts.
pub(crate) const WR_RT_MAX_NS: u64 = 300 * MS;
/// How long a queue must have been idle to count as interactive again.
pub(crate) const WR_MIN_IDLE_NS: u64 = 2_000 * MS;
/// The highest average rate (sectors per second) of a soft real-time queue.
pub(crate) const WR_MAX_SOFTRT_RATE: u64 = 7_000;
/// Service after which an interactive queue is deemed I/O-bound and loses raising
/// (sectors).
pub(crate) const MAX_SERVICE_FROM_WR: u64 = 120_000;
/// After this long idle, a queue no longer counts as a member of the burst it was born in.
pub(crate) const BURST_FORGET_NS: u64 = 10_000 * MS;

/// Interactive raising lasts `REF_WR_NS x REF_RATE / peak_rate`, clamped to these bounds.
pub(crate) const WR_MIN_DURATION_NS: u64 = 3_000 * MS;
/// See [`WR_MIN_DURATION_NS`].
pub(crate) const WR_MAX_DURATION_NS: u64 = 13_000 * MS;
/// Reference raising durations, rotational and not.
pub(crate) const REF_WR_NS: [u64; 2] = [7_000 * MS, 2_500 * MS];
/// Reference peak rates (sectors per second), rotational and not.
pub(crate) const REF_RATE: [u64; 2] = [213_623, 503_540];

/// Why a queue's turn ended (Linux's `bfqq_expiration`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// The idle wait ran out without a new request.
    TooIdle,
    /// The turn lasted its budget timeout.
    BudgetTimeout,
    /// The next request did not fit in what was left of the budget.
    BudgetExhausted,
    /// Nothing left to dispatch, and idling would not pay.
    NoMoreRequests,
    /// A queue with a stronger claim became backlogged.
    Preempted,
}

/// The weight of a priority level: `(8 - level) x 10`, Linux's `ioprio_to_weight`.
pub(crate) fn prio_weight(level: u8) -> u32 {
    (8 - u32::from(level.min(7))) * 10
}

/// The scheduler class of an I/O priority class.
pub(crate) fn class_of(class: IoPrioClass) -> Class {
    match class {
        IoPrioClass::RealTime => Class::Rt,
        IoPrioClass::BestEffort => Class::Be,
        IoPrioClass::Idle => Class::Idle,
    }
}

/// A queue's state. Slots are reused: `live` says whether this one is in use.
#[derive(Clone, Debug)]
pub(crate) struct Queue {
    pub(crate) live: bool,
    pub(crate) entity: EntityId,
    pub(crate) sync: bool,
    /// The issuer of a sync queue.
    pub(crate) issuer: u32,
    /// The group (index) it is under, and for an async queue its slot there.
    pub(crate) group: u32,
    /// The group a sync queue moves to when next it becomes backlogged (its issuer's).
    pub(crate) next_group: u32,
    pub(crate) async_slot: u8,
    pub(crate) class: Class,
    pub(crate) level: u8,
    /// The weight before raising; `explicit` when set by the user, not by priority.
    pub(crate) orig_weight: u32,
    pub(crate) explicit_weight: bool,

    /// The budget of the current (or next) turn and the service received in it (sectors,
    /// charged).
    pub(crate) budget: u64,
    pub(crate) service: u64,
    /// The budget of the next turn, as the feedback set it.
    pub(crate) max_budget: u64,
    /// Service by injection while another queue was in service, charged at its next expiry.
    pub(crate) pending_charge: u64,
    /// Requests in the device.
    pub(crate) dispatched: u32,
    /// The FIFO was looked at in this turn.
    pub(crate) fifo_checked: bool,
    /// Issues enough I/O to use its budget (cleared by a turn that used very little).
    pub(crate) io_bound: bool,

    /// Think time: when its last request completed, and the smoothed gap (x256 weights).
    pub(crate) last_end_ns: u64,
    pub(crate) ttime_samples: u64,
    pub(crate) ttime_total: u64,
    pub(crate) ttime_mean: u64,
    /// One bit per recent request, set for a seek; and where the last request ended.
    pub(crate) seek_history: u32,
    pub(crate) last_request_pos: u64,

    /// Weight raising: the factor (1: none), when it started (or last ended), how long
    /// it lasts, and the service received under it.
    pub(crate) wr_coeff: u32,
    pub(crate) wr_start_ns: u64,
    pub(crate) wr_max_ns: u64,
    pub(crate) service_from_wr: u64,
    /// Soft real-time: the earliest arrival that still qualifies, and whether it is to be
    /// computed when the last request in flight completes.
    pub(crate) soft_rt_next_start: u64,
    pub(crate) softrt_update: bool,
    /// When it last became backlogged, and the service since.
    pub(crate) last_idle_backlogged: u64,
    pub(crate) service_from_backlogged: u64,
    /// When it last became fully idle (empty, nothing in flight).
    pub(crate) idle_since: u64,
    /// Not yet backlogged since it was created.
    pub(crate) just_created: bool,
    pub(crate) in_large_burst: bool,

    /// What the balance last counted for it: (weight, class, group, raised).
    pub(crate) counted: Option<(u32, Class, u32, bool)>,

    /// Lifetime counters, folded into its issuer's when the queue is freed.
    pub(crate) total_service: u64,
    pub(crate) total_dispatched: u64,
    pub(crate) budget_timeouts: u64,
}

impl Queue {
    /// A fresh queue, created at `now`.
    pub(crate) fn new(entity: EntityId, sync: bool, class: Class, weight: u32, now: u64) -> Self {
        Self {
            live: true,
            entity,
            sync,
            issuer: 0,
            group: 0,
            next_group: 0,
            async_slot: 0,
            class,
            level: 4,
            orig_weight: weight,
            explicit_weight: false,
            budget: 0,
            service: 0,
            max_budget: 0,
            pending_charge: 0,
            dispatched: 0,
            fifo_checked: false,
            io_bound: true,
            last_end_ns: now,
            ttime_samples: 0,
            ttime_total: 0,
            ttime_mean: 0,
            seek_history: 0,
            last_request_pos: 0,
            wr_coeff: 1,
            wr_start_ns: 0,
            wr_max_ns: 0,
            service_from_wr: 0,
            soft_rt_next_start: u64::MAX,
            softrt_update: false,
            last_idle_backlogged: now,
            service_from_backlogged: 0,
            idle_since: now,
            just_created: true,
            in_large_burst: false,
            counted: None,
            total_service: 0,
            total_dispatched: 0,
            budget_timeouts: 0,
        }
    }

    /// The weight in use: the original one times the raising factor.
    pub(crate) fn weight(&self) -> u32 {
        self.orig_weight.saturating_mul(self.wr_coeff)
    }

    pub(crate) fn seeky(&self) -> bool {
        self.seek_history.count_ones() > SEEKY_LIMIT
    }

    pub(crate) fn totally_seeky(&self) -> bool {
        self.seek_history == u32::MAX
    }

    /// Whether it issues its next request soon after the previous one completes (or has
    /// not shown otherwise yet).
    pub(crate) fn short_think_time(&self, slice_idle: u64) -> bool {
        self.ttime_samples <= TTIME_VALID || self.ttime_mean <= slice_idle
    }

    /// Folds the gap since its last completion into the think time (capped at two idle
    /// slices, so one long pause does not dominate).
    pub(crate) fn update_think_time(&mut self, now: u64, slice_idle: u64) {
        let elapsed = now.saturating_sub(self.last_end_ns).min(2 * slice_idle);
        self.ttime_samples = (7 * self.ttime_samples + 256) / 8;
        self.ttime_total = (7 * self.ttime_total + 256 * elapsed) / 8;
        // The sample count climbs from 0 to 249, where the decay's rounding down holds it
        // (`(7 * 249 + 256) / 8 == 249`): from then on the divisor is a constant, which
        // the compiler turns into a multiply, not a division.
        let total = self.ttime_total + 128;
        self.ttime_mean = if self.ttime_samples == TTIME_SETTLED {
            total / TTIME_SETTLED
        } else {
            total / self.ttime_samples
        };
    }

    /// Records whether a request at `sector` of `sectors` is a seek from the previous one.
    pub(crate) fn update_seek(&mut self, sector: u64, sectors: u64, rotational: bool) {
        let far = self.last_request_pos != 0
            && self.last_request_pos.abs_diff(sector) > SEEK_THRESHOLD
            && (rotational || sectors < SEEK_SECTORS_NONROT);
        self.seek_history = (self.seek_history << 1) | u32::from(far);
        self.last_request_pos = sector + sectors;
    }

    /// What serving `sectors` costs it: async I/O counts [`ASYNC_CHARGE_FACTOR`] times,
    /// except for a raised queue.
    pub(crate) fn charge(&self, sectors: u64) -> u64 {
        if self.sync || self.wr_coeff > 1 {
            sectors
        } else {
            sectors * ASYNC_CHARGE_FACTOR
        }
    }

    pub(crate) fn budget_left(&self) -> u64 {
        self.budget.saturating_sub(self.service)
    }

    /// Raised for soft real-time (rather than interactive) behaviour.
    pub(crate) fn soft_rt(&self) -> bool {
        self.wr_coeff > 1 && self.wr_max_ns == WR_RT_MAX_NS
    }
}
