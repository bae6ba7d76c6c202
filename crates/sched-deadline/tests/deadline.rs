//! Behaviour of mq-deadline: driven directly over scheduler tags with a virtual clock, on a
//! simulated device (a fixed number of slots, a fixed service time, time advancing event by
//! event), and through a real request queue.
//!
//! Every outcome is exact or bounded by the scheduler's rules; nothing depends on wall-clock
//! time.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use blkmq_core::{
    Alloc, Bio, BioFlags, Driver, Elevator, ElvCx, HctxCx, Host, IoPrio, IoPrioClass, Op, Platform,
    QueueConfig, QueueLimits, QueueTags, Rejected, RequestInit, Rq, Status, StdPlatform, TagError,
    TagSet,
};
use blkmq_sched_deadline::{
    ClassStats, Deadline, MAX_BATCH, MAX_EXPIRE_NS, TunableError, Tunables,
};

const MS: u64 = 1_000_000;

/// A priority of `class` at the default level.
fn prio(class: IoPrioClass) -> IoPrio {
    IoPrio::new(class, 4).unwrap()
}

/// A bio that never merges with another.
fn lone(op: Op, sector: u64, sectors: u32) -> Bio {
    Bio::new(op, sector, sectors).flags(BioFlags::NOMERGE)
}

/// A small deterministic generator (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A 4 KiB-aligned sector below `limit`.
    fn sector(&mut self, limit: u64) -> u64 {
        (self.next() % (limit / 8)) * 8
    }
}

/// A scheduler over bare scheduler tags, with a virtual clock.
struct Rig {
    tags: QueueTags<(), StdPlatform>,
    limits: QueueLimits,
    dd: Deadline,
    now: u64,
    next_id: u64,
}

impl Rig {
    fn new(nr_requests: usize, dd: Deadline) -> Self {
        Self::with_limits(nr_requests, dd, QueueLimits::new(1 << 32))
    }

    fn with_limits(nr_requests: usize, mut dd: Deadline, limits: QueueLimits) -> Self {
        let set = TagSet::builder(16)
            .build(StdPlatform::new(), |_| ())
            .unwrap();
        let mut tags = set.attach().unwrap();
        tags.attach_scheduler(Some(nr_requests), |_| ()).unwrap();
        dd.depth_updated(tags.nr_requests().unwrap(), tags.nr_keys());
        tags.set_min_shallow_depth(dd.min_shallow_depth().unwrap())
            .unwrap();
        Self {
            tags,
            limits,
            dd,
            now: 0,
            next_id: 1,
        }
    }

    /// Makes a request of `bio` (its `private` set to a fresh id, returned) within the
    /// scheduler's depth limit for it, and inserts it.
    fn try_insert(&mut self, bio: Bio) -> Result<u64, TagError> {
        let id = self.next_id;
        let bio = bio.private(id);
        let mut alloc = Alloc::new(0, 0);
        alloc.shallow_depth = self.dd.limit_depth(bio.op, bio.flags);
        let mut rq = self.tags.alloc(&alloc)?;
        self.next_id += 1;
        self.tags.set_bio(&mut rq, bio).unwrap();
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd
            .insert_requests(&cx, &mut std::iter::once(rq), false);
        Ok(id)
    }

    fn insert(&mut self, bio: Bio) -> u64 {
        self.try_insert(bio).unwrap()
    }

    /// Offers `bio` to the scheduler's merging; on success it gets a fresh id, returned.
    fn merge(&mut self, bio: Bio) -> Result<u64, Bio> {
        let id = self.next_id;
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.bio_merge(&cx, bio.private(id))?;
        self.next_id += 1;
        Ok(id)
    }

    fn dispatch(&mut self) -> Option<Rq> {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.dispatch_request(&cx, 0)
    }

    /// Completes a dispatched request and frees it.
    fn finish(&mut self, rq: Rq) {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        self.dd.completed_request(&cx, &rq);
        self.dd.finish_request(&cx, &rq);
        self.tags.complete(rq, Status::Ok).unwrap();
    }

    /// Gives a dispatched request back, to be dispatched again first.
    fn requeue(&mut self, rqs: Vec<Rq>) {
        let cx = ElvCx::new(&self.tags, &self.limits, self.now);
        for rq in &rqs {
            self.dd.requeue_request(&cx, rq);
        }
        self.dd.insert_requests(&cx, &mut rqs.into_iter(), true);
    }

    /// The request's range.
    fn range(&self, rq: &Rq) -> (u64, u64) {
        let io = self.tags.io(rq).unwrap();
        (io.sector(), io.end_sector())
    }

    /// The id of the request's first bio.
    fn id(&self, rq: &Rq) -> u64 {
        self.tags.io(rq).unwrap().first_bio().unwrap().private
    }

    /// The request's bios, front to back: (id, sector, sectors).
    fn bios(&self, rq: &Rq) -> Vec<(u64, u64, u32)> {
        let mut bios = Vec::new();
        self.tags
            .for_each_bio(rq, |b| bios.push((b.private, b.sector, b.sectors)))
            .unwrap();
        bios
    }

    /// Dispatches and completes everything, returning the ids of the first bios in order.
    fn drain_ids(&mut self) -> Vec<u64> {
        let mut order = Vec::new();
        while let Some(rq) = self.dispatch() {
            order.push(self.id(&rq));
            self.finish(rq);
        }
        order
    }

    fn stats(&self, class: IoPrioClass) -> ClassStats {
        self.dd.stats(class)
    }
}

fn stats(
    inserted: u64,
    merged: u64,
    dispatched: u64,
    completed: u64,
    in_flight: u64,
) -> ClassStats {
    ClassStats {
        inserted,
        merged,
        dispatched,
        completed,
        in_flight,
    }
}

// ----- a simulated device -----

/// A command the device took.
#[derive(Clone, Copy, Debug)]
struct Dispatched {
    at: u64,
    issuer: u64,
    class: IoPrioClass,
    op: Op,
    sector: u64,
    /// When the issuer made the request (kept in the high bits of the first bio's
    /// payload, see [`tag`]).
    submitted: u64,
}

/// A command the device finished.
#[derive(Clone, Copy, Debug)]
struct Done {
    issuer: u64,
}

/// Packs an issuer and a submission time into a bio payload.
fn tag(bio: Bio, issuer: u64, now: u64) -> Bio {
    assert!(issuer < 1 << 16 && now < 1 << 47);
    bio.payload(now << 16 | issuer)
}

/// A device with `slots` commands in flight at most, each served in `service_ns`.
struct Device {
    slots: usize,
    service_ns: u64,
    busy: Vec<(u64, Rq)>,
    log: Vec<Dispatched>,
}

