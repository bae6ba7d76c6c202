//! A model test of mq-deadline: random sequences of inserts (any class, direction, place,
//! size, sometimes unmergeable), merge attempts, dispatches, completions, requeues, clock
//! steps and tunable changes, checked against a record of every bio:
//!
//! * a bio is dispatched only while queued, so once per insertion and once more per
//!   requeue, and every bio is dispatched and completed by the end;
//! * a dispatched request holds exactly its bios, contiguous, in order, of one operation
//!   and priority, within the limits;
//! * strict priority by "queued or in flight": a lower class goes only when no higher class
//!   is busy, or when it has waited out `prio_aging_expire`; and the scheduler never
//!   refuses to dispatch unless a higher class in flight holds the queued ones back;
//! * the counters agree with the record, and nothing is left behind after draining (no
//!   work, every scheduler tag free).

use std::collections::BTreeMap;

use blkmq_core::{
    Alloc, Bio, BioFlags, Elevator, ElvCx, IoPrio, IoPrioClass, Op, QueueLimits, QueueTags, Rq,
    Status, StdPlatform, TagError, TagSet,
};
use blkmq_sched_deadline::{Deadline, MAX_BATCH, MAX_EXPIRE_NS};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;

const MS: u64 = 1_000_000;
const NR_REQUESTS: usize = 24;
const CLASSES: [IoPrioClass; 3] = [
    IoPrioClass::RealTime,
    IoPrioClass::BestEffort,
    IoPrioClass::Idle,
];

fn limits() -> QueueLimits {
    QueueLimits {
        max_sectors: 64,
        max_discard_sectors: 128,
        ..QueueLimits::new(1 << 20)
    }
}

fn max_sectors(op: Op) -> u64 {
    match op {
        Op::Discard => 128,
        _ => 64,
    }
}

fn class_of(prio: IoPrio) -> usize {
    match prio.class() {
        IoPrioClass::RealTime => 0,
        IoPrioClass::BestEffort => 1,
        IoPrioClass::Idle => 2,
    }
}

#[derive(Clone, Debug)]
enum Step {
    Insert {
        class: usize,
        level: u8,
        op: Op,
        sector: u64,
        sectors: u32,
        nomerge: bool,
    },
    Merge {
        pick: Index,
        front: bool,
        sectors: u32,
    },
    Dispatch,
    Complete {
        pick: Index,
    },
    Requeue {
        pick: Index,
    },
    Advance {
        ns: u64,
    },
    Tune {
        which: u8,
        value: u64,
    },
}

