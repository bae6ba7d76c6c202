//! Which hardware queue serves which CPU: queue maps, one per queue type.
//!
//! A block device may have several kinds of hardware queue (Linux's `HCTX_TYPE_*`): the
//! default ones, queues only for reads, and queues that are polled rather than interrupt
//! driven. Each kind has a [`QueueMap`] from CPU to hardware queue; [`QueueMaps`] picks the
//! map for an I/O (polled I/O to the poll queues, reads to the read queues, when those
//! exist) and the queue for the submitting CPU.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::bio::{BioFlags, Op};
use crate::error::ConfigError;
use crate::tagset::MAX_HW_QUEUES;

/// A kind of hardware queue (Linux's `hctx_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QueueType {
    /// Everything without a queue of its own.
    Default = 0,
    /// Reads, when the device has read queues.
    Read = 1,
    /// Polled I/O, when the device has poll queues.
    Poll = 2,
}

impl QueueType {
    /// Every queue type, in map order.
    ///
    /// ```
    /// use blkmq_core::QueueType;
    /// assert_eq!(QueueType::ALL.len(), 3);
    /// ```
    pub const ALL: [QueueType; 3] = [QueueType::Default, QueueType::Read, QueueType::Poll];
}

/// One queue type's map from CPU to hardware queue: `nr_queues` hardware queues numbered from
/// `offset` in the device's list (Linux's `blk_mq_queue_map`).
///
/// ```
/// use blkmq_core::QueueMap;
///
/// // 8 CPUs over 3 queues numbered 4, 5, 6: neighbouring CPUs share a queue.
/// let map = QueueMap::spread(8, 3, 4).unwrap();
/// let queues: Vec<usize> = (0..8).map(|cpu| map.hctx(cpu)).collect();
/// assert_eq!(queues, [4, 4, 4, 5, 5, 5, 6, 6]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMap {
    nr_queues: usize,
    offset: usize,
    /// `cpu -> hardware queue`, offset included.
    table: Box<[u16]>,
}

impl QueueMap {
    /// Spreads `nr_cpus` CPUs evenly over `nr_queues` queues from `offset`, in contiguous
    /// groups (neighbouring CPUs, which often share a cache, share a queue); with more
    /// queues than CPUs, the first `nr_cpus` queues get one CPU each.
    ///
    /// # Errors
    /// [`ConfigError::ZeroCpus`], [`ConfigError::ZeroHwQueues`], or
    /// [`ConfigError::TooManyHwQueues`] when `offset + nr_queues` is above
    /// [`MAX_HW_QUEUES`].
    ///
    /// ```
    /// use blkmq_core::{ConfigError, QueueMap};
    /// let map = QueueMap::spread(2, 4, 0).unwrap();
    /// assert_eq!((map.hctx(0), map.hctx(1)), (0, 1));
    /// assert_eq!(QueueMap::spread(4, 0, 0).unwrap_err(), ConfigError::ZeroHwQueues);
    /// ```
    pub fn spread(nr_cpus: usize, nr_queues: usize, offset: usize) -> Result<Self, ConfigError> {
        Self::check(nr_cpus, nr_queues, offset)?;
        let table = (0..nr_cpus)
            .map(|cpu| (offset + cpu * nr_queues.min(nr_cpus) / nr_cpus) as u16)
            .collect();
        Ok(Self {
            nr_queues,
            offset,
            table,
        })
    }

    /// A map from a driver's own table (its `map_queues`): `table[cpu]` is the hardware
    /// queue of `cpu`, which must lie in `offset..offset + nr_queues`.
    ///
    /// # Errors
    /// As [`spread`](Self::spread), with `table.len()` as the CPU count; and
    /// [`ConfigError::BadQueueMap`] for an entry outside the range.
    ///
    /// ```
    /// use blkmq_core::{ConfigError, QueueMap};
    /// let map = QueueMap::from_table(&[1, 0, 1, 0], 2, 0).unwrap();
    /// assert_eq!(map.hctx(2), 1);
    /// assert_eq!(
    ///     QueueMap::from_table(&[0, 2], 2, 0).unwrap_err(),
    ///     ConfigError::BadQueueMap { cpu: 1, hctx: 2 }
    /// );
    /// ```
    pub fn from_table(
        table: &[usize],
        nr_queues: usize,
        offset: usize,
    ) -> Result<Self, ConfigError> {
        Self::check(table.len(), nr_queues, offset)?;
        let range = offset..offset + nr_queues;
        if let Some((cpu, &hctx)) = table.iter().enumerate().find(|(_, h)| !range.contains(h)) {
            return Err(ConfigError::BadQueueMap { cpu, hctx });
        }
        Ok(Self {
            nr_queues,
            offset,
            table: table.iter().map(|&h| h as u16).collect(),
        })
    }

