//! Drivers under simulation: the interrupt hook every simulated driver has
//! ([`SimDriver`]), what an interrupt handler is given ([`IrqCx`]), and a ready driver for
//! any [`DeviceModel`] ([`ModelDriver`]).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use blkmq_core::{
    Driver, HctxCx, Platform, QueueConfig, QueueLimits, Rejected, RequestInit, RequestQueue, Rq,
    Status, TagSet, TagSetBuilder,
};

use crate::data::Medium;
use crate::device::{CmdId, Command, DeviceModel};
use crate::platform::SimPlatform;

/// A blkmq driver that runs under [`Sim`](crate::Sim): besides [`Driver`], it handles the
/// interrupts it asked for with [`SimPlatform::raise_irq`].
///
/// A driver starts a command in [`Driver::queue_rq`], raises an interrupt at the time the
/// device will be done, and in [`interrupt`](Self::interrupt) ends what finished with
/// [`IrqCx::end_request`]. It must not hold its own locks across `end_request`: ending a
/// request may rerun the queue, which calls `queue_rq` again.
///
/// ```
/// use std::sync::Mutex;
/// use blkmq_core::*;
/// use blkmq_sim::{Dd, IrqCx, Sim, SimDriver, SimPlatform};
///
/// /// Completes every request 1 ms after it was issued, any number at once.
/// struct Slow {
///     platform: SimPlatform,
///     held: Mutex<Vec<(u64, Rq)>>,
/// }
/// impl Driver for Slow {
///     type Platform = SimPlatform;
///     type Payload = ();
///     fn init_request(&self, _: RequestInit) {}
///     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
///         let done = self.platform.now_ns() + 1_000_000;
///         self.held.lock().unwrap().push((done, rq));
///         self.platform.raise_irq(done, 0);
///         Ok(())
///     }
/// }
/// impl SimDriver for Slow {
///     fn interrupt(&self, cx: &IrqCx<'_, Self>, _line: u64) {
///         let due: Vec<Rq> = {
///             let mut held = self.held.lock().unwrap();
///             let (due, rest) = held.drain(..).partition(|(t, _)| *t <= cx.now_ns());
///             *held = rest;
///             due.into_iter().map(|(_, rq)| rq).collect()
///         }; // the lock is dropped before ending anything
///         for rq in due {
///             cx.end_request(rq, Status::Ok).unwrap();
///         }
///     }
/// }
///
/// let platform = SimPlatform::new(1);
/// let driver = Slow { platform: platform.clone(), held: Mutex::new(Vec::new()) };
/// let mut sim = Sim::new(platform, TagSet::builder(4), driver).unwrap();
/// let queue = sim.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// sim.add_workload(queue, Dd::read(0, 1 << 20)); // 8 bios of 128 KiB, 2 at a time
/// let report = sim.run().unwrap();
/// assert_eq!(report.workloads[0].bytes_read, 1 << 20);
/// assert_eq!(report.now_ns, 4_000_000); // 4 rounds of 2 bios
/// ```
pub trait SimDriver: Driver<Platform = SimPlatform> {
    /// Handles interrupt `line`, raised at the current virtual time.
    ///
    /// [`ModelDriver`] implements it; a simulation calls it:
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, Sim};
    /// let (mut sim, queue) = Sim::for_model(Ideal::new(IdealParams::default()).unwrap(), 1, None).unwrap();
    /// sim.add_workload(queue, Dd::read(0, 4096));
    /// assert_eq!(sim.run().unwrap().stats.irqs, 1); // one request, one interrupt
    /// ```
    fn interrupt(&self, cx: &IrqCx<'_, Self>, line: u64);
}

