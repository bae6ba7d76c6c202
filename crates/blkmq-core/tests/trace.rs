//! Trace events: the exact events of a bio that is split, merged, requeued and completed,
//! the `blkparse` lines and `btt` table of that trace, and the ring tracer against a model.

#![cfg(not(loom))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use blkmq_core::testing::Hold;
use blkmq_core::*;
use proptest::prelude::*;

/// One CPU, a clock the test sets, kicks ignored.
struct Clock(AtomicU64);

impl Platform for Clock {
    type RawMutex = spin::mutex::SpinMutex<()>;
    fn nr_cpus(&self) -> usize {
        1
    }
    fn current_cpu(&self) -> usize {
        0
    }
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn kick(&self, _hctx: usize) {}
}

type Queue = Arc<RequestQueue<Hold<Clock>>>;

fn set_time(queue: &Queue, ns: u64) {
    queue.platform().0.store(ns, Ordering::Relaxed);
}

/// A queue of 8 tags, requests of 16 sectors at most, traced into a ring of 64 events.
fn traced() -> (Arc<Host<Hold<Clock>>>, Queue, Arc<RingTracer>) {
    let rings = Arc::new(RingTracer::new(1, 64));
    let host = Host::new(TagSet::builder(8), Clock(AtomicU64::new(0)), Hold::new()).unwrap();
    let limits = QueueLimits {
        max_sectors: 16,
        ..QueueLimits::new(1024)
    };
    let queue = host
        .add_queue(QueueConfig::new(limits).tracer(rings.clone()))
        .unwrap();
    (host, queue, rings)
}

/// An event's fields that the test names: (action, time, sector, sectors, tag, status).
type Seen = (char, u64, u64, u32, u32, Status);

fn seen(events: &[TraceEvent]) -> Vec<Seen> {
    events
        .iter()
        .map(|e| {
            let c = e.action.letter();
            (c, e.time_ns, e.sector, e.sectors, e.tag, e.status)
        })
        .collect()
}

#[test]
fn a_split_merged_requeued_bio_has_blktraces_events_in_order() {
    let (host, queue, rings) = traced();
    let mut plug = Plug::new();
    set_time(&queue, 100);
    // 24 sectors, split to 16 + 8: two requests in the plug.
    let whole = Bio::new(Op::Write, 0, 24)
        .issuer(IssuerId(3))
        .flags(BioFlags::SYNC);
    queue.submit_plugged(&mut plug, whole).unwrap();
    set_time(&queue, 200);
    // Joins the second piece's request at its back.
    queue
        .submit_plugged(&mut plug, Bio::new(Op::Write, 24, 8).issuer(IssuerId(4)))
        .unwrap();
    set_time(&queue, 300);
    plug.flush();
    let mut held = host.driver().take();
    assert_eq!(held.len(), 2);
    let (a, b) = (held[0].tag(), held[1].tag());
    assert_ne!(a, b);
    // The driver gives the second back; the queue issues it again.
    set_time(&queue, 400);
    let second = held.pop().unwrap();
    queue.requeue_request(second, true).unwrap();
    held.extend(host.driver().take());
    set_time(&queue, 500);
    queue.end_request(held.remove(0), Status::Ok).unwrap();
    set_time(&queue, 600);
    queue.end_request(held.remove(0), Status::Medium).unwrap();

    let events = rings.drain_sorted();
    let none = NO_TAG;
    let ok = Status::Ok;
    assert_eq!(
        seen(&events),
        [
            ('Q', 100, 0, 24, none, ok),
            ('X', 100, 0, 16, none, ok),
            ('G', 100, 0, 16, a, ok),
            ('P', 100, 0, 0, none, ok),
            ('G', 100, 16, 8, b, ok),
            ('Q', 200, 24, 8, none, ok),
            ('M', 200, 24, 8, b, ok),
            ('U', 300, 0, 2, none, ok),
            ('D', 300, 0, 16, a, ok),
            ('D', 300, 16, 16, b, ok),
            ('R', 400, 16, 16, b, ok),
            ('I', 400, 16, 16, b, ok),
            ('D', 400, 16, 16, b, ok),
            ('C', 500, 0, 16, a, ok),
            ('C', 600, 16, 16, b, Status::Medium),
        ]
    );
    // Every event of the one CPU, numbered in order, of this queue.
    assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64));
    assert!(events.iter().all(|e| e.queue == queue.id() && e.cpu == 0));
    // Request events name hardware queue 0; bio and plug events none.
    for e in &events {
        let expect = if e.action.is_request() { 0 } else { NO_HCTX };
        assert_eq!(e.hctx, expect, "{e}");
    }
    // Issuers: the bio's own, a request's first bio's.
    let issuers: Vec<u32> = events.iter().map(|e| e.issuer.0).collect();
    assert_eq!(issuers, [3, 3, 3, 0, 3, 4, 4, 0, 3, 3, 3, 3, 3, 3, 3]);
    assert_eq!(events[0].rwbs().as_str(), "WS");
    assert_eq!(events[5].rwbs().as_str(), "W");
    assert_eq!(rings.dropped(), 0);

    let lines: Vec<String> = events.iter().map(|e| e.to_string()).collect();
    let id = queue.id();
    assert_eq!(
        lines[0],
        format!("{id:>3},-    0        0     0.000000100     3  Q  WS 0 + 24")
    );
    assert_eq!(
        lines[1],
        format!("{id:>3},-    0        1     0.000000100     3  X  WS 0 / 16")
    );
    assert_eq!(
        lines[3],
        format!("{id:>3},-    0        3     0.000000100     0  P   R ")
    );
    assert_eq!(
        lines[6],
        format!("{id:>3},0    0        6     0.000000200     4  M   W 24 + 8 [tag {b}]")
    );
    assert_eq!(
        lines[7],
        format!("{id:>3},-    0        7     0.000000300     0  U   R 2")
    );
    assert_eq!(
        lines[14],
        format!("{id:>3},0    0       14     0.000000600     3  C  WS 16 + 16 [tag {b}] medium")
    );

    // btt: the first piece waited 0 to its G, 200 for its D, 200 more to its C; the second
    // piece and the merged bio 300 and 100 from their own Qs to the C at 600.
    let summary = TraceSummary::from_events(&events);
    assert_eq!((summary.q2g.count, summary.q2g.max_ns), (2, 0));
    assert_eq!((summary.g2i.count, summary.g2i.min_ns), (1, 300));
    assert_eq!((summary.i2d.count, summary.i2d.min_ns), (1, 0));
    let d2c = summary.d2c;
    assert_eq!((d2c.count, d2c.min_ns, d2c.max_ns), (2, 200, 200));
    let q2c = summary.q2c;
    assert_eq!((q2c.count, q2c.min_ns, q2c.max_ns), (3, 400, 500));
    assert_eq!(summary.q2c_by_issuer[&IssuerId(4)].max_ns, 400);
    assert_eq!(summary.unmatched, 0);
}