    fn check(nr_cpus: usize, nr_queues: usize, offset: usize) -> Result<(), ConfigError> {
        if nr_cpus == 0 {
            return Err(ConfigError::ZeroCpus);
        }
        if nr_queues == 0 {
            return Err(ConfigError::ZeroHwQueues);
        }
        if offset + nr_queues > MAX_HW_QUEUES {
            return Err(ConfigError::TooManyHwQueues {
                nr_hw_queues: offset + nr_queues,
                max: MAX_HW_QUEUES,
            });
        }
        Ok(())
    }

    /// The hardware queue of `cpu` (CPUs beyond the map wrap around: any CPU value is safe).
    ///
    /// ```
    /// use blkmq_core::QueueMap;
    /// let map = QueueMap::spread(2, 2, 0).unwrap();
    /// assert_eq!(map.hctx(3), map.hctx(1));
    /// ```
    #[inline]
    pub fn hctx(&self, cpu: usize) -> usize {
        usize::from(match self.table.get(cpu) {
            Some(&h) => h,
            None => self.table[cpu % self.table.len()],
        })
    }

    /// How many hardware queues the map spreads over.
    ///
    /// ```
    /// use blkmq_core::QueueMap;
    /// assert_eq!(QueueMap::spread(4, 2, 0).unwrap().nr_queues(), 2);
    /// ```
    pub fn nr_queues(&self) -> usize {
        self.nr_queues
    }

    /// The first hardware queue of the map.
    ///
    /// ```
    /// use blkmq_core::QueueMap;
    /// assert_eq!(QueueMap::spread(4, 2, 6).unwrap().offset(), 6);
    /// ```
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// How many CPUs the map covers.
    ///
    /// ```
    /// use blkmq_core::QueueMap;
    /// assert_eq!(QueueMap::spread(4, 2, 0).unwrap().nr_cpus(), 4);
    /// ```
    pub fn nr_cpus(&self) -> usize {
        self.table.len()
    }

    /// The CPUs mapped to `hctx`, in order: when they all go away, the queue is drained and
    /// deactivated.
    ///
    /// ```
    /// use blkmq_core::QueueMap;
    /// let map = QueueMap::spread(5, 2, 0).unwrap();
    /// assert_eq!(map.cpus_of(1).collect::<Vec<_>>(), [3, 4]);
    /// ```
    pub fn cpus_of(&self, hctx: usize) -> impl Iterator<Item = usize> + '_ {
        self.table
            .iter()
            .enumerate()
            .filter(move |&(_, &h)| usize::from(h) == hctx)
            .map(|(cpu, _)| cpu)
    }
}

/// The maps of every queue type of a device. The default map is required; a read or poll
/// map is optional, and I/O of that kind falls back to the default map without one.
///
/// ```
/// use blkmq_core::{BioFlags, Op, QueueMap, QueueMaps, QueueType};
///
/// // 4 CPUs; 2 default queues (0, 1) and 1 poll queue (2).
/// let maps = QueueMaps::new(
///     QueueMap::spread(4, 2, 0).unwrap(),
///     None,
///     Some(QueueMap::spread(4, 1, 2).unwrap()),
/// )
/// .unwrap();
/// assert_eq!(maps.nr_hw_queues(), 3);
/// assert_eq!(maps.select(3, Op::Read, BioFlags::empty()), (QueueType::Default, 1));
/// assert_eq!(maps.select(3, Op::Read, BioFlags::POLLED), (QueueType::Poll, 2));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueMaps {
    maps: [Option<QueueMap>; 3],
}

