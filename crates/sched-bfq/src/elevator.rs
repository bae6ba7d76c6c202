//! BFQ as an elevator: the calls the queue makes into it.
//!
//! BFQ hands out no shared part ([`Elevator::shared`]): its completion stays under the
//! elevator's lock, as Linux's `bfq_completed_request` runs under `bfqd->lock`. None of it
//! is counting for its own sake: the requests in flight (the scheduler's and the queue's),
//! the last completion time and the command-queueing samples are read by the decisions the
//! same completion makes (whether the queue in service expires, idles or keeps its turn
//! alone, its soft real-time start, whether the device queues commands), so moving them
//! into atomics would add a locked operation beside the lock, not take one away.

use blkmq_core::{Bio, BioFlags, Elevator, ElvCx, MergeKind, Op, Rq, RqIo};
use blkmq_sched_index::HeldRequests;

use crate::queue::NO_QUEUE;
use crate::{Bfq, DISPATCH, SD_QUEUE, is_sync};

impl Elevator for Bfq {
    fn name(&self) -> &'static str {
        "bfq"
    }

    fn depth_updated(&mut self, nr_requests: usize, nr_keys: usize) {
        self.end_lone_wait(None, 0);
        self.nr_requests = nr_requests;
        if nr_keys != self.sorted.forest().nr_keys() {
            self.grow(nr_keys);
        }
    }

    fn min_shallow_depth(&self) -> Option<usize> {
        // The smallest of the limits: async I/O while a queue is raised.
        Some(((self.nr_requests * 3) >> 4).max(1))
    }

    fn limit_depth(&self, op: Op, flags: BioFlags) -> Option<usize> {
        let sync = is_sync(op, flags);
        if (sync && !op.is_write()) || self.nr_requests == 0 {
            return None;
        }
        let d = self.nr_requests;
        let limit = match (self.balance.raised > 0, sync) {
            (false, false) => d >> 1,
            (false, true) => (d * 3) >> 2,
            (true, false) => (d * 3) >> 4,
            (true, true) => (d * 6) >> 4,
        };
        Some(limit.max(1))
    }

    fn prepare_request(&mut self, cx: &ElvCx<'_>, rq: &mut Rq) {
        // Make the request's queue now, where allocating is expected, not at insertion,
        // and note it in the request, so that insertion need not look it up again.
        let Ok(io) = cx.io_mut(rq) else {
            return;
        };
        let (sync, prio, issuer) = (is_sync(io.op(), io.flags()), io.prio(), io.issuer());
        // The issuer of the last sync request, most often, whose queue needs no look-up.
        let last = self.last_sync;
        let hinted = if sync {
            self.sync_queue_of(last, issuer)
        } else {
            None
        };
        let q = match hinted.or_else(|| self.find_queue(issuer, sync, prio)) {
            Some(q) => q,
            None => self.queue_for(issuer, sync, prio, cx.now_ns()),
        };
        if sync {
            self.last_sync = q;
        }
        io.sched_data[SD_QUEUE] = u64::from(q) + 1;
    }

    fn insert_requests(
        &mut self,
        cx: &ElvCx<'_>,
        rqs: &mut dyn Iterator<Item = Rq>,
        at_head: bool,
    ) {
        let now = cx.now_ns();
        self.rotational = cx.limits().rotational;
        // A batch at the head keeps its own order.
        let mut prev: Option<usize> = None;
        for rq in rqs {
            if !at_head {
                self.insert_one(cx, rq, false, now);
                continue;
            }
            let key = cx.key(&rq);
            self.insert_one(cx, rq, at_head, now);
            if self.lists.list_of(key) == Some(DISPATCH) {
                if let Some(p) = prev {
                    if self.lists.same_list(p, key) {
                        self.lists.remove(key);
                        self.lists.insert_after(p, key);
                    }
                }
                prev = Some(key);
            }
        }
    }

    fn insert_request(&mut self, cx: &ElvCx<'_>, rq: Rq, at_head: bool) {
        let now = cx.now_ns();
        self.rotational = cx.limits().rotational;
        self.insert_one(cx, rq, at_head, now);
    }

    fn dispatch_request(&mut self, cx: &ElvCx<'_>, _hctx: usize) -> Option<Rq> {
        if self.lists.total() == 0 {
            return None;
        }
        let now = cx.now_ns();
        self.rotational = cx.limits().rotational;
        let (key, injected) = self.next_dispatch(now)?;
        let rq = self.sorted.take(key)?;
        // A sorted request is filed at its start and its size kept (merges refile both);
        // one off the dispatch list (requeued) may have changed since: ask.
        let (sector, sectors) = if self.sorted.forest().contains(key) {
            (self.sorted.forest().sector(key), self.info[key].sectors)
        } else {
            cx.io(&rq).map_or((0, self.info[key].sectors), |io| {
                (io.sector(), io.sectors())
            })
        };
        self.dispatched(key, sector, sectors, injected, now);
        Some(rq)
    }

    fn has_work(&self, _hctx: usize) -> bool {
        self.lists.total() != 0
    }

    fn allow_merge(&self, io: &RqIo, bio: &Bio) -> bool {
        // Merges stay within a queue: the same issuer's sync queue, or the same async one.
        let sync = is_sync(io.op(), io.flags());
        sync == bio.is_sync() && (!sync || io.issuer() == bio.issuer)
    }

    fn request_merge(&mut self, cx: &ElvCx<'_>, bio: &Bio) -> Option<(usize, MergeKind)> {
        if self.lists.total() == 0 {
            // Nothing queued to merge into (an idle device's common case).
            return None;
        }
        let q = self.find_queue(bio.issuer, bio.is_sync(), bio.prio)? as usize;
        self.sorted.request_merge(cx, bio, q, true, |_, t| t == q)
    }

    fn bio_merge(&mut self, cx: &ElvCx<'_>, bio: Bio) -> Result<(), Bio> {
        if self.lists.total() == 0 {
            // Nothing queued to merge into (an idle device's common case): the bio is
            // not moved through the merge sequence only to come back.
            return Err(bio);
        }
        self.bio_merge_held(cx, bio)
    }

    fn may_merge(&self) -> bool {
        // As `bio_merge`: only a queued request takes a bio.
        self.lists.total() != 0
    }

    fn request_merged(&mut self, cx: &ElvCx<'_>, key: usize, kind: MergeKind) {
        if let Some(sectors) = self.sorted.request_merged(cx, key, kind) {
            self.info[key].sectors = sectors;
        }
    }

    fn requests_merged(&mut self, cx: &ElvCx<'_>, into: usize, from: usize) {
        if let Some(sectors) = self.sorted.requests_merged(cx, into) {
            self.info[into].sectors = sectors;
        }
        self.finish_merged(into, from);
    }

    fn completed_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        if self.info.get(key).is_some_and(|i| i.dispatched) {
            self.complete_key(key, cx.now_ns());
        }
    }

    fn finish_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        let Some(info) = self.info.get(key) else {
            return;
        };
        if info.dispatched {
            // Issued, but not reported completed: account for it here.
            self.complete_key(key, cx.now_ns());
        }
        if self.info[key].counted {
            self.info[key].counted = false;
            // Ended before dispatch (an error): no trace may stay in the orders.
            if self.sorted.request(key).is_some() || self.lists.contains(key) {
                self.unlink(key);
                let _ = self.sorted.take(key);
                let q = self.info[key].queue;
                if q != NO_QUEUE {
                    self.reaccount(q);
                }
            }
        }
    }

    fn requeue_request(&mut self, cx: &ElvCx<'_>, rq: &Rq) {
        let key = cx.key(rq);
        let Some(info) = self.info.get_mut(key) else {
            return;
        };
        if !info.dispatched {
            return;
        }
        info.dispatched = false;
        let injected = core::mem::take(&mut info.injected);
        let q = info.queue;
        self.in_flight = self.in_flight.saturating_sub(1);
        if q != NO_QUEUE {
            self.request_returned(q, injected);
        }
    }

    fn next_timer(&self) -> Option<u64> {
        if self.in_service == NO_QUEUE {
            return None;
        }
        self.idle_until
    }
}

impl HeldRequests for Bfq {
    fn request(&self, key: usize) -> Option<&Rq> {
        self.sorted.request(key)
    }

    fn request_mut(&mut self, key: usize) -> Option<&mut Rq> {
        self.sorted.request_mut(key)
    }

    fn next_request(&mut self, _cx: &ElvCx<'_>, key: usize, kind: MergeKind) -> Option<usize> {
        self.sorted.next_request(key, kind)
    }

    fn take_request(&mut self, key: usize) -> Option<Rq> {
        // Out of the sector order, but kept in the FIFO until `requests_merged` has handed
        // its place to the survivor (or the merge fails and it is inserted again).
        self.sorted.take_request(key)
    }
}
