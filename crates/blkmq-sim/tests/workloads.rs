//! Every workload issues exactly the bytes it claims, the device sees exactly those bytes,
//! and each reports what it moved and how long it took.

use blkmq_core::{BioFlags, IssuerId, Op};
use blkmq_sched_deadline::Deadline;
use blkmq_sim::*;

/// One queue on `model`, with mq-deadline when `deadline`.
fn sim_of<M: DeviceModel>(model: M, deadline: bool) -> (Sim<ModelDriver<M>>, QueueId) {
    let elevator = deadline.then(|| Box::new(Deadline::new()) as _);
    Sim::for_model(model, 2, elevator).unwrap()
}

fn card() -> MmcCard {
    MmcCard::new(CardParams::default()).unwrap()
}

fn ideal(latency_ns: u64) -> Ideal {
    Ideal::new(IdealParams {
        latency_ns,
        bandwidth: 0,
        ..IdealParams::default()
    })
    .unwrap()
}

/// The device's own count of bytes read and written.
fn device_bytes<M: DeviceModel>(sim: &Sim<ModelDriver<M>>) -> (u64, u64) {
    sim.host()
        .driver()
        .with_model(|m| (m.stats().bytes_read, m.stats().bytes_written))
}

/// The checks every workload report must pass: it finished, without errors, having issued
/// and moved exactly what it claims.
fn exact(report: &WorkloadReport) {
    assert!(report.finished, "{report:?}");
    assert_eq!(report.errors, 0, "{report:?}");
    assert_eq!(report.issued_bytes, report.claimed_bytes, "{report:?}");
    assert_eq!(report.bytes(), report.claimed_bytes, "{report:?}");
}

#[test]
fn dd_reads_and_writes_exactly_its_bytes_through_splits_and_waits() {
    for deadline in [false, true] {
        // 10 MiB and 1000 bytes: the last bio is short; the claim rounds to sectors.
        let (mut sim, q) = sim_of(card(), deadline);
        let dd = sim.add_workload(
            q,
            Dd::read(2048, (10 << 20) + 1000)
                .bio_bytes(64 << 10)
                .window(3)
                .refill(2),
        );
        let report = sim.run().unwrap();
        exact(&report.workloads[0]);
        assert_eq!(report.workloads[0].claimed_bytes, (10 << 20) + 1024);
        assert_eq!(device_bytes(&sim), ((10 << 20) + 1024, 0));
        let result = sim.workload(dd).result().unwrap();
        assert_eq!(result.bytes, (10 << 20) + 1024);
        assert_eq!(result.elapsed_ns, report.workloads[0].elapsed_ns());

        // 4 MiB bios on a card taking 512 KiB requests, 2 at a time: split, and waiting.
        let (mut sim, q) = sim_of(card(), deadline);
        sim.add_workload(q, Dd::write(0, 16 << 20).bio_bytes(4 << 20).window(2));
        let report = sim.run().unwrap();
        exact(&report.workloads[0]);
        assert!(report.stats.bios_waited > 0);
        assert_eq!(report.stats.bios_submitted, 4);
        assert_eq!(device_bytes(&sim), (0, 16 << 20));
        assert_eq!(sim.host().driver().with_model(|m| m.stats().commands), 32);
    }
}

#[test]
fn dd_elapsed_time_is_the_device_time_when_the_device_is_the_bottleneck() {
    // 16 bios of 128 KiB on the card, two in flight. The first two go in under one plug
    // and merge: one 256 KiB request (prepared in 250 us + 2131.252 us, read in 205 us +
    // 11255.646 us). Its end frees both: the third bio finds the card idle and pays its
    // preparation (250 + 1065.626 us); from then on one is on the bus while the next is
    // prepared, so the other 13 cost only the card's time.
    let (mut sim, q) = sim_of(card(), false);
    let dd = sim.add_workload(q, Dd::read(0, 2 << 20));
    sim.run().unwrap();
    let card_ns = 195_000 + 5_627_823;
    let first = 240_000 + 2_131_252 + 195_000 + 11_255_646;
    let expected = first + 240_000 + 1_065_626 + 14 * card_ns;
    assert_eq!(sim.workload(dd).result().unwrap().elapsed_ns, expected);
    assert_eq!(sim.host().driver().with_model(|m| m.stats().commands), 15);
}

#[test]
fn find_reads_its_blocks_one_at_a_time() {
    let params = FindParams {
        reads: 300,
        think_ns: 683_000,
        burst_every: 0,
        ..FindParams::default()
    };
    let (mut sim, q) = sim_of(ideal(500_000), false);
    let find = sim.add_workload(q, Find::new(params));
    let report = sim.run().unwrap();
    exact(&report.workloads[0]);
    assert_eq!(report.workloads[0].bytes_read, 300 * 4096);
    assert_eq!(report.workloads[0].ios, 300);
    // One at a time: 300 reads of 0.5 ms and 300 pauses of 0.683 ms.
    assert_eq!(
        sim.workload(find).elapsed_ns(),
        Some(300 * (500_000 + 683_000))
    );
    assert_eq!(report.issuers[0].latency.max_ns, 500_000);
    // Every read lands in the span, block-aligned.
    let (read, _) = device_bytes(&sim);
    assert_eq!(read, 300 * 4096);
}

