//! Turns of service: which queue is served, what it dispatches, when its turn ends and with
//! which next budget, when the device idles for it, what is injected meanwhile, and weight
//! raising.

use crate::burst::Joined;
use crate::queue::{
    DEFAULT_MAX_BUDGET, Expiry, MAX_SERVICE_FROM_WR, NO_QUEUE, RAISED_IDLE_NS, REF_RATE, REF_WR_NS,
    SEEKY_IDLE_NS, SOFT_RT_FACTOR, STATS_MIN_BUDGETS, WR_COEFF, WR_MAX_DURATION_NS,
    WR_MAX_SOFTRT_RATE, WR_MIN_DURATION_NS, WR_MIN_IDLE_NS, WR_RT_MAX_NS,
};
use crate::tunables::MS;
use crate::wf2q::Class;
use crate::{Bfq, DISPATCH};

/// A queue idle (empty, nothing in flight, not scheduled) this long is recycled when a new
/// queue is made: past the 2 s after which it would count as interactive anyway, and past
/// the 10 s after which it no longer counts as a member of the burst it was born in.
pub(crate) const REAP_NS: u64 = 12_000 * MS;
/// Requests in the device below which one is injected while idling.
const INJECT_LIMIT: usize = 1;
/// More requests than this in the device say it queues commands itself.
pub(crate) const HW_TAG_THRESHOLD: usize = 3;
/// Completions with enough requests around to tell, before deciding.
pub(crate) const HW_TAG_SAMPLES: u32 = 32;
/// A turn this short says nothing about the queue's rate.
const SHORT_TURN_NS: u64 = MS;
/// A turn longer than this shows the queue's rate.
const RATE_TURN_NS: u64 = 20 * MS;

/// What the queue in service does next.
enum Step {
    /// Dispatch this key.
    Serve(usize),
    /// Nothing now: idling, or waiting for its requests in flight.
    Wait,
    /// Its turn ended: select another.
    Expired,
}

fn class_index(class: Class) -> usize {
    match class {
        Class::Rt => 0,
        Class::Be => 1,
        Class::Idle => 2,
    }
}

impl Bfq {
    /// The maximum budget in use: the tunable, else `peak_rate x timeout_sync` once enough
    /// turns have been given, else [`DEFAULT_MAX_BUDGET`].
    pub(crate) fn max_budget_now(&self) -> u64 {
        if self.tunables.max_budget != 0 {
            self.tunables.max_budget
        } else if self.budgets_assigned < STATS_MIN_BUDGETS || self.auto_max_budget == 0 {
            DEFAULT_MAX_BUDGET
        } else {
            self.auto_max_budget
        }
    }

    /// The smallest budget: 1/32 of the maximum.
    pub(crate) fn min_budget(&self) -> u64 {
        (self.max_budget_now() / 32).max(1)
    }

    /// How long interactive raising lasts: 7 s (2.5 s off rotational devices) at the
    /// reference rate, scaled inversely by the measured one, within 3 s to 13 s.
    pub(crate) fn wr_duration(&self) -> u64 {
        let i = usize::from(!self.rotational);
        let rate = if self.rate.rate == 0 {
            REF_RATE[i]
        } else {
            self.rate.rate
        };
        let d = u128::from(REF_WR_NS[i]) * u128::from(REF_RATE[i]) / u128::from(rate);
        (d.min(u128::from(WR_MAX_DURATION_NS)) as u64).max(WR_MIN_DURATION_NS)
    }

    /// The next request to dispatch: a requeued one, else one of the queue in service
    /// (selecting one as needed), else an injected one while idling.
    pub(crate) fn next_dispatch(&mut self, now: u64) -> Option<(usize, bool)> {
        if let Some(key) = self.lists.front(DISPATCH) {
            self.lists.remove(key);
            return Some((key, false));
        }
        // Each pass ends a turn (or selects): bounded by the queues there are.
        for _ in 0..2 * self.queues.len() + 4 {
            let q = if self.in_service == NO_QUEUE {
                self.select_queue(now)?
            } else {
                self.in_service
            };
            match self.step(q, now) {
                Step::Serve(key) => {
                    self.idle_until = None;
                    return Some((key, false));
                }
                Step::Wait => return self.inject().map(|key| (key, true)),
                Step::Expired => {}
            }
        }
        None
    }

