//! Operation sequences on BFQ checked after every op: the test support shared by the corpus
//! replay of the root package (`tests/fuzz_corpus.rs`), the model test
//! (`crates/sched-bfq/tests/model.rs`) and the cargo-fuzz target `bfq_ops`.
//!
//! A [`Config`] says what to build: the bare tags and limits of a
//! [harness](crate::elv::Harness) (one or two hardware queues, scheduler tags of
//! 1 to [`MAX_NR_REQUESTS`] requests per map, a clock that moves only when an op says so), a
//! rotational device or not, and a [`Bfq`] with `low_latency` on or off and `max_budget`
//! fixed or auto-tuned, sized by [`Elevator::depth_updated`]. [`run`] then drives the
//! elevator directly, the way a request queue does: requests of [`MAX_ISSUERS`] issuers (any
//! class and level, reads and writes, sync and async) allocated within
//! [`Elevator::limit_depth`], prepared and inserted (alone or several in one call, at the
//! tail or at the head), bios offered to [`Elevator::bio_merge`] (and inserted as requests of
//! their own when refused), dispatches, completions, requeues (inserted again at the head),
//! clock steps (so idle waits, budget timeouts, FIFO expiry and the end of weight raising
//! happen), runs at the elevator's [`next_timer`](Elevator::next_timer), tunable changes
//! (valid and not, one at a time or all at once), groups made and weighted, issuers moved
//! between groups and given weights, and changes of `nr_requests` within the scheduler tags
//! made.
//!
//! After every op it checks what the harness checks of every elevator (see
//! [`elv`]: every bio dispatched exactly once per insertion, every
//! dispatched request exactly its bios within the limits, every bio ending once with its
//! request's status, the scheduler tags in use are the requests held and in flight), and
//! what BFQ promises:
//!
//! * a request holds the bios of one BFQ queue: all sync or all async, and when sync, all
//!   of one issuer;
//! * requests inserted at the head (fresh, or requeued) are dispatched before everything
//!   else: each insert before those inserted at the head earlier, the requests of one call
//!   in the order they were handed in, and each exactly as it went in;
//! * [`Bfq::queued`] is the number of requests held; [`has_work`](Elevator::has_work) holds
//!   on every hardware queue exactly when a bio is queued; and a dispatch that gives nothing
//!   while requests are held leaves a reason to be called again: a request in flight (its
//!   completion reruns the queue), or a [`next_timer`](Elevator::next_timer) not in the
//!   past;
//! * [`Elevator::limit_depth`] is no limit for sync reads, at most half of `nr_requests` for
//!   async I/O and three quarters for sync writes, never below
//!   [`min_shallow_depth`](Elevator::min_shallow_depth);
//! * per issuer, [`Bfq::issuer_stats`] counts the sync requests dispatched from its queue
//!   (a request dispatched from the head list, fresh or requeued, is not charged again, as
//!   in Linux) and their sectors; an issuer given a weight shows it unless raised, and more
//!   while raised; with `low_latency` off nothing is raised; [`BfqStats`]
//!   counts only grow, and a fixed `max_budget` is the one in use;
//! * tunables: every setter accepts exactly its documented range; a value refused comes
//!   back as a [`TunableError`] naming the tunable and the value, and changes nothing; a
//!   value accepted changes that tunable alone; [`Bfq::set_tunables`] does the same for a
//!   whole set; groups and issuer weights take exactly `1..=`[`MAX_GROUP_WEIGHT`], and a
//!   group of another scheduler is [`BfqError::NoSuchGroup`].
//!
//! At the end the run drains: it dispatches everything, completes what is in flight and
//! moves the clock to each idle timer until nothing is left. Then no hardware queue may have
//! work, no request may be held or in flight, no scheduler tag in use, and every bio must
//! have ended once.
//!
//! Every field of a [`Config`] or an [`Op`] is reduced into a meaningful range rather than
//! rejected, so any input a fuzzer makes up is a valid test: a panic or a [`Failure`] is a
//! bug.
//!
//! ```
//! use blkmq_model::bfq::{BioSpec, Config, LimitsSpec, Op, Place, TagsConfig, run};
//!
//! let tags = TagsConfig {
//!     hw_queues: 0,
//!     shared_tags: false,
//!     nr_requests: 7,
//!     limits: LimitsSpec { max_sectors: 7, chunk: None, discard: None, write_zeroes: None },
//! };
//! let config = Config { tags, rotational: true, low_latency: true, max_budget: None };
//! let read = BioSpec { class: 1, level: 4, op: 0, place: Place::At(0), sectors: 7, flags: 0 };
//! let next = BioSpec { place: Place::Follow, ..read };
//! let ops = [
//!     Op::Insert { hctx: 0, issuer: 0, bio: read, more: 0, at_head: false },
//!     Op::Merge { hctx: 0, issuer: 0, bio: next }, // 8..16 joins the request at 0
//!     Op::Dispatch { hctx: 0, count: 0 },
//!     Op::Complete { index: 0, status: 0 },
//!     Op::Timer, // the idle wait for the issuer runs out
//! ];
//! run(&config, &ops).unwrap();
//! ```

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use crate::elv::{self, ElvModel, Harness, Model, Tuned, run_model};
use arbitrary::Arbitrary;
use blkmq_core::{Bio, Elevator, IoPrio, IssuerId, Op as BioOp, Rq};