#[test]
fn find_bursts_read_adjacent_blocks_under_one_plug() {
    let walk = FindParams {
        reads: 10,
        burst_every: 5,
        burst_blocks: 8,
        think_ns: 0,
        ..FindParams::default()
    };
    assert_eq!((walk.bursts(), walk.blocks()), (2, 8 + 2 * 8));
    // One command at a time, 0.5 ms each: merged, a burst is one command; kept from
    // merging, eight.
    let one_at_a_time = || {
        Ideal::new(IdealParams {
            latency_ns: 500_000,
            bandwidth: 0,
            queue_depth: 1,
            ..IdealParams::default()
        })
        .unwrap()
    };
    let merging = FindParams::default().flags;
    for (flags, commands) in [(merging, 10), (merging | BioFlags::NOMERGE, 24)] {
        let (mut sim, q) = sim_of(one_at_a_time(), false);
        let find = sim.add_workload(q, Find::new(FindParams { flags, ..walk }));
        let report = sim.run().unwrap();
        exact(&report.workloads[0]);
        assert_eq!(report.workloads[0].bytes_read, 24 * 4096);
        let device = sim.host().driver().with_model(|m| m.stats());
        assert_eq!((device.commands, device.bytes_read), (commands, 24 * 4096));
        assert_eq!(sim.workload(find).elapsed_ns(), Some(commands * 500_000));
    }
}

#[test]
fn iozone_moves_the_file_six_times_per_record_size() {
    let params = IozoneParams {
        file_bytes: 1 << 20,
        max_record: 256 << 10,
        file_sector: 4096,
        ..IozoneParams::default()
    };
    for deadline in [false, true] {
        let (mut sim, q) = sim_of(card(), deadline);
        let iozone = sim.add_workload(q, Iozone::new(params));
        let report = sim.run().unwrap();
        exact(&report.workloads[0]);
        // 4 KiB to 256 KiB: 7 sizes, each writing and reading the 1 MiB file 3 times.
        assert_eq!(report.workloads[0].claimed_bytes, 7 * 6 * (1 << 20));
        assert_eq!(device_bytes(&sim), (21 << 20, 21 << 20));
        // One bio per record: 256 + 128 + ... + 4 records per test.
        assert_eq!(
            report.stats.bios_submitted,
            6 * (256 + 128 + 64 + 32 + 16 + 8 + 4)
        );
        let grid = sim.workload(iozone).grid();
        assert_eq!(grid.file_kb, 1024);
        assert_eq!(
            grid.rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            [4, 8, 16, 32, 64, 128, 256]
        );
        // Small random writes are the slowest column, reads faster than writes.
        let rw = grid.get(4, IozoneTest::RandomWrite).unwrap();
        let w = grid.get(4, IozoneTest::Write).unwrap();
        let r = grid.get(4, IozoneTest::Read).unwrap();
        assert!(rw < w && w < r, "{grid}");
        assert!(IozoneGrid::parse(&grid.to_string()).as_ref() == Some(grid));
    }
}

#[test]
fn iozone_rates_follow_from_the_device_time() {
    // One 64 KiB record size, 4 records: every test takes 4 * 1 ms on this device.
    let params = IozoneParams {
        file_bytes: 256 << 10,
        min_record: 64 << 10,
        max_record: 64 << 10,
        ..IozoneParams::default()
    };
    let (mut sim, q) = sim_of(ideal(1_000_000), false);
    let iozone = sim.add_workload(q, Iozone::new(params));
    sim.run().unwrap();
    let grid = sim.workload(iozone).grid();
    // 256 kB in 4 ms: 64000 kB/s.
    assert_eq!(grid.rows, [(64, [64_000; 6])]);
}

#[test]
fn fio_jobs_issue_their_ios_at_their_depth() {
    for pattern in [
        Pattern::Read,
        Pattern::Write,
        Pattern::RandRead,
        Pattern::RandWrite,
        Pattern::RandRw { read_percent: 70 },
    ] {
        let (mut sim, q) = sim_of(Ssd::new(SsdParams::default()).unwrap(), false);
        sim.add_workload(
            q,
            FioJob::new(IssuerId(4), pattern, 8192, 8, 1000).region(1 << 20, 1 << 20),
        );
        let report = sim.run().unwrap();
        let w = &report.workloads[0];
        exact(w);
        assert_eq!(w.ios, 1000);
        assert_eq!(device_bytes(&sim).0 + device_bytes(&sim).1, 1000 * 8192);
        match pattern {
            Pattern::Read | Pattern::RandRead => assert_eq!(w.bytes_written, 0),
            Pattern::Write | Pattern::RandWrite => assert_eq!(w.bytes_read, 0),
            Pattern::RandRw { .. } => {
                let reads = w.bytes_read / 8192;
                assert!((600..800).contains(&reads), "{reads} reads of 1000");
            }
        }
        assert_eq!(report.issuers.len(), 1);
        assert_eq!(report.issuers[0].issuer, IssuerId(4));
        assert_eq!(report.issuers[0].latency.count, 1000);
    }
}

