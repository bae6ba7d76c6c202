//! State dumps: a stall shown as such (a hardware queue marked for a restart, its put-back
//! request on its dispatch list) and cleared by the completion; a request's line; a queue
//! with mq-deadline and queues sharing tags.

#![cfg(not(loom))]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use blkmq_core::*;
use blkmq_sched_deadline::Deadline;

/// Holds up to `cap` requests and turns the next down with [`Status::Resource`].
struct Capped {
    held: Mutex<Vec<Rq>>,
    cap: AtomicUsize,
}

impl Capped {
    fn new(cap: usize) -> Self {
        Self {
            held: Mutex::new(Vec::new()),
            cap: AtomicUsize::new(cap),
        }
    }

    fn take(&self) -> Vec<Rq> {
        std::mem::take(&mut *self.held.lock().unwrap())
    }
}

impl Driver for Capped {
    type Platform = StdPlatform;
    type Payload = ();
    fn init_request(&self, _: RequestInit) {}
    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
        let mut held = self.held.lock().unwrap();
        if held.len() >= self.cap.load(Ordering::SeqCst) {
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        held.push(rq);
        Ok(())
    }
}

fn limits() -> QueueLimits {
    QueueLimits::new(1 << 20)
}

/// The lines of `text` under the first line that starts with `header`, indented under it.
fn section<'a>(text: &'a str, header: &str) -> Vec<&'a str> {
    let mut lines = text.lines().skip_while(|l| !l.starts_with(header));
    assert!(lines.next().is_some(), "no {header:?} in:\n{text}");
    lines.take_while(|l| l.starts_with("    ")).collect()
}

/// The first line of `text` that starts with `start`.
fn line<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no {start:?} in:\n{text}"))
}