    /// Puts the next queue in service.
    fn select_queue(&mut self, now: u64) -> Option<u32> {
        let e = self.sched.select(now)?;
        let q = *self.entity_queue.get(e.0 as usize)?;
        if q == NO_QUEUE {
            return None;
        }
        self.in_service = q;
        self.budgets_assigned = (self.budgets_assigned * 7 + 256) / 8;
        self.budget_start = now;
        self.idle_until = None;
        let timeout = self.tunables.timeout_sync_ns;
        let queue = &mut self.queues[q as usize];
        queue.service = 0;
        queue.fifo_checked = false;
        queue.idle_since = now;
        // A raised interactive queue may keep the device longer in proportion.
        let coeff = if queue.wr_coeff > 1 && !queue.soft_rt() {
            u64::from(queue.wr_coeff)
        } else {
            1
        };
        self.budget_deadline = now.saturating_add(timeout.saturating_mul(coeff));
        Some(q)
    }

    /// Decides for the queue in service.
    fn step(&mut self, q: u32, now: u64) -> Step {
        let qi = q as usize;
        if self.queued_in(q) == 0 {
            if let Some(until) = self.idle_until {
                if now < until {
                    return Step::Wait;
                }
                let why = if now >= self.budget_deadline {
                    Expiry::BudgetTimeout
                } else {
                    Expiry::TooIdle
                };
                self.expire(q, why, now);
                return Step::Expired;
            }
            let queue = &self.queues[qi];
            if queue.service > 0 && self.better_to_idle(q) {
                if queue.dispatched > 0 {
                    // Wait for its requests in flight: it may send more when they end.
                    return Step::Wait;
                }
                self.arm_idle(q, now);
                return Step::Wait;
            }
            self.expire(q, Expiry::NoMoreRequests, now);
            return Step::Expired;
        }
        if now >= self.budget_deadline {
            self.expire(q, Expiry::BudgetTimeout, now);
            return Step::Expired;
        }
        let key = self.fifo_head(q, now).or_else(|| self.next_rq(q));
        let Some(key) = key else {
            self.expire(q, Expiry::NoMoreRequests, now);
            return Step::Expired;
        };
        let charge = self.queues[qi].charge(self.info[key].sectors);
        let queue = &mut self.queues[qi];
        if charge > queue.budget_left() {
            if queue.service > 0 {
                self.expire(q, Expiry::BudgetExhausted, now);
                return Step::Expired;
            }
            // A turn always serves its first request, however large (an expired FIFO
            // head the budget was not sized for, a budget shrunk below a request):
            // expiring it unserved would give it the same budget again, forever.
            queue.budget = charge;
        }
        Step::Serve(key)
    }

    /// The FIFO head, when it expired; looked at once per turn.
    fn fifo_head(&mut self, q: u32, now: u64) -> Option<usize> {
        let queue = &mut self.queues[q as usize];
        if queue.fifo_checked {
            return None;
        }
        queue.fifo_checked = true;
        let key = self.lists.front(Self::fifo(q))?;
        (self.info[key].fifo_time <= now).then_some(key)
    }

    /// The next request of `q` in sector order from the head position: the first at or
    /// after it, or the last before it when that is closer counting the back-seek penalty
    /// (Linux's `bfq_choose_req`).
    pub(crate) fn next_rq(&self, q: u32) -> Option<usize> {
        let t = q as usize;
        if self.queued_in(q) == 1 {
            // One request queued (the common case of a lone issuer): its FIFO's head, the
            // only key of its tree, is the choice wherever the head is.
            let only = self.lists.front(Self::fifo(q));
            debug_assert!(
                only.is_some_and(|k| self.sorted.forest().tree_of(k) == Some(t))
                    && self.sorted.forest().first(t) == self.sorted.forest().last(t),
                "a queue's FIFO and its sector tree hold the same requests"
            );
            return only;
        }
        let pos = self.last_position;
        let ahead = self.sorted.forest().lower_bound(t, pos);
        let behind = match ahead {
            Some(k) => self.sorted.forest().prev(k),
            None => self.sorted.forest().last(t),
        };
        let forward = ahead.or_else(|| self.sorted.forest().first(t));
        self.choose(forward, behind, pos)
    }

