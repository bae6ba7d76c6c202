//! Trace events: what happened to each bio and request, at blktrace's points.
//!
//! A request queue made with a [`Tracer`] ([`QueueConfig::tracer`](crate::QueueConfig::tracer))
//! calls it at each point Linux's `blktrace` records (`kernel/trace/blktrace.c`), with a
//! [`TraceEvent`]: the time (the platform's trace clock,
//! [`Platform::trace_now_ns`](crate::Platform::trace_now_ns)), the action, the sector range, the
//! operation and flags, the hardware queue, the tag, the CPU and the issuer. A queue made
//! without one pays one branch on a field it holds anyway at each point, never taken.
//!
//! | action | letter | when |
//! |---|---|---|
//! | [`Action::Queue`] | Q | a bio is submitted ([`submit`](crate::RequestQueue::submit); one that comes back and is submitted again, again) |
//! | [`Action::Split`] | X | a bio is cut to the limits (`sector / sector + sectors`) |
//! | [`Action::BackMerge`] | M | a bio joins a request at its back |
//! | [`Action::FrontMerge`] | F | a bio joins a request at its front |
//! | [`Action::GetRq`] | G | a request is allocated for a bio |
//! | [`Action::Plug`] | P | a plug takes its first request |
//! | [`Action::Unplug`] | U | a plug hands its requests to the queue (`sectors`: how many) |
//! | [`Action::Insert`] | I | a request goes into the elevator or a software queue |
//! | [`Action::Issue`] | D | a request is started for the driver |
//! | [`Action::Complete`] | C | a request ends, with its status |
//! | [`Action::Requeue`] | R | a request comes back from the driver to be issued again |
//!
//! [`RingTracer`] keeps events in per-CPU rings allocated once, for a reader to drain;
//! an event's [`Display`](core::fmt::Display) is a `blkparse` line, and [`TraceSummary`]
//! is `btt`'s latency table (Q2G, G2I, I2D, D2C, Q2C) of a drained trace.
//!
//! ```
//! use blkmq_core::testing::Null;
//! use blkmq_core::*;
//! use std::sync::Arc;
//!
//! let rings = Arc::new(RingTracer::new(1, 64));
//! let host = Host::new(TagSet::builder(8), StdPlatform::with_cpus(1), Null::new()).unwrap();
//! let config = QueueConfig::new(QueueLimits::new(1024)).tracer(rings.clone());
//! let queue = host.add_queue(config).unwrap();
//! queue.submit(Bio::new(Op::Read, 16, 8)).unwrap(); // `Null` ends it at once
//! let events = rings.drain_sorted();
//! let letters: String = events.iter().map(|e| e.action.letter()).collect();
//! assert_eq!(letters, "QGDC");
//! assert_eq!((events[3].sector, events[3].sectors, events[3].status), (16, 8, Status::Ok));
//! ```

use core::fmt;

use crate::bio::{BioFlags, IssuerId, Op, Status};

mod ring;
mod summary;

pub use ring::RingTracer;
pub use summary::{Percentiles, SummaryBuilder, TraceSummary};

/// No hardware queue: a bio not placed yet ([`Action::Queue`], [`Action::Split`]) or a plug.
pub const NO_HCTX: u32 = u32::MAX;

/// What happened, at one of blktrace's points (see the [`Tracer`] table).
///
/// ```
/// use blkmq_core::Action;
/// assert_eq!(Action::Queue.letter(), 'Q');
/// assert_eq!(Action::FrontMerge.letter(), 'F');
/// assert!(Action::Issue.is_request() && !Action::Queue.is_request());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Action {
    /// Q: a bio was submitted.
    Queue,
    /// X: a bio was split; the event's range is the first piece.
    Split,
    /// M: a bio was merged at the back of a request (or a request into another's back).
    BackMerge,
    /// F: a bio was merged at the front of a request.
    FrontMerge,
    /// G: a request was allocated for a bio.
    GetRq,
    /// P: a plug took its first request.
    Plug,
    /// U: a plug handed its requests over; the event's `sectors` is how many.
    Unplug,
    /// I: a request was inserted into the elevator or a software queue.
    Insert,
    /// D: a request was issued to the driver.
    Issue,
    /// C: a request completed; the event's `status` is how.
    Complete,
    /// R: a request was given back to be issued again.
    Requeue,
}

