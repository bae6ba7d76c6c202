//! The queue's trace points: each is one branch on the queue's tracer, and the event is
//! made out of line only when one is set (see [`crate::trace`]).
//!
//! The Q, G and D of a bio issued directly by its submission happen within nanoseconds of
//! each other: they share one reading of the trace clock, taken for the Q
//! ([`trace_stamp`](RequestQueue::trace_stamp)) and handed down the submission, as Linux
//! caches the time of a submission batch in its plug. Every other event reads the clock
//! when it happens; a completion reads it once. Events of one CPU stay in the order of
//! their times: a shared reading is used only by the events before any that reads the
//! clock again.
//!
//! The common submission (a bio that fits one request, no plug) tells its Q late: the
//! reading handed down ([`TraceStamp`]) also says that the Q, and once the request is
//! made its G, are not told yet. If the request goes to the driver at once, its D tells
//! all three in one call ([`Tracer::direct_issue`]), which a tracer may keep as one
//! record. Any other way, the first thing that would tell an event first tells what is
//! untold (`trace_untold_bio`, `trace_untold`), at the handed-down reading, so every
//! tracer sees the same events in the same order as if each were told as it happened.

use crate::bio::{Bio, Status};
use crate::driver::Driver;
use crate::request::{Request, Rq, RqIo};
use crate::trace::{Action, TraceEvent, Tracer};

use super::RequestQueue;

/// A trace clock reading taken earlier in the same call chain, for an event that happens
/// right after it; `None`: read the clock (or no tracer is set). On the common
/// submission's way down, it also says that the bio's Q (and its request's G, once made)
/// is not told yet (see the module's docs).
pub(super) type TraceStamp = Option<u64>;

impl<D: Driver> RequestQueue<D> {
    /// The trace clock now when a tracer is set, for the events of a submission.
    #[inline(always)]
    pub(super) fn trace_stamp(&self) -> TraceStamp {
        if self.tracer.is_some() {
            Some(self.trace_now())
        } else {
            None
        }
    }

    /// The trace clock ([`Platform::trace_now_ns`](crate::Platform::trace_now_ns)).
    #[cold]
    #[inline(never)]
    fn trace_now(&self) -> u64 {
        crate::platform::Platform::trace_now_ns(self.platform())
    }

    /// The time of an event: `stamp`'s, else the trace clock now.
    #[inline]
    fn time(&self, stamp: TraceStamp) -> u64 {
        match stamp {
            Some(time) => time,
            None => crate::platform::Platform::trace_now_ns(self.platform()),
        }
    }

    /// A bio event: Q, or X with the first piece.
    ///
    /// The bio is copied for the event only once a tracer is found: taking its address on
    /// the way in would keep a submission's bio in memory where it stays in registers.
    #[inline(always)]
    pub(super) fn trace_bio(&self, action: Action, bio: &Bio) {
        if let Some(tracer) = &self.tracer {
            self.emit_bio(&**tracer, action, *bio, None);
        }
    }

    /// Tells the Q of `bio` if `stamp` says it is untold; after it nothing is untold.
    #[inline(always)]
    pub(super) fn trace_untold_bio(&self, bio: &Bio, stamp: TraceStamp) -> TraceStamp {
        if let (Some(tracer), Some(_)) = (&self.tracer, stamp) {
            self.emit_bio(&**tracer, Action::Queue, *bio, stamp);
        }
        None
    }

    /// Tells the Q and G of `rq`, just made for a bio, if `stamp` says they are untold.
    #[inline(always)]
    pub(super) fn trace_untold(&self, rq: &Rq, stamp: TraceStamp) {
        if let (Some(tracer), Some(_)) = (&self.tracer, stamp) {
            self.emit_untold(&**tracer, rq, stamp);
        }
    }

    /// A request event (G, I, D, R) with the request's range.
    #[inline(always)]
    pub(super) fn trace_rq(&self, action: Action, rq: &Rq) {
        if let Some(tracer) = &self.tracer {
            self.emit_rq(&**tracer, action, rq, None, None);
        }
    }