/// A tracer that keeps every event it is told, one by one, in a list.
#[derive(Default)]
struct Kept(std::sync::Mutex<Vec<TraceEvent>>);

impl Tracer for Kept {
    fn event(&self, event: &TraceEvent) {
        self.0.lock().unwrap().push(*event);
    }
}

/// A queue of 8 tags traced by `tracer`, with the test's clock.
fn traced_by(tracer: Arc<dyn Tracer>) -> (Arc<Host<Hold<Clock>>>, Queue) {
    let host = Host::new(TagSet::builder(8), Clock(AtomicU64::new(0)), Hold::new()).unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(1024)).tracer(tracer))
        .unwrap();
    (host, queue)
}

/// Bios submitted one by one, without a plug: one issued at once, one queued behind a
/// stopped hardware queue and one merged into it there, one turned back by a frozen queue.
fn unplugged_bios(host: &Host<Hold<Clock>>, queue: &Queue) {
    set_time(queue, 100);
    queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    set_time(queue, 200);
    queue.stop_hw_queue(0);
    queue
        .submit(Bio::new(Op::Read, 64, 8).issuer(IssuerId(5)))
        .unwrap();
    set_time(queue, 300);
    queue.submit(Bio::new(Op::Read, 72, 8)).unwrap();
    set_time(queue, 400);
    queue.start_hw_queue(0);
    set_time(queue, 500);
    queue.freeze_start();
    assert!(queue.submit(Bio::new(Op::Write, 128, 8)).is_err());
    queue.unfreeze();
    set_time(queue, 600);
    let held = host.driver().take();
    assert_eq!(held.len(), 2);
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
}