    fn choose(&self, a: Option<usize>, b: Option<usize>, head: u64) -> Option<usize> {
        let (a, b) = match (a, b) {
            (Some(a), Some(b)) if a != b => (a, b),
            (Some(a), _) => return Some(a),
            (None, b) => return b,
        };
        let back_max = self.tunables.back_seek_max_kib * 2;
        let penalty = u64::from(self.tunables.back_seek_penalty);
        // The cost of moving the head to `s`; `None` when it lies too far behind.
        let cost = |s: u64| {
            if s >= head {
                Some(s - head)
            } else if s + back_max >= head {
                Some((head - s) * penalty)
            } else {
                None
            }
        };
        let (sa, sb) = (
            self.sorted.forest().sector(a),
            self.sorted.forest().sector(b),
        );
        let pick_a = match (cost(sa), cost(sb)) {
            (Some(ca), Some(cb)) => ca < cb || (ca == cb && sa >= sb),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            // Both behind: the farthest back, so the rest follow in ascending order.
            (None, None) => sa <= sb,
        };
        Some(if pick_a { a } else { b })
    }

    /// Whether to idle the device for `q` when it has nothing queued (Linux's
    /// `bfq_better_to_idle`): for throughput, on a rotational device, when it is a
    /// sequential I/O-bound queue with a short think time (and no raised queue waits); for
    /// the service guarantees, when it is raised while others are not, or the active queues
    /// are not symmetric.
    pub(crate) fn better_to_idle(&self, q: u32) -> bool {
        let queue = &self.queues[q as usize];
        if !queue.sync {
            return false;
        }
        if self.tunables.strict_guarantees {
            return true;
        }
        if self.tunables.slice_idle_ns == 0 || queue.class == Class::Idle {
            return false;
        }
        let boosts =
            self.idling_boosts_throughput(q) && !(self.balance.raised > 0 && queue.wr_coeff == 1);
        let guarantees = (queue.wr_coeff > 1 && self.balance.raised < self.balance.all)
            || self.balance.asymmetric();
        boosts || guarantees
    }

    /// Whether idling for `q` keeps the device's throughput up: always on a rotational
    /// device that does not queue commands (its head stays where `q` reads), and for a
    /// sequential I/O-bound queue with a short think time on a rotational device or one
    /// that does not queue commands (Linux's `idling_boosts_thr`). Until the device is seen
    /// queueing or not, it is taken to queue.
    pub(crate) fn idling_boosts_throughput(&self, q: u32) -> bool {
        let queue = &self.queues[q as usize];
        let no_queueing = self.hw_tag == Some(false);
        let sequential =
            !queue.seeky() && queue.io_bound && queue.short_think_time(self.tunables.slice_idle_ns);
        (self.rotational && no_queueing) || ((self.rotational || no_queueing) && sequential)
    }

    /// At a completion of a request of `q` (still counted in flight): learns whether the
    /// device queues commands, from the most requests it held while there were more than
    /// [`HW_TAG_THRESHOLD`] around (Linux's `bfq_update_hw_tag`).
    pub(crate) fn update_hw_tag(&mut self, q: u32) {
        self.max_in_flight = self.max_in_flight.max(self.in_flight);
        if self.hw_tag == Some(true) || self.in_flight + self.queued() <= HW_TAG_THRESHOLD {
            return;
        }
        // A queue that thinks briefly and keeps few requests out cannot fill the device:
        // its turn says nothing.
        if q != NO_QUEUE && q == self.in_service {
            let queue = &self.queues[q as usize];
            if queue.short_think_time(self.tunables.slice_idle_ns)
                && queue.dispatched as usize + self.queued_in(q) < HW_TAG_THRESHOLD
                && self.in_flight < HW_TAG_THRESHOLD
            {
                return;
            }
        }
        self.hw_tag_samples += 1;
        if self.hw_tag_samples < HW_TAG_SAMPLES {
            return;
        }
        self.hw_tag = Some(self.max_in_flight > HW_TAG_THRESHOLD);
        self.max_in_flight = 0;
        self.hw_tag_samples = 0;
    }

