//! Misuse is an error value and loses nothing: a request token given to a queue it does not
//! belong to (another request queue's, another host's, another tag set's) comes back to the
//! caller with [`TagError::ForeignRequest`], and nothing changes. The request's bios still
//! end when its own queue ends it, no tag, budget or count moves, and its own queue can
//! still end, requeue or free it.
//!
//! Each entry point that consumes a token has its case: [`RequestQueue::end_request`],
//! [`RequestQueue::end_requests`], [`RequestQueue::requeue_request`], [`QueueTags::free`]
//! and [`QueueTags::complete`]; and [`ElvCx::merge_requests`], which hands back the request
//! it could not merge.

#![cfg(not(loom))]

#[path = "common/fifo.rs"]
mod fifo;

use std::sync::atomic::{AtomicIsize, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use blkmq_core::*;
use fifo::Fifo;

// ----- bio ends -----

/// Every bio end of every test: (`private`, status), in the order they ended.
static ENDS: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());
static NEXT_TEST: AtomicU32 = AtomicU32::new(1);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn record(bio: Bio, status: Status) {
    lock(&ENDS).push((bio.private, status));
}

/// One test's bios: each ends into [`ENDS`] under the test's own key.
struct Bios(u64);

impl Bios {
    fn new() -> Self {
        Self(u64::from(NEXT_TEST.fetch_add(1, Ordering::Relaxed)) << 32)
    }

    /// Bio number `n`: a read of 8 sectors at `8 * n`.
    fn read(&self, n: u32) -> Bio {
        let mut bio = Bio::new(Op::Read, 8 * u64::from(n), 8).end_io(record);
        bio.private = self.0 | u64::from(n);
        bio
    }

    /// How bio number `n` ended, each time it did.
    fn ends(&self, n: u32) -> Vec<Status> {
        let key = self.0 | u64::from(n);
        lock(&ENDS)
            .iter()
            .filter(|(private, _)| *private == key)
            .map(|&(_, status)| status)
            .collect()
    }
}

// ----- the driver -----

/// Holds every request it is given, and counts its completion hooks and budgets.
#[derive(Default)]
struct Counting {
    held: Mutex<Vec<Rq>>,
    completes: AtomicUsize,
    /// Budgets taken less budgets put back.
    budgets: AtomicIsize,
}

impl Counting {
    fn take(&self) -> Vec<Rq> {
        std::mem::take(&mut *lock(&self.held))
    }

    fn one(&self) -> Rq {
        let mut held = self.take();
        assert_eq!(held.len(), 1, "one request in the driver");
        held.pop().unwrap()
    }

    fn completes(&self) -> usize {
        self.completes.load(Ordering::SeqCst)
    }

    fn budgets(&self) -> isize {
        self.budgets.load(Ordering::SeqCst)
    }
}

impl Driver for Counting {
    type Platform = StdPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        lock(&self.held).push(rq);
        Ok(())
    }

    fn get_budget(&self, _: &HctxCx<'_, Self>) -> bool {
        self.budgets.fetch_add(1, Ordering::SeqCst);
        true
    }

    fn put_budget(&self, _: &HctxCx<'_, Self>) {
        self.budgets.fetch_sub(1, Ordering::SeqCst);
    }

    fn complete(&self, _: &HctxCx<'_, Self>, _: &Request<()>) {
        self.completes.fetch_add(1, Ordering::SeqCst);
    }
}

fn host() -> Arc<Host<Counting>> {
    Host::new(TagSet::builder(8), StdPlatform::new(), Counting::default()).unwrap()
}

fn plain(host: &Arc<Host<Counting>>) -> Arc<RequestQueue<Counting>> {
    host.add_queue(QueueConfig::new(QueueLimits::new(1024)))
        .unwrap()
}

fn elevated(host: &Arc<Host<Counting>>) -> Arc<RequestQueue<Counting>> {
    host.add_queue(QueueConfig::new(QueueLimits::new(1024)).elevator(Box::new(Fifo::new())))
        .unwrap()
}

/// What a refused call must leave as it was: the host's and the queues' counts, the
/// driver's hooks and budgets.
#[derive(Debug, PartialEq, Eq)]
struct Counts {
    in_driver: usize,
    busy: usize,
    usage: Vec<usize>,
    requeued: Vec<usize>,
    completes: usize,
    budgets: isize,
}

fn counts(host: &Host<Counting>, queues: &[&RequestQueue<Counting>]) -> Counts {
    Counts {
        in_driver: host.in_driver(),
        busy: host.set().busy(),
        usage: queues.iter().map(|q| q.usage()).collect(),
        requeued: queues.iter().map(|q| q.requeued()).collect(),
        completes: host.driver().completes(),
        budgets: host.driver().budgets(),
    }
}