/// What an interrupt handler is given: the time, and the queues to end requests on.
///
/// ```
/// # use std::sync::Mutex;
/// # use blkmq_core::*;
/// # use blkmq_sim::{Dd, IrqCx, Sim, SimDriver, SimPlatform};
/// /// Completes everything it holds at the first interrupt.
/// struct Batch(SimPlatform, Mutex<Vec<Rq>>);
/// # impl Driver for Batch {
/// #     type Platform = SimPlatform;
/// #     type Payload = ();
/// #     fn init_request(&self, _: RequestInit) {}
/// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
/// #         self.1.lock().unwrap().push(rq);
/// #         self.0.raise_irq(self.0.now_ns() + 1_000, 0);
/// #         Ok(())
/// #     }
/// # }
/// impl SimDriver for Batch {
///     fn interrupt(&self, cx: &IrqCx<'_, Self>, _: u64) {
///         assert_eq!(cx.queues().len(), 1);
///         let held: Vec<Rq> = self.1.lock().unwrap().drain(..).collect();
///         for rq in held {
///             assert!(cx.queue_of(&rq).is_some());
///             cx.end_request(rq, Status::Ok).unwrap();
///         }
///     }
/// }
/// let platform = SimPlatform::new(1);
/// let driver = Batch(platform.clone(), Mutex::new(Vec::new()));
/// let mut sim = Sim::new(platform, TagSet::builder(8), driver).unwrap();
/// let queue = sim.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
/// sim.add_workload(queue, Dd::read(0, 4096));
/// assert_eq!(sim.run().unwrap().now_ns, 1_000);
/// ```
pub struct IrqCx<'a, D: Driver> {
    pub(crate) queues: &'a [Arc<RequestQueue<D>>],
    pub(crate) now: u64,
}