impl Action {
    /// Every action, in the order of their numbers.
    ///
    /// ```
    /// use blkmq_core::Action;
    /// assert!(Action::ALL.iter().enumerate().all(|(i, &a)| a as usize == i));
    /// ```
    pub const ALL: [Action; 11] = [
        Action::Queue,
        Action::Split,
        Action::BackMerge,
        Action::FrontMerge,
        Action::GetRq,
        Action::Plug,
        Action::Unplug,
        Action::Insert,
        Action::Issue,
        Action::Complete,
        Action::Requeue,
    ];

    /// blkparse's letter for it.
    ///
    /// ```
    /// use blkmq_core::Action;
    /// let letters: String = Action::ALL.iter().map(|a| a.letter()).collect();
    /// assert_eq!(letters, "QXMFGPUIDCR");
    /// ```
    pub const fn letter(self) -> char {
        match self {
            Action::Queue => 'Q',
            Action::Split => 'X',
            Action::BackMerge => 'M',
            Action::FrontMerge => 'F',
            Action::GetRq => 'G',
            Action::Plug => 'P',
            Action::Unplug => 'U',
            Action::Insert => 'I',
            Action::Issue => 'D',
            Action::Complete => 'C',
            Action::Requeue => 'R',
        }
    }

    /// Whether the event names a request (its hardware queue and tag are set).
    ///
    /// ```
    /// use blkmq_core::Action;
    /// assert!(Action::GetRq.is_request() && Action::BackMerge.is_request());
    /// assert!(!Action::Split.is_request() && !Action::Plug.is_request());
    /// ```
    pub const fn is_request(self) -> bool {
        !matches!(
            self,
            Action::Queue | Action::Split | Action::Plug | Action::Unplug
        )
    }
}

/// One trace event.
///
/// For a bio event (Q, X) the range and issuer are the bio's; for a request event (M, F, G,
/// I, D, C, R) the range is the bio's for M, F and G (what joined or started the request)
/// and the request's for the others, and `hctx` and `tag` name the request (its tag in the
/// tags that own it, [`Request::tag`](crate::Request::tag)). `seq` is the event's number in
/// its CPU's ring, set by [`RingTracer`] (0 from the queue).
///
/// ```
/// use blkmq_core::{Action, TraceEvent};
/// let event = TraceEvent::new(Action::Queue, 1_500_000_001);
/// assert_eq!((event.sector, event.sectors, event.tag), (0, 0, blkmq_core::NO_TAG));
/// assert!(event.to_string().contains(" 1.500000001 "));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// When, on the platform's trace clock
    /// ([`Platform::trace_now_ns`](crate::Platform::trace_now_ns)); the Q, G and D of a
    /// bio its submission issues directly share one reading.
    pub time_ns: u64,
    /// The event's number in its CPU's ring.
    pub seq: u64,
    /// The first sector.
    pub sector: u64,
    /// Sectors (for [`Action::Unplug`]: requests handed over).
    pub sectors: u32,
    /// The request queue's identity ([`RequestQueue::id`](crate::RequestQueue::id)).
    pub queue: u32,
    /// The hardware queue, or [`NO_HCTX`].
    pub hctx: u32,
    /// The tag, or [`NO_TAG`](crate::NO_TAG).
    pub tag: u32,
    /// The CPU it happened on.
    pub cpu: u32,
    /// Who submitted the bio (the first bio's for a request).
    pub issuer: IssuerId,
    /// The operation.
    pub op: Op,
    /// Its flags.
    pub flags: BioFlags,
    /// What happened.
    pub action: Action,
    /// How the request ended ([`Action::Complete`]; [`Status::Ok`] otherwise).
    pub status: Status,
}

