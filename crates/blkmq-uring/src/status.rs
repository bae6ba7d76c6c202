//! The status a failed operation ends with.

use blkmq_core::{Op, Status};

/// The [`Status`] an operation `op` that failed with `errno` (positive, as `errno` is: a
/// completion's `-res`) ends with, after Linux's `errno_to_blk_status`.
///
/// `EINVAL` and `EOPNOTSUPP` from a discard or write-zeroes say the backing cannot do it:
/// [`Status::NotSupported`]; an `EINVAL` from a read or write is [`Status::Invalid`] (a
/// buffer not aligned for `O_DIRECT`, for one).
///
/// ```
/// use blkmq_core::{Op, Status};
/// use blkmq_uring::status_of_errno;
///
/// assert_eq!(status_of_errno(Op::Read, libc::EIO), Status::IoErr);
/// assert_eq!(status_of_errno(Op::Write, libc::ENOSPC), Status::NoSpace);
/// assert_eq!(status_of_errno(Op::Discard, libc::EOPNOTSUPP), Status::NotSupported);
/// assert_eq!(status_of_errno(Op::WriteZeroes, libc::EINVAL), Status::NotSupported);
/// assert_eq!(status_of_errno(Op::Read, libc::EINVAL), Status::Invalid);
/// assert_eq!(status_of_errno(Op::Read, libc::EAGAIN), Status::Resource);
/// ```
pub fn status_of_errno(op: Op, errno: i32) -> Status {
    let space = matches!(op, Op::Discard | Op::WriteZeroes);
    match errno {
        libc::EOPNOTSUPP => Status::NotSupported,
        libc::EINVAL if space => Status::NotSupported,
        libc::EINVAL | libc::EFAULT => Status::Invalid,
        libc::ENOSPC | libc::EDQUOT | libc::EFBIG => Status::NoSpace,
        libc::EAGAIN | libc::ENOMEM => Status::Resource,
        libc::ETIMEDOUT => Status::Timeout,
        libc::ENODATA | libc::EILSEQ => Status::Medium,
        libc::ENODEV | libc::ENXIO => Status::Offline,
        libc::EBADE => Status::Protection,
        _ => Status::IoErr,
    }
}
