//! The submitter's side of a bio: how it learns that the bio ended, and how.

use core::fmt;

use blkmq_core::{Bio, Status};

#[cfg(not(loom))]
use alloc::sync::Arc;
#[cfg(not(loom))]
use core::sync::atomic::{AtomicUsize, Ordering};
#[cfg(loom)]
use loom::sync::Arc;
#[cfg(loom)]
use loom::sync::atomic::{AtomicUsize, Ordering};

/// What a submitter keeps of one bio: how often it ended, and whether it succeeded.
///
/// Clones share the marks.
///
/// [`bio`](Self::bio) makes the bio carry a reference to the ticket (in its `private`
/// word) and an `end_io` that marks the ticket and gives the reference back. So a bio that
/// never ends keeps its ticket alive, which loom reports as a leak, and a bio that ends
/// twice panics in its second `end_io`: each is a broken promise of the block layer
/// (a bio ends exactly once), which this crate's checks look for. Keep the ticket until
/// the bio has ended: the second end of a bio whose ticket is gone has nothing to mark.
///
/// Under `--cfg loom` the ticket's counters and reference are loom's, so the model sees
/// them.
///
/// ```
/// use blkmq_core::{Bio, Op, Status};
/// use blkmq_example_driver::Ticket;
///
/// let ticket = Ticket::new();
/// let bio = ticket.bio(Bio::new(Op::Read, 0, 8));
/// assert_eq!(ticket.ended(), 0);
/// bio.complete(Status::Ok);
/// assert_eq!((ticket.ended(), ticket.ended_ok()), (1, true));
/// ```
#[derive(Clone)]
pub struct Ticket {
    marks: Arc<Marks>,
}

/// What a ticket's bio marks.
struct Marks {
    ended: AtomicUsize,
    ok: AtomicUsize,
}

impl Ticket {
    /// A ticket for a bio not yet submitted.
    ///
    /// ```
    /// use blkmq_example_driver::Ticket;
    ///
    /// let ticket = Ticket::new();
    /// assert_eq!((ticket.ended(), ticket.ended_ok()), (0, false));
    /// ```
    pub fn new() -> Self {
        Self {
            marks: Arc::new(Marks {
                ended: AtomicUsize::new(0),
                ok: AtomicUsize::new(0),
            }),
        }
    }

    /// `bio`, reporting its end to this ticket (its `private` word and `end_io` are
    /// taken for that).
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Status};
    /// use blkmq_example_driver::Ticket;
    ///
    /// let ticket = Ticket::new();
    /// ticket.bio(Bio::new(Op::Write, 8, 8)).complete(Status::IoErr);
    /// assert_eq!((ticket.ended(), ticket.ended_ok()), (1, false));
    /// ```
    pub fn bio(&self, bio: Bio) -> Bio {
        let reference = Arc::into_raw(Arc::clone(&self.marks));
        bio.private(reference as usize as u64).end_io(Self::end_io)
    }

    /// How many times the bio ended: 0 before, 1 after.
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Status};
    /// use blkmq_example_driver::Ticket;
    ///
    /// let ticket = Ticket::new();
    /// let bio = ticket.bio(Bio::new(Op::Read, 0, 8));
    /// assert_eq!(ticket.ended(), 0);
    /// bio.complete(Status::Ok);
    /// assert_eq!(ticket.ended(), 1);
    /// ```
    pub fn ended(&self) -> usize {
        self.marks.ended.load(Ordering::SeqCst)
    }

    /// Whether the bio ended with [`Status::Ok`].
    ///
    /// ```
    /// use blkmq_core::{Bio, Op, Status};
    /// use blkmq_example_driver::Ticket;
    ///
    /// let ticket = Ticket::new();
    /// ticket.bio(Bio::new(Op::Read, 0, 8)).complete(Status::Ok);
    /// assert!(ticket.ended_ok());
    /// ```
    pub fn ended_ok(&self) -> bool {
        self.marks.ok.load(Ordering::SeqCst) != 0
    }

    /// The `end_io` of a ticket's bio.
    fn end_io(bio: Bio, status: Status) {
        let reference = bio.private as usize as *const Marks;
        // SAFETY: `private` is the reference `bio` made with `Arc::into_raw`. On the first
        // end it is still held (given back only below), so the ticket is alive. A second
        // end finds the ticket alive only while its submitter keeps it, as the type's docs
        // ask, and panics before giving anything back.
        let marks = unsafe { &*reference };
        let before = marks.ended.fetch_add(1, Ordering::SeqCst);
        assert_eq!(before, 0, "a bio ended twice");
        if status.is_ok() {
            marks.ok.store(1, Ordering::SeqCst);
        }
        // SAFETY: the reference made by `bio`, given back once: this is the bio's first end
        // (checked above), and only its end gives it back.
        drop(unsafe { Arc::from_raw(reference) });
    }
}

impl Default for Ticket {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ticket")
            .field("ended", &self.ended())
            .field("ok", &self.ended_ok())
            .finish()
    }
}