// ----- end_request -----

/// Ends `rq` on `wrong` (which must refuse it) and then on `right`; checks that the refusal
/// changed nothing and that the bio ends once, with the status `right` gave.
fn end_on_wrong_then_right(
    hosts: (&Host<Counting>, &Host<Counting>),
    wrong: &RequestQueue<Counting>,
    right: &RequestQueue<Counting>,
    bios: &Bios,
    n: u32,
    rq: Rq,
) {
    let before = (counts(hosts.0, &[wrong]), counts(hosts.1, &[right]));
    let misused = wrong.end_request(rq, Status::Ok).unwrap_err();
    assert_eq!(misused.error, TagError::ForeignRequest);
    let after = (counts(hosts.0, &[wrong]), counts(hosts.1, &[right]));
    assert_eq!(before, after, "the refused end changed nothing");
    assert!(bios.ends(n).is_empty(), "the refused end ended no bio");
    assert_eq!(right.io(&misused.rq).unwrap().sector(), 8 * u64::from(n));

    right.end_request(misused.rq, Status::Medium).unwrap();
    assert_eq!(bios.ends(n), [Status::Medium], "its own queue ended it");
}

#[test]
fn end_request_of_another_queue_comes_back() {
    let bios = Bios::new();
    let host = host();
    let (a, b) = (plain(&host), plain(&host));
    a.submit(bios.read(0)).unwrap();
    let rq = host.driver().one();
    end_on_wrong_then_right((&host, &host), &b, &a, &bios, 0, rq);
    assert_eq!(
        counts(&host, &[&a, &b]),
        Counts {
            in_driver: 0,
            busy: 0,
            usage: vec![0, 0],
            requeued: vec![0, 0],
            completes: 1,
            budgets: 0,
        }
    );
}

#[test]
fn end_request_of_another_host_comes_back() {
    let bios = Bios::new();
    let (one, two) = (host(), host());
    let (a, b) = (plain(&one), plain(&two));
    a.submit(bios.read(0)).unwrap();
    b.submit(bios.read(1)).unwrap(); // the same tag on the other host
    let theirs = one.driver().one();
    let ours = two.driver().one();
    assert_eq!(theirs.tag(), ours.tag());
    end_on_wrong_then_right((&two, &one), &b, &a, &bios, 0, theirs);
    assert!(
        bios.ends(1).is_empty(),
        "the other host's request is untouched"
    );
    b.end_request(ours, Status::Ok).unwrap();
    assert_eq!(bios.ends(1), [Status::Ok]);
    assert_eq!((one.in_driver(), two.in_driver()), (0, 0));
    assert_eq!((one.set().busy(), two.set().busy()), (0, 0));
}

#[test]
fn end_request_across_scheduler_tags_comes_back() {
    let bios = Bios::new();
    let host = host();
    let (a, b) = (elevated(&host), plain(&host));
    // A scheduler request given to a queue without scheduler tags.
    a.submit(bios.read(0)).unwrap();
    let rq = host.driver().one();
    end_on_wrong_then_right((&host, &host), &b, &a, &bios, 0, rq);
    // A driver-tag request given to a queue with scheduler tags.
    b.submit(bios.read(1)).unwrap();
    let rq = host.driver().one();
    end_on_wrong_then_right((&host, &host), &a, &b, &bios, 1, rq);
    // Between two queues with scheduler tags of their own.
    let c = elevated(&host);
    c.submit(bios.read(2)).unwrap();
    let rq = host.driver().one();
    end_on_wrong_then_right((&host, &host), &a, &c, &bios, 2, rq);
    assert_eq!(
        counts(&host, &[&a, &b, &c]),
        Counts {
            in_driver: 0,
            busy: 0,
            usage: vec![0, 0, 0],
            requeued: vec![0, 0, 0],
            completes: 3,
            budgets: 0,
        }
    );
}

// ----- end_requests -----