impl TraceEvent {
    /// An event of `action` at `time_ns`, everything else empty (a read of nothing, no
    /// hardware queue, no tag, CPU 0, the default issuer).
    ///
    /// ```
    /// use blkmq_core::{Action, NO_HCTX, Op, TraceEvent};
    /// let event = TraceEvent::new(Action::Plug, 7);
    /// assert_eq!((event.time_ns, event.hctx, event.op), (7, NO_HCTX, Op::Read));
    /// ```
    pub const fn new(action: Action, time_ns: u64) -> Self {
        Self {
            time_ns,
            seq: 0,
            sector: 0,
            sectors: 0,
            queue: 0,
            hctx: NO_HCTX,
            tag: crate::request::NO_TAG,
            cpu: 0,
            issuer: IssuerId(0),
            op: Op::Read,
            flags: BioFlags::empty(),
            action,
            status: Status::Ok,
        }
    }

    /// The Q, G and D a direct issue stands for ([`Tracer::direct_issue`]), this being its
    /// D: the G is this event with its action, the Q also without hardware queue and tag
    /// (the bio's range, operation, flags and issuer are the request's, which it made).
    ///
    /// ```
    /// use blkmq_core::{Action, NO_HCTX, NO_TAG, TraceEvent};
    /// let d = TraceEvent {
    ///     sector: 8, sectors: 8, hctx: 1, tag: 4,
    ///     ..TraceEvent::new(Action::Issue, 5)
    /// };
    /// let [q, g, issue] = d.direct_issue_events();
    /// assert_eq!((q.action, q.hctx, q.tag), (Action::Queue, NO_HCTX, NO_TAG));
    /// assert_eq!((q.sector, q.time_ns), (8, 5));
    /// assert_eq!((g.action, g.hctx, g.tag), (Action::GetRq, 1, 4));
    /// assert_eq!(issue, d);
    /// ```
    pub const fn direct_issue_events(&self) -> [TraceEvent; 3] {
        let issue = TraceEvent {
            action: Action::Issue,
            ..*self
        };
        let get_rq = TraceEvent {
            action: Action::GetRq,
            ..issue
        };
        let queue = TraceEvent {
            action: Action::Queue,
            hctx: NO_HCTX,
            tag: crate::request::NO_TAG,
            ..issue
        };
        [queue, get_rq, issue]
    }

    /// The sector after the range.
    ///
    /// ```
    /// use blkmq_core::{Action, TraceEvent};
    /// let event = TraceEvent { sector: 8, sectors: 8, ..TraceEvent::new(Action::Queue, 0) };
    /// assert_eq!(event.end_sector(), 16);
    /// ```
    pub const fn end_sector(&self) -> u64 {
        self.sector + self.sectors as u64
    }

    /// blktrace's RWBS field (`blk_fill_rwbs`): F for a preflush, then the operation (R, W,
    /// D for a discard, F for a flush, N for anything else), then F for FUA, A for
    /// readahead, S for sync, M for metadata.
    ///
    /// ```
    /// use blkmq_core::{Action, BioFlags, Op, TraceEvent};
    /// let mut event = TraceEvent::new(Action::Queue, 0);
    /// event.op = Op::Write;
    /// event.flags = BioFlags::SYNC | BioFlags::FUA | BioFlags::PREFLUSH;
    /// assert_eq!(event.rwbs().as_str(), "FWFS");
    /// ```
    pub fn rwbs(&self) -> Rwbs {
        let mut out = Rwbs::default();
        if self.flags.contains(BioFlags::PREFLUSH) {
            out.push('F');
        }
        out.push(match self.op {
            Op::Read => 'R',
            Op::Write => 'W',
            Op::Discard => 'D',
            Op::Flush => 'F',
            Op::WriteZeroes => 'N',
        });
        for (flag, letter) in [
            (BioFlags::FUA, 'F'),
            (BioFlags::RAHEAD, 'A'),
            (BioFlags::SYNC, 'S'),
            (BioFlags::META, 'M'),
        ] {
            if self.flags.contains(flag) {
                out.push(letter);
            }
        }
        out
    }
}