#[test]
fn fio_keeps_exactly_its_iodepth_in_flight() {
    // A device slow enough that the job is always at its depth: 1000 I/Os at depth 10
    // take 100 rounds of 1 ms.
    let (mut sim, q) = sim_of(ideal(1_000_000), false);
    sim.add_workload(
        q,
        FioJob::new(IssuerId(1), Pattern::RandRead, 4096, 10, 1000),
    );
    let report = sim.run().unwrap();
    assert_eq!(report.workloads[0].elapsed_ns(), 100_000_000);
    assert_eq!(report.issuers[0].latency.p50_ns, 1_000_000);
}

#[test]
fn replay_issues_every_record_at_its_time() {
    let text = "\
# issuer time sector bytes op
1 0.000000000 0 4096 R
2 0.000000000 1024 8192 WS
1 0.001000000 8 4096 RM
3 0.002 4096 1048576 D
2 0.0025 0 0 F
1 0.003 2048 65536 W
";
    let trace = Trace::parse(text).unwrap();
    for deadline in [false, true] {
        let (mut sim, q) = sim_of(Ssd::new(SsdParams::default()).unwrap(), deadline);
        let replay = sim.add_workload(q, Replay::new(trace.clone()));
        let report = sim.run().unwrap();
        let w = &report.workloads[0];
        exact(w);
        assert_eq!(w.claimed_bytes, trace.total_bytes());
        assert_eq!(
            (w.bytes_read, w.bytes_written, w.bytes_other),
            (8192, 8192 + 65536, 1 << 20)
        );
        assert_eq!(w.ios, 6);
        assert_eq!(sim.workload(replay).issued(), 6);
        // The last record goes at 3 ms; it ends after that.
        assert!(w.end_ns > 3_000_000);
        let issuers: Vec<u32> = report.issuers.iter().map(|i| i.issuer.0).collect();
        assert_eq!(issuers, [1, 2, 3]);
        assert_eq!(report.issuers[0].first_ns, 0);
    }
}

#[test]
fn trace_text_round_trips_and_bad_lines_are_named() {
    let trace = Trace::from_records(vec![
        TraceRecord {
            issuer: IssuerId(9),
            time_ns: 1_500_000_001,
            sector: 77,
            bytes: 512,
            op: Op::Write,
            flags: BioFlags::SYNC | BioFlags::META,
        },
        TraceRecord {
            issuer: IssuerId(0),
            time_ns: 0,
            sector: 0,
            bytes: 0,
            op: Op::Flush,
            flags: BioFlags::empty(),
        },
    ]);
    let text = trace.to_text();
    assert_eq!(text, "9 1.500000001 77 512 WSM\n0 0.000000000 0 0 F\n");
    assert_eq!(Trace::parse(&text).unwrap(), trace);
    for (bad, line) in [
        ("1 0 0 4096", 1),
        ("\n\n1 0.1234567891 0 512 R", 3),
        ("1 0 0 512 X", 1),
        ("1 0 0 512 RQ", 1),
        ("1 0 0 0 R", 1),
        ("1 0 0 512 F", 1),
        ("x 0 0 512 R", 1),
    ] {
        assert_eq!(Trace::parse(bad).unwrap_err().line, line, "{bad}");
    }
}

#[test]
fn workloads_on_two_queues_of_one_host_are_accounted_apart() {
    let platform = SimPlatform::new(2);
    let driver = ModelDriver::new(platform.clone(), ideal(200_000));
    let limits = driver.limits();
    let mut sim = Sim::new(platform, driver.tag_set(), driver).unwrap();
    let a = sim.add_queue(blkmq_core::QueueConfig::new(limits)).unwrap();
    let b = sim
        .add_queue(blkmq_core::QueueConfig::new(limits).elevator(Box::new(Deadline::new())))
        .unwrap();
    sim.add_workload_on(a, 0, 0, Dd::read(0, 4 << 20));
    sim.add_workload_on(b, 1, 0, Dd::write(0, 2 << 20).issuer(IssuerId(1)));
    let report = sim.run().unwrap();
    exact(&report.workloads[0]);
    exact(&report.workloads[1]);
    assert_eq!(report.workloads[0].bytes_read, 4 << 20);
    assert_eq!(report.workloads[1].bytes_written, 2 << 20);
    assert_eq!(
        (report.workloads[0].queue, report.workloads[1].queue),
        (0, 1)
    );
    assert_eq!(device_bytes(&sim), (4 << 20, 2 << 20));
}
