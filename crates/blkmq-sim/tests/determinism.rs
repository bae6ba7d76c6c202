//! Same configuration, same output: reports are equal run after run, on one thread or
//! several at once; a different seed gives a different run.

use std::time::Instant;

use blkmq_core::{Elevator, IoPrio, IoPrioClass, IssuerId};
use blkmq_sched_deadline::Deadline;
use blkmq_sim::*;

/// Everything a mixed run prints.
fn mixed(seed: u64, deadline: bool) -> (SimReport, String) {
    let elevator = || -> Option<Box<dyn Elevator>> {
        deadline.then(|| Box::new(Deadline::new()) as Box<dyn Elevator>)
    };
    let mut out = String::new();

    // The card: dd, find and a small iozone sweep, one after the other.
    let card = MmcCard::new(CardParams::default()).unwrap();
    let (mut sim, q) = Sim::for_model(card, 2, elevator()).unwrap();
    let dd = sim.add_workload(q, Dd::read(0, 8 << 20).window(4).refill(2));
    let find = sim.add_workload_on(
        q,
        1,
        0,
        Find::new(FindParams {
            reads: 100,
            seed,
            ..FindParams::default()
        }),
    );
    let iozone = sim.add_workload_on(
        q,
        0,
        0,
        Iozone::new(IozoneParams {
            file_bytes: 512 << 10,
            max_record: 128 << 10,
            file_sector: 1 << 20,
            seed,
            ..IozoneParams::default()
        }),
    );
    let card_report = sim.run().unwrap();
    out.push_str(&sim.workload(dd).result().unwrap().to_string());
    out.push_str(&sim.workload(find).real_line().unwrap());
    out.push_str(&sim.workload(iozone).grid().to_string());
    out.push_str(&card_report.to_string());

    // A RAID-0 of disks: competing fio jobs at two priorities.
    let members = (0..4)
        .map(|_| Disk::new(DiskParams::ncq()).unwrap())
        .collect();
    let raid = Raid0::new(members, Raid0Params::default()).unwrap();
    let (mut sim, q) = Sim::for_model(raid, 4, elevator()).unwrap();
    for i in 0..3u32 {
        let prio = if i == 0 {
            IoPrio::new(IoPrioClass::RealTime, 0).unwrap()
        } else {
            IoPrio::default()
        };
        let job = FioJob::new(
            IssuerId(i),
            Pattern::RandRw { read_percent: 60 },
            8192,
            8,
            200,
        )
        .prio(prio)
        .seed(seed + u64::from(i));
        sim.add_workload_on(q, i as usize, 0, job);
    }
    let report = sim.run().unwrap();
    out.push_str(&report.to_string());
    (report, out)
}

#[test]
fn two_runs_print_the_same() {
    for deadline in [false, true] {
        let (a, text_a) = mixed(42, deadline);
        let (b, text_b) = mixed(42, deadline);
        assert_eq!(a, b);
        assert_eq!(text_a, text_b);
        // The seed matters: a run with another is not the same run.
        let (c, text_c) = mixed(43, deadline);
        assert_ne!(a, c);
        assert_ne!(text_a, text_c);
    }
}

#[test]
fn runs_on_parallel_threads_print_what_one_thread_prints() {
    let (alone, text) = mixed(7, true);
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| mixed(7, true)))
        .collect();
    for t in threads {
        let (report, out) = t.join().unwrap();
        assert_eq!(report, alone);
        assert_eq!(out, text);
    }
}

#[test]
fn a_1_gib_dd_repeats_exactly_and_prints_its_wall_time() {
    let mut results = Vec::new();
    for _ in 0..2 {
        let card = MmcCard::new(CardParams::default()).unwrap();
        let (mut sim, q) = Sim::for_model(card, 1, None).unwrap();
        let dd = sim.add_workload(q, Dd::read(0, 1 << 30));
        let wall = Instant::now();
        let report = sim.run().unwrap();
        let wall = wall.elapsed();
        let result = sim.workload(dd).result().unwrap();
        println!(
            "{result}\n(simulated in {:.3} s of wall time)",
            wall.as_secs_f64()
        );
        assert_eq!(result.bytes, 1 << 30);
        assert_eq!(report.stats.end_io_calls, 8192);
        results.push((result, report));
    }
    assert_eq!(results[0], results[1]);
}
