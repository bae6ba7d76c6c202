//! Operation sequences on mq-deadline checked against a reference model after every op: the
//! test support shared by the corpus replay of the root package (`tests/fuzz_corpus.rs`) and
//! the cargo-fuzz target `deadline_ops`.
//!
//! A [`Config`] says what to build: the bare tags and limits of a
//! [harness](crate::elv::Harness) (one or two hardware queues, scheduler tags of
//! 1 to [`MAX_NR_REQUESTS`] requests per map, a clock that moves only when an op says so),
//! and a [`Deadline`] sized by [`Elevator::depth_updated`]. [`run`] then drives the elevator
//! directly, the way a request queue does: requests allocated within
//! [`Elevator::limit_depth`] and inserted (alone or several in one call, at the tail or at
//! the head), bios offered to [`Elevator::bio_merge`] (and inserted as requests of their own
//! when refused), dispatches, completions, requeues (inserted again at the head), clock
//! steps, tunable changes (valid and not) and changes of `nr_requests` within the scheduler
//! tags made.
//!
//! After every op it checks what the harness checks of every elevator (see
//! [`elv`]: every bio dispatched exactly once per insertion, every
//! dispatched request exactly its bios within the limits, every bio ending once with its
//! request's status, the scheduler tags in use), and what mq-deadline promises:
//!
//! * requests inserted at the head (fresh, or requeued) go before everything else of their
//!   class: each insert before those inserted at the head earlier, the requests of one call
//!   in the order they were handed in; and each comes out exactly as it went in (nothing
//!   merges into it);
//! * strict priority: a request of a lower class is dispatched while a higher class has
//!   requests queued or in flight only when it waited out `prio_aging_expire`; and nothing
//!   is refused unless nothing is queued or a busy higher class holds the queued ones back;
//! * the counters ([`Deadline::stats`]) agree with the model: per class, `inserted` counts
//!   the requests inserted fresh (a requeue counts none), `dispatched` and `in_flight` what
//!   was dispatched and is out; `completed` less the completions equals `merged` less the
//!   bios merged (a request merged away counts once in each); a class is busy
//!   (`inserted > completed`) exactly when a bio of it has not ended; the requests held,
//!   `inserted - completed - in_flight` over the classes, are [`Deadline::queued`]; and
//!   [`has_work`](Elevator::has_work) holds on every hardware queue exactly when a bio is
//!   queued;
//! * tunables: every setter accepts exactly its documented range; a value refused comes
//!   back as a [`TunableError`] naming the tunable and the value, and changes nothing; a
//!   value accepted changes that tunable alone. A new `nr_requests` is accepted by the tags
//!   exactly within the depth they were made with, and [`Elevator::depth_updated`] resets
//!   `async_depth` to three quarters of it (at least 1) and changes nothing else;
//!   [`Elevator::limit_depth`] is no limit for reads and `async_depth` for everything else.
//!
//! At the end the run drains: it dispatches everything and completes what is in flight
//! until nothing is left. Then no hardware queue may have work, no request may be held or
//! in flight, no scheduler tag in use, every bio must have ended once, and the counters must
//! balance.
//!
//! Every field of a [`Config`] or an [`Op`] is reduced into a meaningful range rather than
//! rejected, so any input a fuzzer makes up is a valid test: a panic or a [`Failure`] is a
//! bug.
//!
//! ```
//! use blkmq_model::deadline::{BioSpec, Config, LimitsSpec, Op, Place, run};
//!
//! let config = Config {
//!     hw_queues: 0,
//!     shared_tags: false,
//!     nr_requests: 7,
//!     limits: LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None },
//! };
//! let read = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
//! let next = BioSpec { place: Place::Follow, ..read };
//! let ops = [
//!     Op::Insert { hctx: 0, bio: read, more: 0, at_head: false },
//!     Op::Merge { hctx: 0, bio: next }, // 8..16 joins the request at 0
//!     Op::Dispatch { hctx: 0, count: 0 },
//!     Op::Complete { index: 0, status: 0 },
//! ];
//! run(&config, &ops).unwrap();
//! ```