    /// Starts the idle wait for `q`.
    fn arm_idle(&mut self, q: u32, now: u64) {
        let queue = &self.queues[q as usize];
        let mut wait = self.tunables.slice_idle_ns;
        if queue.seeky() && queue.wr_coeff == 1 && !self.balance.asymmetric() {
            wait = wait.min(SEEKY_IDLE_NS);
        } else if queue.wr_coeff > 1 {
            wait = wait.max(RAISED_IDLE_NS);
        }
        self.idle_start = now;
        self.idle_until = Some(now.saturating_add(wait));
        self.stats.idle_waits += 1;
    }

    /// While the queue in service idles for the service guarantees alone (not for its
    /// sequentiality) and has nothing in flight: a request of another queue, if the device
    /// holds fewer than [`INJECT_LIMIT`]. Queues take turns at it, oldest backlog first.
    fn inject(&mut self) -> Option<usize> {
        let q = self.in_service;
        if q == NO_QUEUE
            || self.tunables.strict_guarantees
            || self.in_flight >= INJECT_LIMIT
            || self.queues[q as usize].dispatched > 0
            || self.idling_boosts_throughput(q)
        {
            return None;
        }
        // A queue that thinks briefly is likely to send its next request before an
        // injected one would be done: injecting would delay it (Linux starts such a
        // queue's inject limit at 0).
        if self.queues[q as usize].short_think_time(self.tunables.slice_idle_ns) {
            return None;
        }
        let mut at = self.busy.front();
        while let Some(c) = at {
            at = self.busy.next(c);
            if c == q || self.queues[c as usize].class == Class::Idle {
                continue;
            }
            let key = self.next_rq(c)?;
            self.busy.remove(c);
            self.busy.push_back(c);
            self.stats.injected += 1;
            return Some(key);
        }
        None
    }

    /// Accounts for the dispatch of `key` (`sectors` at `sector`).
    pub(crate) fn dispatched(
        &mut self,
        key: usize,
        sector: u64,
        sectors: u64,
        injected: bool,
        now: u64,
    ) {
        let requeued = !self.sorted.forest().contains(key) && !self.lists.contains(key);
        self.unlink(key);
        let q = self.info[key].queue;
        let in_flight_before = self.in_flight;
        self.in_flight += 1;
        let info = &mut self.info[key];
        info.dispatched = true;
        info.injected = injected;
        if self.rate.dispatched(sector, sectors, now, in_flight_before)
            && self.tunables.max_budget == 0
        {
            let max = u128::from(self.rate.rate) * u128::from(self.tunables.timeout_sync_ns)
                / 1_000_000_000;
            self.auto_max_budget = (max as u64).max(1);
        }
        self.last_position = sector + sectors;
        if q == NO_QUEUE {
            return;
        }
        let queue = &mut self.queues[q as usize];
        queue.dispatched += 1;
        if requeued {
            // Dispatched again after a requeue: it was charged the first time.
            self.reaccount(q);
            return;
        }
        let charge = queue.charge(sectors);
        queue.total_service += charge;
        queue.total_dispatched += 1;
        queue.service_from_backlogged += charge;
        if queue.wr_coeff > 1 {
            queue.service_from_wr += charge;
        }
        if injected || q != self.in_service {
            queue.pending_charge += charge;
        } else {
            queue.service += charge;
            let e = queue.entity;
            self.sched.served(e, charge);
            self.update_raising(q, now);
            // The idle class gets one request per turn while others wait.
            let others = self.balance.all > 1;
            if self.queues[q as usize].class == Class::Idle && others {
                self.expire(q, Expiry::BudgetExhausted, now);
            }
        }
        self.reaccount(q);
    }

