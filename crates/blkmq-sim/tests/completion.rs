//! Every bio ends exactly once: counted by the simulation's `end_io` and, independently,
//! by the workload that issued it — through splits, plugs, merges, waits for requests,
//! errors, flushes, several queues, no elevator and mq-deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blkmq_core::{BioFlags, IoPrio, IoPrioClass, IssuerId, Op, QueueConfig, Status};
use blkmq_sched_deadline::Deadline;
use blkmq_sim::*;

/// Submits `count` bios of every kind, some plugged together, some past the end of the
/// device, and counts the ends of each by its tag.
struct Scatter {
    rng: SimRng,
    capacity: u64,
    max_sectors: u32,
    count: u64,
    issued: u64,
    ends: Vec<u32>,
    errors: u64,
    /// Bios that should fail (past the end), by tag.
    doomed: Vec<bool>,
    claimed: u64,
    total: Arc<AtomicU64>,
}

impl Scatter {
    fn new(seed: u64, capacity: u64, max_sectors: u32, count: u64) -> Self {
        Self {
            rng: SimRng::new(seed),
            capacity,
            max_sectors,
            count,
            issued: 0,
            ends: vec![0; count as usize],
            errors: 0,
            doomed: vec![false; count as usize],
            claimed: 0,
            total: Arc::new(AtomicU64::new(0)),
        }
    }

    fn next(&mut self) -> Io {
        let tag = self.issued;
        self.issued += 1;
        let kind = self.rng.below(20);
        let prio = match self.rng.below(3) {
            0 => IoPrio::new(IoPrioClass::RealTime, 0).unwrap(),
            1 => IoPrio::new(IoPrioClass::Idle, 7).unwrap(),
            _ => IoPrio::default(),
        };
        let io = if kind == 0 {
            Io::new(Op::Flush, 0, 0)
        } else {
            // Up to 4 times the largest request: some are split.
            let mut sectors = 1 + self.rng.below(u64::from(self.max_sectors) * 4) as u32;
            let sector = if kind == 1 {
                self.doomed[tag as usize] = true;
                sectors = sectors.max(2);
                self.capacity - 1 // runs past the end
            } else if kind < 8 {
                // Neighbours of earlier I/O, so that some merge.
                (tag * 64) % (self.capacity / 2)
            } else {
                self.rng.below(self.capacity - u64::from(sectors))
            };
            let op = if self.rng.chance(1, 2) {
                Op::Read
            } else {
                Op::Write
            };
            let flags = if self.rng.chance(1, 4) {
                BioFlags::SYNC
            } else {
                BioFlags::empty()
            };
            Io::new(op, sector, sectors).flags(flags)
        };
        self.claimed += io.bytes();
        io.prio(prio).issuer(IssuerId((tag % 3) as u32)).tag(tag)
    }

    fn issue(&mut self, cx: &mut Cx<'_>) {
        if self.issued == self.count {
            return;
        }
        if self.rng.chance(1, 3) {
            let n = (1 + self.rng.below(6)).min(self.count - self.issued);
            let ios: Vec<Io> = (0..n).map(|_| self.next()).collect();
            cx.submit_plugged(ios);
        } else {
            let io = self.next();
            cx.submit(io);
        }
    }
}

impl Workload for Scatter {
    fn name(&self) -> String {
        "scatter".into()
    }

    fn start(&mut self, cx: &mut Cx<'_>) {
        for _ in 0..8 {
            self.issue(cx);
        }
    }

    fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
        self.ends[done.tag as usize] += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
        if !done.status.is_ok() {
            self.errors += 1;
            assert_eq!(done.status, Status::IoErr);
            assert!(
                self.doomed[done.tag as usize],
                "tag {} failed: {done:?}",
                done.tag
            );
        }
        self.issue(cx);
    }

    fn is_finished(&self) -> bool {
        self.issued == self.count
    }

    fn claimed_bytes(&self) -> u64 {
        self.claimed
    }
}

fn check(report: &SimReport, scatter: &Scatter) {
    let s = &report.stats;
    assert_eq!(s.bios_submitted, scatter.count);
    assert_eq!(s.end_io_calls, scatter.count);
    assert_eq!((s.stale_end_io, s.foreign_end_io), (0, 0));
    assert!(scatter.ends.iter().all(|&n| n == 1), "{:?}", scatter.ends);
    let doomed = scatter.doomed.iter().filter(|&&d| d).count() as u64;
    assert_eq!((scatter.errors, s.errors), (doomed, doomed));
    assert!(doomed > 0);
    assert_eq!(report.workloads[0].issued_bytes, scatter.claimed);
}