fn step() -> impl Strategy<Value = Step> {
    let op = prop_oneof![Just(Op::Read), Just(Op::Write), Just(Op::Discard)];
    let insert = (
        0usize..3,
        0u8..2,
        op,
        0u64..64,
        1u32..5,
        prop::bool::weighted(0.2),
    )
        .prop_map(|(class, level, op, sector, len, nomerge)| Step::Insert {
            class,
            level,
            op,
            sector: sector * 8,
            sectors: len * 8,
            nomerge,
        });
    let merge =
        (any::<Index>(), any::<bool>(), 1u32..5).prop_map(|(pick, front, len)| Step::Merge {
            pick,
            front,
            sectors: len * 8,
        });
    let advance = prop_oneof![
        0u64..2 * MS,
        Just(60 * MS),
        Just(600 * MS),
        Just(6_000 * MS),
        Just(11_000 * MS),
    ]
    .prop_map(|ns| Step::Advance { ns });
    prop_oneof![
        5 => insert,
        3 => merge,
        4 => Just(Step::Dispatch),
        2 => any::<Index>().prop_map(|pick| Step::Complete { pick }),
        1 => any::<Index>().prop_map(|pick| Step::Requeue { pick }),
        2 => advance,
        1 => (0u8..7, any::<u64>()).prop_map(|(which, value)| Step::Tune { which, value }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Queued,
    InFlight,
    Done,
}

/// What the model knows of one bio.
#[derive(Clone, Copy, Debug)]
struct Rec {
    op: Op,
    prio: IoPrio,
    sector: u64,
    sectors: u32,
    /// When it entered the scheduler.
    since: u64,
    state: State,
    dispatched: u32,
    /// Dispatches it is owed: one, and one more per requeue.
    owed: u32,
}

struct InFlight {
    rq: Rq,
    class: usize,
    bios: Vec<u64>,
}

struct World {
    tags: QueueTags<(), StdPlatform>,
    limits: QueueLimits,
    dd: Deadline,
    now: u64,
    next_id: u64,
    bios: BTreeMap<u64, Rec>,
    in_flight: Vec<InFlight>,
    dispatched: [u64; 3],
}

impl World {
    fn new() -> Self {
        let set = TagSet::builder(16)
            .build(StdPlatform::new(), |_| ())
            .unwrap();
        let mut tags = set.attach().unwrap();
        tags.attach_scheduler(Some(NR_REQUESTS), |_| ()).unwrap();
        let mut dd = Deadline::new();
        dd.depth_updated(tags.nr_requests().unwrap(), tags.nr_keys());
        tags.set_min_shallow_depth(dd.min_shallow_depth().unwrap())
            .unwrap();
        Self {
            tags,
            limits: limits(),
            dd,
            now: 0,
            next_id: 1,
            bios: BTreeMap::new(),
            in_flight: Vec::new(),
            dispatched: [0; 3],
        }
    }

    fn record(&mut self, id: u64, bio: &Bio) {
        self.bios.insert(
            id,
            Rec {
                op: bio.op,
                prio: bio.prio,
                sector: bio.sector,
                sectors: bio.sectors,
                since: self.now,
                state: State::Queued,
                dispatched: 0,
                owed: 1,
            },
        );
    }

    /// Allocates (within the scheduler's depth limit) and inserts; false when no tag is free.
    fn insert(&mut self, bio: Bio) -> Result<bool, TestCaseError> {
        let mut alloc = Alloc::new(0, 0);
        alloc.shallow_depth = self.dd.limit_depth(bio.op, bio.flags);
        prop_assert_eq!(alloc.shallow_depth.is_none(), bio.op == Op::Read);
        let mut rq = match self.tags.alloc(&alloc) {
            Ok(rq) => rq,
            Err(TagError::WouldBlock) => return Ok(false),
            Err(e) => return Err(TestCaseError::fail(format!("alloc: {e:?}"))),
        };
        let id = self.next_id;
        self.next_id += 1;
        let bio = bio.private(id);
        self.tags.set_bio(&mut rq, bio).unwrap();
        self.record(id, &bio);
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd
            .insert_requests(&cx, &mut std::iter::once(rq), false);
        Ok(true)
    }

    /// What a request queue does with a bio: a merge, else a new request.
    fn submit(&mut self, bio: Bio) -> Result<(), TestCaseError> {
        let id = self.next_id;
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        match self.dd.bio_merge(&cx, bio.private(id)) {
            Ok(()) => {
                self.next_id += 1;
                self.record(id, &bio);
            }
            Err(back) => {
                prop_assert_eq!(
                    (back.op, back.sector, back.sectors, back.private),
                    (bio.op, bio.sector, bio.sectors, id)
                );
                self.insert(bio)?;
            }
        }
        Ok(())
    }

    fn busy(&self, class: usize) -> bool {
        self.bios
            .values()
            .any(|r| class_of(r.prio) == class && r.state != State::Done)
    }

    fn queued_in(&self, class: usize) -> bool {
        self.bios
            .values()
            .any(|r| class_of(r.prio) == class && r.state == State::Queued)
    }

    /// One dispatch, checked; false when the scheduler gave nothing.
    fn dispatch(&mut self) -> Result<bool, TestCaseError> {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        let Some(rq) = self.dd.dispatch_request(&cx, 0) else {
            // Only when nothing is queued, or a higher class in flight holds back the
            // highest class queued.
            if let Some(top) = (0..3).find(|&c| self.queued_in(c)) {
                prop_assert!(
                    (0..top).any(|c| self.busy(c)),
                    "nothing dispatched, class {} queued and nothing above it busy",
                    top
                );
            }
            return Ok(false);
        };
        let io = self.tags.io(&rq).unwrap();
        let (op, prio) = (io.op(), io.prio());
        let (start, end, nr_bios) = (io.sector(), io.end_sector(), io.nr_bios());
        let class = class_of(prio);
        let mut bios = Vec::new();
        self.tags
            .for_each_bio(&rq, |b| {
                bios.push((b.private, b.op, b.prio, b.sector, b.sectors))
            })
            .unwrap();
        prop_assert_eq!(bios.len(), nr_bios as usize);
        prop_assert!(
            end - start <= max_sectors(op),
            "{}..{} too long",
            start,
            end
        );
        let mut at = start;
        let mut oldest = u64::MAX;
        for &(id, bop, bprio, sector, sectors) in &bios {
            prop_assert_eq!((bop, bprio), (op, prio), "bio {} of another kind", id);
            prop_assert_eq!(sector, at, "bio {} not contiguous", id);
            at += u64::from(sectors);
            let rec = self
                .bios
                .get_mut(&id)
                .ok_or_else(|| TestCaseError::fail(format!("bio {id} unknown")))?;
            prop_assert_eq!((rec.op, rec.prio), (op, prio));
            prop_assert_eq!((rec.sector, rec.sectors), (sector, sectors));
            prop_assert_eq!(rec.state, State::Queued, "bio {} dispatched again", id);
            rec.state = State::InFlight;
            rec.dispatched += 1;
            oldest = oldest.min(rec.since);
        }
        prop_assert_eq!(at, end);
        // Strict priority unless aged: a higher class busy (its bios other than these)
        // means this request waited out the aging expiry.
        let aging = self.dd.tunables().prio_aging_expire_ns;
        for higher in 0..class {
            if self.busy(higher) {
                prop_assert!(
                    oldest.saturating_add(aging) <= self.now,
                    "class {} went at {} (waiting since {}) while class {} was busy, aging {}",
                    class,
                    self.now,
                    oldest,
                    higher,
                    aging
                );
            }
        }
        self.dispatched[class] += 1;
        self.in_flight.push(InFlight {
            rq,
            class,
            bios: bios.iter().map(|b| b.0).collect(),
        });
        Ok(true)
    }

    fn complete(&mut self, index: usize) {
        let f = self.in_flight.remove(index);
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.completed_request(&cx, &f.rq);
        self.dd.finish_request(&cx, &f.rq);
        self.tags.complete(f.rq, Status::Ok).unwrap();
        for id in f.bios {
            self.bios.get_mut(&id).unwrap().state = State::Done;
        }
    }

    fn requeue(&mut self, index: usize) {
        let f = self.in_flight.remove(index);
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.requeue_request(&cx, &f.rq);
        self.dd
            .insert_requests(&cx, &mut std::iter::once(f.rq), true);
        for id in f.bios {
            let rec = self.bios.get_mut(&id).unwrap();
            rec.state = State::Queued;
            rec.owed += 1;
        }
    }

    fn tune(&mut self, which: u8, value: u64) -> Result<(), TestCaseError> {
        const EXPIRIES: [u64; 6] = [0, MS, 50 * MS, 500 * MS, MAX_EXPIRE_NS, MAX_EXPIRE_NS + 1];
        const AGING: [u64; 6] = [
            0,
            MS,
            100 * MS,
            10_000 * MS,
            MAX_EXPIRE_NS,
            MAX_EXPIRE_NS + 1,
        ];
        let before = *self.dd.tunables();
        let (ok, want_ok) = match which {
            0 => {
                let n = (value % 21) as u32;
                (
                    self.dd.set_fifo_batch(n).is_ok(),
                    (1..=MAX_BATCH).contains(&n),
                )
            }
            1 => {
                let ns = EXPIRIES[(value % 6) as usize];
                (self.dd.set_read_expire(ns).is_ok(), ns <= MAX_EXPIRE_NS)
            }
            2 => {
                let ns = EXPIRIES[(value % 6) as usize];
                (self.dd.set_write_expire(ns).is_ok(), ns <= MAX_EXPIRE_NS)
            }
            3 => (self.dd.set_writes_starved((value % 5) as u32).is_ok(), true),
            4 => {
                self.dd.set_front_merges(value % 2 == 0);
                (true, true)
            }
            5 => {
                let ns = AGING[(value % 6) as usize];
                (
                    self.dd.set_prio_aging_expire(ns).is_ok(),
                    ns <= MAX_EXPIRE_NS,
                )
            }
            _ => {
                let depth = (value % (NR_REQUESTS as u64 + 2)) as usize;
                (
                    self.dd.set_async_depth(depth).is_ok(),
                    (1..=NR_REQUESTS).contains(&depth),
                )
            }
        };
        prop_assert_eq!(ok, want_ok, "tunable {} = {}", which, value);
        if !ok {
            prop_assert_eq!(*self.dd.tunables(), before);
        }
        Ok(())
    }

    /// The counters and the tags against the record.
    fn check(&self) -> Result<(), TestCaseError> {
        let queued = self.bios.values().any(|r| r.state == State::Queued);
        prop_assert_eq!(self.dd.has_work(0), queued);
        let mut held = 0;
        for (c, &class) in CLASSES.iter().enumerate() {
            let s = self.dd.stats(class);
            let in_flight = self.in_flight.iter().filter(|f| f.class == c).count() as u64;
            prop_assert_eq!(s.in_flight, in_flight, "class {} in flight", c);
            prop_assert_eq!(s.dispatched, self.dispatched[c], "class {} dispatched", c);
            prop_assert_eq!(s.inserted > s.completed, self.busy(c), "class {} busy", c);
            prop_assert!(s.inserted >= s.completed + s.in_flight);
            held += s.inserted - s.completed - s.in_flight;
        }
        prop_assert_eq!(held, self.dd.queued() as u64);
        prop_assert_eq!(
            self.tags.sched_busy(),
            self.dd.queued() + self.in_flight.len(),
            "a request is neither held nor in flight"
        );
        Ok(())
    }

    /// Dispatches and completes everything, then checks nothing is left.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..10_000 {
            if self.dispatch()? {
                continue;
            }
            if self.in_flight.is_empty() {
                break;
            }
            while !self.in_flight.is_empty() {
                self.complete(0);
            }
        }
        self.check()?;
        prop_assert!(!self.dd.has_work(0));
        prop_assert!(self.in_flight.is_empty());
        prop_assert_eq!(self.dd.queued(), 0);
        prop_assert_eq!(self.tags.sched_busy(), 0);
        for (id, rec) in &self.bios {
            prop_assert_eq!(rec.state, State::Done, "bio {} left behind", id);
            prop_assert_eq!(rec.dispatched, rec.owed, "bio {} dispatch count", id);
        }
        for class in CLASSES {
            let s = self.dd.stats(class);
            prop_assert_eq!(s.inserted, s.completed);
            prop_assert_eq!(s.in_flight, 0);
        }
        Ok(())
    }

    fn run(&mut self, steps: &[Step]) -> Result<(), TestCaseError> {
        for step in steps {
            match step {
                &Step::Insert {
                    class,
                    level,
                    op,
                    sector,
                    sectors,
                    nomerge,
                } => {
                    let mut bio = Bio::new(op, sector, sectors)
                        .prio(IoPrio::new(CLASSES[class], level).unwrap());
                    if nomerge {
                        bio = bio.flags(BioFlags::NOMERGE);
                    }
                    self.submit(bio)?;
                }
                Step::Merge {
                    pick,
                    front,
                    sectors,
                } => {
                    let queued: Vec<Rec> = self
                        .bios
                        .values()
                        .filter(|r| r.state == State::Queued)
                        .copied()
                        .collect();
                    if queued.is_empty() {
                        continue;
                    }
                    let r = queued[pick.index(queued.len())];
                    let sector = if *front && r.sector >= u64::from(*sectors) {
                        r.sector - u64::from(*sectors)
                    } else {
                        r.sector + u64::from(r.sectors)
                    };
                    self.submit(Bio::new(r.op, sector, *sectors).prio(r.prio))?;
                }
                Step::Dispatch => {
                    self.dispatch()?;
                }
                Step::Complete { pick } => {
                    if !self.in_flight.is_empty() {
                        self.complete(pick.index(self.in_flight.len()));
                    }
                }
                Step::Requeue { pick } => {
                    if !self.in_flight.is_empty() {
                        self.requeue(pick.index(self.in_flight.len()));
                    }
                }
                &Step::Advance { ns } => self.now += ns,
                &Step::Tune { which, value } => self.tune(which, value)?,
            }
            self.check()?;
        }
        self.drain()
    }
}

proptest! {
    #![proptest_config(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    })]

    /// Random operation sequences against the record of every bio.
    #[test]
    fn deadline_matches_the_model(steps in prop::collection::vec(step(), 1..160)) {
        World::new().run(&steps)?;
    }
}