use alloc::collections::VecDeque;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::elv::{self, BioState, ElvModel, Harness, Model, Tuned, run_model};
use arbitrary::Arbitrary;
use blkmq_core::{Bio, Elevator, IoPrio, IoPrioClass, IssuerId, Op as BioOp, Rq};

pub use crate::elv::{
    BioSpec, Config, LimitsSpec, MAX_BIO_SECTORS, MAX_HW_QUEUES, MAX_NR_REQUESTS, Place, SPAN,
};

use blkmq_sched_deadline::{Deadline, MAX_BATCH, MAX_EXPIRE_NS, TunableError, Tunables};

const MS: u64 = 1_000_000;

/// How far [`Op::Advance`] moves the clock: `ADVANCE[step % 8]` ns, from nothing to past
/// every expiry.
pub const ADVANCE: [u64; 8] = [
    0,
    1_000,
    MS,
    60 * MS,
    600 * MS,
    6_000 * MS,
    11_000 * MS,
    MAX_EXPIRE_NS + 1,
];

/// The classes by index, highest first.
const CLASSES: [IoPrioClass; 3] = [
    IoPrioClass::RealTime,
    IoPrioClass::BestEffort,
    IoPrioClass::Idle,
];

/// A tunable of [`Op::Tune`].
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tunable {
    /// [`Deadline::set_read_expire`].
    ReadExpire,
    /// [`Deadline::set_write_expire`].
    WriteExpire,
    /// [`Deadline::set_writes_starved`].
    WritesStarved,
    /// [`Deadline::set_front_merges`].
    FrontMerges,
    /// [`Deadline::set_fifo_batch`].
    FifoBatch,
    /// [`Deadline::set_async_depth`].
    AsyncDepth,
    /// [`Deadline::set_prio_aging_expire`].
    PrioAgingExpire,
}

/// One step of a run. Numbers that pick something are reduced modulo the number of choices:
/// `hctx` picks a hardware queue, `index` a request in flight (in the order they were
/// dispatched). An op with nothing to act on does nothing.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Makes requests of `1 + more % 4` bios — `bio`, then each starting where the one
    /// before ends, of the same operation, priority and flags — each allocated as a request
    /// queue does (within [`Elevator::limit_depth`]) for hardware queue `hctx`, and inserts
    /// them with one [`Elevator::insert_requests`] call. When a scheduler tag is not to be
    /// had, the bios from there on are not made.
    Insert {
        /// The hardware queue.
        hctx: u8,
        /// The first bio.
        bio: BioSpec,
        /// How many more, before reduction.
        more: u8,
        /// Inserted at the head.
        at_head: bool,
    },
    /// Offers a fresh bio to [`Elevator::bio_merge`]; refused, it becomes a request of its
    /// own, inserted as [`Op::Insert`] inserts one.
    Merge {
        /// The hardware queue a request of it would be for.
        hctx: u8,
        /// The bio.
        bio: BioSpec,
    },
    /// `1 + count % 4` calls of [`Elevator::dispatch_request`] for hardware queue `hctx`.
    Dispatch {
        /// The hardware queue.
        hctx: u8,
        /// How many, before reduction.
        count: u8,
    },
    /// Completes the `index`-th request in flight: [`Elevator::completed_request`],
    /// [`Elevator::finish_request`], then
    /// [`QueueTags::complete`](blkmq_core::QueueTags::complete) with status `status % 4` of
    /// [`Status::Ok`](blkmq_core::Status::Ok), [`Status::IoErr`](blkmq_core::Status::IoErr),
    /// [`Status::Timeout`](blkmq_core::Status::Timeout), [`Status::Medium`](blkmq_core::Status::Medium).
    Complete {
        /// Which request.
        index: u8,
        /// The status, before reduction.
        status: u8,
    },
    /// Requeues `1 + count % 3` requests in flight, from the `index`-th on (wrapping):
    /// [`Elevator::requeue_request`] for each, then one [`Elevator::insert_requests`] of
    /// them all at the head.
    Requeue {
        /// The first request.
        index: u8,
        /// How many, before reduction.
        count: u8,
    },
    /// Moves the clock [`ADVANCE`]`[step % 8]` ns on.
    Advance {
        /// The step, before reduction.
        step: u8,
    },
    /// Sets a tunable. `value % 4 != 0` picks an edge of its range from
    /// `(value >> 2) % 8` (in range and just out of it); `value % 4 == 0` gives it
    /// `value >> 2` as it is (for an expiry, in µs). [`Tunable::AsyncDepth`] takes
    /// `(value >> 2) % (nr_requests + 2)`, except that with `value % 4 == 0` a result of 0
    /// gives `value >> 2` itself (0, or a depth out of range); [`Tunable::FrontMerges`] is
    /// on for an even `value`.
    Tune {
        /// Which tunable.
        tunable: Tunable,
        /// The value, before reduction.
        value: u32,
    },
    /// [`QueueTags::set_nr_requests`](blkmq_core::QueueTags::set_nr_requests) to `nr % (made + 2)`, where `made` is the depth the
    /// scheduler tags were made with (so 0 and `made + 1` are refused); accepted,
    /// [`Elevator::depth_updated`] with it (the keys stay: the tags made are kept).
    Depth {
        /// The new `nr_requests`, before reduction.
        nr: u8,
    },
}