pub use crate::elv::{
    BioSpec, Config as TagsConfig, LimitsSpec, MAX_BIO_SECTORS, MAX_HW_QUEUES, MAX_NR_REQUESTS,
    Place, SPAN,
};

use blkmq_sched_bfq::{
    Bfq, BfqError, BfqStats, GroupId, MAX_BACK_SEEK_KIB, MAX_BACK_SEEK_PENALTY, MAX_BUDGET,
    MAX_EXPIRE_NS, MAX_GROUP_WEIGHT, MAX_SLICE_IDLE_NS, TunableError, Tunables,
};

/// Issuers a run has: `IssuerId(1 + issuer % MAX_ISSUERS)`.
pub const MAX_ISSUERS: u8 = 4;

/// The most groups a run makes besides the root (more are refused by the model, not by
/// BFQ: the op does nothing).
pub const MAX_GROUPS: usize = 4;

const MS: u64 = 1_000_000;

/// How far [`Op::Advance`] moves the clock: `ADVANCE[step % 8]` ns, from nothing to past
/// every idle wait, budget timeout, FIFO expiry, raising and burst window.
pub const ADVANCE: [u64; 8] = [
    0,
    1_000,
    MS,
    9 * MS,
    130 * MS,
    300 * MS,
    2_100 * MS,
    14_000 * MS,
];

/// What [`run`] builds.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// The tags and limits.
    pub tags: TagsConfig,
    /// [`QueueLimits::rotational`](blkmq_core::QueueLimits::rotational).
    pub rotational: bool,
    /// [`Tunables::low_latency`].
    pub low_latency: bool,
    /// [`Tunables::max_budget`]: `8 * (1 + m % 2048)` sectors; `None` for auto-tuning.
    pub max_budget: Option<u16>,
}

/// A tunable of [`Op::Tune`].
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tunable {
    /// [`Bfq::set_slice_idle`].
    SliceIdle,
    /// [`Bfq::set_timeout_sync`].
    TimeoutSync,
    /// [`Bfq::set_max_budget`].
    MaxBudget,
    /// [`Bfq::set_fifo_expire_sync`].
    FifoExpireSync,
    /// [`Bfq::set_fifo_expire_async`].
    FifoExpireAsync,
    /// [`Bfq::set_back_seek_max`].
    BackSeekMax,
    /// [`Bfq::set_back_seek_penalty`].
    BackSeekPenalty,
    /// [`Bfq::set_low_latency`].
    LowLatency,
    /// [`Bfq::set_strict_guarantees`].
    StrictGuarantees,
}

