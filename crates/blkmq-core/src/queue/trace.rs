//! The queue's trace points: each is one branch on the queue's tracer, and the event is
//! made out of line only when one is set (see [`crate::trace`]).

use crate::bio::{Bio, Status};
use crate::driver::Driver;
use crate::request::{Request, Rq, RqIo};
use crate::trace::{Action, TraceEvent, Tracer};

use super::RequestQueue;

impl<D: Driver> RequestQueue<D> {
    /// A bio event: Q, or X with the first piece.
    ///
    /// The bio is copied for the event only once a tracer is found: taking its address on
    /// the way in would keep a submission's bio in memory where it stays in registers.
    #[inline(always)]
    pub(super) fn trace_bio(&self, action: Action, bio: &Bio) {
        if let Some(tracer) = &self.tracer {
            self.emit_bio(&**tracer, action, *bio);
        }
    }

    /// A request event (G, I, D, R) with the request's range.
    #[inline(always)]
    pub(super) fn trace_rq(&self, action: Action, rq: &Rq) {
        if let Some(tracer) = &self.tracer {
            self.emit_rq(&**tracer, action, rq);
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
                tracer.event(&self.event(Action::Plug));
            }
        }
    }

    /// U: a plug hands `len` requests to the queue.
    #[inline(always)]
    pub(super) fn trace_unplug(&self, len: usize) {
        if let Some(tracer) = &self.tracer {
            let event = TraceEvent {
                sectors: len as u32,
                ..self.event(Action::Unplug)
            };
            tracer.event(&event);
        }
    }

    /// An event of `action` now, on this CPU, of this queue.
    #[inline]
    fn event(&self, action: Action) -> TraceEvent {
        TraceEvent {
            queue: self.id,
            cpu: self.cpu() as u32,
            ..TraceEvent::new(action, crate::platform::Platform::now_ns(self.platform()))
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_bio(&self, tracer: &dyn Tracer, action: Action, bio: Bio) {
        let event = TraceEvent {
            sector: bio.sector,
            sectors: bio.sectors,
            issuer: bio.issuer,
            op: bio.op,
            flags: bio.flags,
            ..self.event(action)
        };
        tracer.event(&event);
    }

    /// The event of `action` for a request, with its range, or `None` if it is not ours.
    fn rq_event(&self, action: Action, rq: &Rq) -> Option<TraceEvent> {
        let tags = self.tags();
        let request = tags.request(rq).ok()?;
        let io = tags.io(rq).ok()?;
        Some(self.io_event(action, request, io))
    }

    fn io_event(&self, action: Action, request: &Request<D::Payload>, io: &RqIo) -> TraceEvent {
        TraceEvent {
            sector: io.sector(),
            sectors: io.sectors() as u32,
            hctx: request.hctx() as u32,
            tag: request.tag(),
            issuer: io.issuer(),
            op: io.op(),
            flags: io.flags(),
            ..self.event(action)
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_rq(&self, tracer: &dyn Tracer, action: Action, rq: &Rq) {
        if let Some(event) = self.rq_event(action, rq) {
            tracer.event(&event);
        }
    }

    #[cold]
    #[inline(never)]
    fn emit_merge(&self, tracer: &dyn Tracer, rq: &Rq, bio: &Bio) {
        let Some(mut event) = self.rq_event(Action::BackMerge, rq) else {
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
        let event = TraceEvent {
            status,
            ..self.io_event(Action::Complete, request, io)
        };
        tracer.event(&event);
    }
}