impl Op {
    /// The name of every variant, for coverage checks of a corpus.
    pub const KINDS: &'static [&'static str] = &[
        "Insert", "Merge", "Dispatch", "Complete", "Requeue", "Advance", "Tune", "Depth",
    ];

    /// This op's variant name (one of [`KINDS`](Self::KINDS)).
    ///
    /// ```
    /// use blkmq_model::deadline::Op;
    /// assert_eq!(Op::Advance { step: 3 }.kind(), "Advance");
    /// assert!(Op::KINDS.contains(&Op::Depth { nr: 1 }.kind()));
    /// ```
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Insert { .. } => "Insert",
            Self::Merge { .. } => "Merge",
            Self::Dispatch { .. } => "Dispatch",
            Self::Complete { .. } => "Complete",
            Self::Requeue { .. } => "Requeue",
            Self::Advance { .. } => "Advance",
            Self::Tune { .. } => "Tune",
            Self::Depth { .. } => "Depth",
        }
    }
}

/// Where [`run`] found a broken promise.
pub type Stage = elv::Stage<Op>;

/// A broken promise: where, and what was expected against what happened.
pub type Failure = elv::Failure<Op>;

/// Runs `ops` against the tags and the elevator `config` describes, checking every promise
/// listed in the module documentation after every op, then drains everything and checks
/// that nothing is left.
///
/// # Errors
/// The first broken promise: where, what was expected and what happened.
///
/// ```
/// use blkmq_model::deadline::{BioSpec, Config, LimitsSpec, Op, Place, Tunable, run};
///
/// let config = Config {
///     hw_queues: 1,
///     shared_tags: true,
///     nr_requests: 3,
///     limits: LimitsSpec { max_sectors: 0, chunk: Some(0), discard: Some(0), write_zeroes: None },
/// };
/// let write = BioSpec { class: 0, level: 0, op: 1, place: Place::At(64), sectors: 7, flags: 0 };
/// let ops = [
///     Op::Tune { tunable: Tunable::FifoBatch, value: 1 }, // 0: refused
///     Op::Insert { hctx: 1, bio: write, more: 3, at_head: false },
///     Op::Dispatch { hctx: 0, count: 1 },
///     Op::Requeue { index: 0, count: 0 },
///     Op::Depth { nr: 2 },
///     Op::Advance { step: 7 },
/// ];
/// run(&config, &ops).unwrap(); // the drain at the end dispatches and completes the rest
/// ```
pub fn run(config: &Config, ops: &[Op]) -> Result<(), Failure> {
    run_model(Runner::build(config), ops)
}

// ----- the model -----