    /// D for `rq`, made from `request`, the request it names, when the caller has it (no
    /// look-up); with a `stamp`, at its time, and with the Q and G it says are untold, in
    /// one call ([`Tracer::direct_issue`]).
    #[inline(always)]
    pub(super) fn trace_issue(
        &self,
        rq: &Rq,
        request: Option<&Request<D::Payload>>,
        stamp: TraceStamp,
    ) {
        if let Some(tracer) = &self.tracer {
            self.emit_issue(&**tracer, rq, request, stamp);
        }
    }

    /// G for `rq`, just made for `bio` on `cpu` for `hctx`: the event is made of what the
    /// caller holds, with no look-up of the request. With a `stamp`, the bio's Q is
    /// untold, and so the G stays untold too.
    #[inline(always)]
    pub(super) fn trace_get_rq(
        &self,
        rq: &Rq,
        bio: &Bio,
        cpu: usize,
        hctx: usize,
        stamp: TraceStamp,
    ) {
        if let Some(tracer) = &self.tracer {
            if stamp.is_none() {
                self.emit_get_rq(&**tracer, rq.tag(), bio, (cpu, hctx));
            }
        }
    }

    /// [`trace_rq`](Self::trace_rq), handing `rq` back.
    #[inline(always)]
    pub(super) fn traced(&self, action: Action, rq: Rq) -> Rq {
        self.trace_rq(action, &rq);
        rq
    }

    /// [`trace_merge`](Self::trace_merge) after a merge that took place: true.
    #[inline(always)]
    pub(super) fn traced_merge(&self, rq: &Rq, bio: &Bio) -> bool {
        self.trace_merge(rq, bio);
        true
    }

    /// `bio` merged into `rq`: M at its back, F at its front (the request starts at the
    /// bio now).
    #[inline(always)]
    pub(super) fn trace_merge(&self, rq: &Rq, bio: &Bio) {
        if let Some(tracer) = &self.tracer {
            self.emit_merge(&**tracer, rq, bio);
        }
    }

    /// An elevator's merge of `bio` into `rq` through the queue, when `merged` says it
    /// took place.
    #[inline(always)]
    pub(super) fn trace_merged<E>(&self, rq: &Rq, bio: &Bio, merged: &Result<Result<(), Bio>, E>) {
        if let Some(tracer) = &self.tracer {
            if matches!(merged, Ok(Ok(()))) {
                self.emit_merge(&**tracer, rq, bio);
            }
        }
    }

    /// C: a request ends with `status`.
    #[inline(always)]
    pub(super) fn trace_done(&self, request: &Request<D::Payload>, io: &RqIo, status: Status) {
        if let Some(tracer) = &self.tracer {
            self.emit_done(&**tracer, request, io, status);
        }
    }

    /// P, when a plug with `len` requests takes its first.
    #[inline(always)]
    pub(super) fn trace_plug(&self, len: usize) {
        if let Some(tracer) = &self.tracer {
            if len == 0 {
                tracer.event(&self.event(Action::Plug, None));
            }
        }
    }

    /// U: a plug hands `len` requests to the queue.
    #[inline(always)]
    pub(super) fn trace_unplug(&self, len: usize) {
        if let Some(tracer) = &self.tracer {
            let event = TraceEvent {
                sectors: len as u32,
                ..self.event(Action::Unplug, None)
            };
            tracer.event(&event);
        }
    }