impl Device {
    fn new(slots: usize, service_ns: u64) -> Self {
        Self {
            slots,
            service_ns,
            busy: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Takes requests while a slot is free and the scheduler has one to give.
    fn fill(&mut self, rig: &mut Rig) {
        while self.busy.len() < self.slots {
            let Some(rq) = rig.dispatch() else {
                break;
            };
            let io = rig.tags.io(&rq).unwrap();
            let payload = io.first_bio().unwrap().payload;
            self.log.push(Dispatched {
                at: rig.now,
                issuer: payload & 0xffff,
                class: io.prio().class(),
                op: io.op(),
                sector: io.sector(),
                submitted: payload >> 16,
            });
            self.busy.push((rig.now + self.service_ns, rq));
        }
    }

    fn next_done(&self) -> Option<u64> {
        self.busy.iter().map(|(t, _)| *t).min()
    }

    /// Completes every command due by now, in the order they were taken.
    fn complete_due(&mut self, rig: &mut Rig) -> Vec<Done> {
        let (due, rest): (Vec<_>, Vec<_>) = self.busy.drain(..).partition(|(t, _)| *t <= rig.now);
        self.busy = rest;
        let mut done = Vec::new();
        for (_, rq) in due {
            let payload = rig.tags.io(&rq).unwrap().first_bio().unwrap().payload;
            done.push(Done {
                issuer: payload & 0xffff,
            });
            rig.finish(rq);
        }
        done
    }
}

/// Runs the device until `end_ns` (or until nothing is left to happen): takes requests,
/// jumps to the next completion or arrival, inserts the arrivals, completes, and lets the
/// issuers react to the completions through `on_done`.
fn simulate(
    rig: &mut Rig,
    dev: &mut Device,
    end_ns: u64,
    arrivals: &mut VecDeque<(u64, Bio)>,
    on_done: &mut dyn FnMut(&mut Rig, &[Done]),
) {
    loop {
        dev.fill(rig);
        let next = [dev.next_done(), arrivals.front().map(|a| a.0)]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = next else {
            return;
        };
        if t > end_ns {
            return;
        }
        rig.now = t;
        while arrivals.front().is_some_and(|a| a.0 <= t) {
            let (_, bio) = arrivals.pop_front().unwrap();
            let now = rig.now;
            let issuer = bio.payload;
            rig.insert(tag(bio, issuer, now));
        }
        let done = dev.complete_due(rig);
        on_done(rig, &done);
    }
}

// ----- 1. FIFO order with a batch of one and no expiry time -----

/// With `fifo_batch = 1` every dispatch is a batch boundary, and with an expiry of 0 the
/// FIFO head is always due: requests of one class and direction go in arrival order,
/// whatever their sectors. With the defaults the same arrivals go in sector order.
#[test]
fn batch_of_one_and_zero_expiry_is_arrival_order() {
    for op in [Op::Read, Op::Write] {
        let mut rng = Rng(0x5eed_0001 + op as u64);
        let sectors: Vec<u64> = (0..64).map(|_| 8 + rng.sector(1 << 30)).collect();

        let mut dd = Deadline::new();
        dd.set_fifo_batch(1).unwrap();
        dd.set_read_expire(0).unwrap();
        dd.set_write_expire(0).unwrap();
        let mut rig = Rig::new(128, dd);
        // The scheduler may start inside a batch with nothing dispatched yet, which a first
        // request would continue in sector order: one request dispatched alone makes every
        // later dispatch a batch boundary. It leaves the sector position at 8, below every
        // arrival, so that sector order would differ from the FIFO.
        let first = rig.insert(lone(op, 0, 8));
        assert_eq!(rig.drain_ids(), [first]);
        let mut arrived = Vec::new();
        for (i, &sector) in sectors.iter().enumerate() {
            rig.now = 10 * MS + i as u64 * 1_000;
            arrived.push(rig.insert(lone(op, sector, 8)));
        }
        assert_eq!(rig.drain_ids(), arrived, "{op:?}: arrival order");

        // The defaults: nothing expires within the run, and the one sweep is in sector order.
        let mut rig = Rig::new(128, Deadline::new());
        let mut by_sector = Vec::new();
        for (i, &sector) in sectors.iter().enumerate() {
            rig.now = i as u64 * 1_000;
            by_sector.push((sector, rig.insert(lone(op, sector, 8))));
        }
        by_sector.sort();
        rig.now = MS;
        let want: Vec<u64> = by_sector.iter().map(|&(_, id)| id).collect();
        assert_ne!(want, arrived);
        assert_eq!(rig.drain_ids(), want, "{op:?}: sector order");
    }
}

// ----- 2. writes_starved -----

/// Reads and writes both backlogged, sequential but unmergeable, `writes_starved = 2`:
/// after the batch the scheduler starts with (whichever direction it was last set to), two
/// read batches of `fifo_batch` for each write batch while both directions have requests,
/// each batch in ascending sector order.
#[test]
fn two_read_batches_per_write_batch() {
    let mut dd = Deadline::new();
    assert_eq!(dd.tunables().writes_starved, 2);
    dd.set_writes_starved(2).unwrap();
    let batch = dd.tunables().fifo_batch as u64;
    assert_eq!(batch, 16);
    let mut rig = Rig::new(256, dd);
    let (nr_reads, nr_writes) = (7 * batch, 3 * batch);
    const WRITES_AT: u64 = 1 << 24;
    for i in 0..nr_reads {
        rig.insert(lone(Op::Read, i * 8, 8));
    }
    for i in 0..nr_writes {
        rig.insert(lone(Op::Write, WRITES_AT + i * 8, 8));
    }
    rig.now = MS;
    let mut got = Vec::new();
    while let Some(rq) = rig.dispatch() {
        let io = rig.tags.io(&rq).unwrap();
        got.push((io.op(), io.sector()));
        rig.finish(rq);
    }
    assert_eq!(got.len() as u64, nr_reads + nr_writes);

    // The expected sequence: a first batch in the direction the scheduler starts with, then
    // read, read, write, ... (a direction run dry gives way to the other).
    let (mut r, mut w) = (0, 0);
    let mut want = Vec::new();
    let mut batch_of = |op: Op, want: &mut Vec<(Op, u64)>| {
        let op = match op {
            Op::Read if r == nr_reads => Op::Write,
            Op::Write if w == nr_writes => Op::Read,
            op => op,
        };
        for _ in 0..batch {
            if op == Op::Read {
                want.push((Op::Read, r * 8));
                r += 1;
            } else {
                want.push((Op::Write, WRITES_AT + w * 8));
                w += 1;
            }
        }
    };
    batch_of(got[0].0, &mut want);
    for op in [Op::Read, Op::Read, Op::Write].into_iter().cycle() {
        if want.len() == got.len() {
            break;
        }
        batch_of(op, &mut want);
    }
    assert_eq!(got, want);
    // After the first batch: two read batches, a write batch, twice over at least.
    let batches: String = got
        .chunks(batch as usize)
        .map(|c| if c[0].0 == Op::Read { 'R' } else { 'W' })
        .collect();
    assert!(batches[1..].starts_with("RRWRRW"), "{batches}");
    let be = rig.stats(IoPrioClass::BestEffort);
    let all = nr_reads + nr_writes;
    assert_eq!(be, stats(all, 0, all, all, 0));
}

// ----- 3. read expiry under a saturating write stream -----

/// A 16-deep, 1 ms device kept busy by sequential readers and writers; a read far behind
/// the read sweep is never next in sector order, so only its deadline gets it served: not
/// before `read_expire`, and once expired at the next read batch boundary — after the batch
/// under way and at most one write batch that `writes_starved` owes. With a batch of 16 on
/// this device every service time is a boundary; with 32 a batch spans two.
#[test]
fn expired_read_goes_at_the_next_batch_boundary() {
    for fifo_batch in [16, 32] {
        expiry_run(fifo_batch);
    }
}

fn expiry_run(fifo_batch: u32) {
    const SLOTS: usize = 16;
    const SERVICE: u64 = MS;
    const READ_EXPIRE: u64 = 50 * MS;
    const VICTIM: u64 = 999;
    const VICTIM_AT: u64 = 20 * MS + MS / 2;
    let mut dd = Deadline::new();
    dd.set_read_expire(READ_EXPIRE).unwrap();
    dd.set_fifo_batch(fifo_batch).unwrap();
    let fifo_batch = u64::from(fifo_batch);
    let mut rig = Rig::new(256, dd);
    let mut dev = Device::new(SLOTS, SERVICE);

    // 32 readers and 32 writers, each with one I/O outstanding, each stream sequential.
    let mut read_at = 1u64 << 20;
    let mut write_at = 1u64 << 30;
    let mut submit = |rig: &mut Rig, issuer: u64| {
        let now = rig.now;
        let bio = if issuer < 32 {
            read_at += 8;
            lone(Op::Read, read_at, 8)
        } else {
            write_at += 8;
            lone(Op::Write, write_at, 8)
        };
        rig.insert(tag(bio, issuer, now));
    };
    for issuer in 0..64 {
        submit(&mut rig, issuer);
    }
    let mut arrivals = VecDeque::from([(VICTIM_AT, lone(Op::Read, 0, 8).payload(VICTIM))]);
    simulate(
        &mut rig,
        &mut dev,
        400 * MS,
        &mut arrivals,
        &mut |rig, done| {
            for d in done {
                if d.issuer != VICTIM {
                    submit(rig, d.issuer);
                }
            }
        },
    );

    let log = &dev.log;
    let at = log
        .iter()
        .position(|d| d.issuer == VICTIM)
        .expect("the read was never served");
    let victim = log[at];
    assert_eq!(
        (victim.op, victim.sector, victim.submitted),
        (Op::Read, 0, VICTIM_AT)
    );
    let expired = VICTIM_AT + READ_EXPIRE;
    assert!(
        victim.at >= expired,
        "served at {} before its deadline {expired}",
        victim.at
    );
    // Dispatches from the expiry to the victim: what was left of the batch under way, then
    // perhaps one write batch.
    let after: Vec<&Dispatched> = log[..at].iter().filter(|d| d.at >= expired).collect();
    let reads = after.iter().filter(|d| d.op == Op::Read).count() as u64;
    let writes = after.len() as u64 - reads;
    assert!(reads < fifo_batch, "{reads} reads went first");
    assert!(writes <= fifo_batch, "{writes} writes went first");
    assert!((after.len() as u64) < 2 * fifo_batch);
    // In time: one batch is fifo_batch commands, fifo_batch / SLOTS service times here.
    let batch_ns = fifo_batch * SERVICE / SLOTS as u64;
    let wait = victim.at - VICTIM_AT;
    assert!(wait <= READ_EXPIRE + 2 * batch_ns, "waited {wait} ns");
    // The device never idled (16 commands every millisecond, 0 to 400 ms), and both
    // streams kept going around the victim.
    assert_eq!(log.len(), SLOTS * 401);
    let writes_total = log.iter().filter(|d| d.op == Op::Write).count();
    let reads_total = log.len() - writes_total;
    assert!(
        writes_total > 1000 && reads_total > 2 * 1000,
        "{reads_total} {writes_total}"
    );
}

// ----- 4. priority aging -----

/// An aging run on a 16-deep, 1 ms device: RT issuers 0..32 keep the RT queue full, BE
/// issuers from 100 on keep one I/O outstanding each; random 4 KiB reads. Returns what the
/// device took.
fn aging_run(aging_ns: u64, end_ns: u64, be_issuers: u64) -> Vec<Dispatched> {
    let mut dd = Deadline::new();
    dd.set_prio_aging_expire(aging_ns).unwrap();
    let mut rig = Rig::new(256, dd);
    let mut dev = Device::new(16, MS);
    let mut rng = Rng(0xa91e);
    let mut submit = |rig: &mut Rig, issuer: u64| {
        let class = if issuer < 100 {
            IoPrioClass::RealTime
        } else {
            IoPrioClass::BestEffort
        };
        let now = rig.now;
        let bio = lone(Op::Read, rng.sector(1 << 30), 8).prio(prio(class));
        rig.insert(tag(bio, issuer, now));
    };
    for issuer in 0..32 {
        submit(&mut rig, issuer);
    }
    // The BE issuers start half a service time in.
    let mut arrivals: VecDeque<(u64, Bio)> = (0..be_issuers)
        .map(|i| {
            let bio = lone(Op::Read, (i + 1) << 20, 8).prio(prio(IoPrioClass::BestEffort));
            (MS / 2, bio.payload(100 + i))
        })
        .collect();
    simulate(
        &mut rig,
        &mut dev,
        end_ns,
        &mut arrivals,
        &mut |rig, done| {
            for d in done {
                submit(rig, d.issuer);
            }
        },
    );
    dev.log
}

/// RT saturating: a BE request is served once it has waited `prio_aging_expire`, and at
/// the latest one batch (here one service time of the device) later.
#[test]
fn aged_best_effort_waits_at_most_the_aging_expiry_plus_a_batch() {
    const AGING: u64 = 20 * MS;
    let log = aging_run(AGING, 500 * MS, 1);
    let be: Vec<&Dispatched> = log
        .iter()
        .filter(|d| d.class == IoPrioClass::BestEffort)
        .collect();
    // 500 ms / (20 ms waiting + 1 ms service) at least, less the first wait.
    assert!(be.len() >= 20, "{} BE dispatches", be.len());
    for d in &be {
        let wait = d.at - d.submitted;
        assert!((AGING..=AGING + MS).contains(&wait), "BE waited {wait} ns");
    }
    let rt = log.len() - be.len();
    assert!(rt as u64 >= 16 * 490, "RT got {rt}");
}

/// Aging effectively off: while RT keeps the device busy, BE gets nothing at all (Linux:
/// 11000 vs 40 IOPS with aging at 100 s).
#[test]
fn without_aging_best_effort_starves_under_real_time() {
    for aging in [MAX_EXPIRE_NS, Tunables::default().prio_aging_expire_ns] {
        let log = aging_run(aging, 1_000 * MS, 4);
        let be = log
            .iter()
            .filter(|d| d.class == IoPrioClass::BestEffort)
            .count();
        assert_eq!(be, 0);
        // RT has the whole device: 16 every millisecond, from 0 to 1000 ms inclusive.
        assert_eq!(log.len(), 16 * 1_001);
    }
}

/// Aging at 0, Linux's test set-up: two jobs, one RT and one BE, each keeping 32 reads
/// outstanding on a 16-deep, 1 ms device with 32 scheduler tags, the tags handed to the
/// waiting jobs in turn. Nothing waits on priority, so both get about half of the device
/// (Linux: 6712 vs 6796 IOPS), and the device stays busy.
#[test]
fn aging_at_zero_shares_the_device() {
    let (rt, be) = two_jobs(0, 1_000 * MS);
    let total = rt + be;
    assert_eq!(total, 16 * 1_001, "the device idled");
    for (class, n) in [("RT", rt), ("BE", be)] {
        assert!(
            (40..=60).contains(&(n * 100 / total)),
            "{class} got {n} of {total}"
        );
    }
}

/// Two jobs over 32 scheduler tags: (RT dispatches, BE dispatches).
fn two_jobs(aging_ns: u64, end_ns: u64) -> (usize, usize) {
    let mut dd = Deadline::new();
    dd.set_prio_aging_expire(aging_ns).unwrap();
    let mut rig = Rig::new(32, dd);
    let mut dev = Device::new(16, MS);
    let mut rng = Rng(0x2_10b5);
    // I/Os each job wants to start but has no tag for; whose turn it is to get a tag.
    let mut want = [32u32, 32];
    let mut turn = 0;
    let mut hand_out = |rig: &mut Rig, want: &mut [u32; 2]| {
        while want[0] + want[1] != 0 {
            let job = if want[turn] != 0 { turn } else { 1 - turn };
            let class = [IoPrioClass::RealTime, IoPrioClass::BestEffort][job];
            let now = rig.now;
            let bio = lone(Op::Read, rng.sector(1 << 30), 8).prio(prio(class));
            match rig.try_insert(tag(bio, job as u64, now)) {
                Ok(_) => {
                    want[job] -= 1;
                    turn = 1 - job;
                }
                Err(TagError::WouldBlock) => return,
                Err(e) => panic!("{e:?}"),
            }
        }
    };
    hand_out(&mut rig, &mut want);
    simulate(
        &mut rig,
        &mut dev,
        end_ns,
        &mut VecDeque::new(),
        &mut |rig, done| {
            for d in done {
                want[d.issuer as usize] += 1;
            }
            hand_out(rig, &mut want);
        },
    );
    let rt = dev
        .log
        .iter()
        .filter(|d| d.class == IoPrioClass::RealTime)
        .count();
    (rt, dev.log.len() - rt)
}

// ----- 5. merges -----

/// Back and front merges through `bio_merge` give the exact contiguous range, with the
/// bios in sector order; bios that do not fit are given back untouched.
#[test]
fn back_and_front_merges_are_exact() {
    let mut rig = Rig::new(32, Deadline::new());
    let a = rig.insert(Bio::new(Op::Read, 1000, 8));
    let b1 = rig.merge(Bio::new(Op::Read, 1008, 8)).unwrap();
    let f1 = rig.merge(Bio::new(Op::Read, 992, 8)).unwrap();
    let b2 = rig.merge(Bio::new(Op::Read, 1016, 16)).unwrap();
    let f2 = rig.merge(Bio::new(Op::Read, 976, 16)).unwrap();
    let refused = [
        Bio::new(Op::Read, 1040, 8),                                   // a gap
        Bio::new(Op::Write, 1032, 8),                                  // another direction
        Bio::new(Op::Read, 1032, 8).prio(prio(IoPrioClass::RealTime)), // another class
        Bio::new(Op::Read, 1032, 8).prio(IoPrio::new(IoPrioClass::BestEffort, 0).unwrap()),
        Bio::new(Op::Read, 1032, 8).flags(BioFlags::NOMERGE),
        Bio::new(Op::Read, 968, 8).flags(BioFlags::FUA),
    ];
    for bio in refused {
        let back = rig.merge(bio).unwrap_err();
        assert_eq!(
            (back.op, back.sector, back.sectors),
            (bio.op, bio.sector, bio.sectors)
        );
    }
    assert_eq!(rig.dd.queued(), 1);
    assert_eq!(rig.stats(IoPrioClass::BestEffort), stats(1, 4, 0, 0, 0));

    rig.now = MS;
    let rq = rig.dispatch().unwrap();
    assert_eq!(rig.range(&rq), (976, 1032));
    assert_eq!(rig.tags.io(&rq).unwrap().nr_bios(), 5);
    let want = [
        (f2, 976, 16),
        (f1, 992, 8),
        (a, 1000, 8),
        (b1, 1008, 8),
        (b2, 1016, 16),
    ];
    assert_eq!(rig.bios(&rq), want);
    rig.finish(rq);
    assert!(!rig.dd.has_work(0));
    assert_eq!(rig.stats(IoPrioClass::BestEffort), stats(1, 4, 1, 1, 0));
    assert_eq!(rig.tags.sched_busy(), 0);
}

/// `front_merges = false` refuses front merges only; turning it back on allows them.
#[test]
fn front_merges_can_be_turned_off() {
    let mut dd = Deadline::new();
    dd.set_front_merges(false);
    assert!(!dd.tunables().front_merges);
    let mut rig = Rig::new(32, dd);
    rig.insert(Bio::new(Op::Write, 1000, 8));
    let back = rig.merge(Bio::new(Op::Write, 992, 8)).unwrap_err();
    assert_eq!(back.sector, 992);
    rig.merge(Bio::new(Op::Write, 1008, 8)).unwrap();
    rig.dd.set_front_merges(true);
    rig.merge(Bio::new(Op::Write, 992, 8)).unwrap();
    let rq = rig.dispatch().unwrap();
    assert_eq!(rig.range(&rq), (992, 1016));
    assert_eq!(rig.bios(&rq).len(), 3);
    rig.finish(rq);
    assert_eq!(rig.stats(IoPrioClass::BestEffort), stats(1, 2, 1, 1, 0));
}

/// A bio filling the gap between two queued requests merges into the first, which then
/// takes the second; the survivor keeps the earlier FIFO deadline (and the other's place
/// in the FIFO), so it is the one served first once that deadline has passed.
#[test]
fn requests_that_come_to_touch_merge_and_keep_the_earlier_deadline() {
    let mut dd = Deadline::new();
    dd.set_fifo_batch(1).unwrap();
    dd.set_read_expire(100 * MS).unwrap();
    let mut rig = Rig::new(32, dd);
    // End the batch the scheduler starts in, leaving the sector position at 8.
    let p = rig.insert(Bio::new(Op::Read, 0, 8));
    assert_eq!(rig.drain_ids(), [p]);

    let b = rig.insert(Bio::new(Op::Read, 1016, 8)); // deadline 100 ms
    rig.now = 5 * MS;
    let c = rig.insert(Bio::new(Op::Read, 100, 8)); // deadline 105 ms
    rig.now = 10 * MS;
    let a = rig.insert(Bio::new(Op::Read, 1000, 8)); // deadline 110 ms
    rig.now = 20 * MS;
    let gap = rig.merge(Bio::new(Op::Read, 1008, 8)).unwrap();
    assert_eq!(rig.dd.queued(), 2);
    // Two merges: the bio, then request `b`, counted finished.
    assert_eq!(rig.stats(IoPrioClass::BestEffort), stats(4, 2, 1, 2, 0));

    // At 102 ms only the 100 ms deadline has passed: the merged request is the FIFO head
    // and goes before `c`, which sector order would pick.
    rig.now = 102 * MS;
    let rq = rig.dispatch().unwrap();
    assert_eq!(rig.range(&rq), (1000, 1024));
    assert_eq!(rig.bios(&rq), [(a, 1000, 8), (gap, 1008, 8), (b, 1016, 8)]);
    rig.finish(rq);
    assert_eq!(rig.drain_ids(), [c]);
    assert_eq!(rig.stats(IoPrioClass::BestEffort), stats(4, 2, 3, 4, 0));
}

/// Without the merge, the same arrivals go the other way round at 102 ms: `b` (deadline
/// 100 ms) is then the expired FIFO head, and `a` keeps its own, later deadline.
#[test]
fn without_the_gap_bio_each_request_keeps_its_own_deadline() {
    let mut dd = Deadline::new();
    dd.set_fifo_batch(1).unwrap();
    dd.set_read_expire(100 * MS).unwrap();
    let mut rig = Rig::new(32, dd);
    let p = rig.insert(Bio::new(Op::Read, 0, 8));
    assert_eq!(rig.drain_ids(), [p]);
    let b = rig.insert(Bio::new(Op::Read, 1016, 8));
    rig.now = 5 * MS;
    let c = rig.insert(Bio::new(Op::Read, 100, 8));
    rig.now = 10 * MS;
    let a = rig.insert(Bio::new(Op::Read, 1000, 8));
    rig.now = 102 * MS;
    // `b` (expired), then from its end nothing follows in sector order: the FIFO head `c`,
    // then `a`.
    assert_eq!(rig.drain_ids(), [b, c, a]);
}

/// A bio that touches the back of a request that cannot take it (NOMERGE) and the front
/// of one that can: Linux's end hash holds only mergeable requests and falls through to
/// the front merge; the bio should merge into the second request.
#[test]
fn front_merge_behind_an_unmergeable_back_candidate() {
    let mut rig = Rig::new(32, Deadline::new());
    rig.insert(Bio::new(Op::Write, 100, 8).flags(BioFlags::NOMERGE));
    rig.insert(Bio::new(Op::Write, 116, 8));
    assert!(rig.merge(Bio::new(Op::Write, 108, 8)).is_ok());
    let ranges: Vec<(u64, u64)> = std::iter::from_fn(|| {
        let rq = rig.dispatch()?;
        let range = rig.range(&rq);
        rig.finish(rq);
        Some(range)
    })
    .collect();
    assert_eq!(ranges, [(100, 108), (108, 124)]);
}

/// The same with a discard ending where a write bio starts, and a write request starting
/// where that bio ends.
#[test]
fn front_merge_behind_a_back_candidate_of_another_op() {
    let limits = QueueLimits {
        max_discard_sectors: 1024,
        ..QueueLimits::new(1 << 32)
    };
    let mut rig = Rig::with_limits(32, Deadline::new(), limits);
    rig.insert(Bio::new(Op::Discard, 0, 64));
    rig.insert(Bio::new(Op::Write, 72, 8));
    assert!(rig.merge(Bio::new(Op::Write, 64, 8)).is_ok());
    assert_eq!(rig.dd.queued(), 2);
}

/// Discards merge within `max_discard_sectors`, at either end and at insertion, never
/// with writes, and not at all on a device that cannot discard.
#[test]
fn discard_merges() {
    let limits = QueueLimits {
        max_discard_sectors: 256,
        ..QueueLimits::new(1 << 32)
    };
    let mut rig = Rig::with_limits(32, Deadline::new(), limits);
    let d = rig.insert(Bio::new(Op::Discard, 512, 64));
    let back = rig.merge(Bio::new(Op::Discard, 576, 64)).unwrap();
    let front = rig.merge(Bio::new(Op::Discard, 448, 64)).unwrap();
    // 192 sectors now: 65 more would pass the limit.
    assert_eq!(
        rig.merge(Bio::new(Op::Discard, 640, 72))
            .unwrap_err()
            .sectors,
        72
    );
    // A write touching the discard does not join it.
    assert!(rig.merge(Bio::new(Op::Write, 640, 8)).is_err());
    let w = rig.insert(Bio::new(Op::Write, 4096, 8));
    assert!(rig.merge(Bio::new(Op::Discard, 4104, 8)).is_err());
    // A discard request continuing the first one merges into it as it is inserted.
    let tail = rig.insert(Bio::new(Op::Discard, 640, 64));
    assert_eq!(rig.dd.queued(), 2);
    assert_eq!(rig.stats(IoPrioClass::BestEffort), stats(3, 3, 0, 1, 0));

    let rq = rig.dispatch().unwrap();
    assert_eq!(rig.range(&rq), (448, 704));
    assert_eq!(
        rig.bios(&rq),
        [
            (front, 448, 64),
            (d, 512, 64),
            (back, 576, 64),
            (tail, 640, 64)
        ]
    );
    rig.finish(rq);
    assert_eq!(rig.drain_ids(), [w]);

    // No discard support: no discard merges.
    let mut rig = Rig::new(32, Deadline::new());
    rig.insert(Bio::new(Op::Discard, 0, 8));
    assert!(rig.merge(Bio::new(Op::Discard, 8, 8)).is_err());
    assert_eq!(rig.drain_ids().len(), 1);
}

/// Per-class counters after a scripted sequence of inserts, merges, dispatches,
/// completions and a requeue; strict priority by requests queued or in flight.
#[test]
fn stats_are_exact_after_a_script() {
    let rt = prio(IoPrioClass::RealTime);
    let idle = prio(IoPrioClass::Idle);
    let (rt_c, be_c, idle_c) = (
        IoPrioClass::RealTime,
        IoPrioClass::BestEffort,
        IoPrioClass::Idle,
    );
    let mut rig = Rig::new(32, Deadline::new());
    let r1 = rig.insert(Bio::new(Op::Read, 0, 8).prio(rt));
    let r2 = rig.insert(Bio::new(Op::Read, 100, 8).prio(rt));
    let w1 = rig.insert(Bio::new(Op::Write, 200, 8));
    // Continues `w1`: merged into it on insertion, counted inserted and finished.
    rig.insert(Bio::new(Op::Write, 208, 8));
    let i1 = rig.insert(Bio::new(Op::Read, 300, 8).prio(idle));
    rig.merge(Bio::new(Op::Write, 216, 8)).unwrap();
    rig.merge(Bio::new(Op::Read, 8, 8).prio(rt)).unwrap();
    assert_eq!(rig.dd.queued(), 4);
    assert_eq!(rig.stats(rt_c), stats(2, 1, 0, 0, 0));
    assert_eq!(rig.stats(be_c), stats(2, 2, 0, 1, 0));
    assert_eq!(rig.stats(idle_c), stats(1, 0, 0, 0, 0));

    let first = rig.dispatch().unwrap();
    assert_eq!((rig.id(&first), rig.range(&first)), (r1, (0, 16)));
    let second = rig.dispatch().unwrap();
    assert_eq!(rig.id(&second), r2);
    assert_eq!(rig.stats(rt_c), stats(2, 1, 2, 0, 2));
    // RT is in flight: BE and IDLE wait, though queued.
    assert!(rig.dispatch().is_none());
    assert!(rig.dd.has_work(0));
    rig.finish(first);
    assert!(rig.dispatch().is_none());
    assert_eq!(rig.stats(rt_c), stats(2, 1, 2, 1, 1));
    rig.requeue(vec![second]);
    assert_eq!(rig.stats(rt_c), stats(2, 1, 2, 1, 0));
    let again = rig.dispatch().unwrap();
    assert_eq!(rig.id(&again), r2);
    assert_eq!(rig.stats(rt_c), stats(2, 1, 3, 1, 1));
    rig.finish(again);
    assert_eq!(rig.stats(rt_c), stats(2, 1, 3, 2, 0));

    let w = rig.dispatch().unwrap();
    assert_eq!((rig.id(&w), rig.range(&w)), (w1, (200, 224)));
    assert_eq!(rig.bios(&w).len(), 3);
    assert!(rig.dispatch().is_none());
    assert_eq!(rig.stats(be_c), stats(2, 2, 1, 1, 1));
    rig.finish(w);
    assert_eq!(rig.drain_ids(), [i1]);
    assert_eq!(rig.stats(rt_c), stats(2, 1, 3, 2, 0));
    assert_eq!(rig.stats(be_c), stats(2, 2, 1, 2, 0));
    assert_eq!(rig.stats(idle_c), stats(1, 0, 1, 1, 0));
    assert!(!rig.dd.has_work(0));
    assert_eq!(rig.dd.queued(), 0);
    assert_eq!(rig.tags.sched_busy(), 0);
}

// ----- 6. depth limit and tunables -----

/// Reads are never limited; everything else is limited to `async_depth`, 3/4 of
/// `nr_requests` by default, and the allocation really stops there.
#[test]
fn limit_depth_and_async_depth() {
    let mut dd = Deadline::new();
    assert_eq!(dd.min_shallow_depth(), Some(1));
    dd.depth_updated(64, 64);
    assert_eq!(dd.tunables().async_depth, 48);
    for flags in [BioFlags::empty(), BioFlags::SYNC] {
        assert_eq!(dd.limit_depth(Op::Read, flags), None);
        for op in [Op::Write, Op::Discard, Op::WriteZeroes, Op::Flush] {
            assert_eq!(dd.limit_depth(op, flags), Some(48), "{op:?}");
        }
    }
    dd.set_async_depth(5).unwrap();
    assert_eq!(dd.limit_depth(Op::Write, BioFlags::empty()), Some(5));
    // A new depth resets it.
    dd.depth_updated(4, 64);
    assert_eq!(dd.tunables().async_depth, 3);
    dd.depth_updated(1, 64);
    assert_eq!(dd.tunables().async_depth, 1);

    // On 16 scheduler tags: 12 writes, then reads take the rest.
    let mut rig = Rig::new(16, Deadline::new());
    assert_eq!(rig.dd.tunables().async_depth, 12);
    for i in 0..12 {
        rig.insert(lone(Op::Write, i * 64, 8));
    }
    assert_eq!(
        rig.try_insert(lone(Op::Write, 1 << 20, 8)),
        Err(TagError::WouldBlock)
    );
    for i in 0..4 {
        rig.insert(lone(Op::Read, i * 64, 8));
    }
    assert_eq!(
        rig.try_insert(lone(Op::Read, 1 << 20, 8)),
        Err(TagError::WouldBlock)
    );
    assert_eq!(rig.drain_ids().len(), 16);
    assert_eq!(rig.tags.sched_busy(), 0);
}

/// Setters refuse out-of-range values with the tunable's name and leave it unchanged.
#[test]
fn tunables_are_validated() {
    let mut dd = Deadline::new();
    // Before the depth is known any async_depth but 0 goes.
    assert_eq!(
        dd.set_async_depth(0),
        Err(TunableError {
            name: "async_depth",
            value: 0
        })
    );
    dd.set_async_depth(100_000).unwrap();
    dd.depth_updated(64, 64);
    let before = *dd.tunables();
    let err = |name: &'static str, value: u64| Err(TunableError { name, value });
    assert_eq!(dd.set_fifo_batch(0), err("fifo_batch", 0));
    assert_eq!(
        dd.set_fifo_batch(MAX_BATCH + 1),
        err("fifo_batch", u64::from(MAX_BATCH) + 1)
    );
    assert_eq!(dd.set_async_depth(0), err("async_depth", 0));
    assert_eq!(dd.set_async_depth(65), err("async_depth", 65));
    assert_eq!(
        dd.set_writes_starved(MAX_BATCH + 1),
        err("writes_starved", u64::from(MAX_BATCH) + 1)
    );
    let too_long = MAX_EXPIRE_NS + 1;
    assert_eq!(dd.set_read_expire(too_long), err("read_expire", too_long));
    assert_eq!(dd.set_write_expire(too_long), err("write_expire", too_long));
    assert_eq!(
        dd.set_prio_aging_expire(too_long),
        err("prio_aging_expire", too_long)
    );
    assert_eq!(*dd.tunables(), before);
    assert_eq!(
        TunableError {
            name: "fifo_batch",
            value: 0
        }
        .to_string(),
        "fifo_batch = 0 is out of range"
    );

    // The edges are accepted.
    dd.set_fifo_batch(MAX_BATCH).unwrap();
    dd.set_fifo_batch(1).unwrap();
    dd.set_async_depth(64).unwrap();
    dd.set_async_depth(1).unwrap();
    dd.set_writes_starved(MAX_BATCH).unwrap();
    dd.set_writes_starved(0).unwrap();
    dd.set_read_expire(MAX_EXPIRE_NS).unwrap();
    dd.set_read_expire(0).unwrap();
    dd.set_write_expire(MAX_EXPIRE_NS).unwrap();
    dd.set_write_expire(0).unwrap();
    dd.set_prio_aging_expire(MAX_EXPIRE_NS).unwrap();
    dd.set_prio_aging_expire(0).unwrap();
    dd.set_front_merges(false);
    assert_eq!(
        *dd.tunables(),
        Tunables {
            read_expire_ns: 0,
            write_expire_ns: 0,
            writes_starved: 0,
            front_merges: false,
            fifo_batch: 1,
            async_depth: 1,
            prio_aging_expire_ns: 0,
        }
    );
    assert_eq!(dd.limit_depth(Op::Write, BioFlags::empty()), Some(1));
}

// ----- 7. requeue -----

/// A requeued request is dispatched next, before older and even expired queued ones; a
/// batch given back at the head keeps its order; in-flight counts follow exactly.
#[test]
fn requeued_requests_go_first() {
    let be = IoPrioClass::BestEffort;
    let mut dd = Deadline::new();
    dd.set_read_expire(10 * MS).unwrap();
    let mut rig = Rig::new(32, dd);
    let c = rig.insert(Bio::new(Op::Read, 200, 8));
    rig.now = MS;
    let a = rig.insert(Bio::new(Op::Read, 0, 8));
    let b = rig.insert(Bio::new(Op::Read, 100, 8));
    let d = rig.insert(Bio::new(Op::Read, 300, 8));
    let ra = rig.dispatch().unwrap();
    assert_eq!(rig.id(&ra), a);
    assert_eq!(rig.stats(be).in_flight, 1);
    rig.now = 2 * MS;
    rig.requeue(vec![ra]);
    assert_eq!(rig.stats(be).in_flight, 0);
    // At 50 ms `c` is older than `a` and expired; `a` still goes first.
    rig.now = 50 * MS;
    let ra = rig.dispatch().unwrap();
    assert_eq!(rig.id(&ra), a);
    let rb = rig.dispatch().unwrap();
    assert_eq!(rig.id(&rb), b);
    assert_eq!(rig.stats(be), stats(4, 0, 3, 0, 2));

    // Both back, handed in as b, a: dispatched b, a, before `c` and `d`.
    rig.requeue(vec![rb, ra]);
    assert_eq!(rig.stats(be).in_flight, 0);
    let got: Vec<Rq> = std::iter::from_fn(|| rig.dispatch()).collect();
    let ids: Vec<u64> = got.iter().map(|rq| rig.id(rq)).collect();
    assert_eq!(&ids[..2], [b, a]);
    let mut rest = ids[2..].to_vec();
    rest.sort();
    assert_eq!(rest, [c, d]);
    assert_eq!(rig.stats(be), stats(4, 0, 7, 0, 4));
    for (n, rq) in got.into_iter().enumerate() {
        rig.finish(rq);
        assert_eq!(rig.stats(be).in_flight, 3 - n as u64);
    }
    assert_eq!(rig.stats(be), stats(4, 0, 7, 4, 0));
    assert_eq!(rig.tags.sched_busy(), 0);
}

/// Each insert at the head goes before what is already there, earlier requeues included.
#[test]
fn a_later_requeue_goes_before_an_earlier_one() {
    let be = IoPrioClass::BestEffort;
    let mut rig = Rig::new(32, Deadline::new());
    let x = rig.insert(Bio::new(Op::Write, 0, 8));
    let y = rig.insert(Bio::new(Op::Write, 100, 8));
    let z = rig.insert(Bio::new(Op::Write, 200, 8));
    let rx = rig.dispatch().unwrap();
    let ry = rig.dispatch().unwrap();
    assert_eq!((rig.id(&rx), rig.id(&ry)), (x, y));
    assert_eq!(rig.stats(be).in_flight, 2);
    rig.requeue(vec![rx]);
    assert_eq!(rig.stats(be).in_flight, 1);
    rig.requeue(vec![ry]);
    assert_eq!(rig.stats(be).in_flight, 0);
    assert_eq!(rig.drain_ids(), [y, x, z]);
    assert_eq!(rig.stats(be), stats(3, 0, 5, 3, 0));
}

// ----- 8. through a real request queue -----

/// Holds what it is given until the test completes it; on platform `P`.
struct Hold<P = StdPlatform> {
    held: Mutex<Vec<Rq>>,
    platform: PhantomData<fn() -> P>,
}

impl<P> Default for Hold<P> {
    fn default() -> Self {
        Self {
            held: Mutex::default(),
            platform: PhantomData,
        }
    }
}

impl<P: Platform> Driver for Hold<P> {
    type Platform = P;
    type Payload = ();
    fn init_request(&self, _: RequestInit) {}
    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
        self.held.lock().unwrap().push(rq);
        Ok(())
    }
}

fn take(host: &Host<Hold>) -> Vec<Rq> {
    host.driver().held.lock().unwrap().drain(..).collect()
}

static QUEUE_OK: AtomicUsize = AtomicUsize::new(0);
static QUEUE_FAILED: AtomicUsize = AtomicUsize::new(0);

fn queue_done(_: Bio, status: Status) {
    if status.is_ok() {
        QUEUE_OK.fetch_add(1, Ordering::SeqCst);
    } else {
        QUEUE_FAILED.fetch_add(1, Ordering::SeqCst);
    }
}

/// Completes whatever the driver holds until it holds nothing, returning each request's
/// (op, sector, sectors, bios) in the order the driver got them.
fn serve_all(
    host: &Host<Hold>,
    queue: &blkmq_core::RequestQueue<Hold>,
) -> Vec<(Op, u64, u64, u32)> {
    let mut got = Vec::new();
    loop {
        let held = take(host);
        if held.is_empty() {
            return got;
        }
        for rq in &held {
            let io = queue.io(rq).unwrap();
            got.push((io.op(), io.sector(), io.sectors(), io.nr_bios()));
        }
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
    }
}

/// mq-deadline on a real queue: the driver gets the requests sector-sorted, merged where
/// contiguous, and everything completes; switching to none and back with I/O in between
/// loses nothing.
#[test]
fn through_a_real_queue_and_switching() {
    let host = Host::new(TagSet::builder(16), StdPlatform::new(), Hold::default()).unwrap();
    // No deadline can pass on the platform's clock during the test.
    let dd = Deadline::with_tunables(Tunables {
        read_expire_ns: MAX_EXPIRE_NS,
        write_expire_ns: MAX_EXPIRE_NS,
        ..Tunables::default()
    });
    let config = QueueConfig::new(QueueLimits::new(1 << 30)).elevator(Box::new(dd));
    let queue = host.add_queue(config).unwrap();
    assert_eq!(queue.elevator_name(), Some("mq-deadline"));
    let mut submitted = 0;
    let mut rng = Rng(0xf00d);

    // 24 scattered reads and 4 contiguous ones, queued while the queue is quiesced: more
    // than the 16 driver tags, so they go in two rounds.
    let mut sectors: Vec<u64> = (0..24).map(|i| i * 4096).collect();
    for i in (1..sectors.len()).rev() {
        sectors.swap(i, rng.next() as usize % (i + 1));
    }
    queue.quiesce();
    for &s in &sectors {
        queue
            .submit(Bio::new(Op::Read, s, 8).end_io(queue_done))
            .unwrap();
    }
    for i in 0..4 {
        queue
            .submit(Bio::new(Op::Read, (1 << 20) + i * 8, 8).end_io(queue_done))
            .unwrap();
    }
    submitted += 28;
    assert!(take(&host).is_empty());
    queue.unquiesce();
    let got = serve_all(&host, &queue);
    let mut want: Vec<(Op, u64, u64, u32)> = (0..24).map(|i| (Op::Read, i * 4096, 8, 1)).collect();
    want.push((Op::Read, 1 << 20, 32, 4));
    assert_eq!(got, want);
    assert_eq!(QUEUE_OK.load(Ordering::SeqCst), submitted);

    // To none, I/O, back to mq-deadline, I/O.
    queue.switch_elevator(None, None).unwrap();
    assert_eq!(queue.elevator_name(), None);
    for i in 0..10 {
        queue
            .submit(Bio::new(Op::Write, i * 4096, 8).end_io(queue_done))
            .unwrap();
    }
    submitted += 10;
    assert_eq!(serve_all(&host, &queue).len(), 10);
    assert_eq!(QUEUE_OK.load(Ordering::SeqCst), submitted);

    queue
        .switch_elevator(Some(Box::new(Deadline::new())), None)
        .unwrap();
    assert_eq!(queue.elevator_name(), Some("mq-deadline"));
    queue.quiesce();
    for s in [7, 3, 9, 1, 5] {
        queue
            .submit(Bio::new(Op::Write, s * 4096, 8).end_io(queue_done))
            .unwrap();
    }
    submitted += 5;
    queue.unquiesce();
    let got: Vec<u64> = serve_all(&host, &queue).iter().map(|g| g.1).collect();
    assert_eq!(got, [1, 3, 5, 7, 9].map(|s| s * 4096));

    assert_eq!(QUEUE_OK.load(Ordering::SeqCst), submitted);
    assert_eq!(QUEUE_FAILED.load(Ordering::SeqCst), 0);
    assert_eq!(host.set().busy(), 0);
    assert_eq!(queue.queue_tags().sched_busy(), 0);
    assert_eq!(queue.usage(), 0);
}

/// RT in flight holds BE back (strict by queued or in flight); when the RT request
/// completes, the queue must dispatch the BE one without anybody running it by hand.
#[test]
fn real_time_completion_releases_best_effort() {
    let host = Host::new(TagSet::builder(16), StdPlatform::new(), Hold::default()).unwrap();
    let config = QueueConfig::new(QueueLimits::new(1 << 30)).elevator(Box::new(Deadline::new()));
    let queue = host.add_queue(config).unwrap();
    queue
        .submit(Bio::new(Op::Read, 0, 8).prio(prio(IoPrioClass::RealTime)))
        .unwrap();
    let rt = take(&host);
    assert_eq!(rt.len(), 1);
    queue.submit(Bio::new(Op::Read, 4096, 8)).unwrap();
    assert!(take(&host).is_empty(), "BE went while RT was in flight");
    assert!(queue.has_work(0));
    queue
        .end_requests(rt.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    let be = take(&host);
    assert_eq!(be.len(), 1, "the BE read stayed in the scheduler");
    queue
        .end_requests(be.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert!(!queue.has_work(0));
    assert_eq!(host.set().busy(), 0);
    assert_eq!(queue.usage(), 0);
}

/// A platform whose precise and coarse clocks are set apart by the test, counting the
/// precise reads.
#[derive(Default)]
struct TwoClocks {
    precise_ns: AtomicU64,
    coarse_ns: AtomicU64,
    precise_reads: AtomicUsize,
}

impl Platform for TwoClocks {
    type RawMutex = <StdPlatform as Platform>::RawMutex;

    fn nr_cpus(&self) -> usize {
        1
    }

    fn current_cpu(&self) -> usize {
        0
    }

    fn now_ns(&self) -> u64 {
        self.precise_reads.fetch_add(1, Ordering::SeqCst);
        self.precise_ns.load(Ordering::SeqCst)
    }

    fn coarse_now_ns(&self) -> u64 {
        self.coarse_ns.load(Ordering::SeqCst)
    }

    fn kick(&self, _hctx: usize) {}
}

/// Deadlines are stamped and checked on the coarse clock, as Linux counts them in
/// jiffies. Batches of one: the first request goes by sector, and at the next batch's start
/// the oldest read is checked. With the coarse clock short of its expiry and the precise
/// clock past it, the read is not expired, and dispatch goes on in sector order; once the
/// coarse clock reaches the expiry, the oldest read goes next. The precise clock is never
/// read.
#[test]
fn deadlines_follow_the_coarse_clock() {
    for (coarse_ms, second) in [(9, 8192), (10, 100_000)] {
        let host = Host::new(
            TagSet::builder(16),
            TwoClocks::default(),
            Hold::<TwoClocks>::default(),
        )
        .unwrap();
        let dd = Deadline::with_tunables(Tunables {
            read_expire_ns: 10 * MS,
            fifo_batch: 1,
            ..Tunables::default()
        });
        let config = QueueConfig::new(QueueLimits::new(1 << 30)).elevator(Box::new(dd));
        let queue = host.add_queue(config).unwrap();
        let clocks = host.set().platform();
        queue.quiesce();
        // The oldest read is furthest out: sector order and FIFO order differ.
        for sector in [100_000, 8192, 0] {
            queue.submit(Bio::new(Op::Read, sector, 8)).unwrap();
        }
        clocks.coarse_ns.store(coarse_ms * MS, Ordering::SeqCst);
        clocks.precise_ns.store(11 * MS, Ordering::SeqCst);
        queue.unquiesce();
        let held: Vec<u64> = host
            .driver()
            .held
            .lock()
            .unwrap()
            .iter()
            .map(|rq| queue.io(rq).unwrap().sector())
            .collect();
        assert_eq!(held.len(), 3);
        assert_eq!(held[0], 0, "the first batch goes by sector");
        assert_eq!(held[1], second, "coarse clock at {coarse_ms} ms: {held:?}");
        assert_eq!(clocks.precise_reads.load(Ordering::SeqCst), 0);
        let held: Vec<Rq> = host.driver().held.lock().unwrap().drain(..).collect();
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
        assert_eq!(host.set().busy(), 0);
    }
}