/// The model's counters of one class.
#[derive(Clone, Copy, Default)]
struct Counts {
    /// Requests inserted fresh.
    inserted: u64,
    /// Bios taken by `bio_merge`.
    bio_merges: u64,
    dispatched: u64,
    /// Requests completed.
    completed: u64,
}

fn class_of(prio: IoPrio) -> usize {
    match prio.class() {
        IoPrioClass::RealTime => 0,
        IoPrioClass::BestEffort => 1,
        IoPrioClass::Idle => 2,
    }
}

/// An expiry for [`Op::Tune`].
fn expiry(value: u32) -> u64 {
    const EDGES: [u64; 8] = [
        0,
        1,
        MS,
        50 * MS,
        500 * MS,
        10_000 * MS,
        MAX_EXPIRE_NS,
        MAX_EXPIRE_NS + 1,
    ];
    if value % 4 != 0 {
        EDGES[(value >> 2) as usize % EDGES.len()]
    } else {
        u64::from(value >> 2) * 1_000
    }
}

/// A count (`fifo_batch`, `writes_starved`) for [`Op::Tune`].
fn count(value: u32) -> u32 {
    const EDGES: [u32; 8] = [0, 1, 2, 4, 16, MAX_BATCH, MAX_BATCH + 1, u32::MAX];
    if value % 4 != 0 {
        EDGES[(value >> 2) as usize % EDGES.len()]
    } else {
        value >> 2
    }
}

struct Runner {
    h: Harness,
    dd: Deadline,
    /// Per class, the requests inserted at the head and not yet dispatched (their bios),
    /// in the order they must come out.
    heads: [VecDeque<Vec<u32>>; 3],
    counts: [Counts; 3],
}

impl Model for Runner {
    type Op = Op;

    fn step(&mut self, op: &Op) -> Result<(), String> {
        let issuer = IssuerId::default();
        match *op {
            Op::Insert {
                hctx,
                bio,
                more,
                at_head,
            } => elv::insert(self, hctx, issuer, &bio, more, at_head)?,
            Op::Merge { hctx, bio } => elv::merge(self, hctx, issuer, &bio)?,
            Op::Dispatch { hctx, count } => elv::dispatch(self, hctx, count)?,
            Op::Complete { index, status } => elv::complete(self, index, status)?,
            Op::Requeue { index, count } => elv::requeue(self, index, count),
            Op::Advance { step } => self.h.now += ADVANCE[usize::from(step) % ADVANCE.len()],
            Op::Tune { tunable, value } => self.tune(tunable, value)?,
            Op::Depth { nr } => self.depth(nr)?,
        }
        self.h.settle()?;
        self.check()
    }

    /// Dispatches and completes everything, then checks that nothing is left.
    fn drain(&mut self) -> Result<(), String> {
        elv::drain(self)
    }
}

impl ElvModel for Runner {
    type Elv = Deadline;

    fn parts(&mut self) -> (&mut Harness, &mut Deadline) {
        (&mut self.h, &mut self.dd)
    }

    fn held(&self) -> usize {
        self.dd.queued()
    }