/// One step of a run. Numbers that pick something are reduced modulo the number of choices:
/// `hctx` picks a hardware queue, `issuer` one of [`MAX_ISSUERS`], `index` a request in
/// flight (in the order they were dispatched), `group` one of the groups made (the root
/// first) or, one past them, a group of another scheduler. A weight is `weight % 1002` (so
/// 0 and 1001 are refused). An op with nothing to act on does nothing.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Makes requests of `1 + more % 4` bios of `issuer` — `bio`, then each starting where
    /// the one before ends, of the same operation, priority and flags — each allocated as a
    /// request queue does (within [`Elevator::limit_depth`]) for hardware queue `hctx` and
    /// prepared ([`Elevator::prepare_request`]), and inserts them with one
    /// [`Elevator::insert_requests`] call. When a scheduler tag is not to be had, the bios
    /// from there on are not made. A bio placed after or before another takes that one's
    /// issuer.
    Insert {
        /// The hardware queue.
        hctx: u8,
        /// The issuer.
        issuer: u8,
        /// The first bio.
        bio: BioSpec,
        /// How many more, before reduction.
        more: u8,
        /// Inserted at the head.
        at_head: bool,
    },
    /// Offers a fresh bio of `issuer` to [`Elevator::bio_merge`]; refused, it becomes a
    /// request of its own, inserted as [`Op::Insert`] inserts one.
    Merge {
        /// The hardware queue a request of it would be for.
        hctx: u8,
        /// The issuer.
        issuer: u8,
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
    /// [`Elevator::finish_request`], then the tags' completion with status `status % 4` of
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
    /// Moves the clock to [`Elevator::next_timer`], if it is set and ahead, then dispatches
    /// once, as the queue does when the timer fires.
    Timer,
    /// Sets a tunable. `value % 4 != 0` picks an edge of its range from `(value >> 2) % 8`
    /// (in range and just out of it); `value % 4 == 0` gives it `value >> 2` as it is (a
    /// time in µs). A flag is on for an even `value`. With `all`, through
    /// [`Bfq::set_tunables`] (the other tunables as they are).
    Tune {
        /// Which tunable.
        tunable: Tunable,
        /// The value, before reduction.
        value: u32,
        /// All at once.
        all: bool,
    },
    /// [`Bfq::add_group`] under `parent`, with `weight`.
    AddGroup {
        /// The parent group.
        parent: u8,
        /// The weight, before reduction.
        weight: u16,
    },
    /// [`Bfq::set_group_weight`].
    GroupWeight {
        /// The group.
        group: u8,
        /// The weight, before reduction.
        weight: u16,
    },
    /// [`Bfq::set_issuer_group`].
    IssuerGroup {
        /// The issuer.
        issuer: u8,
        /// The group.
        group: u8,
    },
    /// [`Bfq::set_issuer_weight`].
    IssuerWeight {
        /// The issuer.
        issuer: u8,
        /// The weight, before reduction.
        weight: u16,
    },
    /// The tags' `set_nr_requests` to `nr % (made + 2)`, where `made` is the depth the
    /// scheduler tags were made with (so 0 and `made + 1` are refused); accepted,
    /// [`Elevator::depth_updated`] with it.
    Depth {
        /// The new `nr_requests`, before reduction.
        nr: u8,
    },
}