    /// A request of `q` left the device at `now`.
    pub(crate) fn request_done(&mut self, q: u32, now: u64, _injected: bool) {
        let queue = &mut self.queues[q as usize];
        queue.dispatched = queue.dispatched.saturating_sub(1);
        queue.last_end_ns = now;
        let idle = queue.dispatched == 0 && self.lists.is_empty(Self::fifo(q));
        if idle && queue.softrt_update {
            queue.softrt_update = false;
            let next = self.soft_rt_next_start(q, now);
            self.queues[q as usize].soft_rt_next_start = next;
        }
        if q == self.in_service {
            if idle {
                if self.better_to_idle(q) {
                    self.arm_idle(q, now);
                } else if self.lists.total() == 0 && self.in_flight == 0 {
                    // Nothing else wants the device: whether the turn ends is for the next
                    // request to say (`end_lone_wait`).
                    self.lone_since = Some(now);
                } else {
                    self.expire(q, Expiry::NoMoreRequests, now);
                }
            } else if now >= self.budget_deadline
                && (self.idle_until.is_none() || self.budget_left_third(q))
            {
                self.expire(q, Expiry::BudgetTimeout, now);
            }
        } else if idle && !self.sched.is_active(self.queues[q as usize].entity) {
            self.became_idle(q, now);
        }
        self.reaccount(q);
    }

    /// A request of `q` (`None`: one outside any queue's order) arrives at `now` while the
    /// queue in service waits alone, empty: the turn goes on if it is that queue's and
    /// within an idle slice of its emptying (Linux lets such a queue, expired for want of
    /// requests, take the device back with the budget it had left); otherwise the turn ends
    /// as it would have when it emptied.
    pub(crate) fn end_lone_wait(&mut self, q: Option<u32>, now: u64) {
        let Some(since) = self.lone_since.take() else {
            return;
        };
        let p = self.in_service;
        if p == NO_QUEUE {
            return;
        }
        let soon = now.saturating_sub(since) <= self.tunables.slice_idle_ns.max(SEEKY_IDLE_NS);
        if q != Some(p) || !soon {
            self.expire(p, Expiry::NoMoreRequests, since);
        }
    }

    fn budget_left_third(&self, q: u32) -> bool {
        let queue = &self.queues[q as usize];
        queue.budget_left() >= queue.budget / 3
    }

    /// A dispatched request of `q` came back to be dispatched again.
    pub(crate) fn request_returned(&mut self, q: u32, _injected: bool) {
        let queue = &mut self.queues[q as usize];
        queue.dispatched = queue.dispatched.saturating_sub(1);
        self.reaccount(q);
    }

    /// `q` is fully idle from `now`: a candidate for recycling.
    fn became_idle(&mut self, q: u32, now: u64) {
        self.queues[q as usize].idle_since = now;
        self.idle.push_back(q);
    }

    /// When a queue that goes idle now may next be deemed soft real-time: not before its
    /// average rate since it became backlogged falls to [`WR_MAX_SOFTRT_RATE`], nor before
    /// an idle slice (and 4 ms) has passed.
    fn soft_rt_next_start(&self, q: u32, now: u64) -> u64 {
        let queue = &self.queues[q as usize];
        let by_rate = queue.last_idle_backlogged.saturating_add(
            queue.service_from_backlogged.saturating_mul(1_000_000_000) / WR_MAX_SOFTRT_RATE,
        );
        let by_gap = now + self.tunables.slice_idle_ns + 4 * MS;
        queue.soft_rt_next_start.max(by_rate).max(by_gap)
    }

