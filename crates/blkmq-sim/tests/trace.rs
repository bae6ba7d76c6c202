//! A traced run: a mixed workload (three issuers on two CPUs, sequential writes that merge,
//! random and sequential reads) through mq-deadline on a seeking disk with a command queue
//! deep enough for them all, with a ring tracer on the queue. The trace's `btt` figures per
//! issuer are the simulator's own latency figures for the same run, figure for figure:
//! both read the one virtual clock. (A bio the simulator holds back for want of a request
//! waits outside the queue, where no trace sees it: hence the deep queue.)

use std::sync::Arc;

use blkmq_core::{Action, Elevator, IssuerId, QueueConfig, RingTracer, TraceSummary};
use blkmq_sched_deadline::Deadline;
use blkmq_sim::*;

#[test]
fn a_traced_mixed_run_summarises_to_the_simulators_latencies() {
    let platform = SimPlatform::new(2);
    let driver = ModelDriver::new(platform.clone(), Disk::new(DiskParams::ncq()).unwrap());
    let tags = driver.tag_set();
    let rings = Arc::new(RingTracer::new(2, 1 << 14));
    let e: Box<dyn Elevator> = Box::new(Deadline::new());
    let config: QueueConfig = driver.queue_config().elevator(e).tracer(rings.clone());
    let mut sim = Sim::new(platform, tags, driver).unwrap();
    let q = sim.add_queue(config).unwrap();
    let span = DiskParams::ncq().capacity_sectors;
    let jobs = [
        FioJob::new(IssuerId(1), Pattern::Write, 4096, 16, 400).region(0, span / 2),
        FioJob::new(IssuerId(2), Pattern::RandRead, 4096, 8, 200)
            .region(0, span)
            .seed(7),
        FioJob::new(IssuerId(3), Pattern::Read, 8192, 4, 200).region(span / 2, span / 4),
    ];
    for (i, job) in jobs.into_iter().enumerate() {
        sim.add_workload_on(q, i % 2, 0, job);
    }
    let report = sim.run().unwrap();
    assert_eq!(report.stats.end_io_calls, 800);

    let events = rings.drain_sorted();
    assert_eq!(rings.dropped(), 0);
    let count = |a: Action| events.iter().filter(|e| e.action == a).count();
    // No bio came back for want of a request: one Q each.
    assert_eq!(count(Action::Queue), 800);
    assert_eq!(report.stats.bios_waited, 0);
    assert!(count(Action::BackMerge) > 0, "the sequential writes merge");
    assert!(count(Action::Insert) > 0 && count(Action::Issue) > 0);
    assert_eq!(
        count(Action::GetRq),
        count(Action::Complete),
        "every request ends"
    );
    // Formatted: one blkparse line per event, its letter in its place.
    for e in &events {
        let line = e.to_string();
        let letter = format!("  {} ", e.action.letter());
        assert!(line.contains(&letter), "{line}");
    }

    let summary = TraceSummary::from_events(&events);
    println!("{summary}");
    assert_eq!(summary.unmatched, 0);
    assert_eq!(summary.q2c.count, 800);
    assert_eq!(
        summary.q2g.count + count(Action::BackMerge) as u64 + count(Action::FrontMerge) as u64,
        800
    );
    assert_eq!(report.issuers.len(), 3);
    for issuer in &report.issuers {
        let sim = issuer.latency;
        let btt = summary.q2c_by_issuer[&issuer.issuer];
        assert_eq!(
            (
                btt.count, btt.min_ns, btt.avg_ns, btt.p50_ns, btt.p99_ns, btt.max_ns
            ),
            (
                sim.count,
                sim.min_ns,
                sim.mean_ns,
                sim.p50_ns,
                sim.p99_ns,
                sim.max_ns
            ),
            "issuer {}",
            issuer.issuer.0
        );
    }
}