#[test]
fn end_requests_stops_at_a_refused_request_and_hands_back_the_rest() {
    let bios = Bios::new();
    let host = host();
    let (a, b) = (plain(&host), plain(&host));
    a.submit(bios.read(0)).unwrap();
    b.submit(bios.read(1)).unwrap();
    a.submit(bios.read(2)).unwrap();
    let held = host.driver().take();
    assert_eq!(held.len(), 3);
    let statuses = [Status::Ok, Status::Timeout, Status::IoErr];

    let unended = a.end_requests(held.into_iter().zip(statuses)).unwrap_err();
    assert_eq!(unended.misused.error, TagError::ForeignRequest);
    assert_eq!(
        unended.status,
        Status::Timeout,
        "the refused one's status comes back"
    );
    assert_eq!(bios.ends(0), [Status::Ok], "the one before it ended");
    assert!(bios.ends(1).is_empty() && bios.ends(2).is_empty());
    assert_eq!(
        counts(&host, &[&a, &b]),
        Counts {
            in_driver: 2,
            busy: 2,
            usage: vec![1, 1],
            requeued: vec![0, 0],
            completes: 1,
            budgets: 2,
        },
        "only the first request ended"
    );
    let rest: Vec<(Rq, Status)> = unended.rest.collect();
    assert_eq!(rest.len(), 1);
    assert_eq!(
        a.io(&rest[0].0).unwrap().sector(),
        16,
        "the rest is untouched"
    );

    b.end_request(unended.misused.rq, unended.status).unwrap();
    a.end_requests(rest).unwrap();
    assert_eq!(bios.ends(1), [Status::Timeout]);
    assert_eq!(bios.ends(2), [Status::IoErr]);
    assert_eq!(
        counts(&host, &[&a, &b]),
        Counts {
            in_driver: 0,
            busy: 0,
            usage: vec![0, 0],
            requeued: vec![0, 0],
            completes: 3,
            budgets: 0,
        }
    );
}

#[test]
fn end_requests_refusing_the_first_request_ends_nothing() {
    let bios = Bios::new();
    let host = host();
    let (a, b) = (plain(&host), plain(&host));
    b.submit(bios.read(0)).unwrap();
    a.submit(bios.read(1)).unwrap();
    let held = host.driver().take();
    let before = counts(&host, &[&a, &b]);
    let unended = a
        .end_requests(held.into_iter().map(|rq| (rq, Status::Ok)))
        .unwrap_err();
    assert_eq!(
        counts(&host, &[&a, &b]),
        before,
        "nothing ended, nothing moved"
    );
    assert!(bios.ends(0).is_empty() && bios.ends(1).is_empty());
    b.end_request(unended.misused.rq, Status::Ok).unwrap();
    a.end_requests(unended.rest).unwrap();
    assert_eq!(
        (bios.ends(0), bios.ends(1)),
        (vec![Status::Ok], vec![Status::Ok])
    );
    assert_eq!((host.in_driver(), host.set().busy()), (0, 0));
}

// ----- requeue_request -----

#[test]
fn requeue_request_of_another_queue_comes_back() {
    for kick in [false, true] {
        let bios = Bios::new();
        let host = host();
        let (a, b) = (elevated(&host), plain(&host));
        a.submit(bios.read(0)).unwrap();
        let rq = host.driver().one();
        let before = counts(&host, &[&a, &b]);
        let misused = b.requeue_request(rq, kick).unwrap_err();
        assert_eq!(misused.error, TagError::ForeignRequest);
        assert_eq!(
            counts(&host, &[&a, &b]),
            before,
            "the refused requeue changed nothing"
        );
        assert!(host.driver().take().is_empty(), "nothing was issued again");

        // Its own queue can still requeue it, and then end it.
        a.requeue_request(misused.rq, true).unwrap();
        let rq = host.driver().one();
        assert!(bios.ends(0).is_empty());
        a.end_request(rq, Status::Ok).unwrap();
        assert_eq!(bios.ends(0), [Status::Ok]);
        assert_eq!(
            counts(&host, &[&a, &b]),
            Counts {
                in_driver: 0,
                busy: 0,
                usage: vec![0, 0],
                requeued: vec![0, 0],
                completes: 1,
                budgets: 0,
            }
        );
    }
}

// ----- QueueTags::free and QueueTags::complete -----

/// A refused `free` or `complete` (`status`) of `rq`, which belongs to `right` and carries
/// bio `n`, then the right one; checks nothing changed in between.
fn tags_wrong_then_right(
    sets: (&TagSet<(), StdPlatform>, &TagSet<(), StdPlatform>),
    wrong: &QueueTags<(), StdPlatform>,
    right: &QueueTags<(), StdPlatform>,
    bios: &Bios,
    n: u32,
    rq: Rq,
    status: Option<Status>,
) {
    let snapshot = || {
        (
            sets.0.busy(),
            sets.1.busy(),
            wrong.in_flight(0),
            right.in_flight(0),
            right.is_active(0),
        )
    };
    let before = snapshot();
    let misused = match status {
        Some(status) => wrong.complete(rq, status),
        None => wrong.free(rq),
    }
    .unwrap_err();
    assert_eq!(misused.error, TagError::ForeignRequest);
    assert_eq!(snapshot(), before, "the refused call changed nothing");
    assert!(bios.ends(n).is_empty(), "the refused call ended no bio");
    assert_eq!(
        right.io(&misused.rq).unwrap().nr_bios(),
        1,
        "the bio is still on it"
    );

    match status {
        Some(status) => right.complete(misused.rq, status).unwrap(),
        None => right.free(misused.rq).unwrap(),
    }
    // A bio left on a freed request fails.
    assert_eq!(bios.ends(n), [status.unwrap_or(Status::IoErr)]);
}