/// The driver turns a request down with `Resource` while it holds another: the hardware
/// queue waits for a completion. The dump shows it marked for a restart (in its queue's
/// set, the queue in its host's) with the request put back on its dispatch list; after
/// the completion it shows the mark gone and the request in the driver.
#[test]
fn a_stall_waiting_for_a_restart_shows_and_clears() {
    let platform = StdPlatform::manual();
    let host = Host::new(TagSet::builder(8), platform.clone(), Capped::new(1)).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    queue.submit(Bio::new(Op::Write, 0, 8)).unwrap();
    queue
        .submit(Bio::new(Op::Read, 100, 16).flags(BioFlags::SYNC))
        .unwrap();
    let first = host.driver().take();
    assert_eq!(first.len(), 1);
    assert!(
        platform.take_kicks().is_empty(),
        "waits for the completion, not a kick"
    );

    let stalled = queue.dump(0).to_string();
    assert_eq!(
        line(&stalled, "  restart: "),
        "  restart: marked=true queue_marked_in_host=true kicked=false due=-"
    );
    let put_back = section(&stalled, "  dispatch (1):");
    assert_eq!(put_back.len(), 1, "{stalled}");
    assert!(put_back[0].contains(" state=idle "), "{stalled}");
    assert!(
        put_back[0]
            .ends_with(" op=read sector=100 sectors=16 flags=SYNC bios=1: [100+16 read SYNC]"),
        "{stalled}"
    );
    let in_driver = section(&stalled, "  in driver (1)");
    let tag = first[0].tag();
    assert_eq!(in_driver.len(), 1);
    assert!(in_driver[0].starts_with(&format!("    tag={tag} driver_tag={tag} state=in_flight ")));
    // The host and the queue say the same: slot 0, hardware queue 0.
    let whole = host.dump().to_string();
    assert!(
        line(&whole, "host: ").ends_with(" restart=0 kicked=-"),
        "{whole}"
    );
    assert!(
        line(&whole, "queue ").ends_with(" restart=0 kicked=-"),
        "{whole}"
    );
    assert!(whole.contains(&stalled), "{whole}");

    // The completion reruns the queue: the put-back request goes to the driver.
    queue
        .end_requests(first.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    let cleared = queue.dump(0).to_string();
    assert_eq!(
        line(&cleared, "  restart: "),
        "  restart: marked=false queue_marked_in_host=false kicked=false due=-"
    );
    assert!(section(&cleared, "  dispatch (0):").is_empty(), "{cleared}");
    let second = host.driver().take();
    assert_eq!(second.len(), 1);
    let tag = second[0].tag();
    let in_driver = section(&cleared, "  in driver (1)");
    assert_eq!(in_driver.len(), 1);
    assert!(in_driver[0].starts_with(&format!("    tag={tag} driver_tag={tag} state=in_flight ")));
    let whole = host.dump().to_string();
    assert!(
        line(&whole, "host: ").ends_with(" restart=- kicked=-"),
        "{whole}"
    );

    queue
        .end_requests(second.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    let idle = queue.dump(0).to_string();
    assert!(section(&idle, "  in driver (0), driver tags held not started: 0:").is_empty());
    assert!(
        line(&idle, "  tags: ").ends_with(" busy=0 waiters=0 bitmap=-"),
        "{idle}"
    );
}

/// A request's line: its tag, state, generation and deadline, its I/O and each bio as they
/// are, on a software queue, in the driver, and after part of it ended.
#[test]
fn a_request_dump_shows_its_state_tag_and_bios() {
    let host = Host::new(TagSet::builder(8), StdPlatform::manual(), Capped::new(8)).unwrap();
    let queue = host.add_queue(QueueConfig::new(limits())).unwrap();
    queue.quiesce(); // the two bios merge into one request, held on a software queue
    queue
        .submit(Bio::new(Op::Write, 0, 8).buffer(0x10000))
        .unwrap();
    queue
        .submit(Bio::new(Op::Write, 8, 8).buffer(0x20000))
        .unwrap();
    let queued = queue.dump(0).to_string();
    let ctx = queued
        .lines()
        .find(|l| l.starts_with("  ctx "))
        .unwrap_or_else(|| panic!("no software queue holds it:\n{queued}"));
    assert!(ctx.ends_with(" (1) has_work=true:"), "{queued}");
    let on_ctx = section(&queued, ctx);
    assert_eq!(on_ctx.len(), 1, "{queued}");
    assert!(on_ctx[0].contains(" state=idle "), "{queued}");
    assert!(
        on_ctx[0]
            .ends_with(" op=write sector=0 sectors=16 flags=- bios=2: [0+8 write -] [8+8 write -]"),
        "{queued}"
    );
    queue.unquiesce();

    let mut rq = host.driver().take().pop().unwrap();
    let request = queue.request(&rq).unwrap();
    let (tag, generation, deadline) = (request.tag(), request.generation(), request.deadline_ns());
    assert_eq!(
        queue.dump_request(&rq).unwrap().to_string(),
        format!(
            "tag={tag} driver_tag={tag} hctx=0 state=in_flight gen={generation:#x} \
             deadline={deadline} op=write sector=0 sectors=16 flags=- bios=2: [0+8 write -] [8+8 write -]"
        )
    );
    // The first 6 KiB ended: the first bio is gone, the second advanced.
    assert_eq!(queue.update_request(&mut rq, 6144, Status::Ok), Ok(true));
    assert_eq!(
        queue.dump_request(&rq).unwrap().to_string(),
        format!(
            "tag={tag} driver_tag={tag} hctx=0 state=in_flight gen={generation:#x} \
             deadline={deadline} op=write sector=12 sectors=4 flags=- bios=1: [12+4 write -]"
        )
    );
    let other = host.add_queue(QueueConfig::new(limits())).unwrap();
    assert!(other.dump_request(&rq).is_none());
    queue.end_request(rq, Status::Ok).unwrap();
}

/// With mq-deadline: requests wait in the elevator on scheduler tags without driver tags,
/// then take driver tags in the driver; the dump shows both tag maps and the elevator.
#[test]
fn a_queue_with_mq_deadline() {
    let host = Host::new(TagSet::builder(8), StdPlatform::manual(), Capped::new(8)).unwrap();
    let config = QueueConfig::new(limits())
        .elevator(Box::new(Deadline::new()))
        .nr_requests(16);
    let queue = host.add_queue(config).unwrap();
    queue.quiesce();
    for i in 0..3u64 {
        queue.submit(Bio::new(Op::Read, i * 1000, 8)).unwrap();
    }
    let waiting = queue.dump(0).to_string();
    assert!(queue.dump_queue().to_string().starts_with(&format!(
        "queue {} (slot 0): elevator=mq-deadline usage=3 frozen=false quiesced=true ",
        queue.id()
    )));
    assert_eq!(
        line(&waiting, "  elevator: "),
        "  elevator: mq-deadline has_work=true"
    );
    assert!(line(&waiting, "  tags: ").ends_with(" depth=8 reserved=0 busy=0 waiters=0 bitmap=-"));
    let sched = line(&waiting, "  sched_tags: ");
    assert!(sched.starts_with("  sched_tags: depth=16 reserved=0 busy=3 waiters=0 bitmap="));
    assert!(section(&waiting, "  in driver (0)").is_empty());

    queue.unquiesce();
    let issued = queue.dump(0).to_string();
    assert_eq!(
        line(&issued, "  elevator: "),
        "  elevator: mq-deadline has_work=false"
    );
    assert!(line(&issued, "  tags: ").contains(" busy=3 "), "{issued}");
    assert!(
        line(&issued, "  sched_tags: ").contains(" busy=3 "),
        "{issued}"
    );
    let held = host.driver().take();
    let in_driver = section(&issued, "  in driver (3)");
    assert_eq!(in_driver.len(), 3, "{issued}");
    for rq in &held {
        let request = queue.request(rq).unwrap();
        let (tag, driver_tag) = (request.tag(), request.driver_tag());
        let want = format!("    tag={tag} driver_tag={driver_tag} state=in_flight ");
        assert!(
            in_driver.iter().any(|l| l.starts_with(&want)),
            "{want:?} in {issued}"
        );
        let own = format!("tag={tag} driver_tag={driver_tag} hctx=0 state=in_flight ");
        assert!(
            queue
                .dump_request(rq)
                .unwrap()
                .to_string()
                .starts_with(&own)
        );
    }
    queue
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap();
    let done = queue.dump(0).to_string();
    assert!(
        line(&done, "  sched_tags: ").ends_with(" busy=0 waiters=0 bitmap=-"),
        "{done}"
    );
}

/// Two queues on shared host tags over two hardware queues: each hardware queue's dump
/// shows the one map with every queue's tags, and its own queue's requests in the driver.
#[test]
fn queues_sharing_host_tags() {
    let platform = StdPlatform::manual_with_cpus(2);
    let tags = TagSet::builder(8)
        .hw_queues(2)
        .flags(TagSetFlags::SHARED_HOST_TAGS);
    let host = Host::new(tags, platform.clone(), Capped::new(8)).unwrap();
    let a = host.add_queue(QueueConfig::new(limits())).unwrap();
    let b = host.add_queue(QueueConfig::new(limits())).unwrap();
    platform.pin_current_thread(0);
    a.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    platform.pin_current_thread(1);
    b.submit(Bio::new(Op::Write, 64, 8)).unwrap();
    b.submit(Bio::new(Op::Write, 640, 8)).unwrap();
    let held = host.driver().take();
    assert_eq!(held.len(), 3);

    let mut busy = Vec::new();
    host.set().for_each_busy(|r| {
        busy.push(r.tag);
        true
    });
    busy.sort_unstable();
    let whole = host.dump().to_string();
    assert!(
        line(&whole, "host: ").starts_with("host: in_driver=3 "),
        "{whole}"
    );
    for (queue, mine) in [(&a, 1), (&b, 2)] {
        assert!(whole.contains(&queue.dump_queue().to_string()), "{whole}");
        let mut in_driver = 0;
        for hctx in 0..2 {
            let text = queue.dump(hctx).to_string();
            let tags = line(&text, "  tags: ");
            assert!(
                tags.starts_with("  tags: map 0 (shared host tags) queues=2 "),
                "{text}"
            );
            // The whole map: both queues' tags.
            assert!(tags.contains(" busy=3 "), "{text}");
            let lines = text.lines().filter(|l| l.starts_with("    tag=")).count();
            in_driver += lines;
        }
        assert_eq!(in_driver, mine, "{whole}");
    }
    let text = a.dump(0).to_string();
    let bitmap = line(&text, "  tags: ").rsplit("bitmap=").next().unwrap();
    let listed: Vec<u32> = bitmap
        .split(',')
        .flat_map(|r| match r.split_once('-') {
            Some((x, y)) => (x.parse().unwrap()..=y.parse().unwrap()).collect::<Vec<u32>>(),
            None => vec![r.parse().unwrap()],
        })
        .collect();
    assert_eq!(listed, busy);
    for rq in held {
        let queue = if a.request(&rq).is_some() { &a } else { &b };
        queue.end_request(rq, Status::Ok).unwrap();
    }
}

/// Dumps its hardware queue from inside `queue_rq`, then holds the request.
struct Dumping {
    held: Mutex<Vec<Rq>>,
    dumps: Mutex<Vec<String>>,
}

impl Driver for Dumping {
    type Platform = StdPlatform;
    type Payload = ();
    fn init_request(&self, _: RequestInit) {}
    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
        let text = cx.queue().dump(cx.hctx()).to_string();
        let line = cx.queue().dump_request(&rq).unwrap().to_string();
        self.dumps.lock().unwrap().push(format!("{text}{line}"));
        self.held.lock().unwrap().push(rq);
        Ok(())
    }
}

/// A driver may dump from its `queue_rq`, with and without an elevator: nothing the dump
/// waits for is held there, and the dump shows the run claim held.
#[test]
fn a_dump_from_the_drivers_queue_rq_shows_the_runner() {
    for elevator in [false, true] {
        let driver = Dumping {
            held: Mutex::new(Vec::new()),
            dumps: Mutex::new(Vec::new()),
        };
        let host = Host::new(TagSet::builder(8), StdPlatform::manual(), driver).unwrap();
        let mut config = QueueConfig::new(limits());
        if elevator {
            config = config.elevator(Box::new(Deadline::new()));
        }
        let queue = host.add_queue(config).unwrap();
        queue.submit(Bio::new(Op::Read, 8, 8)).unwrap();
        let dumps = std::mem::take(&mut *host.driver().dumps.lock().unwrap());
        assert_eq!(dumps.len(), 1);
        let text = &dumps[0];
        assert!(line(text, "  state: ").contains(" running=true "), "{text}");
        let own = text.lines().last().unwrap();
        assert!(own.contains(" state=in_flight "), "{text}");
        assert!(
            own.ends_with(" op=read sector=8 sectors=8 flags=- bios=1: [8+8 read -]"),
            "{text}"
        );
        let held = std::mem::take(&mut *host.driver().held.lock().unwrap());
        queue
            .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
            .unwrap();
        let after = queue.dump(0).to_string();
        assert!(
            line(&after, "  state: ").contains(" running=false "),
            "{after}"
        );
        assert!(!after.contains("runner's batch"), "{after}");
    }
}