/// An RWBS field ([`TraceEvent::rwbs`]), held inline.
///
/// ```
/// use blkmq_core::{Action, TraceEvent};
/// assert_eq!(TraceEvent::new(Action::Queue, 0).rwbs().as_str(), "R");
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rwbs {
    bytes: [u8; 8],
    len: usize,
}

impl Rwbs {
    fn push(&mut self, letter: char) {
        if self.len < self.bytes.len() {
            self.bytes[self.len] = letter as u8;
            self.len += 1;
        }
    }

    /// The letters.
    ///
    /// ```
    /// use blkmq_core::{Action, Op, TraceEvent};
    /// let event = TraceEvent { op: Op::Discard, ..TraceEvent::new(Action::Queue, 0) };
    /// assert_eq!(event.rwbs().as_str(), "D");
    /// ```
    pub fn as_str(&self) -> &str {
        // Only ASCII letters are pushed.
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl fmt::Display for TraceEvent {
    /// A `blkparse` line: `queue,hctx cpu seq seconds.nanoseconds issuer action rwbs`, then
    /// what the action says: `sector + sectors [tag T]` (C adds the status, a bio event has
    /// no tag), `sector / split-at` for X, the request count for U. A hardware queue or a
    /// tag the event has none of shows as `-`.
    ///
    /// ```
    /// use blkmq_core::{Action, IssuerId, Op, Status, TraceEvent};
    /// let event = TraceEvent {
    ///     sector: 2048, sectors: 8, queue: 1, hctx: 0, tag: 5, cpu: 2, seq: 17,
    ///     issuer: IssuerId(7), op: Op::Write, status: Status::Ok,
    ///     ..TraceEvent::new(Action::Complete, 1_000_123_456)
    /// };
    /// assert_eq!(
    ///     event.to_string(),
    ///     "  1,0    2       17     1.000123456     7  C   W 2048 + 8 [tag 5] ok"
    /// );
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.time_ns / 1_000_000_000;
        let nanos = self.time_ns % 1_000_000_000;
        write!(f, "{:>3},", self.queue)?;
        if self.hctx == NO_HCTX {
            write!(f, "{:<3}", "-")?;
        } else {
            write!(f, "{:<3}", self.hctx)?;
        }
        write!(
            f,
            "{:>3} {:>8} {:>5}.{:09} {:>5}  {} {:>3} ",
            self.cpu,
            self.seq,
            secs,
            nanos,
            self.issuer.0,
            self.action.letter(),
            self.rwbs().as_str()
        )?;
        match self.action {
            Action::Split => write!(f, "{} / {}", self.sector, self.end_sector()),
            Action::Plug => Ok(()),
            Action::Unplug => write!(f, "{}", self.sectors),
            Action::Queue => write!(f, "{} + {}", self.sector, self.sectors),
            _ => {
                write!(f, "{} + {} ", self.sector, self.sectors)?;
                if self.tag == crate::request::NO_TAG {
                    write!(f, "[tag -]")?;
                } else {
                    write!(f, "[tag {}]", self.tag)?;
                }
                if self.action == Action::Complete {
                    write!(f, " {}", status_word(self.status))?;
                }
                Ok(())
            }
        }
    }
}

/// A status as one word.
fn status_word(status: Status) -> &'static str {
    match status {
        Status::Ok => "ok",
        Status::NotSupported => "notsupp",
        Status::Timeout => "timeout",
        Status::NoSpace => "nospc",
        Status::Medium => "medium",
        Status::Protection => "protection",
        Status::Offline => "offline",
        Status::Invalid => "invalid",
        Status::IoErr => "ioerr",
        Status::Again => "again",
        Status::Resource => "resource",
        Status::DevResource => "devresource",
    }
}

