//! Workloads: programs that issue I/O under virtual time and react to its completion.
//!
//! A [`Workload`] is called when it starts, when one of its I/Os ends, and when a wake-up
//! it asked for comes; each time it may submit I/O ([`Io`]) or ask to be woken, through
//! its [`Cx`]. The simulation issues exactly what it submits, waits for a free request
//! when there is none (as a task sleeping on a tag would), and accounts every byte.
//!
//! Ready workloads: [`Dd`] (sequential transfer through readahead-sized bios), [`Find`]
//! (a walk of small synchronous metadata reads), [`Iozone`] (the record-size sweep of
//! `iozone -a -i0 -i1 -i2 -I`), [`FioJob`] (random or sequential I/O at an iodepth, per
//! issuer and priority) and [`Replay`] (a [`Trace`] replayed at its timestamps).

mod dd;
mod find;
mod fio;
mod iozone;
mod trace;

pub use dd::{Dd, DdResult};
pub use find::{Find, FindParams};
pub use fio::{FioJob, Pattern};
pub use iozone::{IOZONE_TESTS, Iozone, IozoneGrid, IozoneParams, IozoneTest};
pub use trace::{Replay, Trace, TraceError, TraceRecord};

use std::any::Any;

use blkmq_core::{BioFlags, IoPrio, IssuerId, Op, SECTOR_SIZE, Status};

/// One I/O a workload submits: a bio to be.
///
/// ```
/// use blkmq_core::{BioFlags, IssuerId, Op};
/// use blkmq_sim::Io;
///
/// let io = Io::read(2048, 8).flags(BioFlags::META).issuer(IssuerId(3)).tag(17);
/// assert_eq!((io.op, io.sector, io.sectors, io.bytes()), (Op::Read, 2048, 8, 4096));
/// assert_eq!((io.issuer, io.tag), (IssuerId(3), 17));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    /// The operation.
    pub op: Op,
    /// The first sector.
    pub sector: u64,
    /// Its length in sectors (0 for a flush).
    pub sectors: u32,
    /// Bio flags (sync, meta, ...).
    pub flags: BioFlags,
    /// I/O priority.
    pub prio: IoPrio,
    /// Who issues it (the "process" schedulers see).
    pub issuer: IssuerId,
    /// The workload's own number for it, handed back in [`Done::tag`].
    pub tag: u64,
}

impl Io {
    /// An I/O of `op` with default flags, priority and issuer.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::Io;
    /// assert_eq!(Io::new(Op::Discard, 0, 2048).bytes(), 1 << 20);
    /// ```
    pub fn new(op: Op, sector: u64, sectors: u32) -> Self {
        Self {
            op,
            sector,
            sectors,
            flags: BioFlags::empty(),
            prio: IoPrio::default(),
            issuer: IssuerId(0),
            tag: 0,
        }
    }

    /// A read.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::Io;
    /// assert_eq!(Io::read(0, 8).op, Op::Read);
    /// ```
    pub fn read(sector: u64, sectors: u32) -> Self {
        Self::new(Op::Read, sector, sectors)
    }

    /// A write.
    ///
    /// ```
    /// use blkmq_core::Op;
    /// use blkmq_sim::Io;
    /// assert_eq!(Io::write(0, 8).op, Op::Write);
    /// ```
    pub fn write(sector: u64, sectors: u32) -> Self {
        Self::new(Op::Write, sector, sectors)
    }

    /// With these flags.
    ///
    /// ```
    /// use blkmq_core::BioFlags;
    /// use blkmq_sim::Io;
    /// assert_eq!(Io::read(0, 8).flags(BioFlags::SYNC).flags, BioFlags::SYNC);
    /// ```
    pub fn flags(mut self, flags: BioFlags) -> Self {
        self.flags = flags;
        self
    }

    /// With this priority.
    ///
    /// ```
    /// use blkmq_core::{IoPrio, IoPrioClass};
    /// use blkmq_sim::Io;
    /// let rt = IoPrio::new(IoPrioClass::RealTime, 0).unwrap();
    /// assert_eq!(Io::read(0, 8).prio(rt).prio, rt);
    /// ```
    pub fn prio(mut self, prio: IoPrio) -> Self {
        self.prio = prio;
        self
    }