impl<'a, D: Driver> IrqCx<'a, D> {
    /// The virtual time of the interrupt.
    ///
    /// ```
    /// # use std::sync::Mutex;
    /// # use blkmq_core::*;
    /// # use blkmq_sim::{Dd, IrqCx, Sim, SimDriver, SimPlatform};
    /// # struct Batch(SimPlatform, Mutex<Vec<Rq>>);
    /// # impl Driver for Batch {
    /// #     type Platform = SimPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.1.lock().unwrap().push(rq);
    /// #         self.0.raise_irq(self.0.now_ns() + 1_000, 0);
    /// #         Ok(())
    /// #     }
    /// # }
    /// impl SimDriver for Batch {
    ///     fn interrupt(&self, cx: &IrqCx<'_, Self>, _: u64) {
    ///         let held: Vec<Rq> = self.1.lock().unwrap().drain(..).collect();
    ///         assert_eq!(cx.now_ns(), 1_000); // raised for 1 us after the issue at 0
    ///         for rq in held {
    ///             cx.end_request(rq, Status::Ok).unwrap();
    ///         }
    ///     }
    /// }
    /// # let platform = SimPlatform::new(1);
    /// # let driver = Batch(platform.clone(), Mutex::new(Vec::new()));
    /// # let mut sim = Sim::new(platform, TagSet::builder(8), driver).unwrap();
    /// # let queue = sim.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
    /// # sim.add_workload(queue, Dd::read(0, 4096));
    /// sim.run().unwrap();
    /// ```
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// Every queue of the simulation, in the order they were added.
    ///
    /// ```
    /// # use std::sync::Mutex;
    /// # use blkmq_core::*;
    /// # use blkmq_sim::{Dd, IrqCx, Sim, SimDriver, SimPlatform};
    /// # struct Batch(SimPlatform, Mutex<Vec<Rq>>);
    /// # impl Driver for Batch {
    /// #     type Platform = SimPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.1.lock().unwrap().push(rq);
    /// #         self.0.raise_irq(self.0.now_ns() + 1_000, 0);
    /// #         Ok(())
    /// #     }
    /// # }
    /// impl SimDriver for Batch {
    ///     fn interrupt(&self, cx: &IrqCx<'_, Self>, _: u64) {
    ///         let held: Vec<Rq> = self.1.lock().unwrap().drain(..).collect();
    ///         for rq in held {
    ///             let queue = &cx.queues()[0]; // the only one
    ///             queue.end_request(rq, Status::Ok).unwrap();
    ///         }
    ///     }
    /// }
    /// # let platform = SimPlatform::new(1);
    /// # let driver = Batch(platform.clone(), Mutex::new(Vec::new()));
    /// # let mut sim = Sim::new(platform, TagSet::builder(8), driver).unwrap();
    /// # let queue = sim.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
    /// # sim.add_workload(queue, Dd::read(0, 4096));
    /// sim.run().unwrap();
    /// ```
    pub fn queues(&self) -> &'a [Arc<RequestQueue<D>>] {
        self.queues
    }

    /// The queue that owns `rq`.
    ///
    /// ```
    /// # use std::sync::Mutex;
    /// # use blkmq_core::*;
    /// # use blkmq_sim::{Dd, IrqCx, Sim, SimDriver, SimPlatform};
    /// # struct Batch(SimPlatform, Mutex<Vec<Rq>>);
    /// # impl Driver for Batch {
    /// #     type Platform = SimPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.1.lock().unwrap().push(rq);
    /// #         self.0.raise_irq(self.0.now_ns() + 1_000, 0);
    /// #         Ok(())
    /// #     }
    /// # }
    /// impl SimDriver for Batch {
    ///     fn interrupt(&self, cx: &IrqCx<'_, Self>, _: u64) {
    ///         let held: Vec<Rq> = self.1.lock().unwrap().drain(..).collect();
    ///         for rq in held {
    ///             let queue = cx.queue_of(&rq).unwrap();
    ///             assert_eq!(queue.io(&rq).unwrap().sectors(), 8);
    ///             queue.end_request(rq, Status::Ok).unwrap();
    ///         }
    ///     }
    /// }
    /// # let platform = SimPlatform::new(1);
    /// # let driver = Batch(platform.clone(), Mutex::new(Vec::new()));
    /// # let mut sim = Sim::new(platform, TagSet::builder(8), driver).unwrap();
    /// # let queue = sim.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
    /// # sim.add_workload(queue, Dd::read(0, 4096));
    /// sim.run().unwrap();
    /// ```
    pub fn queue_of(&self, rq: &Rq) -> Option<&'a RequestQueue<D>> {
        self.queues
            .iter()
            .find(|q| q.request(rq).is_some())
            .map(|q| &**q)
    }

    /// Ends `rq` with `status` on the queue that owns it.
    ///
    /// # Errors
    /// The request back if no queue of the simulation owns it.
    ///
    /// ```
    /// # use std::sync::Mutex;
    /// # use blkmq_core::*;
    /// # use blkmq_sim::{Dd, IrqCx, Sim, SimDriver, SimPlatform};
    /// # struct Batch(SimPlatform, Mutex<Vec<Rq>>);
    /// # impl Driver for Batch {
    /// #     type Platform = SimPlatform;
    /// #     type Payload = ();
    /// #     fn init_request(&self, _: RequestInit) {}
    /// #     fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _: bool) -> Result<(), Rejected> {
    /// #         self.1.lock().unwrap().push(rq);
    /// #         self.0.raise_irq(self.0.now_ns() + 1_000, 0);
    /// #         Ok(())
    /// #     }
    /// # }
    /// impl SimDriver for Batch {
    ///     fn interrupt(&self, cx: &IrqCx<'_, Self>, _: u64) {
    ///         let held: Vec<Rq> = self.1.lock().unwrap().drain(..).collect();
    ///         for rq in held {
    ///             cx.end_request(rq, Status::IoErr).unwrap();
    ///         }
    ///     }
    /// }
    /// # let platform = SimPlatform::new(1);
    /// # let driver = Batch(platform.clone(), Mutex::new(Vec::new()));
    /// # let mut sim = Sim::new(platform, TagSet::builder(8), driver).unwrap();
    /// # let queue = sim.add_queue(QueueConfig::new(QueueLimits::new(1 << 20))).unwrap();
    /// # sim.add_workload(queue, Dd::read(0, 4096));
    /// assert_eq!(sim.run().unwrap().stats.errors, 1);
    /// ```
    pub fn end_request(&self, rq: Rq, status: Status) -> Result<(), Rq> {
        match self.queue_of(&rq) {
            Some(queue) => queue.end_request(rq, status).map_err(|misused| misused.rq),
            None => Err(rq),
        }
    }
}