    /// `q` has become backlogged: raising decisions, burst detection, its budget, and
    /// preemption of the queue in service.
    pub(crate) fn idle_to_busy(&mut self, q: u32, now: u64) {
        let qi = q as usize;
        let low_latency = self.tunables.low_latency;
        // Sync queues move to their issuer's group while inactive.
        let queue = &self.queues[qi];
        if queue.sync {
            let group = queue.next_group;
            if group != queue.group
                && self
                    .sched
                    .set_parent(queue.entity, self.groups[group as usize].entity)
                    .is_ok()
            {
                self.reaccount_group(q, group);
            }
        }
        let queue = &mut self.queues[qi];
        let idle_long = queue.dispatched == 0
            && (queue.just_created || now.saturating_sub(queue.idle_since) >= WR_MIN_IDLE_NS);
        if !queue.just_created
            && idle_long
            && now.saturating_sub(queue.idle_since) >= crate::queue::BURST_FORGET_NS
        {
            queue.in_large_burst = false;
            self.burst.forget(q);
        }
        let queue = &self.queues[qi];
        if low_latency && queue.sync && queue.just_created {
            match self.burst.arrived(q, queue.group, now) {
                Joined::Small => {}
                Joined::Large => self.queues[qi].in_large_burst = true,
                Joined::MadeLarge(members, len) => {
                    self.stats.large_bursts += 1;
                    self.queues[qi].in_large_burst = true;
                    for &m in &members[..len] {
                        let member = &mut self.queues[m as usize];
                        if member.live {
                            member.in_large_burst = true;
                        }
                        if member.live && member.wr_coeff > 1 {
                            self.end_raising(m, now);
                        }
                    }
                }
            }
        }
        let queue = &self.queues[qi];
        let in_burst = queue.in_large_burst;
        let soft_rt = low_latency
            && !queue.totally_seeky()
            && !in_burst
            && now >= queue.soft_rt_next_start
            && queue.dispatched == 0;
        let interactive = !in_burst && idle_long;
        // The idle class only ever gets what nobody else wants: never raised.
        let deserves = low_latency
            && queue.sync
            && queue.class != Class::Idle
            && !queue.explicit_weight
            && (interactive || soft_rt);
        if queue.wr_coeff > 1 && (in_burst || !low_latency) {
            self.end_raising(q, now);
        } else if deserves && interactive {
            self.raise(q, WR_COEFF, self.wr_duration(), now);
        } else if deserves && (queue.wr_coeff == 1 || queue.soft_rt()) {
            self.raise(q, WR_COEFF * SOFT_RT_FACTOR, WR_RT_MAX_NS, now);
        } else {
            self.update_raising(q, now);
        }
        let head = self.next_rq(q).map_or(0, |k| self.info[k].sectors);
        let queue = &mut self.queues[qi];
        queue.just_created = false;
        queue.last_idle_backlogged = now;
        queue.service_from_backlogged = 0;
        queue.softrt_update = false;
        queue.budget = queue.max_budget.max(queue.charge(head));
        queue.service = 0;
        let (e, w, budget) = (queue.entity, queue.weight(), queue.budget);
        let _ = self.sched.set_weight(e, w);
        self.sched.activate(e, budget, now);
        self.reaccount(q);
        self.maybe_preempt(q, now);
    }

    /// A queue that became backlogged with a higher class than the queue in service, or of
    /// the same class and raised more, takes the device from it.
    fn maybe_preempt(&mut self, q: u32, now: u64) {
        let p = self.in_service;
        if p == NO_QUEUE || p == q {
            return;
        }
        let (new, cur) = (&self.queues[q as usize], &self.queues[p as usize]);
        if new.class < cur.class || (new.class == cur.class && new.wr_coeff > cur.wr_coeff) {
            self.expire(p, Expiry::Preempted, now);
        }
    }

    fn raise(&mut self, q: u32, coeff: u32, duration: u64, now: u64) {
        let queue = &mut self.queues[q as usize];
        if queue.wr_coeff == 1 {
            self.nr_raised += 1;
        }
        queue.wr_coeff = coeff;
        queue.wr_start_ns = now;
        queue.wr_max_ns = duration;
        queue.service_from_wr = 0;
        let (e, w) = (queue.entity, queue.weight());
        let _ = self.sched.set_weight(e, w);
    }

    pub(crate) fn end_raising(&mut self, q: u32, now: u64) {
        let queue = &mut self.queues[q as usize];
        if queue.wr_coeff == 1 {
            return;
        }
        queue.wr_coeff = 1;
        queue.wr_start_ns = now;
        self.nr_raised -= 1;
        let (e, w) = (queue.entity, queue.weight());
        let _ = self.sched.set_weight(e, w);
        self.reaccount(q);
    }