    /// A request of `bio` for `hctx`, allocated as a request queue does: `None` when no
    /// scheduler tag is to be had (the bio is then not handed over).
    fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
        let shallow = self.dd.limit_depth(bio.op, bio.flags);
        let want = (bio.op != BioOp::Read).then_some(self.dd.tunables().async_depth);
        ensure!(
            shallow == want,
            "limit_depth({:?}) = {shallow:?}, expected {want:?}",
            bio.op
        );
        let Some(mut rq) = self.h.alloc_request(hctx, bio, seq, shallow)? else {
            return Ok(None);
        };
        self.counts[class_of(bio.prio)].inserted += 1;
        let cx = self.h.cx();
        self.dd.prepare_request(&cx, &mut rq);
        Ok(Some(rq))
    }

    /// Requests (priority, bios) inserted at the head by one call, in the order handed in:
    /// in each class they go before those there, in this order.
    fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>) {
        for (prio, bios) in batch.into_iter().rev() {
            self.heads[class_of(prio)].push_front(bios);
        }
    }

    fn bio_merged(&mut self, bio: &Bio) {
        self.counts[class_of(bio.prio)].bio_merges += 1;
    }

    /// One dispatch, checked; false when the scheduler gave nothing.
    fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
        let cx = self.h.cx();
        let Some(rq) = self.dd.dispatch_request(&cx, hctx) else {
            if let Some(top) = (0..CLASSES.len()).find(|&c| self.queued_in(c)) {
                ensure!(
                    (0..top).any(|c| self.busy(c)),
                    "nothing dispatched with class {top} queued and no class above it busy"
                );
            }
            return Ok(false);
        };
        let f = self.h.dispatched(rq)?;
        let (class, ids, oldest) = (class_of(f.prio), f.bios.clone(), f.oldest);
        if let Some(want) = self.heads[class].pop_front() {
            ensure!(
                want == ids,
                "class {class} has requests inserted at the head, the first with bios {want:?}; \
                 {ids:?} came out (at the head: {:?})",
                self.heads[class]
            );
        }
        let aging = self.dd.tunables().prio_aging_expire_ns;
        for higher in 0..class {
            ensure!(
                !self.busy(higher) || oldest.saturating_add(aging) <= self.h.now,
                "class {class} dispatched at {} (waiting since {oldest}) while class {higher} \
                 is busy, prio_aging_expire {aging}",
                self.h.now
            );
        }
        self.counts[class].dispatched += 1;
        Ok(true)
    }

    fn check(&mut self) -> Result<(), String> {
        Runner::check(self)
    }

    fn completed(&mut self, prio: IoPrio) {
        self.counts[class_of(prio)].completed += 1;
    }

    fn drained(&mut self) -> Result<(), String> {
        for (c, &class) in CLASSES.iter().enumerate() {
            let s = self.dd.stats(class);
            ensure!(
                s.inserted == s.completed && s.in_flight == 0,
                "class {c} does not balance at the end: {s:?}"
            );
        }
        Ok(())
    }
}

impl Runner {
    fn build(config: &Config) -> Result<Self, String> {
        let h = Harness::build(config)?;
        let made = h.made;
        let mut dd = Deadline::new();
        dd.depth_updated(made, h.tags.nr_keys());
        let min = dd.min_shallow_depth();
        ensure!(
            min == Some(1),
            "min_shallow_depth {min:?}, expected Some(1)"
        );
        h.tags
            .set_min_shallow_depth(1)
            .map_err(|e| format!("min_shallow_depth 1: {e:?}"))?;
        let want = Tunables {
            async_depth: (3 * made / 4).max(1),
            ..Tunables::default()
        };
        ensure!(
            *dd.tunables() == want,
            "tunables {:?} after depth_updated({made}), expected {want:?}",
            dd.tunables()
        );
        let runner = Self {
            h,
            dd,
            heads: Default::default(),
            counts: [Counts::default(); 3],
        };
        runner.check()?;
        Ok(runner)
    }

    fn busy(&self, class: usize) -> bool {
        self.h
            .records()
            .values()
            .any(|r| class_of(r.prio) == class && r.state != BioState::Done)
    }

    fn queued_in(&self, class: usize) -> bool {
        self.h
            .records()
            .values()
            .any(|r| class_of(r.prio) == class && r.state == BioState::Queued)
    }