impl<D: Driver> fmt::Debug for IrqCx<'_, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IrqCx")
            .field("now_ns", &self.now)
            .field("queues", &self.queues.len())
            .finish()
    }
}

/// The state behind a [`ModelDriver`]'s lock.
struct ModelState<M> {
    model: M,
    /// The request of each command id in the device.
    held: Vec<Option<Rq>>,
    free: Vec<usize>,
    /// The earliest interrupt asked for and not yet taken.
    armed: Option<u64>,
    rejected: u64,
    done: Vec<CmdId>,
    ended: Vec<Rq>,
    /// The device's data, when it keeps it ([`ModelDriver::keep_data`]).
    data: Option<Medium>,
    scratch: Vec<u8>,
}

/// A driver for any [`DeviceModel`]: one command per request, the device's own queue depth,
/// completions by interrupt.
///
/// `queue_rq` hands the request to the model, or pushes back with
/// [`Status::Resource`] when the model holds its queue depth already (the queue then
/// reruns on the next completion); the interrupt collects what the model finished and
/// ends those requests. Use [`ModelDriver::tag_set`] and [`ModelDriver::queue_config`] for
/// the tag set and limits that fit the device, or [`Sim::for_model`](crate::Sim::for_model)
/// for both.
///
/// ```
/// use blkmq_core::Host;
/// use blkmq_sim::{DeviceModel, ModelDriver, Ssd, SsdParams, SimPlatform};
///
/// let platform = SimPlatform::new(2);
/// let driver = ModelDriver::new(platform.clone(), Ssd::new(SsdParams::default()).unwrap());
/// assert_eq!(driver.limits().max_discard_sectors, 1 << 22);
/// let host = Host::new(driver.tag_set(), platform, driver).unwrap();
/// assert_eq!(host.set().depth(), 32); // the drive's NCQ depth
/// ```
pub struct ModelDriver<M> {
    platform: SimPlatform,
    line: u64,
    state: Mutex<ModelState<M>>,
}

impl<M: DeviceModel> ModelDriver<M> {
    /// A driver of `model`, raising its interrupts on `platform` (line 0).
    ///
    /// ```
    /// use blkmq_sim::{DeviceModel, Disk, DiskParams, ModelDriver, SimPlatform};
    /// let driver = ModelDriver::new(SimPlatform::new(1), Disk::new(DiskParams::default()).unwrap());
    /// assert_eq!(driver.with_model(|disk| disk.name()), "disk");
    /// ```
    pub fn new(platform: SimPlatform, model: M) -> Self {
        Self {
            platform,
            line: 0,
            state: Mutex::new(ModelState {
                model,
                held: Vec::new(),
                free: Vec::new(),
                armed: None,
                rejected: 0,
                done: Vec::new(),
                ended: Vec::new(),
                data: None,
                scratch: Vec::new(),
            }),
        }
    }