    /// From this issuer.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sim::Io;
    /// assert_eq!(Io::read(0, 8).issuer(IssuerId(2)).issuer, IssuerId(2));
    /// ```
    pub fn issuer(mut self, issuer: IssuerId) -> Self {
        self.issuer = issuer;
        self
    }

    /// With the workload's own number.
    ///
    /// ```
    /// use blkmq_sim::Io;
    /// assert_eq!(Io::read(0, 8).tag(5).tag, 5);
    /// ```
    pub fn tag(mut self, tag: u64) -> Self {
        self.tag = tag;
        self
    }

    /// Its length in bytes.
    ///
    /// ```
    /// use blkmq_sim::Io;
    /// assert_eq!(Io::write(0, 256).bytes(), 128 * 1024);
    /// ```
    pub fn bytes(&self) -> u64 {
        u64::from(self.sectors) * SECTOR_SIZE
    }
}

/// An I/O that ended, as its workload is told.
///
/// ```
/// use blkmq_core::{Op, Status};
/// use blkmq_sim::Done;
/// let done = Done { tag: 1, op: Op::Read, sector: 0, bytes: 4096, status: Status::Ok,
///                   submitted_ns: 1_000, completed_ns: 1_500 };
/// assert_eq!(done.latency_ns(), 500);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// The workload's number for it ([`Io::tag`]).
    pub tag: u64,
    /// The operation.
    pub op: Op,
    /// The first sector.
    pub sector: u64,
    /// Its length in bytes.
    pub bytes: u64,
    /// How it ended.
    pub status: Status,
    /// When the workload submitted it.
    pub submitted_ns: u64,
    /// When it ended.
    pub completed_ns: u64,
}

impl Done {
    /// From submission to completion, waiting for a request included.
    ///
    /// ```
    /// use blkmq_core::{Op, Status};
    /// use blkmq_sim::Done;
    /// let done = Done { tag: 0, op: Op::Write, sector: 0, bytes: 512, status: Status::Ok,
    ///                   submitted_ns: 7, completed_ns: 7 };
    /// assert_eq!(done.latency_ns(), 0);
    /// ```
    pub fn latency_ns(&self) -> u64 {
        self.completed_ns.saturating_sub(self.submitted_ns)
    }
}

/// A request of a workload to the simulation.
#[derive(Debug)]
pub(crate) enum Action {
    /// Submit these, under one plug when `plugged`.
    Submit { ios: Vec<Io>, plugged: bool },
    /// Wake the workload at `at` with `token`.
    Wake { at: u64, token: u64 },
}

/// What a workload is given when called: the time, and the means to act.
///
/// ```
/// use blkmq_sim::{Cx, Done, Io, Workload};
///
/// /// Reads 4 KiB, waits 1 ms, reads the next 4 KiB: 3 times.
/// struct Sipper { left: u32 }
/// impl Workload for Sipper {
///     fn name(&self) -> String { "sipper".into() }
///     fn start(&mut self, cx: &mut Cx<'_>) { cx.submit(Io::read(0, 8)); }
///     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
///         self.left -= 1;
///         if self.left > 0 {
///             cx.wake_after(1_000_000, done.sector + 8);
///         }
///     }
///     fn woken(&mut self, cx: &mut Cx<'_>, sector: u64) { cx.submit(Io::read(sector, 8)); }
///     fn is_finished(&self) -> bool { self.left == 0 }
///     fn claimed_bytes(&self) -> u64 { 3 * 4096 }
/// }
///
/// use blkmq_sim::{Ideal, IdealParams, Sim};
/// let params = IdealParams { latency_ns: 100_000, bandwidth: 0, ..Default::default() };
/// let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
/// sim.add_workload(queue, Sipper { left: 3 });
/// let report = sim.run().unwrap();
/// assert_eq!(report.workloads[0].bytes_read, 3 * 4096);
/// assert_eq!(report.workloads[0].elapsed_ns(), 3 * 100_000 + 2 * 1_000_000);
/// ```
#[derive(Debug)]
pub struct Cx<'a> {
    pub(crate) now: u64,
    pub(crate) actions: &'a mut Vec<Action>,
}