impl Op {
    /// The name of every variant, for coverage checks of a corpus.
    pub const KINDS: &'static [&'static str] = &[
        "Insert",
        "Merge",
        "Dispatch",
        "Complete",
        "Requeue",
        "Advance",
        "Timer",
        "Tune",
        "AddGroup",
        "GroupWeight",
        "IssuerGroup",
        "IssuerWeight",
        "Depth",
    ];

    /// This op's variant name (one of [`KINDS`](Self::KINDS)).
    ///
    /// ```
    /// use blkmq_model::bfq::Op;
    /// assert_eq!(Op::Timer.kind(), "Timer");
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
            Self::Timer => "Timer",
            Self::Tune { .. } => "Tune",
            Self::AddGroup { .. } => "AddGroup",
            Self::GroupWeight { .. } => "GroupWeight",
            Self::IssuerGroup { .. } => "IssuerGroup",
            Self::IssuerWeight { .. } => "IssuerWeight",
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
/// use blkmq_model::bfq::{BioSpec, Config, LimitsSpec, Op, Place, TagsConfig, Tunable, run};
///
/// let tags = TagsConfig {
///     hw_queues: 1,
///     shared_tags: true,
///     nr_requests: 3,
///     limits: LimitsSpec { max_sectors: 0, chunk: Some(0), discard: Some(0), write_zeroes: None },
/// };
/// let config = Config { tags, rotational: false, low_latency: false, max_budget: Some(3) };
/// let write = BioSpec { class: 0, level: 0, op: 1, place: Place::At(64), sectors: 7, flags: 0 };
/// let ops = [
///     Op::Tune { tunable: Tunable::BackSeekPenalty, value: 1, all: false }, // 0: refused
///     Op::IssuerWeight { issuer: 1, weight: 500 },
///     Op::Insert { hctx: 1, issuer: 1, bio: write, more: 3, at_head: false },
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

/// What an issuer's queue must show.
#[derive(Clone, Copy, Debug, Default)]
struct IssuerModel {
    /// The weight given by [`Bfq::set_issuer_weight`].
    weight: Option<u32>,
    /// Sync requests dispatched from its queue, and their sectors.
    dispatched: u64,
    sectors: u64,
}

/// A value for [`Op::Tune`]: an edge of `edges` or, for `value % 4 == 0`, `value >> 2`
/// times `unit`.
fn pick(value: u32, edges: [u64; 8], unit: u64) -> u64 {
    if value % 4 != 0 {
        edges[(value >> 2) as usize % edges.len()]
    } else {
        u64::from(value >> 2) * unit
    }
}

/// The weight an op names.
fn weight_of(raw: u16) -> u32 {
    u32::from(raw) % (MAX_GROUP_WEIGHT + 2)
}

fn issuer_of(raw: u8) -> IssuerId {
    IssuerId(1 + u32::from(raw % MAX_ISSUERS))
}

/// Whether a bio of `op` with `flags` is sync (the rule of [`Bio::is_sync`]).
fn sync_of(rec: &elv::BioRec) -> bool {
    Bio::new(rec.op, 0, 0).flags(rec.flags).is_sync()
}

struct Runner {
    h: Harness,
    bfq: Bfq,
    /// The requests inserted at the head and not yet dispatched (their bios), in the order
    /// they must come out.
    heads: VecDeque<Vec<u32>>,
    /// The tunables as the ops set them.
    tunables: Tunables,
    /// The groups made, the root first.
    groups: Vec<GroupId>,
    /// Makes groups that are not this scheduler's.
    stranger: Bfq,
    issuers: BTreeMap<IssuerId, IssuerModel>,
    /// The counters after the last op.
    stats: BfqStats,
}

impl Model for Runner {
    type Op = Op;