    /// The same driver keeping the device's data: a write's bytes are stored when the
    /// device takes the command, a read is filled from what is stored then (zeroes where
    /// nothing was written), discard and write-zeroes zero their range. The bytes are those
    /// the bios' segments name in the platform's [`SimMemory`](crate::SimMemory); a bio
    /// that names none moves nothing. Timing is the model's, as without.
    ///
    /// ```
    /// use blkmq_sim::{Dd, Ideal, IdealParams, ModelDriver, Sim, SimPlatform};
    /// let platform = SimPlatform::new(1);
    /// let driver = ModelDriver::new(platform.clone(), Ideal::new(IdealParams::default()).unwrap())
    ///     .keep_data();
    /// let (tags, config) = (driver.tag_set(), driver.queue_config());
    /// let mut sim = Sim::new(platform, tags, driver).unwrap();
    /// let queue = sim.add_queue(config).unwrap();
    /// sim.check_data(); // the bios name buffers, writes carry a pattern
    /// sim.add_workload(queue, Dd::write(0, 4096));
    /// sim.run().unwrap();
    /// let mut stored = [0u8; 512];
    /// assert!(sim.host().driver().read_data(0, &mut stored));
    /// assert!(stored.iter().any(|&b| b != 0));
    /// ```
    pub fn keep_data(self) -> Self {
        self.lock().data = Some(Medium::default());
        self
    }