    /// Ends raising that has run its time, or its service for an interactive queue.
    fn update_raising(&mut self, q: u32, now: u64) {
        let queue = &self.queues[q as usize];
        if queue.wr_coeff == 1 {
            return;
        }
        let over = queue.in_large_burst
            || now.saturating_sub(queue.wr_start_ns) >= queue.wr_max_ns
            || (!queue.soft_rt() && queue.service_from_wr > MAX_SERVICE_FROM_WR);
        if over {
            self.end_raising(q, now);
        }
    }

    /// Whether the turn of the queue in service was slow (Linux's `bfq_bfqq_is_slow`), and
    /// its length in ms for charging time.
    fn slow_turn(&self, q: u32, at: u64) -> (bool, u64) {
        let queue = &self.queues[q as usize];
        if !queue.sync {
            return (false, 0);
        }
        let delta = at.saturating_sub(self.budget_start);
        if delta < SHORT_TURN_NS {
            let ms = if self.rotational {
                self.tunables.slice_idle_ns / MS
            } else {
                SEEKY_IDLE_NS / MS
            };
            return (queue.seeky(), ms);
        }
        let slow = if delta > RATE_TURN_NS {
            queue.service < self.max_budget_now() / 2
        } else {
            queue.seeky()
        };
        (slow, delta / MS)
    }

    /// Charges the queue in service as if it had used the device for `ms` at the peak rate
    /// (the maximum budget per `timeout_sync`), if that is more than it received.
    fn charge_time(&mut self, q: u32, ms: u64) {
        let timeout_ms = (self.tunables.timeout_sync_ns / MS).max(1);
        let for_time = self.max_budget_now() * ms.min(timeout_ms) / timeout_ms;
        let queue = &mut self.queues[q as usize];
        let total = for_time.max(queue.service);
        queue.budget = queue.budget.max(total);
        let extra = total - queue.service;
        if extra > 0 {
            queue.service = total;
            let e = queue.entity;
            self.sched.served(e, extra);
        }
    }

    /// Ends the turn of the queue in service (Linux's `bfq_bfqq_expire`).
    pub(crate) fn expire(&mut self, q: u32, why: Expiry, now: u64) {
        let qi = q as usize;
        let at = if why == Expiry::TooIdle {
            self.idle_start
        } else {
            now
        };
        let (slow, ms) = self.slow_turn(q, at);
        let queue = &self.queues[qi];
        if queue.wr_coeff == 1
            && (slow || (why == Expiry::BudgetTimeout && self.budget_left_third(q)))
        {
            self.charge_time(q, ms);
        }
        let empty = self.queued_in(q) == 0;
        let low_latency = self.tunables.low_latency;
        let queue = &mut self.queues[qi];
        match why {
            Expiry::TooIdle if queue.service <= 2 * queue.budget / 10 => queue.io_bound = false,
            Expiry::BudgetExhausted | Expiry::BudgetTimeout => queue.io_bound = true,
            _ => {}
        }
        if low_latency && queue.wr_coeff == 1 {
            queue.wr_start_ns = now;
        }
        if low_latency && empty {
            if queue.dispatched == 0 {
                let next = self.soft_rt_next_start(q, now);
                self.queues[qi].soft_rt_next_start = next;
            } else {
                queue.softrt_update = true;
            }
        }
        self.recalc_budget(q, why);
        let queue = &mut self.queues[qi];
        let e = queue.entity;
        let pending = core::mem::take(&mut queue.pending_charge);
        if pending > 0 {
            queue.service += pending;
            self.sched.served(e, pending);
        }
        if why == Expiry::BudgetTimeout {
            self.stats.budget_timeouts += 1;
            self.queues[qi].budget_timeouts += 1;
        }
        let queue = &mut self.queues[qi];
        let requeue = (!empty).then_some(queue.budget);
        queue.service = 0;
        queue.idle_since = now;
        self.sched.expire(e, requeue, now);
        self.in_service = NO_QUEUE;
        self.idle_until = None;
        self.lone_since = None;
        if empty && self.queues[qi].dispatched == 0 {
            self.became_idle(q, now);
        }
        self.reaccount(q);
    }