#[test]
fn a_bio_issued_at_once_has_its_q_g_and_d_and_the_others_theirs() {
    let rings = Arc::new(RingTracer::new(1, 64));
    let (host, queue) = traced_by(rings.clone());
    unplugged_bios(&host, &queue);
    let from_rings = rings.drain_sorted();
    let kept = Arc::new(Kept::default());
    let (host, queue) = traced_by(kept.clone());
    unplugged_bios(&host, &queue);
    let told = kept.0.lock().unwrap().clone();

    for events in [&from_rings, &told] {
        let (a, b) = (events[1].tag, events[4].tag);
        let none = NO_TAG;
        let ok = Status::Ok;
        assert_eq!(
            seen(events),
            [
                ('Q', 100, 0, 8, none, ok),
                ('G', 100, 0, 8, a, ok),
                ('D', 100, 0, 8, a, ok),
                ('Q', 200, 64, 8, none, ok),
                ('G', 200, 64, 8, b, ok),
                ('I', 200, 64, 8, b, ok),
                ('Q', 300, 72, 8, none, ok),
                ('M', 300, 72, 8, b, ok),
                ('D', 400, 64, 16, b, ok),
                ('Q', 500, 128, 8, none, ok),
                ('C', 600, 0, 8, a, ok),
                ('C', 600, 64, 16, b, ok),
            ]
        );
        assert_ne!(a, b);
        for e in events.iter() {
            let expect = if e.action.is_request() { 0 } else { NO_HCTX };
            assert_eq!(e.hctx, expect, "{e}");
            assert_eq!((e.queue, e.cpu), (queue_id(events), 0), "{e}");
        }
        let issuers: Vec<u32> = events.iter().map(|e| e.issuer.0).collect();
        assert_eq!(issuers, [0, 0, 0, 5, 5, 5, 0, 0, 5, 0, 0, 5]);
        let ops: String = events
            .iter()
            .map(|e| e.rwbs().as_str().to_owned())
            .collect();
        assert_eq!(ops, "RRRRRRRRRWRR");
    }
    // The ring numbers its events in order.
    assert!(
        from_rings
            .iter()
            .enumerate()
            .all(|(i, e)| e.seq == i as u64)
    );
    assert_eq!(rings.dropped(), 0);
}

/// The queue every event names (they all name the same one).
fn queue_id(events: &[TraceEvent]) -> u32 {
    events[0].queue
}

/// What the ring tracer is asked to do in the model test.
#[derive(Clone, Debug)]
enum RingOp {
    /// An event on a CPU (beyond the rings: wraps around them).
    Event { cpu: u32 },
    /// A direct issue's Q, G and D on a CPU.
    DirectIssue { cpu: u32 },
    /// Drain everything.
    Drain,
}

fn ring_op() -> impl Strategy<Value = RingOp> {
    prop_oneof![
        4 => (0u32..4).prop_map(|cpu| RingOp::Event { cpu }),
        2 => (0u32..4).prop_map(|cpu| RingOp::DirectIssue { cpu }),
        1 => Just(RingOp::Drain),
    ]
}

proptest! {
    /// The ring tracer against a model: per ring a queue of bounded length of slots (an
    /// event, or a direct issue's three), what finds it full counted as dropped events, each
    /// kept event numbered by its ring in order as it is taken, a drain giving ring 0's
    /// events first, each ring's oldest first.
    #[test]
    fn ring_tracer_matches_its_model(
        nr_rings in 1usize..4,
        capacity in 1usize..6,
        ops in proptest::collection::vec(ring_op(), 0..80),
    ) {
        let rings = RingTracer::new(nr_rings, capacity);
        let room = capacity.max(2).next_power_of_two();
        prop_assert_eq!(rings.capacity(), room);
        // Per ring its slots, each the (cpu, time, letters) of what it holds.
        let mut model: Vec<std::collections::VecDeque<(u32, u64, &str)>> =
            vec![Default::default(); nr_rings];
        let mut next_seq = vec![0u64; nr_rings];
        let mut dropped = 0u64;
        for (time, op) in ops.into_iter().enumerate() {
            let time = time as u64;
            match op {
                RingOp::Event { cpu } | RingOp::DirectIssue { cpu } => {
                    let letters = if let RingOp::Event { .. } = op {
                        rings.event(&TraceEvent { cpu, ..TraceEvent::new(Action::Queue, time) });
                        "Q"
                    } else {
                        let issue = TraceEvent {
                            cpu,
                            hctx: 0,
                            tag: 2,
                            ..TraceEvent::new(Action::Issue, time)
                        };
                        rings.direct_issue(&issue);
                        "QGD"
                    };
                    let r = cpu as usize % nr_rings;
                    if model[r].len() == room {
                        dropped += letters.len() as u64;
                    } else {
                        model[r].push_back((cpu, time, letters));
                    }
                }
                RingOp::Drain => {
                    let mut got = Vec::new();
                    let n = rings.drain(|e| got.push((e.cpu, e.seq, e.time_ns, e.action.letter())));
                    let mut want = Vec::new();
                    for (r, slots) in model.iter_mut().enumerate() {
                        for (cpu, time, letters) in slots.drain(..) {
                            for letter in letters.chars() {
                                want.push((cpu, next_seq[r], time, letter));
                                next_seq[r] += 1;
                            }
                        }
                    }
                    prop_assert_eq!(n, want.len());
                    prop_assert_eq!(got, want);
                }
            }
            prop_assert_eq!(rings.dropped(), dropped);
        }
    }
}