#[test]
fn every_bio_ends_once_on_a_shallow_card() {
    for deadline in [false, true] {
        let card = MmcCard::new(CardParams::default()).unwrap();
        let capacity = card.capacity();
        let elevator = deadline.then(|| Box::new(Deadline::new()) as _);
        let (mut sim, q) = Sim::for_model(card, 2, elevator).unwrap();
        let id = sim.add_workload(q, Scatter::new(7, capacity, 1024, 400));
        let report = sim.run().unwrap();
        let scatter = sim.workload(id);
        check(&report, scatter);
        assert_eq!(scatter.total.load(Ordering::Relaxed), 400);
        // The card holds two commands: plenty had to wait for a request.
        assert!(report.stats.bios_waited > 0);
        if deadline {
            let dispatched = sim
                .queue(q)
                .with_elevator(|d: &mut Deadline| {
                    [
                        IoPrioClass::RealTime,
                        IoPrioClass::BestEffort,
                        IoPrioClass::Idle,
                    ]
                    .map(|c| d.stats(c).dispatched)
                })
                .unwrap();
            assert!(dispatched.iter().all(|&n| n > 0), "{dispatched:?}");
        }
    }
}

#[test]
fn every_bio_ends_once_on_a_deep_ssd_and_a_disk() {
    for deadline in [false, true] {
        let ssd = Ssd::new(SsdParams::default()).unwrap();
        let capacity = ssd.capacity();
        let elevator = deadline.then(|| Box::new(Deadline::new()) as _);
        let (mut sim, q) = Sim::for_model(ssd, 4, elevator).unwrap();
        let id = sim.add_workload(q, Scatter::new(11, capacity, 2560, 600));
        let report = sim.run().unwrap();
        check(&report, sim.workload(id));

        let disk = Disk::new(DiskParams::ncq()).unwrap();
        let capacity = disk.capacity();
        let elevator = deadline.then(|| Box::new(Deadline::new()) as _);
        let (mut sim, q) = Sim::for_model(disk, 1, elevator).unwrap();
        let id = sim.add_workload(q, Scatter::new(13, capacity, 2560, 300));
        let report = sim.run().unwrap();
        check(&report, sim.workload(id));
    }
}

#[test]
fn every_bio_ends_once_on_two_queues_sharing_a_raid_volume() {
    let members = (0..8)
        .map(|_| Ssd::new(SsdParams::default()).unwrap())
        .collect();
    let raid = Raid0::new(members, Raid0Params::default()).unwrap();
    let platform = SimPlatform::new(4);
    let driver = ModelDriver::new(platform.clone(), raid);
    let limits = driver.limits();
    let capacity = limits.capacity;
    let mut sim = Sim::new(platform, driver.tag_set().hw_queues(2), driver).unwrap();
    let a = sim.add_queue(QueueConfig::new(limits)).unwrap();
    let b = sim
        .add_queue(QueueConfig::new(limits).elevator(Box::new(Deadline::new())))
        .unwrap();
    let first = sim.add_workload_on(a, 0, 0, Scatter::new(17, capacity, 128, 500));
    let second = sim.add_workload_on(b, 3, 0, Scatter::new(19, capacity, 128, 500));
    let report = sim.run().unwrap();
    assert_eq!(report.stats.end_io_calls, 1000);
    assert_eq!(report.stats.stale_end_io, 0);
    for id in [first, second] {
        let scatter = sim.workload(id);
        assert!(scatter.ends.iter().all(|&n| n == 1));
    }
    // Both volumes' requests reached the members.
    let commands = sim.host().driver().with_model(|r| r.stats().commands);
    assert!(commands > 0);
    assert_eq!(sim.host().in_driver(), 0);
    assert_eq!(sim.host().set().busy(), 0);
}

#[test]
fn simulations_on_one_thread_never_take_each_others_ends() {
    // Two simulations alive at once on one thread, run in turns.
    let mk = || Sim::for_model(MmcCard::new(CardParams::default()).unwrap(), 1, None).unwrap();
    let (mut one, q1) = mk();
    let (mut two, q2) = mk();
    one.add_workload(q1, Dd::read(0, 1 << 20));
    two.add_workload(q2, Dd::write(0, 1 << 20));
    let r1 = one.run().unwrap();
    let r2 = two.run().unwrap();
    one.add_workload(q1, Dd::read(1 << 20, 1 << 20));
    let r3 = one.run().unwrap();
    assert_eq!(r1.stats.end_io_calls, 8);
    assert_eq!(r2.stats.end_io_calls, 8);
    assert_eq!(r3.stats.end_io_calls, 16);
    for r in [&r1, &r2, &r3] {
        assert_eq!(r.stats.foreign_end_io + r.stats.stale_end_io, 0);
    }
}