    fn step(&mut self, op: &Op) -> Result<(), String> {
        match *op {
            Op::Insert {
                hctx,
                issuer,
                bio,
                more,
                at_head,
            } => elv::insert(self, hctx, issuer_of(issuer), &bio, more, at_head)?,
            Op::Merge { hctx, issuer, bio } => elv::merge(self, hctx, issuer_of(issuer), &bio)?,
            Op::Dispatch { hctx, count } => elv::dispatch(self, hctx, count)?,
            Op::Complete { index, status } => elv::complete(self, index, status)?,
            Op::Requeue { index, count } => elv::requeue(self, index, count),
            Op::Advance { step } => self.h.now += ADVANCE[usize::from(step) % ADVANCE.len()],
            Op::Timer => {
                if let Some(at) = self.bfq.next_timer() {
                    self.h.now = self.h.now.max(at);
                }
                self.dispatch(0)?;
            }
            Op::Tune {
                tunable,
                value,
                all,
            } => self.tune(tunable, value, all)?,
            Op::AddGroup { parent, weight } => self.add_group(parent, weight)?,
            Op::GroupWeight { group, weight } => {
                let (group, known) = self.group(group);
                let weight = weight_of(weight);
                let got = self.bfq.set_group_weight(group, weight);
                self.expect_group_call(got, known, weight, "set_group_weight")?;
            }
            Op::IssuerGroup { issuer, group } => {
                let (group, known) = self.group(group);
                let got = self.bfq.set_issuer_group(issuer_of(issuer), group);
                let want = if known {
                    Ok(())
                } else {
                    Err(BfqError::NoSuchGroup)
                };
                ensure!(
                    got == want,
                    "set_issuer_group({group:?}) = {got:?}, expected {want:?}"
                );
            }
            Op::IssuerWeight { issuer, weight } => {
                let issuer = issuer_of(issuer);
                let weight = weight_of(weight);
                let got = self.bfq.set_issuer_weight(issuer, weight);
                let valid = (1..=MAX_GROUP_WEIGHT).contains(&weight);
                let want = if valid {
                    Ok(())
                } else {
                    Err(BfqError::BadWeight(weight))
                };
                ensure!(
                    got == want,
                    "set_issuer_weight({issuer:?}, {weight}) = {got:?}, expected {want:?}"
                );
                if valid {
                    self.issuers.entry(issuer).or_default().weight = Some(weight);
                }
            }
            Op::Depth { nr } => self.depth(nr)?,
        }
        self.h.settle()?;
        self.check()
    }

    /// Dispatches and completes everything, moving the clock to each idle timer, then
    /// checks that nothing is left.
    fn drain(&mut self) -> Result<(), String> {
        elv::drain(self)
    }
}

impl ElvModel for Runner {
    type Elv = Bfq;

    fn parts(&mut self) -> (&mut Harness, &mut Bfq) {
        (&mut self.h, &mut self.bfq)
    }

    fn held(&self) -> usize {
        self.bfq.queued()
    }

    /// A request of `bio` for `hctx`, allocated and prepared as a request queue does:
    /// `None` when no scheduler tag is to be had (the bio is then not handed over).
    fn make_request(&mut self, hctx: usize, bio: Bio, seq: u32) -> Result<Option<Rq>, String> {
        let shallow = self.bfq.limit_depth(bio.op, bio.flags);
        let nr = self.h.nr_requests;
        let min = self.bfq.min_shallow_depth().unwrap_or(1);
        let most = match (bio.is_sync(), bio.op == BioOp::Read) {
            (true, true) => None,
            (true, false) => Some((3 * nr / 4).max(1)),
            (false, _) => Some((nr / 2).max(1)),
        };
        let fine = match (shallow, most) {
            (None, None) => true,
            (Some(d), Some(most)) => (min..=most).contains(&d),
            _ => false,
        };
        ensure!(
            fine,
            "limit_depth({:?}, {:?}) = {shallow:?} at nr_requests {nr}: expected at most \
             {most:?}, at least {min}",
            bio.op,
            bio.flags
        );
        let Some(mut rq) = self.h.alloc_request(hctx, bio, seq, shallow)? else {
            return Ok(None);
        };
        let cx = self.h.cx();
        self.bfq.prepare_request(&cx, &mut rq);
        Ok(Some(rq))
    }

    /// Requests (their bios) inserted at the head by one call, in the order handed in: they
    /// go before those there, in this order.
    fn went_in_at_head(&mut self, batch: Vec<(IoPrio, Vec<u32>)>) {
        for (_, bios) in batch.into_iter().rev() {
            self.heads.push_front(bios);
        }
    }