fn set() -> Arc<TagSet<(), StdPlatform>> {
    TagSet::builder(8)
        .build(StdPlatform::new(), |_| ())
        .unwrap()
}

fn with_bio(tags: &QueueTags<(), StdPlatform>, bio: Bio) -> Rq {
    let mut rq = tags.alloc(&Alloc::new(0, 0)).unwrap();
    tags.set_bio(&mut rq, bio).unwrap();
    rq
}

#[test]
fn tags_free_and_complete_of_another_queue_come_back() {
    for status in [None, Some(Status::Ok), Some(Status::Timeout)] {
        let bios = Bios::new();
        let set = set();
        let (a, b) = (set.attach().unwrap(), set.attach().unwrap());
        // Shared: `a`'s tag counts towards its fair share, which must not move.
        let rq = with_bio(&a, bios.read(0));
        assert_eq!(a.in_flight(0), 1);
        tags_wrong_then_right((&set, &set), &b, &a, &bios, 0, rq, status);
        assert_eq!((set.busy(), a.in_flight(0)), (0, 0));
    }
}

#[test]
fn tags_free_and_complete_of_another_set_come_back() {
    for status in [None, Some(Status::Ok)] {
        let bios = Bios::new();
        let (one, two) = (set(), set());
        let (a, b) = (one.attach().unwrap(), two.attach().unwrap());
        let theirs = with_bio(&a, bios.read(0));
        let ours = with_bio(&b, bios.read(1)); // the same tag in the other set
        assert_eq!(theirs.tag(), ours.tag());
        tags_wrong_then_right((&two, &one), &b, &a, &bios, 0, theirs, status);
        assert!(
            bios.ends(1).is_empty(),
            "the other set's request is untouched"
        );
        b.free(ours).unwrap();
        assert_eq!((one.busy(), two.busy()), (0, 0));
    }
}

#[test]
fn tags_free_and_complete_across_scheduler_tags_come_back() {
    for status in [None, Some(Status::Ok)] {
        let bios = Bios::new();
        let set = set();
        let (mut a, b) = (set.attach().unwrap(), set.attach().unwrap());
        a.attach_scheduler(None, |_| ()).unwrap();
        let mut rq = with_bio(&a, bios.read(0));
        assert!(a.get_driver_tag(&mut rq).unwrap());
        tags_wrong_then_right((&set, &set), &b, &a, &bios, 0, rq, status);
        // And the other way: a driver-tag request given to the queue with scheduler tags.
        let rq = with_bio(&b, bios.read(1));
        tags_wrong_then_right((&set, &set), &a, &b, &bios, 1, rq, status);
        assert_eq!(set.busy(), 0);
    }
}

// ----- ElvCx::merge_requests -----

#[test]
fn merge_requests_of_another_queue_comes_back() {
    let bios = Bios::new();
    let set = set();
    let (mut a, mut b) = (set.attach().unwrap(), set.attach().unwrap());
    a.attach_scheduler(None, |_| ()).unwrap();
    b.attach_scheduler(None, |_| ()).unwrap();
    let limits = QueueLimits::new(1 << 20);
    let cx = ElvCx::new(&b, &limits, 0);
    let theirs = with_bio(&a, bios.read(1)); // contiguous with `ours`: only the owner differs
    let mut ours = with_bio(&b, bios.read(0));
    let busy = set.busy();
    let theirs = cx.merge_requests(&mut ours, theirs).unwrap_err();
    assert_eq!(set.busy(), busy, "nothing was freed");
    assert_eq!(b.io(&ours).unwrap().nr_bios(), 1, "nothing was merged");
    assert_eq!(a.io(&theirs).unwrap().nr_bios(), 1);
    a.complete(theirs, Status::Ok).unwrap();
    b.complete(ours, Status::Ok).unwrap();
    assert_eq!(
        (bios.ends(0), bios.ends(1)),
        (vec![Status::Ok], vec![Status::Ok])
    );
    assert_eq!(set.busy(), 0);
}