    fn tune(&mut self, tunable: Tunable, value: u32) -> Result<(), String> {
        let before = *self.dd.tunables();
        let mut want = before;
        let (result, name, raw, valid) = match tunable {
            Tunable::ReadExpire => {
                let ns = expiry(value);
                want.read_expire_ns = ns;
                let r = self.dd.set_read_expire(ns);
                (r, "read_expire", ns, ns <= MAX_EXPIRE_NS)
            }
            Tunable::WriteExpire => {
                let ns = expiry(value);
                want.write_expire_ns = ns;
                let r = self.dd.set_write_expire(ns);
                (r, "write_expire", ns, ns <= MAX_EXPIRE_NS)
            }
            Tunable::PrioAgingExpire => {
                let ns = expiry(value);
                want.prio_aging_expire_ns = ns;
                let r = self.dd.set_prio_aging_expire(ns);
                (r, "prio_aging_expire", ns, ns <= MAX_EXPIRE_NS)
            }
            Tunable::WritesStarved => {
                let n = count(value);
                want.writes_starved = n;
                let r = self.dd.set_writes_starved(n);
                (r, "writes_starved", u64::from(n), n <= MAX_BATCH)
            }
            Tunable::FifoBatch => {
                let n = count(value);
                want.fifo_batch = n;
                let r = self.dd.set_fifo_batch(n);
                (r, "fifo_batch", u64::from(n), (1..=MAX_BATCH).contains(&n))
            }
            Tunable::AsyncDepth => {
                let mut depth = (value >> 2) as usize % (self.h.nr_requests + 2);
                if value % 4 == 0 && depth == 0 {
                    depth = (value >> 2) as usize;
                }
                want.async_depth = depth;
                let r = self.dd.set_async_depth(depth);
                let valid = (1..=self.h.nr_requests).contains(&depth);
                (r, "async_depth", depth as u64, valid)
            }
            Tunable::FrontMerges => {
                let on = value % 2 == 0;
                want.front_merges = on;
                self.dd.set_front_merges(on);
                (Ok(()), "front_merges", u64::from(on), true)
            }
        };
        let tuned = Tuned {
            name,
            value: raw,
            valid,
            before: &before,
            want: &want,
        };
        let refused_as = TunableError { name, value: raw };
        tuned.check(self.dd.tunables(), result, refused_as)
    }

    fn depth(&mut self, nr: u8) -> Result<(), String> {
        let Some(nr) = self.h.set_nr_requests(nr)? else {
            return Ok(());
        };
        let before = *self.dd.tunables();
        self.dd.depth_updated(nr, self.h.tags.nr_keys());
        let want = Tunables {
            async_depth: (3 * nr / 4).max(1),
            ..before
        };
        let now = *self.dd.tunables();
        ensure!(
            now == want,
            "tunables {now:?} after depth_updated({nr}), expected {want:?}"
        );
        let min = self.dd.min_shallow_depth();
        ensure!(
            min == Some(1),
            "min_shallow_depth {min:?}, expected Some(1)"
        );
        self.h
            .tags
            .set_min_shallow_depth(1)
            .map_err(|e| format!("min_shallow_depth 1 at nr_requests {nr}: {e:?}"))
    }

    // ----- checks -----

    /// The counters, the work and the tags against the model.
    fn check(&self) -> Result<(), String> {
        elv::check_has_work(&self.h, &self.dd)?;
        let mut held = 0;
        for (c, &class) in CLASSES.iter().enumerate() {
            let s = self.dd.stats(class);
            let m = &self.counts[c];
            let in_flight = self
                .h
                .in_flight()
                .iter()
                .filter(|f| class_of(f.prio) == c)
                .count() as u64;
            ensure!(
                (s.inserted, s.dispatched, s.in_flight) == (m.inserted, m.dispatched, in_flight),
                "class {c}: {s:?}; expected inserted {}, dispatched {}, in flight {in_flight}",
                m.inserted,
                m.dispatched
            );
            ensure!(
                s.completed >= m.completed
                    && s.merged >= m.bio_merges
                    && s.completed - m.completed == s.merged - m.bio_merges,
                "class {c}: {s:?}; {} requests completed and {} bios merged",
                m.completed,
                m.bio_merges
            );
            ensure!(
                (s.inserted > s.completed) == self.busy(c),
                "class {c}: {s:?}, a bio of it not ended: {}",
                self.busy(c)
            );
            ensure!(s.inserted >= s.completed + s.in_flight, "class {c}: {s:?}");
            held += s.inserted - s.completed - s.in_flight;
        }
        let queued_rqs = self.dd.queued();
        ensure!(
            held == queued_rqs as u64,
            "the counters say {held} requests held, queued() {queued_rqs}"
        );
        self.h.check_tags(queued_rqs)
    }
}
