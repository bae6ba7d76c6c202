//! A bio's status as the errno a program sees.

use blkmq_core::Status;

/// The errno Linux returns for a block I/O that ended with `status` (its `blk_errors`
/// table); zero for [`Status::Ok`].
///
/// ```
/// use blkmq_core::Status;
/// use blkmq_fuse::errno;
///
/// assert_eq!(errno(Status::Ok), 0);
/// assert_eq!(errno(Status::IoErr), libc::EIO);
/// assert_eq!(errno(Status::NotSupported), libc::EOPNOTSUPP);
/// assert!(Status::ALL[1..].iter().all(|&s| errno(s) > 0));
/// ```
pub fn errno(status: Status) -> i32 {
    match status {
        Status::Ok => 0,
        Status::NotSupported => libc::EOPNOTSUPP,
        Status::Timeout => libc::ETIMEDOUT,
        Status::NoSpace => libc::ENOSPC,
        Status::Medium => libc::ENODATA,
        Status::Protection => libc::EILSEQ,
        Status::Offline => libc::ENODEV,
        Status::Invalid => libc::EINVAL,
        Status::IoErr => libc::EIO,
        Status::Again => libc::EAGAIN,
        Status::Resource => libc::ENOMEM,
        Status::DevResource => libc::EBUSY,
    }
}