    /// One dispatch, checked; false when the scheduler gave nothing.
    fn dispatch(&mut self, hctx: usize) -> Result<bool, String> {
        let cx = self.h.cx();
        let Some(rq) = self.bfq.dispatch_request(&cx, hctx) else {
            if self.h.any_queued() && self.h.in_flight().is_empty() {
                let timer = self.bfq.next_timer();
                ensure!(
                    timer.is_some_and(|t| t >= self.h.now),
                    "nothing dispatched at {} with requests queued, none in flight, and \
                     next_timer {timer:?}",
                    self.h.now
                );
            }
            return Ok(false);
        };
        let f = self.h.dispatched(rq)?;
        let (ids, issuer, sync, sectors) = (f.bios.clone(), f.issuer, f.sync, f.sectors);
        for id in &ids {
            let rec = &self.h.records()[id];
            ensure!(
                sync_of(rec) == sync && (!sync || rec.issuer == issuer),
                "bio {id} ({rec:?}) in a request of {issuer:?} (sync: {sync}), bios {ids:?}"
            );
        }
        if let Some(want) = self.heads.pop_front() {
            ensure!(
                want == ids,
                "requests inserted at the head, the first with bios {want:?}; {ids:?} came \
                 out (at the head: {:?})",
                self.heads
            );
        } else if sync {
            let m = self.issuers.entry(issuer).or_default();
            m.dispatched += 1;
            m.sectors += sectors;
        }
        Ok(true)
    }

    fn check(&mut self) -> Result<(), String> {
        Runner::check(self)
    }
}

impl Runner {
    fn build(config: &Config) -> Result<Self, String> {
        let mut h = Harness::build(&config.tags)?;
        h.limits.rotational = config.rotational;
        let tunables = Tunables {
            low_latency: config.low_latency,
            max_budget: config
                .max_budget
                .map_or(0, |m| 8 * (1 + u64::from(m) % 2048)),
            ..Tunables::default()
        };
        let mut bfq = Bfq::with_tunables(tunables).map_err(|e| format!("{tunables:?}: {e}"))?;
        bfq.depth_updated(h.made, h.tags.nr_keys());
        let mut runner = Self {
            h,
            bfq,
            heads: VecDeque::new(),
            tunables,
            groups: alloc::vec![GroupId::ROOT],
            stranger: Bfq::new(),
            issuers: BTreeMap::new(),
            stats: BfqStats::default(),
        };
        runner.set_min_shallow_depth()?;
        runner.check()?;
        Ok(runner)
    }

    /// Tells the tags the elevator's smallest depth limit.
    fn set_min_shallow_depth(&self) -> Result<(), String> {
        let min = self.bfq.min_shallow_depth();
        let nr = self.h.nr_requests;
        ensure!(
            min.is_some_and(|m| (1..=nr).contains(&m)),
            "min_shallow_depth {min:?} at nr_requests {nr}"
        );
        self.h
            .tags
            .set_min_shallow_depth(min.unwrap_or(1))
            .map_err(|e| format!("min_shallow_depth {min:?} at nr_requests {nr}: {e:?}"))
    }

