//! Drivers that move no data, for doc examples, tests and benches.
//!
//! Linux has `null_blk` for the same purpose: a block device whose driver ends every request
//! without touching a medium, so what is measured or checked is the block layer alone. Two
//! drivers are here:
//!
//! * [`Null`] ends every request inside [`Driver::queue_rq`], with [`Status::Ok`].
//! * [`Hold`] keeps every request it is given until the caller takes them
//!   ([`Hold::take`]) and ends, requeues or inspects them, so a test controls exactly what
//!   is in the driver at each step.
//!
//! Both work on any [`Platform`]: the platform is a type parameter, inferred from the one
//! the [`Host`](crate::Host) is made with.
//!
//! ```
//! use blkmq_core::testing::{Hold, Null};
//! use blkmq_core::*;
//!
//! let host = Host::new(TagSet::builder(8), StdPlatform::new(), Null::new()).unwrap();
//! let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
//! queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
//! assert_eq!(host.in_driver(), 0); // ended inside `queue_rq`
//!
//! let host = Host::new(TagSet::builder(8), StdPlatform::new(), Hold::new()).unwrap();
//! let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
//! queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
//! assert_eq!(host.in_driver(), 1);
//! for rq in host.driver().take() {
//!     queue.end_request(rq, Status::Ok);
//! }
//! assert_eq!(host.in_driver(), 0);
//! ```

use alloc::vec::Vec;
use core::fmt;
use core::marker::PhantomData;

use crate::bio::Status;
use crate::driver::{Driver, HctxCx, Rejected};
use crate::platform::Platform;
use crate::request::Rq;
use crate::tags::RequestInit;

/// A driver that ends every request as soon as it is issued, with [`Status::Ok`].
///
/// ```
/// use blkmq_core::testing::Null;
/// use blkmq_core::*;
///
/// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Null::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// for i in 0..16 {
///     queue.submit(Bio::new(Op::Write, i * 8, 8)).unwrap();
/// }
/// assert_eq!(queue.usage(), 0);
/// ```
pub struct Null<P> {
    platform: PhantomData<fn() -> P>,
}

impl<P> Null<P> {
    /// A null driver.
    ///
    /// ```
    /// # use blkmq_core::testing::Null;
    /// # use blkmq_core::StdPlatform;
    /// let driver: Null<StdPlatform> = Null::new();
    /// # let _ = driver;
    /// ```
    pub const fn new() -> Self {
        Null {
            platform: PhantomData,
        }
    }
}

impl<P> Default for Null<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P> fmt::Debug for Null<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Null")
    }
}

impl<P: Platform> Driver for Null<P> {
    type Platform = P;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, cx: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        cx.queue().end_request(rq, Status::Ok);
        Ok(())
    }
}

/// A driver that keeps every request it is given until [`take`](Hold::take)n.
///
/// The requests stay in flight (started, counted by [`Host::in_driver`](crate::Host::in_driver))
/// until the caller ends or requeues them through their queue.
///
/// ```
/// use blkmq_core::testing::Hold;
/// use blkmq_core::*;
///
/// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Hold::new()).unwrap();
/// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
/// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
/// queue.submit(Bio::new(Op::Read, 32, 8)).unwrap();
/// assert_eq!(host.driver().len(), 2);
/// let held = host.driver().take();
/// assert!(host.driver().is_empty());
/// queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
/// assert_eq!(host.in_driver(), 0);
/// ```
pub struct Hold<P: Platform> {
    held: lock_api::Mutex<P::RawMutex, Vec<Rq>>,
}

impl<P: Platform> Hold<P> {
    /// A driver holding nothing yet.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::StdPlatform;
    /// let driver: Hold<StdPlatform> = Hold::new();
    /// assert!(driver.is_empty());
    /// ```
    pub fn new() -> Self {
        Hold {
            held: lock_api::Mutex::new(Vec::new()),
        }
    }

    /// Every request held, in the order they were issued; the driver holds none after.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::*;
    /// let host = Host::new(TagSet::builder(4), StdPlatform::new(), Hold::new()).unwrap();
    /// let queue = host.add_queue(QueueConfig::new(QueueLimits::new(64))).unwrap();
    /// queue.submit(Bio::new(Op::Read, 0, 8)).unwrap();
    /// let held = host.driver().take();
    /// assert_eq!(queue.io(&held[0]).unwrap().sector(), 0);
    /// # queue.end_requests(held.into_iter().map(|rq| (rq, Status::Ok)));
    /// ```
    pub fn take(&self) -> Vec<Rq> {
        core::mem::take(&mut *self.held.lock())
    }

    /// How many requests are held.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::StdPlatform;
    /// assert_eq!(Hold::<StdPlatform>::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.held.lock().len()
    }

    /// Whether no request is held.
    ///
    /// ```
    /// # use blkmq_core::testing::Hold;
    /// # use blkmq_core::StdPlatform;
    /// assert!(Hold::<StdPlatform>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.held.lock().is_empty()
    }
}

impl<P: Platform> Default for Hold<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Platform> fmt::Debug for Hold<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hold").field("held", &self.len()).finish()
    }
}

impl<P: Platform> Driver for Hold<P> {
    type Platform = P;
    type Payload = ();

    fn init_request(&self, _: RequestInit) {}

    fn queue_rq(&self, _: &HctxCx<'_, Self>, rq: Rq, _last: bool) -> Result<(), Rejected> {
        self.held.lock().push(rq);
        Ok(())
    }
}