    /// The budget feedback (Linux's `__bfq_bfqq_recalc_budget`).
    fn recalc_budget(&mut self, q: u32, why: Expiry) {
        let (min, max) = (self.min_budget(), self.max_budget_now());
        let head = self.next_rq(q).map(|k| self.info[k].sectors);
        let queue = &mut self.queues[q as usize];
        let mut budget = if queue.wr_coeff == 1 {
            queue.max_budget
        } else {
            // Raised queues keep small budgets: many short turns, low latency.
            2 * min
        };
        if !queue.sync {
            budget = max;
        } else if queue.wr_coeff == 1 {
            budget = match why {
                Expiry::TooIdle if queue.dispatched > 0 => (budget * 2).min(max),
                Expiry::TooIdle if budget > 5 * min => budget - 4 * min,
                Expiry::TooIdle => min,
                Expiry::BudgetTimeout => (budget * 2).min(max),
                Expiry::BudgetExhausted => (budget * 4).min(max),
                Expiry::NoMoreRequests => queue.service.max(min),
                Expiry::Preempted => budget,
            };
        }
        queue.max_budget = budget.min(max);
        if let Some(sectors) = head {
            queue.budget = queue.max_budget.max(queue.charge(sectors));
        }
    }

    /// Brings the balance (active queues, their weights, classes and groups) up to date
    /// for `q`.
    #[inline(always)]
    pub(crate) fn reaccount(&mut self, q: u32) {
        let queue = &self.queues[q as usize];
        let active = queue.live
            && (queue.dispatched > 0
                || self.in_service == q
                || !self.lists.is_empty(Self::fifo(q)));
        let want = active.then_some((queue.weight(), queue.class, queue.group, queue.wr_coeff > 1));
        if want == queue.counted {
            // The common case (nothing changed), inline: a test and a return.
            return;
        }
        self.recount(q, want);
    }

    /// [`reaccount`](Self::reaccount) when `q`'s standing changed to `want`: kept out of
    /// line, so that the common call, with nothing changed, is a test and a return.
    #[inline(never)]
    fn recount(&mut self, q: u32, want: Option<(u32, Class, u32, bool)>) {
        let queue = &self.queues[q as usize];
        if let Some((w, class, group, raised)) = queue.counted {
            self.count(w, class, group, raised, false);
        }
        if let Some((w, class, group, raised)) = want {
            self.count(w, class, group, raised, true);
        }
        self.queues[q as usize].counted = want;
    }

    /// Moves `q`'s accounting to `group`.
    fn reaccount_group(&mut self, q: u32, group: u32) {
        if let Some((w, class, old, raised)) = self.queues[q as usize].counted {
            self.count(w, class, old, raised, false);
            self.count(w, class, group, raised, true);
            self.queues[q as usize].counted = Some((w, class, group, raised));
        }
        self.queues[q as usize].group = group;
    }

    fn count(&mut self, w: u32, class: Class, group: u32, raised: bool, add: bool) {
        let b = &mut self.balance;
        let g = &mut self.groups[group as usize].active;
        let (w64, sq) = (u64::from(w), u128::from(w) * u128::from(w));
        if add {
            b.all += 1;
            if raised {
                b.raised += 1;
            } else {
                b.plain += 1;
                b.sum += w64;
                b.sum_sq += sq;
            }
            b.per_class[class_index(class)] += 1;
            *g += 1;
            if *g == 1 {
                b.groups_active += 1;
            }
        } else {
            b.all -= 1;
            if raised {
                b.raised -= 1;
            } else {
                b.plain -= 1;
                b.sum -= w64;
                b.sum_sq -= sq;
            }
            b.per_class[class_index(class)] -= 1;
            *g -= 1;
            if *g == 0 {
                b.groups_active -= 1;
            }
        }
        b.refresh();
    }
}