    fn tune(&mut self, tunable: Tunable, value: u32, all: bool) -> Result<(), String> {
        const NS_EDGES: [u64; 8] = [0, 1, MS - 1, MS, 125 * MS, 10_000 * MS, 0, 0];
        let ns = |max: u64| {
            let mut edges = NS_EDGES;
            edges[6] = max;
            edges[7] = max + 1;
            pick(value, edges, 1_000)
        };
        let before = self.tunables;
        let mut want = before;
        let (name, raw, valid) = match tunable {
            Tunable::SliceIdle => {
                want.slice_idle_ns = ns(MAX_SLICE_IDLE_NS);
                let v = want.slice_idle_ns;
                ("slice_idle", v, v <= MAX_SLICE_IDLE_NS)
            }
            Tunable::TimeoutSync => {
                want.timeout_sync_ns = ns(MAX_EXPIRE_NS);
                let v = want.timeout_sync_ns;
                ("timeout_sync", v, (MS..=MAX_EXPIRE_NS).contains(&v))
            }
            Tunable::FifoExpireSync => {
                want.fifo_expire_sync_ns = ns(MAX_EXPIRE_NS);
                let v = want.fifo_expire_sync_ns;
                ("fifo_expire_sync", v, v <= MAX_EXPIRE_NS)
            }
            Tunable::FifoExpireAsync => {
                want.fifo_expire_async_ns = ns(MAX_EXPIRE_NS);
                let v = want.fifo_expire_async_ns;
                ("fifo_expire_async", v, v <= MAX_EXPIRE_NS)
            }
            Tunable::MaxBudget => {
                let edges = [0, 1, 8, 64, 4096, 16_384, MAX_BUDGET, MAX_BUDGET + 1];
                want.max_budget = pick(value, edges, 1);
                let v = want.max_budget;
                ("max_budget", v, v <= MAX_BUDGET)
            }
            Tunable::BackSeekMax => {
                let edges = [
                    0,
                    1,
                    16,
                    1024,
                    16_384,
                    1 << 20,
                    MAX_BACK_SEEK_KIB,
                    MAX_BACK_SEEK_KIB + 1,
                ];
                want.back_seek_max_kib = pick(value, edges, 1);
                let v = want.back_seek_max_kib;
                ("back_seek_max", v, v <= MAX_BACK_SEEK_KIB)
            }
            Tunable::BackSeekPenalty => {
                let max = u64::from(MAX_BACK_SEEK_PENALTY);
                let edges = [0, 1, 2, 3, 16, 1000, max, max + 1];
                let v = pick(value, edges, 1).min(u64::from(u32::MAX));
                want.back_seek_penalty = v as u32;
                ("back_seek_penalty", v, (1..=max).contains(&v))
            }
            Tunable::LowLatency => {
                want.low_latency = value % 2 == 0;
                ("low_latency", u64::from(want.low_latency), true)
            }
            Tunable::StrictGuarantees => {
                want.strict_guarantees = value % 2 == 0;
                ("strict_guarantees", u64::from(want.strict_guarantees), true)
            }
        };
        let result = if all {
            self.bfq.set_tunables(want)
        } else {
            match tunable {
                Tunable::SliceIdle => self.bfq.set_slice_idle(want.slice_idle_ns),
                Tunable::TimeoutSync => self.bfq.set_timeout_sync(want.timeout_sync_ns),
                Tunable::MaxBudget => self.bfq.set_max_budget(want.max_budget),
                Tunable::FifoExpireSync => self.bfq.set_fifo_expire_sync(want.fifo_expire_sync_ns),
                Tunable::FifoExpireAsync => {
                    self.bfq.set_fifo_expire_async(want.fifo_expire_async_ns)
                }
                Tunable::BackSeekMax => self.bfq.set_back_seek_max(want.back_seek_max_kib),
                Tunable::BackSeekPenalty => self.bfq.set_back_seek_penalty(want.back_seek_penalty),
                Tunable::LowLatency => {
                    self.bfq.set_low_latency(want.low_latency);
                    Ok(())
                }
                Tunable::StrictGuarantees => {
                    self.bfq.set_strict_guarantees(want.strict_guarantees);
                    Ok(())
                }
            }
        };
        let accepted = result.is_ok();
        let tuned = Tuned {
            name,
            value: raw,
            valid,
            before: &before,
            want: &want,
        };
        let refused_as = TunableError { name, value: raw };
        tuned.check(self.bfq.tunables(), result, refused_as)?;
        if accepted {
            self.tunables = want;
        }
        Ok(())
    }

    /// The group `raw` picks, and whether it is this scheduler's: one past those made, a
    /// group only another scheduler made.
    fn group(&mut self, raw: u8) -> (GroupId, bool) {
        let i = usize::from(raw) % (self.groups.len() + 1);
        if let Some(&g) = self.groups.get(i) {
            return (g, true);
        }
        let mut g = GroupId::ROOT;
        while self.groups.contains(&g) {
            g = self
                .stranger
                .add_group(GroupId::ROOT, 100)
                .unwrap_or(GroupId::ROOT);
        }
        (g, false)
    }

