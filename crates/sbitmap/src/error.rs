//! Errors: bad configuration and misuse are values, never silent corruption.

use core::fmt;

/// What went wrong in a call to [`Sbitmap`](crate::Sbitmap) or
/// [`SbitmapQueue`](crate::SbitmapQueue).
///
/// Every variant is detected before anything is changed: a call that returns an error leaves
/// the bitmap as it was.
///
/// ```
/// use blkmq_sbitmap::{Sbitmap, SbitmapError};
///
/// assert_eq!(Sbitmap::new(0).unwrap_err(), SbitmapError::ZeroDepth);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SbitmapError {
    /// A bitmap (or a resize) asked for zero bits.
    ZeroDepth,
    /// The requested depth does not fit: more than [`MAX_DEPTH`](crate::MAX_DEPTH) bits, or
    /// a resize above the depth the bitmap was created with.
    DepthTooLarge {
        /// The depth asked for.
        depth: usize,
        /// The largest depth allowed here.
        max: usize,
    },
    /// An explicit shift gives words wider than a machine word.
    BadShift {
        /// The shift asked for.
        shift: u32,
        /// The largest shift allowed (`log2(usize::BITS)`).
        max: u32,
    },
    /// A bit number at or beyond the bitmap's depth.
    OutOfRange {
        /// The bit number given.
        bit: usize,
        /// The bitmap's depth (bits `0..depth` exist).
        depth: usize,
    },
    /// A bit that is not allocated was freed: a double put, or a put of a bit never got.
    ///
    /// Detected when the bit is visibly free at the time of the put (clear in the word, or
    /// already waiting in the deferred-clear mask). A double put that races with a new
    /// allocation of the same bit cannot be told apart from a legitimate put; no bitmap that
    /// stores one bit per tag can.
    NotAllocated {
        /// The bit that was freed.
        bit: usize,
    },
    /// A shallow allocation asked for a depth below the queue's declared
    /// `min_shallow_depth`; the wake batch was sized on that minimum, so waiters could hang.
    ShallowBelowMinimum {
        /// The shallow depth asked for.
        shallow_depth: usize,
        /// The declared minimum.
        min_shallow_depth: usize,
    },
    /// A batch put named bits that do not lie in one word starting at `offset`.
    BadBatch {
        /// The offset given.
        offset: usize,
        /// The mask given.
        mask: usize,
    },
}

impl fmt::Display for SbitmapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::ZeroDepth => f.write_str("a bitmap needs at least one bit"),
            Self::DepthTooLarge { depth, max } => {
                write!(f, "depth {depth} is above the limit of {max}")
            }
            Self::BadShift { shift, max } => {
                write!(f, "shift {shift} is above the limit of {max}")
            }
            Self::OutOfRange { bit, depth } => {
                write!(f, "bit {bit} is out of range for depth {depth}")
            }
            Self::NotAllocated { bit } => {
                write!(f, "bit {bit} was freed but is not allocated (double put?)")
            }
            Self::ShallowBelowMinimum {
                shallow_depth,
                min_shallow_depth,
            } => write!(
                f,
                "shallow depth {shallow_depth} is below the declared minimum {min_shallow_depth}"
            ),
            Self::BadBatch { offset, mask } => {
                write!(
                    f,
                    "batch {mask:#x} at offset {offset} is not within one word"
                )
            }
        }
    }
}

impl core::error::Error for SbitmapError {}