/// What a request queue calls at each trace point, with a [`TraceEvent`]: the points are
/// those Linux's `blktrace` records (`kernel/trace/blktrace.c`).
///
/// | action | letter | when |
/// |---|---|---|
/// | [`Action::Queue`] | Q | a bio is submitted ([`submit`](crate::RequestQueue::submit); one that comes back and is submitted again, again) |
/// | [`Action::Split`] | X | a bio is cut to the limits (`sector / sector + sectors`) |
/// | [`Action::BackMerge`] | M | a bio joins a request at its back |
/// | [`Action::FrontMerge`] | F | a bio joins a request at its front |
/// | [`Action::GetRq`] | G | a request is allocated for a bio |
/// | [`Action::Plug`] | P | a plug takes its first request |
/// | [`Action::Unplug`] | U | a plug hands its requests to the queue (`sectors`: how many) |
/// | [`Action::Insert`] | I | a request goes into the elevator or a software queue |
/// | [`Action::Issue`] | D | a request is started for the driver |
/// | [`Action::Complete`] | C | a request ends, with its status |
/// | [`Action::Requeue`] | R | a request comes back from the driver to be issued again |
///
/// A queue made with a tracer ([`QueueConfig::tracer`](crate::QueueConfig::tracer)) calls
/// it at each; one made without pays one branch on a field it holds anyway at each point,
/// never taken. The tracer is set at creation for the queue's life, an `Arc` in the queue
/// read with the queue itself: no atomic load, no ordering, nothing shared written. A
/// tracer that should be switched on and off while the queue runs does that itself.
///
/// Called on the I/O path, under the queue's locks at some points (an elevator's, a
/// software queue's): it must not block, call back into the queue, or take long.
/// [`RingTracer`] is one that allocates nothing per event.
///
/// ```
/// use blkmq_core::{TraceEvent, Tracer};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// /// Counts events.
/// struct Count(AtomicU64);
/// impl Tracer for Count {
///     fn event(&self, _: &TraceEvent) {
///         self.0.fetch_add(1, Ordering::Relaxed);
///     }
/// }
/// let count = Count(AtomicU64::new(0));
/// count.event(&TraceEvent::new(blkmq_core::Action::Queue, 0));
/// assert_eq!(count.0.load(Ordering::Relaxed), 1);
/// ```
pub trait Tracer: Send + Sync {
    /// One event happened.
    fn event(&self, event: &TraceEvent);

    /// A bio's Q, G and D, told at once: its submission made a request for it and issued
    /// it to the driver straight away, the common submission without an elevator or a
    /// plug. `issue` is the D; the Q and G are made of it
    /// ([`TraceEvent::direct_issue_events`]), and all three have its time, as the queue
    /// stamps them with one reading anyway.
    ///
    /// The default tells the three to [`event`](Self::event), in order, so a tracer that
    /// implements only `event` sees every event as it would one by one; one that keeps
    /// events may keep these as one record ([`RingTracer`] keeps them in one slot).
    ///
    /// ```
    /// use blkmq_core::{Action, TraceEvent, Tracer};
    /// use std::sync::Mutex;
    ///
    /// struct Letters(Mutex<String>);
    /// impl Tracer for Letters {
    ///     fn event(&self, event: &TraceEvent) {
    ///         self.0.lock().unwrap().push(event.action.letter());
    ///     }
    /// }
    /// let letters = Letters(Mutex::new(String::new()));
    /// letters.direct_issue(&TraceEvent { tag: 3, hctx: 0, ..TraceEvent::new(Action::Issue, 9) });
    /// assert_eq!(*letters.0.lock().unwrap(), "QGD");
    /// ```
    fn direct_issue(&self, issue: &TraceEvent) {
        for event in issue.direct_issue_events() {
            self.event(&event);
        }
    }
}
