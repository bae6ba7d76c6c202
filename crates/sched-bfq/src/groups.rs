//! Groups and weights: the hierarchy of groups, and the group and weight of each issuer.

use blkmq_core::IssuerId;

use crate::queue::NO_QUEUE;
use crate::wf2q::Class;
use crate::{ASYNC_SLOTS, Bfq, BfqError, Group};

/// The weights a group or an issuer may be given.
///
/// ```
/// use blkmq_sched_bfq::{Bfq, BfqError, GroupId, MAX_GROUP_WEIGHT};
/// let mut bfq = Bfq::new();
/// assert!(bfq.add_group(GroupId::ROOT, MAX_GROUP_WEIGHT).is_ok());
/// assert_eq!(bfq.add_group(GroupId::ROOT, 1001), Err(BfqError::BadWeight(1001)));
/// ```
pub const MAX_GROUP_WEIGHT: u32 = 1000;

/// The weight of a group made without one (Linux's cgroup default).
///
/// ```
/// use blkmq_sched_bfq::DEFAULT_GROUP_WEIGHT;
/// assert_eq!(DEFAULT_GROUP_WEIGHT, 100);
/// ```
pub const DEFAULT_GROUP_WEIGHT: u32 = 100;

/// A group of queues (what a cgroup is to Linux's BFQ): it gets a share of its parent's
/// service by its weight, and shares it among its queues and subgroups.
///
/// ```
/// use blkmq_sched_bfq::{Bfq, GroupId};
/// let mut bfq = Bfq::new();
/// let g = bfq.add_group(GroupId::ROOT, 200).unwrap();
/// assert_ne!(g, GroupId::ROOT);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupId(u32);

impl GroupId {
    /// The root group: every issuer's queues are in it unless moved.
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::{Bfq, GroupId};
    /// let mut bfq = Bfq::new();
    /// assert!(bfq.set_issuer_group(IssuerId(1), GroupId::ROOT).is_ok());
    /// ```
    pub const ROOT: GroupId = GroupId(0);
}

fn check_weight(weight: u32) -> Result<(), BfqError> {
    if (1..=MAX_GROUP_WEIGHT).contains(&weight) {
        Ok(())
    } else {
        Err(BfqError::BadWeight(weight))
    }
}

impl Bfq {
    /// A new group under `parent`, with `weight` (1 to [`MAX_GROUP_WEIGHT`]; Linux's
    /// default is [`DEFAULT_GROUP_WEIGHT`]).
    ///
    /// # Errors
    /// [`BfqError::NoSuchGroup`] for `parent`, [`BfqError::BadWeight`].
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, BfqError, GroupId};
    /// let mut bfq = Bfq::new();
    /// let g = bfq.add_group(GroupId::ROOT, 100).unwrap();
    /// let sub = bfq.add_group(g, 500).unwrap();
    /// assert_ne!(g, sub);
    /// assert_eq!(bfq.add_group(GroupId::ROOT, 0), Err(BfqError::BadWeight(0)));
    /// ```
    pub fn add_group(&mut self, parent: GroupId, weight: u32) -> Result<GroupId, BfqError> {
        check_weight(weight)?;
        let parent = self
            .groups
            .get(parent.0 as usize)
            .ok_or(BfqError::NoSuchGroup)?
            .entity;
        let entity = self
            .sched
            .add_group(parent, weight, Class::Be)
            .map_err(|_| BfqError::NoSuchGroup)?;
        self.groups.push(Group {
            entity,
            async_queues: [NO_QUEUE; ASYNC_SLOTS],
            active: 0,
        });
        Ok(GroupId(self.groups.len() as u32 - 1))
    }

    /// Sets a group's weight (1 to [`MAX_GROUP_WEIGHT`]); it applies from the group's next
    /// activation.
    ///
    /// # Errors
    /// [`BfqError::NoSuchGroup`], [`BfqError::BadWeight`].
    ///
    /// ```
    /// use blkmq_sched_bfq::{Bfq, BfqError, GroupId};
    /// let mut bfq = Bfq::new();
    /// let g = bfq.add_group(GroupId::ROOT, 100).unwrap();
    /// bfq.set_group_weight(g, 300).unwrap();
    /// assert_eq!(bfq.set_group_weight(g, 1001), Err(BfqError::BadWeight(1001)));
    /// ```
    pub fn set_group_weight(&mut self, group: GroupId, weight: u32) -> Result<(), BfqError> {
        check_weight(weight)?;
        if group == GroupId::ROOT {
            // The root shares nothing with a sibling: its weight is moot.
            return Ok(());
        }
        let entity = self
            .groups
            .get(group.0 as usize)
            .ok_or(BfqError::NoSuchGroup)?
            .entity;
        self.sched
            .set_weight(entity, weight)
            .map_err(|_| BfqError::NoSuchGroup)
    }

    /// Puts an issuer's queues in `group`: its async requests from now on, its sync queue
    /// when it is next idle.
    ///
    /// # Errors
    /// [`BfqError::NoSuchGroup`].
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::{Bfq, BfqError, GroupId};
    /// let mut bfq = Bfq::new();
    /// let g = bfq.add_group(GroupId::ROOT, 100).unwrap();
    /// bfq.set_issuer_group(IssuerId(3), g).unwrap();
    /// let other = Bfq::new().add_group(GroupId::ROOT, 100).unwrap();
    /// let mut fresh = Bfq::new();
    /// assert_eq!(fresh.set_issuer_group(IssuerId(3), other), Err(BfqError::NoSuchGroup));
    /// ```
    pub fn set_issuer_group(&mut self, issuer: IssuerId, group: GroupId) -> Result<(), BfqError> {
        if group.0 as usize >= self.groups.len() {
            return Err(BfqError::NoSuchGroup);
        }
        let entry = self.issuer_entry(issuer);
        entry.group = group.0;
        let q = entry.queue;
        if q != NO_QUEUE {
            // Its sync queue moves when next it becomes backlogged.
            self.queues[q as usize].next_group = group.0;
        }
        Ok(())
    }

    /// Overrides the weight the I/O priority gives an issuer's sync queue (1 to
    /// [`MAX_GROUP_WEIGHT`]). A queue with a weight set is never raised.
    ///
    /// # Errors
    /// [`BfqError::BadWeight`].
    ///
    /// ```
    /// use blkmq_core::IssuerId;
    /// use blkmq_sched_bfq::{Bfq, BfqError};
    /// let mut bfq = Bfq::new();
    /// bfq.set_issuer_weight(IssuerId(1), 400).unwrap();
    /// assert_eq!(bfq.set_issuer_weight(IssuerId(1), 1001), Err(BfqError::BadWeight(1001)));
    /// ```
    pub fn set_issuer_weight(&mut self, issuer: IssuerId, weight: u32) -> Result<(), BfqError> {
        check_weight(weight)?;
        let entry = self.issuer_entry(issuer);
        entry.weight = Some(weight);
        let q = entry.queue;
        if q != NO_QUEUE {
            let queue = &mut self.queues[q as usize];
            queue.orig_weight = weight;
            queue.explicit_weight = true;
            let (e, w) = (queue.entity, queue.weight());
            let _ = self.sched.set_weight(e, w);
            self.reaccount(q);
        }
        Ok(())
    }
}