    /// An event of `action` at `stamp`'s time or now, on this CPU, of this queue.
    #[inline(always)]
    fn event(&self, action: Action, stamp: TraceStamp) -> TraceEvent {
        TraceEvent {
            queue: self.id,
            cpu: self.cpu() as u32,
            ..TraceEvent::new(action, self.time(stamp))
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_bio(&self, tracer: &dyn Tracer, action: Action, bio: Bio, stamp: TraceStamp) {
        let event = TraceEvent {
            sector: bio.sector,
            sectors: bio.sectors,
            issuer: bio.issuer,
            op: bio.op,
            flags: bio.flags,
            ..self.event(action, stamp)
        };
        tracer.event(&event);
    }

    /// The event of `action` for a request, with its range, or `None` if it is not ours;
    /// `known`, the request `rq` names when the caller has it, spares the look-up.
    ///
    /// Made where it is handed over (inlined): an event made out of line and copied
    /// would be read back with wide loads over its narrow stores, which the processor
    /// cannot forward.
    #[inline(always)]
    fn rq_event(
        &self,
        action: Action,
        rq: &Rq,
        known: Option<&Request<D::Payload>>,
        stamp: TraceStamp,
    ) -> Option<TraceEvent> {
        let tags = self.tags();
        let (request, io) = match known {
            Some(request) => (request, tags.io_known(rq, request)),
            None => tags.request_and_io(rq).ok()?,
        };
        Some(self.io_event(action, request, io, stamp, Status::Ok))
    }

    /// The event of `action` for `request` and its I/O `io`, ended with `status`; made
    /// where it is handed over, as [`rq_event`](Self::rq_event).
    #[inline(always)]
    fn io_event(
        &self,
        action: Action,
        request: &Request<D::Payload>,
        io: &RqIo,
        stamp: TraceStamp,
        status: Status,
    ) -> TraceEvent {
        TraceEvent {
            sector: io.sector(),
            sectors: io.sectors() as u32,
            hctx: request.hctx() as u32,
            tag: request.tag(),
            issuer: io.issuer(),
            op: io.op(),
            flags: io.flags(),
            status,
            ..self.event(action, stamp)
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_rq(
        &self,
        tracer: &dyn Tracer,
        action: Action,
        rq: &Rq,
        known: Option<&Request<D::Payload>>,
        stamp: TraceStamp,
    ) {
        if let Some(event) = self.rq_event(action, rq, known, stamp) {
            tracer.event(&event);
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_issue(
        &self,
        tracer: &dyn Tracer,
        rq: &Rq,
        known: Option<&Request<D::Payload>>,
        stamp: TraceStamp,
    ) {
        if let Some(event) = self.rq_event(Action::Issue, rq, known, stamp) {
            if stamp.is_some() {
                tracer.direct_issue(&event);
            } else {
                tracer.event(&event);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_untold(&self, tracer: &dyn Tracer, rq: &Rq, stamp: TraceStamp) {
        if let Some(event) = self.rq_event(Action::GetRq, rq, None, stamp) {
            let [queue, get_rq, _] = event.direct_issue_events();
            tracer.event(&queue);
            tracer.event(&get_rq);
        }
    }

    /// G, told as it happens (a G at a submission's reading stays untold, `trace_untold`).
    #[cold]
    #[inline(never)]
    fn emit_get_rq(&self, tracer: &dyn Tracer, tag: u32, bio: &Bio, (cpu, hctx): (usize, usize)) {
        let event = TraceEvent {
            sector: bio.sector,
            sectors: bio.sectors,
            queue: self.id,
            hctx: hctx as u32,
            tag,
            cpu: cpu as u32,
            issuer: bio.issuer,
            op: bio.op,
            flags: bio.flags,
            ..TraceEvent::new(Action::GetRq, self.time(None))
        };
        tracer.event(&event);
    }

    #[cold]
    #[inline(never)]
    fn emit_merge(&self, tracer: &dyn Tracer, rq: &Rq, bio: &Bio) {
        let Some(mut event) = self.rq_event(Action::BackMerge, rq, None, None) else {
            return;
        };
        if event.sector == bio.sector {
            event.action = Action::FrontMerge;
        }
        event.sector = bio.sector;
        event.sectors = bio.sectors;
        event.issuer = bio.issuer;
        event.flags = bio.flags;
        tracer.event(&event);
    }

    #[cold]
    #[inline(never)]
    fn emit_done(
        &self,
        tracer: &dyn Tracer,
        request: &Request<D::Payload>,
        io: &RqIo,
        status: Status,
    ) {
        let event = self.io_event(Action::Complete, request, io, None, status);
        tracer.event(&event);
    }
}
