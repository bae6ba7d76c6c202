//! The driver on `StdPlatform`: what it stores, what it refuses, and its interrupt on a
//! thread of its own under submitters on several.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use blkmq_core::{Bio, Host, Op, QueueConfig, QueueLimits, RequestQueue, StdPlatform, TagSet};
use blkmq_example_driver::{MemDisk, Ticket};

type Disk = MemDisk<StdPlatform>;

fn world(
    platform: StdPlatform,
    tags: usize,
    sectors: usize,
    depth: usize,
) -> (Arc<Host<Disk>>, Arc<RequestQueue<Disk>>) {
    let host = Host::new(
        TagSet::builder(tags),
        platform,
        MemDisk::new(sectors, depth),
    )
    .unwrap();
    let queue = host
        .add_queue(QueueConfig::new(QueueLimits::new(sectors as u64)))
        .unwrap();
    (host, queue)
}

/// Writes land on the medium when issued and end when the interrupt is served; reads
/// leave it as it is; a device with fewer commands than tags takes the rest as room frees.
#[test]
fn writes_land_and_end_on_the_interrupt() {
    let (host, queue) = world(StdPlatform::with_cpus(1), 8, 256, 2);
    let tickets: Vec<_> = (0..4u64)
        .map(|i| {
            let ticket = Ticket::new();
            let bio = ticket.bio(Bio::new(Op::Write, i * 16, 16).payload(100 + i));
            queue.submit(bio).unwrap();
            ticket
        })
        .collect();
    let read = Ticket::new();
    queue
        .submit(read.bio(Bio::new(Op::Read, 0, 8).payload(7)))
        .unwrap();
    // Two commands on the device; the other three wait for room.
    assert_eq!((host.driver().in_flight(), host.driver().issued()), (2, 2));
    let mut served = 0;
    while served < 5 {
        let now = host.driver().interrupt(&queue);
        assert!(now > 0, "requests waiting and nothing on the device");
        served += now;
    }
    assert_eq!(served, 5);
    for (i, ticket) in tickets.iter().enumerate() {
        assert_eq!((ticket.ended(), ticket.ended_ok()), (1, true));
        for sector in i as u64 * 16..(i as u64 + 1) * 16 {
            assert_eq!(host.driver().read_sector(sector), Some(100 + i as u64));
        }
    }
    assert_eq!((read.ended(), read.ended_ok()), (1, true));
    assert_eq!(host.driver().read_sector(64), Some(0));
    assert_eq!(
        (host.in_driver(), queue.usage(), host.set().busy()),
        (0, 0, 0)
    );
}

/// Four submitters on four CPUs and an interrupt thread serving completions as they come:
/// every bio ends once and with success, and nothing is left in flight.
#[test]
fn an_interrupt_thread_under_submitters() {
    const PER_SUBMITTER: u64 = 500;
    let platform = StdPlatform::with_cpus(4);
    let (host, queue) = world(platform.clone(), 16, 1 << 16, 4);
    let stop = Arc::new(AtomicBool::new(false));
    let irq = {
        let (host, queue, stop, platform) =
            (host.clone(), queue.clone(), stop.clone(), platform.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                // Kicks are the platform's deferred runs: served here, as a worker would.
                if !platform.take_kicks().is_empty() {
                    host.run_kicked();
                }
                if host.driver().interrupt(&queue) == 0 {
                    thread::yield_now();
                }
            }
        })
    };
    let submitters: Vec<_> = (0..4u64)
        .map(|cpu| {
            let (queue, platform) = (queue.clone(), platform.clone());
            thread::spawn(move || {
                platform.pin_current_thread(cpu as usize);
                (0..PER_SUBMITTER)
                    .map(|i| {
                        let ticket = Ticket::new();
                        // A gap after each: no two merge, so each is one command.
                        let sector = (cpu * PER_SUBMITTER + i) * 16;
                        let bio = ticket.bio(Bio::new(Op::Write, sector, 8).payload(sector));
                        // More submitters than tags: wait for one when none is free.
                        queue.submit_wait(bio);
                        (sector, ticket)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let tickets: Vec<_> = submitters
        .into_iter()
        .flat_map(|s| s.join().unwrap())
        .collect();
    while tickets.iter().any(|(_, t)| t.ended() == 0) {
        thread::yield_now();
    }
    stop.store(true, Ordering::Release);
    irq.join().unwrap();
    for (sector, ticket) in &tickets {
        assert_eq!((ticket.ended(), ticket.ended_ok()), (1, true));
        assert_eq!(host.driver().read_sector(*sector), Some(*sector));
    }
    assert_eq!(host.driver().issued(), 4 * PER_SUBMITTER);
    assert_eq!((host.driver().in_flight(), host.driver().pending()), (0, 0));
    assert_eq!(
        (host.in_driver(), queue.usage(), host.set().busy()),
        (0, 0, 0)
    );
}

/// A request reaching past the medium ends with an error, having moved nothing.
#[test]
fn past_the_medium_is_an_error() {
    let (host, queue) = world(StdPlatform::with_cpus(1), 4, 64, 4);
    // The queue's own limit is larger than the medium: the device is the one to refuse.
    let queue_over = host
        .add_queue(QueueConfig::new(QueueLimits::new(128)))
        .unwrap();
    let ticket = Ticket::new();
    queue_over
        .submit(ticket.bio(Bio::new(Op::Write, 60, 8).payload(5)))
        .unwrap();
    assert_eq!(host.driver().interrupt(&queue_over), 1);
    assert_eq!((ticket.ended(), ticket.ended_ok()), (1, false));
    assert_eq!(host.driver().read_sector(60), Some(0));
    assert_eq!(
        (queue.usage(), queue_over.usage(), host.set().busy()),
        (0, 0, 0)
    );
}