    fn add_group(&mut self, parent: u8, weight: u16) -> Result<(), String> {
        if self.groups.len() > MAX_GROUPS {
            return Ok(());
        }
        let (parent, known) = self.group(parent);
        let weight = weight_of(weight);
        let got = self.bfq.add_group(parent, weight);
        if let Ok(g) = got {
            ensure!(
                !self.groups.contains(&g),
                "add_group gave {g:?}, a group already made ({:?})",
                self.groups
            );
            self.groups.push(g);
        }
        self.expect_group_call(got.map(|_| ()), known, weight, "add_group")
    }

    /// A group call's result against the rules: a bad weight first, then an unknown group.
    fn expect_group_call(
        &self,
        got: Result<(), BfqError>,
        known: bool,
        weight: u32,
        call: &str,
    ) -> Result<(), String> {
        let want = if !(1..=MAX_GROUP_WEIGHT).contains(&weight) {
            Err(BfqError::BadWeight(weight))
        } else if !known {
            Err(BfqError::NoSuchGroup)
        } else {
            Ok(())
        };
        ensure!(
            got == want,
            "{call} with weight {weight} (a group of ours: {known}) = {got:?}, expected {want:?}"
        );
        Ok(())
    }

    fn depth(&mut self, nr: u8) -> Result<(), String> {
        let Some(nr) = self.h.set_nr_requests(nr)? else {
            return Ok(());
        };
        self.bfq.depth_updated(nr, self.h.tags.nr_keys());
        ensure!(
            *self.bfq.tunables() == self.tunables,
            "tunables {:?} after depth_updated({nr}), expected {:?}",
            self.bfq.tunables(),
            self.tunables
        );
        self.set_min_shallow_depth()
    }

    // ----- checks -----

    /// The work, the counters and the tags against the model.
    fn check(&mut self) -> Result<(), String> {
        elv::check_has_work(&self.h, &self.bfq)?;
        let queued = self.h.any_queued();
        let held = self.bfq.queued();
        ensure!(
            (held > 0) == queued,
            "queued() = {held}, a bio queued: {queued}"
        );
        self.h.check_tags(held)?;
        ensure!(
            *self.bfq.tunables() == self.tunables,
            "tunables {:?}, expected {:?}",
            self.bfq.tunables(),
            self.tunables
        );
        let s = self.bfq.stats();
        let was = self.stats;
        ensure!(
            s.idle_waits >= was.idle_waits
                && s.injected >= was.injected
                && s.budget_timeouts >= was.budget_timeouts
                && s.large_bursts >= was.large_bursts,
            "counters went back: {was:?}, then {s:?}"
        );
        if self.tunables.max_budget != 0 {
            ensure!(
                s.max_budget == self.tunables.max_budget,
                "max_budget {} in use, fixed at {}",
                s.max_budget,
                self.tunables.max_budget
            );
        }
        let mut raised = 0;
        for (&issuer, m) in &self.issuers {
            let Some(q) = self.bfq.issuer_stats(issuer) else {
                ensure!(
                    m.dispatched == 0,
                    "no stats for {issuer:?}, which had {} requests dispatched",
                    m.dispatched
                );
                continue;
            };
            ensure!(
                (q.dispatched, q.service_sectors) == (m.dispatched, m.sectors),
                "{issuer:?}: {q:?}; expected {} sync requests dispatched, of {} sectors",
                m.dispatched,
                m.sectors
            );
            if let Some(w) = m.weight {
                ensure!(
                    if q.raised {
                        q.weight > w
                    } else {
                        q.weight == w
                    },
                    "{issuer:?} given weight {w} shows {q:?}"
                );
            }
            raised += usize::from(q.raised);
        }
        if !self.tunables.low_latency {
            ensure!(
                s.raised_queues == 0 && raised == 0,
                "low_latency off, yet {} queues raised ({raised} of the issuers')",
                s.raised_queues
            );
        }
        self.stats = s;
        Ok(())
    }
}