impl QueueMaps {
    /// The maps of a device.
    ///
    /// # Errors
    /// [`ConfigError::BadQueueMap`] when the maps cover different CPU counts or their queue
    /// ranges overlap (each hardware queue serves one type).
    ///
    /// ```
    /// use blkmq_core::{QueueMap, QueueMaps};
    /// let overlapping = QueueMaps::new(
    ///     QueueMap::spread(2, 2, 0).unwrap(),
    ///     Some(QueueMap::spread(2, 1, 1).unwrap()),
    ///     None,
    /// );
    /// assert!(overlapping.is_err());
    /// ```
    pub fn new(
        default: QueueMap,
        read: Option<QueueMap>,
        poll: Option<QueueMap>,
    ) -> Result<Self, ConfigError> {
        let maps = [Some(default), read, poll];
        let present: Vec<&QueueMap> = maps.iter().flatten().collect();
        for (i, a) in present.iter().enumerate() {
            for b in &present[i + 1..] {
                if a.nr_cpus() != b.nr_cpus() {
                    return Err(ConfigError::BadQueueMap {
                        cpu: a.nr_cpus().min(b.nr_cpus()),
                        hctx: b.offset(),
                    });
                }
                let overlap = a.offset() < b.offset() + b.nr_queues()
                    && b.offset() < a.offset() + a.nr_queues();
                if overlap {
                    return Err(ConfigError::BadQueueMap {
                        cpu: 0,
                        hctx: a.offset().max(b.offset()),
                    });
                }
            }
        }
        Ok(Self { maps })
    }

    /// Default queues only, spread over `nr_cpus` CPUs (what a device gets without its own
    /// `map_queues`).
    ///
    /// # Errors
    /// As [`QueueMap::spread`].
    ///
    /// ```
    /// use blkmq_core::QueueMaps;
    /// let maps = QueueMaps::spread(8, 4).unwrap();
    /// assert_eq!(maps.nr_hw_queues(), 4);
    /// ```
    pub fn spread(nr_cpus: usize, nr_hw_queues: usize) -> Result<Self, ConfigError> {
        Self::new(QueueMap::spread(nr_cpus, nr_hw_queues, 0)?, None, None)
    }

    /// The map of `kind`, if the device has one.
    ///
    /// ```
    /// use blkmq_core::{QueueMaps, QueueType};
    /// let maps = QueueMaps::spread(2, 1).unwrap();
    /// assert!(maps.map(QueueType::Default).is_some());
    /// assert!(maps.map(QueueType::Read).is_none());
    /// ```
    pub fn map(&self, kind: QueueType) -> Option<&QueueMap> {
        self.maps[kind as usize].as_ref()
    }

    /// Hardware queues over every map.
    ///
    /// ```
    /// use blkmq_core::QueueMaps;
    /// assert_eq!(QueueMaps::spread(2, 3).unwrap().nr_hw_queues(), 3);
    /// ```
    pub fn nr_hw_queues(&self) -> usize {
        self.maps
            .iter()
            .flatten()
            .map(|m| m.offset() + m.nr_queues())
            .max()
            .unwrap_or(0)
    }

    /// The queue type and hardware queue for an I/O of `op` with `flags` from `cpu`: polled
    /// I/O to the poll map, reads to the read map, when those exist; else the default map.
    ///
    /// ```
    /// use blkmq_core::{BioFlags, Op, QueueMap, QueueMaps, QueueType};
    /// let maps = QueueMaps::new(
    ///     QueueMap::spread(2, 1, 0).unwrap(),
    ///     Some(QueueMap::spread(2, 1, 1).unwrap()),
    ///     None,
    /// )
    /// .unwrap();
    /// assert_eq!(maps.select(0, Op::Read, BioFlags::empty()), (QueueType::Read, 1));
    /// assert_eq!(maps.select(0, Op::Write, BioFlags::empty()), (QueueType::Default, 0));
    /// // No poll queues: a polled read is served as a read.
    /// assert_eq!(maps.select(0, Op::Read, BioFlags::POLLED), (QueueType::Read, 1));
    /// ```
    #[inline]
    pub fn select(&self, cpu: usize, op: Op, flags: BioFlags) -> (QueueType, usize) {
        let kind = if flags.contains(BioFlags::POLLED) && self.maps[2].is_some() {
            QueueType::Poll
        } else if op == Op::Read && self.maps[1].is_some() {
            QueueType::Read
        } else {
            QueueType::Default
        };
        let map = self.maps[kind as usize]
            .as_ref()
            .expect("the default map always exists, and the others are checked above");
        (kind, map.hctx(cpu))
    }
}