impl Cx<'_> {
    /// The virtual time.
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         self.at.push(cx.now_ns()); // 0
    ///         cx.wake_after(5_000, 0);
    ///     }
    /// #     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    /// #         let _ = (cx, done);
    /// #     }
    ///     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    ///         let _ = token;
    ///         self.at.push(cx.now_ns()); // 5 us later
    ///         self.woken += 1;
    ///     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.woken == 1
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// assert_eq!(sim.workload(w).at, [0, 5_000]);
    /// ```
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// Submits one I/O (after the workload returns, in order with its other actions).
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         cx.submit(Io::write(0, 8).flags(BioFlags::SYNC));
    ///         cx.submit(Io::read(64, 8));
    ///     }
    /// #     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    /// #         let _ = done;
    /// #         self.ends += 1;
    /// #     }
    /// #     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    /// #         let _ = (cx, token);
    /// #     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.ends == 2
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// assert_eq!(report.workloads[0].ios, 2);
    /// assert_eq!(report.workloads[0].elapsed_ns(), 1_000_000); // in parallel
    /// ```
    pub fn submit(&mut self, io: Io) {
        self.actions.push(Action::Submit {
            ios: vec![io],
            plugged: false,
        });
    }

    /// Submits several I/Os under one plug, as the page cache does for a readahead window
    /// or a writeback batch: they may merge before reaching the queue.
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         // Three touching reads: one request.
    ///         cx.submit_plugged((0..3).map(|i| Io::read(i * 8, 8)));
    ///     }
    /// #     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    /// #         let _ = done;
    /// #         self.ends += 1;
    /// #     }
    /// #     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    /// #         let _ = (cx, token);
    /// #     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.ends == 3
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// assert_eq!(report.stats.bios_submitted, 3);
    /// use blkmq_sim::DeviceModel;
    /// assert_eq!(sim.host().driver().with_model(|m| m.stats().commands), 1);
    /// ```
    pub fn submit_plugged(&mut self, ios: impl IntoIterator<Item = Io>) {
        let ios: Vec<Io> = ios.into_iter().collect();
        if !ios.is_empty() {
            self.actions.push(Action::Submit { ios, plugged: true });
        }
    }

    /// Asks to be woken ([`Workload::woken`]) at virtual time `at_ns` (now, if past) with
    /// `token`.
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         cx.wake_at(2_000, 1);
    ///         cx.wake_at(1_000, 2);
    ///     }
    /// #     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    /// #         let _ = (cx, done);
    /// #     }
    ///     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    ///         self.at.push(token * 10_000 + cx.now_ns());
    ///         self.woken += 1;
    ///     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.woken == 2
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// assert_eq!(sim.workload(w).at, [21_000, 12_000]); // in time order
    /// ```
    pub fn wake_at(&mut self, at_ns: u64, token: u64) {
        self.actions.push(Action::Wake {
            at: at_ns.max(self.now),
            token,
        });
    }

    /// Asks to be woken after `delay_ns` of virtual time, with `token`.
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    /// #     fn start(&mut self, cx: &mut Cx<'_>) {
    /// #         cx.submit(Io::read(0, 8));
    /// #     }
    ///     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    ///         let _ = done;
    ///         cx.wake_after(500, 0); // half a microsecond to think
    ///     }
    ///     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    ///         let _ = (cx, token);
    ///         self.woken += 1;
    ///     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.woken == 1
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// assert_eq!(report.workloads[0].elapsed_ns(), 1_000_500);
    /// ```
    pub fn wake_after(&mut self, delay_ns: u64, token: u64) {
        self.wake_at(self.now.saturating_add(delay_ns), token);
    }
}

