//! What only the inside of a request queue can set up: an elevator gone from under
//! requests that still wait for it.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use std::sync::Mutex;

use crate::bio::{Bio, Op, Status};
use crate::elevator::{Elevator, ElvCx};
use crate::limits::QueueLimits;
use crate::platform::StdPlatform;
use crate::request::Rq;
use crate::tagset::TagSet;
use crate::testing::Hold;

use super::{Host, QueueConfig};

/// First in, first out.
#[derive(Default)]
struct Fifo(VecDeque<Rq>);

impl Elevator for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn insert_requests(&mut self, _: &ElvCx<'_>, rqs: &mut dyn Iterator<Item = Rq>, _: bool) {
        self.0.extend(rqs);
    }
    fn dispatch_request(&mut self, _: &ElvCx<'_>, _: usize) -> Option<Rq> {
        self.0.pop_front()
    }
    fn has_work(&self, _: usize) -> bool {
        !self.0.is_empty()
    }
}

static ENDED: Mutex<Vec<(u64, Status)>> = Mutex::new(Vec::new());

fn ended(bio: Bio, status: Status) {
    ENDED.lock().unwrap().push((bio.sector, status));
}

/// A requeued request whose elevator is gone when the requeue list is kicked still goes
/// to the driver (from the dispatch list, as a fresh request does), ends, and gives its
/// tags back: none is dropped with its tag held.
#[test]
fn a_requeued_request_outlives_its_elevator() {
    let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
    let config = QueueConfig::new(QueueLimits::new(1024)).elevator(Box::new(Fifo::default()));
    let queue = host.add_queue(config).unwrap();
    queue
        .submit(Bio::new(Op::Read, 64, 8).end_io(ended))
        .unwrap();
    let rq = host.driver().take().pop().unwrap();
    queue.requeue_request(rq, false).unwrap();
    assert_eq!(queue.requeued(), 1);
    // What no run-time change does (a switch drains the queue first), and what the
    // submission and the requeue list must both survive alike.
    let gone = queue.elevator.lock().take();
    assert!(gone.is_some() && queue.has_elevator.load(crate::sync::Ordering::SeqCst));
    queue.kick_requeue_list();
    let held = host.driver().take();
    assert_eq!(
        held.len(),
        1,
        "the requeued request reached the driver again"
    );
    assert_eq!(queue.io(&held[0]).unwrap().sector(), 64);
    // A fresh submission takes the same way in.
    queue
        .submit(Bio::new(Op::Read, 128, 8).end_io(ended))
        .unwrap();
    let fresh = host.driver().take();
    assert_eq!(fresh.len(), 1);
    queue
        .end_requests(held.into_iter().chain(fresh).map(|rq| (rq, Status::Ok)))
        .unwrap();
    assert_eq!(
        *ENDED.lock().unwrap(),
        [(64, Status::Ok), (128, Status::Ok)]
    );
    assert_eq!(queue.queue_tags().sched_busy(), 0);
    assert_eq!((host.set().busy(), queue.usage()), (0, 0));
}
