//! The same workloads with no elevator and with mq-deadline: both move every byte; where
//! scheduling matters (a seeking disk, a shallow card, priorities) mq-deadline does what
//! it is for.

use blkmq_core::{Elevator, IoPrio, IoPrioClass, IssuerId, QueueConfig};
use blkmq_sched_deadline::Deadline;
use blkmq_sim::*;

/// One queue on `model`; with mq-deadline holding `nr_requests` when given.
fn sim_of<M: DeviceModel>(model: M, deadline: Option<usize>) -> (Sim<ModelDriver<M>>, QueueId) {
    let platform = SimPlatform::new(2);
    let driver = ModelDriver::new(platform.clone(), model);
    let tags = driver.tag_set();
    let mut config: QueueConfig = driver.queue_config();
    if let Some(nr) = deadline {
        let e: Box<dyn Elevator> = Box::new(Deadline::new());
        config = config.elevator(e).nr_requests(nr);
    }
    let mut sim = Sim::new(platform, tags, driver).unwrap();
    let q = sim.add_queue(config).unwrap();
    (sim, q)
}

fn disk() -> Disk {
    Disk::new(DiskParams::default()).unwrap()
}

fn random_readers(sim: &mut Sim<ModelDriver<Disk>>, q: QueueId, prios: [IoPrio; 2]) {
    for (i, prio) in prios.into_iter().enumerate() {
        let job = FioJob::new(IssuerId(i as u32 + 1), Pattern::RandRead, 4096, 16, 150)
            .region(0, DiskParams::default().capacity_sectors)
            .seed(i as u64 + 10)
            .prio(prio);
        sim.add_workload_on(q, i, 0, job);
    }
}

#[test]
fn mq_deadline_sorts_random_reads_on_a_seeking_disk() {
    let be = IoPrio::default();
    let (mut none, q) = sim_of(disk(), None);
    random_readers(&mut none, q, [be, be]);
    let none = none.run().unwrap();
    let (mut dd, q) = sim_of(disk(), Some(64));
    random_readers(&mut dd, q, [be, be]);
    let dd = dd.run().unwrap();
    for r in [&none, &dd] {
        assert_eq!(r.stats.end_io_calls, 300);
        assert_eq!(
            r.issuers.iter().map(|i| i.bytes_read).sum::<u64>(),
            300 * 4096
        );
    }
    // Served in sector order, the same reads take far less seeking.
    assert!(
        dd.now_ns * 10 < none.now_ns * 8,
        "mq-deadline {} ns, none {} ns",
        dd.now_ns,
        none.now_ns
    );
}

#[test]
fn mq_deadline_serves_the_real_time_class_first() {
    let rt = IoPrio::new(IoPrioClass::RealTime, 0).unwrap();
    let be = IoPrio::default();
    let (mut sim, q) = sim_of(disk(), Some(64));
    random_readers(&mut sim, q, [rt, be]);
    let report = sim.run().unwrap();
    let (rt, be) = (&report.issuers[0].latency, &report.issuers[1].latency);
    // Best effort waits while real time has work: its tail is many times longer, and
    // real time is done first.
    assert!(
        rt.p90_ns * 4 < be.p90_ns,
        "real time {rt}, best effort {be}"
    );
    assert!(report.issuers[0].last_ns < report.issuers[1].last_ns);
    let stats = sim
        .queue(q)
        .with_elevator(|d: &mut Deadline| d.stats(IoPrioClass::RealTime))
        .unwrap();
    assert_eq!(
        (stats.dispatched, stats.completed, stats.in_flight),
        (150, 150, 0)
    );
}

#[test]
fn mq_deadline_merges_what_waits_behind_a_shallow_card() {
    let card = || MmcCard::new(CardParams::default()).unwrap();
    // 8 bios of 128 KiB in flight, refilled one at a time: nothing merges in a plug.
    let dd = || Dd::read(0, 32 << 20).window(8).refill(1);
    let (mut none, q) = sim_of(card(), None);
    let none_dd = none.add_workload(q, dd());
    none.run().unwrap();
    let (mut sched, q) = sim_of(card(), Some(4));
    let sched_dd = sched.add_workload(q, dd());
    sched.run().unwrap();
    let merged = sched
        .queue(q)
        .with_elevator(|d: &mut Deadline| d.stats(IoPrioClass::BestEffort).merged)
        .unwrap();
    let commands =
        |sim: &Sim<ModelDriver<MmcCard>>| sim.host().driver().with_model(|m| m.stats().commands);
    let (none_result, sched_result) = (
        none.workload(none_dd).result().unwrap(),
        sched.workload(sched_dd).result().unwrap(),
    );
    assert_eq!(
        (none_result.bytes, sched_result.bytes),
        (32 << 20, 32 << 20)
    );
    // With no elevator, bios that find no request wait whole: one command each, but for
    // the first window, which went in under one plug (8 bios, 2 requests of 512 KiB).
    assert_eq!(commands(&none), 256 - 6);
    // With mq-deadline they take scheduler requests and merge while the card is busy.
    assert!(merged > 0);
    assert!(commands(&sched) < 200, "{}", commands(&sched));
    // Fewer commands, fewer command overheads (205 us each).
    assert!(sched_result.elapsed_ns < none_result.elapsed_ns);
}

#[test]
fn both_elevators_run_every_workload_to_the_same_bytes() {
    // 200 steps of the walk, three of them bursts of 32 blocks.
    let walk = FindParams {
        reads: 200,
        ..FindParams::default()
    };
    assert_eq!(walk.blocks(), 197 + 3 * 32);
    for deadline in [None, Some(8)] {
        let (mut sim, q) = sim_of(Ssd::new(SsdParams::default()).unwrap(), deadline);
        sim.add_workload_on(q, 0, 0, Dd::write(1 << 20, 8 << 20));
        sim.add_workload_on(q, 1, 0, Find::new(walk));
        sim.add_workload_on(
            q,
            1,
            1_000_000,
            FioJob::new(
                IssuerId(3),
                Pattern::RandRw { read_percent: 50 },
                16384,
                4,
                300,
            ),
        );
        let report = sim.run().unwrap();
        let bytes: Vec<u64> = report.workloads.iter().map(WorkloadReport::bytes).collect();
        assert_eq!(bytes, [8 << 20, walk.blocks() * 4096, 300 * 16384]);
        assert_eq!(report.stats.end_io_calls, report.stats.bios_submitted);
    }
}
