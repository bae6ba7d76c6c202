//! A run's report and the queue's I/O accounting agree. The report counts no requests,
//! merges or sectors of its own: its per-queue figures (`SimReport::queues`, the `queue N:`
//! lines it prints) are the queue's counters (`RequestQueue::stats`). What it does count
//! is per bio, per workload and per issuer, which the queue cannot see; those add up to the
//! queue's figures: every bio either made a request or merged into one, and the bytes the
//! workloads moved are the sectors the queue completed.

use blkmq_core::OpGroup;
use blkmq_sched_deadline::Deadline;
use blkmq_sim::{CardParams, Dd, MmcCard, Sim};

#[test]
fn the_reports_figures_are_the_queues_counters() {
    let card = MmcCard::new(CardParams::default()).expect("the card");
    let (mut sim, queue) =
        Sim::for_model(card, 2, Some(Box::new(Deadline::new()))).expect("the simulation");
    sim.add_workload(queue, Dd::read(0, 8 << 20));
    sim.add_workload_on(queue, 1, 0, Dd::write(1 << 20, 4 << 20));
    let report = sim.run().expect("the run");
    let stats = sim.queue(queue).stats().expect("accounting on");

    // The report's per-queue figures are a reading of the queue's counters, and it prints
    // them as they are.
    assert_eq!(report.queues, [Some(stats)]);
    let line = format!(
        "queue 0: {} requests, {} merges; diskstats {stats}",
        stats.ios(),
        stats.merges()
    );
    let text = report.to_string();
    assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");

    // What the report counts per bio and per workload adds up to them.
    let read: u64 = report.workloads.iter().map(|w| w.bytes_read).sum();
    let written: u64 = report.workloads.iter().map(|w| w.bytes_written).sum();
    assert_eq!(
        (read, written),
        (8 << 20, 4 << 20),
        "every byte moved: {report}"
    );
    assert_eq!(stats.op(OpGroup::Read).sectors * 512, read);
    assert_eq!(stats.op(OpGroup::Write).sectors * 512, written);
    assert_eq!(report.stats.end_io_calls, report.stats.bios_submitted);
    assert!(stats.merges() > 0, "nothing merged: {stats}");
    assert_eq!(stats.ios() + stats.merges(), report.stats.bios_submitted);
    assert_eq!(stats.in_flight_total(), 0);

    // And the latency histograms count each completion once.
    let latency = sim.queue(queue).latency().expect("accounting on");
    for group in OpGroup::ALL {
        assert_eq!(latency.count(group), stats.op(group).ios, "{group:?}");
    }
}