/// A program that issues I/O under simulation.
///
/// The simulation calls [`start`](Self::start) once at the workload's start time, then
/// [`completed`](Self::completed) for each of its I/Os as it ends and
/// [`woken`](Self::woken) for each wake-up it asked for. It is done when
/// [`is_finished`](Self::is_finished) says so and none of its I/O is outstanding; its
/// report then covers its start to that moment. [`claimed_bytes`](Self::claimed_bytes) is
/// what it means to move in all, which the report sets beside what it did move.
///
/// ```
/// use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
///
/// /// Writes 1 MiB in 4 KiB pieces, one at a time.
/// struct Trickle { next: u64 }
/// impl Workload for Trickle {
///     fn name(&self) -> String { "trickle".into() }
///     fn start(&mut self, cx: &mut Cx<'_>) { self.issue_next(cx) }
///     fn completed(&mut self, cx: &mut Cx<'_>, _: &Done) { self.issue_next(cx) }
///     fn is_finished(&self) -> bool { self.next == 256 }
///     fn claimed_bytes(&self) -> u64 { 256 * 4096 }
/// }
/// impl Trickle {
///     fn issue_next(&mut self, cx: &mut Cx<'_>) {
///         if self.next < 256 {
///             cx.submit(Io::write(self.next * 8, 8));
///             self.next += 1;
///         }
///     }
/// }
///
/// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
/// sim.add_workload(queue, Trickle { next: 0 });
/// let w = &sim.run().unwrap().workloads[0];
/// assert_eq!((w.bytes_written, w.claimed_bytes, w.ios), (1 << 20, 1 << 20, 256));
/// ```
pub trait Workload: Any {
    /// A name for reports.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Workload};
    /// assert_eq!(Dd::read(0, 1 << 20).name(), "dd read");
    /// ```
    fn name(&self) -> String;

    /// Starts: submit the first I/O, or ask to be woken.
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    ///     fn start(&mut self, cx: &mut Cx<'_>) {
    ///         self.at.push(cx.now_ns());
    ///         cx.submit(Io::read(0, 8));
    ///     }
    /// #     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    /// #         let _ = done;
    /// #         self.ends += 1;
    /// #     }
    /// #     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    /// #         let _ = (cx, token);
    /// #     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.ends == 1
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// # let _ = report;
    /// assert_eq!(sim.workload(w).at, [0]);
    /// ```
    fn start(&mut self, cx: &mut Cx<'_>);

    /// One of its I/Os ended.
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    /// #     fn start(&mut self, cx: &mut Cx<'_>) {
    /// #         cx.submit(Io::read(0, 8));
    /// #     }
    ///     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    ///         assert!(done.status.is_ok() && done.op == Op::Read);
    ///         self.at.push(done.latency_ns());
    ///         self.ends += 1;
    ///     }
    /// #     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    /// #         let _ = (cx, token);
    /// #     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.ends == 1
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// # let _ = report;
    /// assert_eq!(sim.workload(w).at, [1_000_000]);
    /// ```
    fn completed(&mut self, cx: &mut Cx<'_>, done: &Done);

    /// A wake-up it asked for, with its token.
    ///
    /// ```
    /// # use blkmq_core::{BioFlags, Op};
    /// # use blkmq_sim::{Cx, Done, Ideal, IdealParams, Io, Sim, Workload};
    /// # #[derive(Default)]
    /// # struct W { ends: u32, woken: u32, at: Vec<u64> }
    /// impl Workload for W {
    /// #   fn name(&self) -> String { "w".into() }
    /// #   fn claimed_bytes(&self) -> u64 { 0 }
    /// #     fn start(&mut self, cx: &mut Cx<'_>) {
    /// #         cx.wake_after(10, 7);
    /// #     }
    /// #     fn completed(&mut self, cx: &mut Cx<'_>, done: &Done) {
    /// #         let _ = (cx, done);
    /// #     }
    ///     fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
    ///         assert_eq!((token, cx.now_ns()), (7, 10));
    ///         self.woken += 1;
    ///     }
    /// #     fn is_finished(&self) -> bool {
    /// #         self.woken == 1
    /// #     }
    /// }
    /// # let params = IdealParams { latency_ns: 1_000_000, bandwidth: 0, ..Default::default() };
    /// # let (mut sim, queue) = Sim::for_model(Ideal::new(params).unwrap(), 1, None).unwrap();
    /// let w = sim.add_workload(queue, W::default());
    /// let report = sim.run().unwrap();
    /// assert!(report.workloads[0].finished);
    /// ```
    fn woken(&mut self, cx: &mut Cx<'_>, token: u64) {
        let _ = (cx, token);
    }

    /// Whether it has nothing more to do (once its outstanding I/O ends).
    ///
    /// ```
    /// use blkmq_sim::{Dd, Workload};
    /// assert!(!Dd::read(0, 4096).is_finished()); // not started
    /// ```
    fn is_finished(&self) -> bool;

    /// The bytes it means to move in all, every operation counted.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Workload};
    /// assert_eq!(Dd::read(0, 1 << 30).claimed_bytes(), 1 << 30);
    /// ```
    fn claimed_bytes(&self) -> u64;
}