    /// Copies the stored bytes from sector `sector` into `out`; `false` when the driver
    /// keeps no data ([`keep_data`](Self::keep_data)).
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, ModelDriver, SimPlatform};
    /// let model = Ideal::new(IdealParams::default()).unwrap();
    /// let mut out = [1u8; 512];
    /// assert!(!ModelDriver::new(SimPlatform::new(1), model).read_data(0, &mut out));
    /// let model = Ideal::new(IdealParams::default()).unwrap();
    /// let driver = ModelDriver::new(SimPlatform::new(1), model).keep_data();
    /// assert!(driver.read_data(0, &mut out) && out == [0; 512]); // never written
    /// ```
    pub fn read_data(&self, sector: u64, out: &mut [u8]) -> bool {
        match &self.lock().data {
            Some(medium) => {
                medium.read(sector * blkmq_core::SECTOR_SIZE, out);
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, ModelState<M>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the model (to read its state or statistics).
    ///
    /// ```
    /// use blkmq_sim::{CardParams, DeviceModel, MmcCard, ModelDriver, SimPlatform};
    /// let driver = ModelDriver::new(SimPlatform::new(1), MmcCard::new(CardParams::default()).unwrap());
    /// assert_eq!(driver.with_model(|card| card.stats().commands), 0);
    /// ```
    pub fn with_model<R>(&self, f: impl FnOnce(&M) -> R) -> R {
        f(&self.lock().model)
    }

    /// Requests turned away because the device was full, so far.
    ///
    /// ```
    /// use blkmq_sim::{Ideal, IdealParams, ModelDriver, SimPlatform};
    /// let driver = ModelDriver::new(SimPlatform::new(1), Ideal::new(IdealParams::default()).unwrap());
    /// assert_eq!(driver.rejected(), 0);
    /// ```
    pub fn rejected(&self) -> u64 {
        self.lock().rejected
    }

    /// The device's queue limits.
    ///
    /// ```
    /// use blkmq_sim::{DiskParams, Disk, ModelDriver, SimPlatform};
    /// let driver = ModelDriver::new(SimPlatform::new(1), Disk::new(DiskParams::default()).unwrap());
    /// assert_eq!(driver.limits().max_sectors, 2560);
    /// ```
    pub fn limits(&self) -> QueueLimits {
        self.lock().model.limits()
    }

    /// A tag set as deep as the device's queue, one hardware queue, with room for every
    /// request in the device to hold as many merged bios as it has segments.
    ///
    /// ```
    /// use blkmq_sim::{CardParams, MmcCard, ModelDriver, SimPlatform};
    /// use blkmq_core::Host;
    /// let platform = SimPlatform::new(1);
    /// let driver = ModelDriver::new(platform.clone(), MmcCard::new(CardParams::default()).unwrap());
    /// let host = Host::new(driver.tag_set(), platform, driver).unwrap();
    /// assert_eq!(host.set().depth(), 2);
    /// ```
    pub fn tag_set(&self) -> TagSetBuilder {
        let st = self.lock();
        let depth = st.model.queue_depth();
        let segments = st.model.limits().max_segments as usize;
        TagSet::builder(depth).bio_slots(depth * segments)
    }

    /// A queue configuration with the device's limits and I/O accounting on (add an elevator
    /// to it as needed).
    ///
    /// ```
    /// use blkmq_sim::{CardParams, MmcCard, ModelDriver, SimPlatform};
    /// let driver = ModelDriver::new(SimPlatform::new(1), MmcCard::new(CardParams::default()).unwrap());
    /// assert_eq!(driver.queue_config().limits.max_sectors, 1024);
    /// assert!(driver.queue_config().accounting); // I/O accounting on
    /// ```
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig::new(self.limits()).accounting(true)
    }

    /// Asks for an interrupt at the model's next completion if none is asked for earlier.
    fn arm(&self, st: &mut ModelState<M>) {
        if let Some(t) = st.model.next_completion() {
            if st.armed.is_none_or(|armed| t < armed) {
                self.platform.raise_irq(t, self.line);
                st.armed = Some(t);
            }
        }
    }
}

impl<M: DeviceModel> Driver for ModelDriver<M> {
    type Platform = SimPlatform;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        let Some(io) = cx.io(&rq) else {
            return Err(Rejected {
                rq,
                status: Status::IoErr,
            });
        };
        let cmd = Command {
            op: io.op(),
            sector: io.sector(),
            sectors: io.sectors(),
            flags: io.flags(),
        };
        let now = self.platform.now_ns();
        let mut st = self.lock();
        if st.model.in_flight() >= st.model.queue_depth() {
            st.rejected += 1;
            return Err(Rejected {
                rq,
                status: Status::Resource,
            });
        }
        let slot = match st.free.pop() {
            Some(slot) => slot,
            None => {
                st.held.push(None);
                st.held.len() - 1
            }
        };
        match st.model.submit(now, slot as CmdId, cmd) {
            Ok(()) => {
                let state = &mut *st;
                if let Some(medium) = state.data.as_mut() {
                    let (memory, scratch) = (self.platform.memory(), &mut state.scratch);
                    cx.for_each_bio(&rq, |bio| medium.serve(memory, bio, scratch));
                }
                st.held[slot] = Some(rq);
                self.arm(&mut st);
                Ok(())
            }
            Err(_) => {
                st.free.push(slot);
                st.rejected += 1;
                Err(Rejected {
                    rq,
                    status: Status::Resource,
                })
            }
        }
    }
}

impl<M: DeviceModel> SimDriver for ModelDriver<M> {
    fn interrupt(&self, cx: &IrqCx<'_, Self>, _line: u64) {
        let now = cx.now_ns();
        let mut ended = {
            let mut st = self.lock();
            if st.armed.is_some_and(|t| t <= now) {
                st.armed = None;
            }
            let mut done = std::mem::take(&mut st.done);
            let mut ended = std::mem::take(&mut st.ended);
            st.model.complete(now, &mut done);
            for id in done.drain(..) {
                let slot = id as usize;
                if let Some(rq) = st.held.get_mut(slot).and_then(Option::take) {
                    ended.push(rq);
                    st.free.push(slot);
                }
            }
            st.done = done;
            self.arm(&mut st);
            ended
        };
        for rq in ended.drain(..) {
            // Every request came from one of the simulation's queues.
            let _ = cx.end_request(rq, Status::Ok);
        }
        let mut st = self.lock();
        if st.ended.capacity() < ended.capacity() {
            st.ended = ended;
        }
    }
}

impl<M: DeviceModel + fmt::Debug> fmt::Debug for ModelDriver<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("ModelDriver")
            .field("model", &st.model)
            .field("rejected", &st.rejected)
            .finish_non_exhaustive()
    }
}
