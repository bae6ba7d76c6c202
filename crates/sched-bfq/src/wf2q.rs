//! B-WF2Q+: hierarchical weighted fair queueing over budgets.
//!
//! # The idea
//!
//! Every backlogged entity — a queue (leaf) or a group of entities (inner node) — owns a
//! virtual *start* time `S` and *finish* time `F`: `F = S + (budget << SERVICE_SHIFT) /
//! weight`, where the budget is the service (sectors) it may receive in one turn. Each group
//! keeps, per class, a *virtual time* `V` that advances by `(service << SERVICE_SHIFT) /
//! wsum` whenever one of its children is served, `wsum` being the weights of its children
//! that are backlogged or still remembered (see below). An entity is *eligible* when `S <=
//! V`; the scheduler serves, among eligible entities, the one with the smallest `F`. When
//! none is eligible, `V` jumps to the smallest `S`. Eligibility is what makes the scheduler
//! worst-case fair: an entity that got ahead of its share (a large `S`) waits even if its
//! `F` is small.
//!
//! A turn ends with [`Wf2q::expire`]: the finish is recomputed from the service actually
//! received, and a still-backlogged entity restarts from there (`S = F`), so the timestamps
//! count service, not turns. An entity that goes idle stays *remembered* on an idle tree
//! (its weight still counted in `wsum`) until `V` passes its finish: coming back at once it
//! starts at its old `F`, not at `V`, so going idle briefly does not reset its account.
//!
//! Groups are entities of their parent: a group's budget is the budget of the child it
//! would serve next, and its timestamps advance with the service of its descendants.
//! Selection walks from the root group down, at each level choosing a class (real time
//! before best effort before idle, except that the idle class is served once it has waited
//! [`IDLE_CLASS_TIMEOUT_NS`] while backlogged), then the eligible child with the smallest
//! finish.
//!
//! # Data structures
//!
//! Entities live in an arena (`Vec`) and are named by [`EntityId`]; freed slots are reused.
//! Each group has three service trees (one per [`Class`]), each made of an *active* tree of
//! backlogged children not in service and an *idle* tree of remembered ones. Both are AVL
//! trees over arena indices ordered by `(F, id)`; every node of an active tree also holds
//! the smallest `S` of its subtree, so the eligible entity with the smallest `F` is found
//! in one walk from the root: go left while the left subtree holds an eligible entity, else
//! take the node if eligible, else go right. Tree links live in the entities (an entity is
//! in at most one tree), so no operation but adding an entity allocates.
//!
//! Timestamps are `u64` compared with wrapping arithmetic: only their differences matter,
//! and those stay far below 2^63 for any realistic run.
//!
//! ```
//! use blkmq_sched_bfq::wf2q::{Class, Wf2q};
//!
//! let mut s = Wf2q::new();
//! let light = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
//! let heavy = s.add_leaf(Wf2q::ROOT, 300, Class::Be).unwrap();
//! s.activate(light, 64, 0);
//! s.activate(heavy, 64, 0);
//! let mut served = [0u64; 2];
//! for _ in 0..400 {
//!     let q = s.select(0).unwrap();
//!     s.served(q, 64);
//!     served[usize::from(q == heavy)] += 64;
//!     s.expire(q, Some(64), 0);
//! }
//! // Service follows the weights 1:3.
//! assert_eq!(served[0] * 3, served[1]);
//! ```

use alloc::vec::Vec;
use core::fmt;

/// Fixed-point shift of virtual time: a timestamp advances by `(service << SERVICE_SHIFT) /
/// weight`.
///
/// ```
/// use blkmq_sched_bfq::wf2q::{Class, SERVICE_SHIFT, Wf2q};
///
/// let mut s = Wf2q::new();
/// let q = s.add_leaf(Wf2q::ROOT, 2, Class::Be).unwrap();
/// s.activate(q, 8, 0);
/// assert_eq!(s.finish(q), (8 << SERVICE_SHIFT) / 2);
/// ```
pub const SERVICE_SHIFT: u32 = 22;

/// The smallest weight an entity may have.
///
/// ```
/// use blkmq_sched_bfq::wf2q::{Class, MIN_WEIGHT, Wf2q, Wf2qError};
///
/// let mut s = Wf2q::new();
/// assert!(s.add_leaf(Wf2q::ROOT, MIN_WEIGHT, Class::Be).is_ok());
/// assert_eq!(s.add_leaf(Wf2q::ROOT, MIN_WEIGHT - 1, Class::Be), Err(Wf2qError::BadWeight(0)));
/// ```
pub const MIN_WEIGHT: u32 = 1;

/// The largest weight an entity may have: the largest group weight times the largest
/// weight-raising factors, so that raised weights fit.
///
/// ```
/// use blkmq_sched_bfq::wf2q::{Class, MAX_WEIGHT, Wf2q, Wf2qError};
///
/// let mut s = Wf2q::new();
/// assert!(s.add_leaf(Wf2q::ROOT, MAX_WEIGHT, Class::Be).is_ok());
/// assert_eq!(
///     s.add_leaf(Wf2q::ROOT, MAX_WEIGHT + 1, Class::Be),
///     Err(Wf2qError::BadWeight(MAX_WEIGHT + 1))
/// );
/// ```
pub const MAX_WEIGHT: u32 = 1000 * 30 * 100;

/// How long the IDLE class may go unserved while backlogged (200 ms).
///
/// ```
/// use blkmq_sched_bfq::wf2q::{Class, IDLE_CLASS_TIMEOUT_NS, Wf2q};
///
/// let mut s = Wf2q::new();
/// let be = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
/// let idle = s.add_leaf(Wf2q::ROOT, 100, Class::Idle).unwrap();
/// s.activate(be, 8, 0);
/// s.activate(idle, 8, 0);
/// assert_eq!(s.select(1), Some(be));
/// s.expire(be, Some(8), 1);
/// // The idle class has waited long enough: it gets a turn although BE is backlogged.
/// assert_eq!(s.select(IDLE_CLASS_TIMEOUT_NS), Some(idle));
/// ```
pub const IDLE_CLASS_TIMEOUT_NS: u64 = 200_000_000;

/// Scheduling class of an entity: strict priority between classes, real time first.
///
/// ```
/// use blkmq_sched_bfq::wf2q::Class;
///
/// assert!(Class::Rt < Class::Be && Class::Be < Class::Idle);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Class {
    /// Real time: served before anything else.
    Rt,
    /// Best effort: the default.
    Be,
    /// Idle: served when nothing else is backlogged, or after [`IDLE_CLASS_TIMEOUT_NS`].
    Idle,
}

impl Class {
    /// All classes, highest priority first.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::Class;
    ///
    /// assert_eq!(Class::ALL, [Class::Rt, Class::Be, Class::Idle]);
    /// ```
    pub const ALL: [Class; 3] = [Class::Rt, Class::Be, Class::Idle];

    fn idx(self) -> usize {
        match self {
            Class::Rt => 0,
            Class::Be => 1,
            Class::Idle => 2,
        }
    }
}

/// A queue (leaf) or a group (inner node); index into the arena.
///
/// ```
/// use blkmq_sched_bfq::wf2q::{Class, EntityId, Wf2q};
///
/// let mut s = Wf2q::new();
/// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
/// assert_ne!(q, Wf2q::ROOT);
/// assert_eq!(Wf2q::ROOT, EntityId(0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityId(pub u32);

/// Errors of the configuration operations of [`Wf2q`].
///
/// ```
/// use blkmq_sched_bfq::wf2q::{Class, EntityId, Wf2q, Wf2qError};
///
/// let mut s = Wf2q::new();
/// assert_eq!(s.add_leaf(EntityId(7), 100, Class::Be), Err(Wf2qError::NoSuchEntity));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wf2qError {
    /// The id names no entity (never added, or removed).
    NoSuchEntity,
    /// The parent given is a leaf.
    NotAGroup,
    /// A weight outside [`MIN_WEIGHT`]`..=`[`MAX_WEIGHT`].
    BadWeight(u32),
    /// The entity is active, in service, the root, or a group with children.
    Busy,
}

impl fmt::Display for Wf2qError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wf2qError::NoSuchEntity => f.write_str("no such scheduling entity"),
            Wf2qError::NotAGroup => f.write_str("the parent is not a group"),
            Wf2qError::BadWeight(w) => {
                write!(f, "weight {w} outside {MIN_WEIGHT}..={MAX_WEIGHT}")
            }
            Wf2qError::Busy => f.write_str("the entity is active, the root or a non-empty group"),
        }
    }
}

impl core::error::Error for Wf2qError {}

/// No entity: the null link of trees and parents.
const NIL: u32 = u32::MAX;
const ROOT_IDX: u32 = 0;
/// Weight given to the root group (never used in any computation).
const ROOT_WEIGHT: u32 = 100;

/// `a > b` for timestamps that may wrap around.
fn ts_gt(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) > 0
}

/// Service mapped into virtual time: `(service << SERVICE_SHIFT) / weight`.
fn delta(service: u64, weight: u64) -> u64 {
    debug_assert!(weight > 0);
    if service >> (64 - SERVICE_SHIFT) == 0 {
        (service << SERVICE_SHIFT) / weight
    } else {
        // Only a service of 2^42 sectors and more gets here; truncation to 64 bits is the
        // same wrap-around the timestamps live with.
        ((u128::from(service) << SERVICE_SHIFT) / u128::from(weight)) as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// The slot is on the free list.
    Free,
    /// Not backlogged and forgotten: not counted anywhere.
    Inactive,
    /// Not backlogged but remembered on the idle tree (weight still in `wsum`).
    Idle,
    /// Backlogged, waiting in the active tree.
    Active,
    /// Backlogged and in service (out of any tree).
    InService,
}

#[derive(Clone, Debug)]
struct Entity {
    state: State,
    is_group: bool,
    parent: u32,
    /// Weight and class in use.
    weight: u32,
    class: Class,
    /// Weight and class to apply at the next (re)activation or requeue.
    new_weight: u32,
    new_class: Class,
    /// Service (sectors) the current or next turn may get.
    budget: u64,
    /// Service (sectors) received since it was last set in service.
    service: u64,
    start: u64,
    finish: u64,
    // Node of an active or idle tree.
    left: u32,
    right: u32,
    height: u8,
    /// Smallest start in the subtree (meaningful in active trees only).
    min_start: u64,
}

impl Entity {
    fn new(parent: u32, weight: u32, class: Class, is_group: bool) -> Self {
        Entity {
            state: State::Inactive,
            is_group,
            parent,
            weight,
            class,
            new_weight: weight,
            new_class: class,
            budget: 0,
            service: 0,
            start: 0,
            finish: 0,
            left: NIL,
            right: NIL,
            height: 0,
            min_start: 0,
        }
    }

    fn backlogged(&self) -> bool {
        matches!(self.state, State::Active | State::InService)
    }
}

/// One class of one group.
#[derive(Clone, Debug)]
struct ServiceTree {
    /// Root of the tree of backlogged children not in service.
    active: u32,
    /// Root of the tree of remembered idle children.
    idle: u32,
    vtime: u64,
    /// Weights of the children backlogged or remembered: what `vtime` advances against.
    wsum: u64,
    /// Weights and number of the backlogged children (in service included).
    active_weight: u64,
    active_count: u32,
}

impl ServiceTree {
    const EMPTY: ServiceTree = ServiceTree {
        active: NIL,
        idle: NIL,
        vtime: 0,
        wsum: 0,
        active_weight: 0,
        active_count: 0,
    };
}

/// Scheduling data of a group (slots of leaves keep an unused one).
#[derive(Clone, Debug)]
struct Sched {
    trees: [ServiceTree; 3],
    /// The child in service, or `NIL`.
    in_service: u32,
    /// Backlogged children, all classes.
    active_children: u32,
    /// All children, whatever their state.
    children: u32,
    /// When the idle class last became backlogged or was last chosen.
    idle_class_since_ns: u64,
}

impl Sched {
    const EMPTY: Sched = Sched {
        trees: [ServiceTree::EMPTY, ServiceTree::EMPTY, ServiceTree::EMPTY],
        in_service: NIL,
        active_children: 0,
        children: 0,
        idle_class_since_ns: 0,
    };
}

/// A B-WF2Q+ scheduler over a hierarchy of groups and leaves.
///
/// # Invariants
///
/// - An entity is in at most one tree: the active tree of its parent and class when
///   `Active`, the idle tree when `Idle`; `InService` entities form the path from the root
///   to the in-service leaf and are in no tree.
/// - A tree's `wsum` is the weight of its children that are `Idle`, `Active` or
///   `InService`; `active_weight`/`active_count` cover the last two.
/// - A backlogged group has at least one backlogged child; an idle or inactive group has
///   none.
///
/// ```
/// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
///
/// let mut s = Wf2q::new();
/// let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
/// let q = s.add_leaf(g, 100, Class::Be).unwrap();
/// s.activate(q, 32, 0);
/// assert!(s.is_active(g));
/// assert_eq!(s.select(0), Some(q));
/// s.served(q, 32);
/// s.expire(q, None, 0);
/// assert!(!s.is_active(q) && !s.is_active(g));
/// assert_eq!(s.select(0), None);
/// ```
#[derive(Clone, Debug)]
pub struct Wf2q {
    ents: Vec<Entity>,
    /// Indexed like `ents`; used by groups only.
    scheds: Vec<Sched>,
    free: Vec<u32>,
    in_service_leaf: u32,
}

impl Default for Wf2q {
    /// Same as [`Wf2q::new`].
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::Wf2q;
    ///
    /// assert_eq!(Wf2q::default().in_service(), None);
    /// ```
    fn default() -> Self {
        Self::new()
    }
}

impl Wf2q {
    /// The root group: always present, never active itself, never removed.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::Wf2q;
    ///
    /// let s = Wf2q::new();
    /// assert!(s.is_group(Wf2q::ROOT));
    /// assert_eq!(s.parent(Wf2q::ROOT), None);
    /// ```
    pub const ROOT: EntityId = EntityId(ROOT_IDX);

    /// A scheduler with only the root group.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::Wf2q;
    ///
    /// let mut s = Wf2q::new();
    /// assert_eq!(s.select(0), None);
    /// ```
    pub fn new() -> Self {
        let ents = alloc::vec![Entity::new(NIL, ROOT_WEIGHT, Class::Be, true)];
        let scheds = alloc::vec![Sched::EMPTY];
        Wf2q {
            ents,
            scheds,
            free: Vec::new(),
            in_service_leaf: NIL,
        }
    }

    /// A new group under `parent` (a group).
    ///
    /// Errors: [`Wf2qError::NoSuchEntity`], [`Wf2qError::NotAGroup`] for `parent`,
    /// [`Wf2qError::BadWeight`].
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q, Wf2qError};
    ///
    /// let mut s = Wf2q::new();
    /// let g = s.add_group(Wf2q::ROOT, 500, Class::Be).unwrap();
    /// assert_eq!(s.parent(g), Some(Wf2q::ROOT));
    /// let q = s.add_leaf(g, 100, Class::Be).unwrap();
    /// assert_eq!(s.add_group(q, 100, Class::Be), Err(Wf2qError::NotAGroup));
    /// ```
    pub fn add_group(
        &mut self,
        parent: EntityId,
        weight: u32,
        class: Class,
    ) -> Result<EntityId, Wf2qError> {
        self.add(parent, weight, class, true)
    }

    /// A new leaf (a queue) under group `parent`.
    ///
    /// Errors as for [`Wf2q::add_group`].
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 40, Class::Rt).unwrap();
    /// assert_eq!((s.weight(q), s.class(q), s.is_group(q)), (40, Class::Rt, false));
    /// ```
    pub fn add_leaf(
        &mut self,
        parent: EntityId,
        weight: u32,
        class: Class,
    ) -> Result<EntityId, Wf2qError> {
        self.add(parent, weight, class, false)
    }

    fn add(
        &mut self,
        parent: EntityId,
        weight: u32,
        class: Class,
        is_group: bool,
    ) -> Result<EntityId, Wf2qError> {
        let p = self.group_idx(parent)?;
        check_weight(weight)?;
        let ent = Entity::new(p, weight, class, is_group);
        let idx = match self.free.pop() {
            Some(idx) => {
                self.ents[idx as usize] = ent;
                self.scheds[idx as usize] = Sched::EMPTY;
                idx
            }
            None => {
                let idx = u32::try_from(self.ents.len())
                    .ok()
                    .filter(|&i| i != NIL)
                    .expect("more than u32::MAX - 1 scheduling entities");
                self.ents.push(ent);
                self.scheds.push(Sched::EMPTY);
                idx
            }
        };
        self.scheds[p as usize].children += 1;
        Ok(EntityId(idx))
    }

    /// Frees an entity that is neither active nor in service (and, for a group, has no
    /// children); its slot is reused by later adds. A remembered idle entity is forgotten.
    ///
    /// Errors: [`Wf2qError::NoSuchEntity`]; [`Wf2qError::Busy`] for the root, an active
    /// entity or a group with children.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q, Wf2qError};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.activate(q, 8, 0);
    /// assert_eq!(s.remove(q), Err(Wf2qError::Busy));
    /// s.select(0);
    /// s.expire(q, None, 0);
    /// assert_eq!(s.remove(q), Ok(()));
    /// assert_eq!(s.remove(q), Err(Wf2qError::NoSuchEntity));
    /// assert_eq!(s.remove(Wf2q::ROOT), Err(Wf2qError::Busy));
    /// ```
    pub fn remove(&mut self, e: EntityId) -> Result<(), Wf2qError> {
        let x = self.idx(e)?;
        self.check_detachable(x)?;
        let p = self.ents[x as usize].parent;
        self.scheds[p as usize].children -= 1;
        self.ents[x as usize].state = State::Free;
        self.ents[x as usize].parent = NIL;
        self.free.push(x);
        Ok(())
    }

    /// Moves an inactive leaf or empty group under another group. A remembered idle entity
    /// is forgotten first: it starts afresh under its new parent.
    ///
    /// Errors: [`Wf2qError::NoSuchEntity`], [`Wf2qError::NotAGroup`] for `parent` (or
    /// `parent == e`), [`Wf2qError::Busy`] as for [`Wf2q::remove`].
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.set_parent(q, g).unwrap();
    /// assert_eq!(s.parent(q), Some(g));
    /// ```
    pub fn set_parent(&mut self, e: EntityId, parent: EntityId) -> Result<(), Wf2qError> {
        let x = self.idx(e)?;
        let p = self.group_idx(parent)?;
        if p == x {
            return Err(Wf2qError::NotAGroup);
        }
        self.check_detachable(x)?;
        let old = self.ents[x as usize].parent;
        self.scheds[old as usize].children -= 1;
        self.scheds[p as usize].children += 1;
        self.ents[x as usize].parent = p;
        Ok(())
    }

    /// Checks that `x` may leave its parent, and forgets it if it is remembered.
    fn check_detachable(&mut self, x: u32) -> Result<(), Wf2qError> {
        let ent = &self.ents[x as usize];
        if x == ROOT_IDX
            || ent.backlogged()
            || (ent.is_group && self.scheds[x as usize].children > 0)
        {
            return Err(Wf2qError::Busy);
        }
        if ent.state == State::Idle {
            self.idle_extract(x);
            self.forget(x);
        }
        Ok(())
    }

    /// Sets the weight: at once when the entity is not active (a remembered idle entity
    /// keeps its timestamps), else at its next (re)activation or requeue.
    ///
    /// Errors: [`Wf2qError::NoSuchEntity`], [`Wf2qError::BadWeight`].
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.activate(q, 8, 0);
    /// s.set_weight(q, 300).unwrap();
    /// assert_eq!(s.weight(q), 100); // pending while active
    /// s.select(0);
    /// s.expire(q, Some(8), 0);
    /// assert_eq!(s.weight(q), 300); // applied on requeue
    /// ```
    pub fn set_weight(&mut self, e: EntityId, weight: u32) -> Result<(), Wf2qError> {
        let x = self.idx(e)?;
        check_weight(weight)?;
        let ent = &mut self.ents[x as usize];
        ent.new_weight = weight;
        match ent.state {
            State::Active | State::InService => {}
            State::Idle => {
                let old = ent.weight;
                ent.weight = weight;
                let st = self.tree_of_mut(x);
                st.wsum = st.wsum - u64::from(old) + u64::from(weight);
            }
            State::Inactive | State::Free => ent.weight = weight,
        }
        Ok(())
    }

    /// Sets the class: at once when the entity is not active (a remembered idle entity is
    /// forgotten: its timestamps mean nothing in another class), else at its next
    /// (re)activation or requeue, where it starts at the new class's virtual time.
    ///
    /// Errors: [`Wf2qError::NoSuchEntity`].
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.set_class(q, Class::Idle).unwrap();
    /// assert_eq!(s.class(q), Class::Idle);
    /// ```
    pub fn set_class(&mut self, e: EntityId, class: Class) -> Result<(), Wf2qError> {
        let x = self.idx(e)?;
        self.ents[x as usize].new_class = class;
        match self.ents[x as usize].state {
            State::Active | State::InService => {}
            State::Idle => {
                if self.ents[x as usize].class != class {
                    self.idle_extract(x);
                    self.forget(x);
                }
            }
            State::Inactive | State::Free => self.ents[x as usize].class = class,
        }
        Ok(())
    }

    /// The weight in use (a pending change shows after it is applied); 0 for an unknown id.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 70, Class::Be).unwrap();
    /// assert_eq!(s.weight(q), 70);
    /// ```
    pub fn weight(&self, e: EntityId) -> u32 {
        self.ent(e).map_or(0, |x| x.weight)
    }

    /// The class in use; [`Class::Be`] for an unknown id.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 70, Class::Rt).unwrap();
    /// assert_eq!(s.class(q), Class::Rt);
    /// ```
    pub fn class(&self, e: EntityId) -> Class {
        self.ent(e).map_or(Class::Be, |x| x.class)
    }

    /// The parent group; `None` for the root and unknown ids.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 70, Class::Be).unwrap();
    /// assert_eq!(s.parent(q), Some(Wf2q::ROOT));
    /// ```
    pub fn parent(&self, e: EntityId) -> Option<EntityId> {
        self.ent(e)
            .filter(|x| x.parent != NIL)
            .map(|x| EntityId(x.parent))
    }

    /// Whether `e` is a group (the root included).
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// let q = s.add_leaf(g, 100, Class::Be).unwrap();
    /// assert!(s.is_group(g) && !s.is_group(q));
    /// ```
    pub fn is_group(&self, e: EntityId) -> bool {
        self.ent(e).is_some_and(|x| x.is_group)
    }

    /// Backlogged: in an active tree or in service. For the root: whether anything is.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// assert!(!s.is_active(q));
    /// s.activate(q, 8, 0);
    /// assert!(s.is_active(q) && s.is_active(Wf2q::ROOT));
    /// ```
    pub fn is_active(&self, e: EntityId) -> bool {
        if e == Self::ROOT {
            return self.scheds[ROOT_IDX as usize].active_children > 0;
        }
        self.ent(e).is_some_and(Entity::backlogged)
    }

    /// Whether `e` is idle but still remembered on its idle tree (its finish is ahead of
    /// the virtual time): activated again, it starts at its old finish.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let a = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// let b = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.activate(a, 8, 0);
    /// s.activate(b, 8, 0);
    /// assert_eq!(s.select(0), Some(a));
    /// s.served(a, 8);
    /// s.expire(a, None, 0);
    /// assert!(s.is_remembered(a));
    /// ```
    pub fn is_remembered(&self, e: EntityId) -> bool {
        self.ent(e).is_some_and(|x| x.state == State::Idle)
    }

    /// A leaf becomes backlogged with `budget` (sectors) to receive.
    ///
    /// Its start is the virtual time `V` of its class in its parent, or its old finish if
    /// that is later and it is still remembered on the idle tree; its finish is `start +
    /// (budget << SERVICE_SHIFT) / weight`. Pending weight/class changes apply now.
    /// Ancestors are activated (or repositioned, when the child they would serve next
    /// changes their budget) as needed. No-op if already active, or if `leaf` is not a leaf.
    /// `now_ns` starts the idle-class timer when this makes the idle class backlogged.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, SERVICE_SHIFT, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 4, Class::Be).unwrap();
    /// s.activate(q, 16, 0);
    /// assert_eq!((s.start(q), s.finish(q)), (0, 4 << SERVICE_SHIFT));
    /// assert_eq!(s.budget(q), 16);
    /// ```
    pub fn activate(&mut self, leaf: EntityId, budget: u64, now_ns: u64) {
        let Ok(x) = self.idx(leaf) else { return };
        let ent = &mut self.ents[x as usize];
        if ent.is_group || ent.backlogged() {
            return;
        }
        ent.budget = budget;
        self.activate_one(x, now_ns);
        let p = self.ents[x as usize].parent;
        self.propagate(p, now_ns);
    }

    /// Picks the next leaf to serve and puts it (and its ancestors) in service.
    ///
    /// Per group, from the root down: the class (RT > BE > IDLE, but IDLE first when it has
    /// waited [`IDLE_CLASS_TIMEOUT_NS`] since it became backlogged or was last chosen), then
    /// the eligible child (`S <= V`) with the smallest finish, `V` first jumping to the
    /// smallest start when none is eligible. O(log n) per level. The chosen entities' turn
    /// service restarts at 0. `None` when nothing is active; the leaf in service if there is
    /// one (call [`Wf2q::expire`] first).
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let be = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// let rt = s.add_leaf(Wf2q::ROOT, 100, Class::Rt).unwrap();
    /// s.activate(be, 8, 0);
    /// s.activate(rt, 8, 0);
    /// assert_eq!(s.select(0), Some(rt));
    /// assert_eq!(s.in_service(), Some(rt));
    /// ```
    pub fn select(&mut self, now_ns: u64) -> Option<EntityId> {
        if self.in_service_leaf != NIL {
            return Some(EntityId(self.in_service_leaf));
        }
        let mut g = ROOT_IDX;
        loop {
            let sd = &mut self.scheds[g as usize];
            let class = pick_class(sd, now_ns)?;
            if class == Class::Idle {
                sd.idle_class_since_ns = now_ns;
            }
            let root = sd.trees[class.idx()].active;
            let jump = self.ents[root as usize].min_start;
            self.raise_vtime(g, class, jump);
            let v = self.scheds[g as usize].trees[class.idx()].vtime;
            let x = self.first_eligible(root, v);
            debug_assert_ne!(
                x, NIL,
                "an active tree has an entity eligible after the jump"
            );
            self.active_extract(x);
            let ent = &mut self.ents[x as usize];
            ent.state = State::InService;
            ent.service = 0;
            self.scheds[g as usize].in_service = x;
            if !self.ents[x as usize].is_group {
                self.in_service_leaf = x;
                return Some(EntityId(x));
            }
            g = x;
        }
    }

    /// The leaf in service, if any.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// assert_eq!(s.in_service(), None);
    /// s.activate(q, 8, 0);
    /// s.select(0);
    /// assert_eq!(s.in_service(), Some(q));
    /// ```
    pub fn in_service(&self) -> Option<EntityId> {
        (self.in_service_leaf != NIL).then_some(EntityId(self.in_service_leaf))
    }

    /// Charges `service` (sectors, already multiplied by any charge factor) to `leaf` and
    /// its ancestors: each one's turn service grows by `service`, and the virtual time of
    /// the tree each is in by `(service << SERVICE_SHIFT) / wsum` (see
    /// [`Wf2q::vtime_weight_sum`]); idle entities whose finish the virtual time reaches are
    /// forgotten. Meant for the leaf in service; charging another one (I/O injected while
    /// idling) advances the virtual times alike, but its turn service is reset when it is
    /// next selected. No-op for a group or an unknown id.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, SERVICE_SHIFT, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    /// let b = s.add_leaf(Wf2q::ROOT, 3, Class::Be).unwrap();
    /// s.activate(a, 8, 0);
    /// s.activate(b, 8, 0);
    /// let q = s.select(0).unwrap();
    /// s.served(q, 8);
    /// assert_eq!(s.service(q), 8);
    /// // V advanced by 8 sectors over a weight sum of 4.
    /// assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), (8 << SERVICE_SHIFT) / 4);
    /// ```
    pub fn served(&mut self, leaf: EntityId, service: u64) {
        let Ok(mut x) = self.idx(leaf) else { return };
        if self.ents[x as usize].is_group {
            return;
        }
        while x != ROOT_IDX {
            let ent = &mut self.ents[x as usize];
            ent.service = ent.service.saturating_add(service);
            let (p, class) = (ent.parent, ent.class);
            let st = &mut self.scheds[p as usize].trees[class.idx()];
            if st.wsum > 0 {
                st.vtime = st.vtime.wrapping_add(delta(service, st.wsum));
                self.forget_idle(p, class);
            }
            x = p;
        }
    }

    /// Ends a leaf's turn.
    ///
    /// For the leaf in service: its finish is recomputed from the service it actually
    /// received (`F = S + (service << SERVICE_SHIFT) / weight`). With `Some(budget)` it stays
    /// backlogged and is requeued with `S = F`, `F = S + (budget << SERVICE_SHIFT) /
    /// weight`; with `None` it goes idle: remembered on the idle tree while `F > V` (so
    /// coming back at once gains nothing), forgotten otherwise. Its ancestors, in service
    /// with it, are requeued the same way with the budget of the child each would serve
    /// next, or go idle when no child is backlogged. Pending weight/class changes apply.
    ///
    /// For an active leaf not in service: `Some(budget)` keeps `S` and sets `F = S + (budget
    /// << SERVICE_SHIFT) / weight`; `None` deactivates it (remembered while `F > V`). No-op
    /// for an inactive entity, a group or an unknown id. `now_ns` starts the idle-class timer
    /// when a class change makes the idle class backlogged.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, SERVICE_SHIFT, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
    /// s.activate(q, 8, 0);
    /// s.select(0);
    /// s.served(q, 2); // used 2 of its 8 sectors
    /// s.expire(q, Some(8), 0);
    /// assert_eq!(s.start(q), 2 << SERVICE_SHIFT);
    /// assert_eq!(s.finish(q), 10 << SERVICE_SHIFT);
    /// assert_eq!(s.in_service(), None);
    /// ```
    pub fn expire(&mut self, leaf: EntityId, requeue_budget: Option<u64>, now_ns: u64) {
        let Ok(x) = self.idx(leaf) else { return };
        if self.ents[x as usize].is_group {
            return;
        }
        match self.ents[x as usize].state {
            State::InService => {
                self.in_service_leaf = NIL;
                match requeue_budget {
                    Some(budget) => self.requeue_in_service(x, budget, now_ns),
                    None => self.deactivate(x),
                }
                let mut g = self.ents[x as usize].parent;
                while g != ROOT_IDX {
                    if self.scheds[g as usize].active_children > 0 {
                        let budget = self.next_child_budget(g);
                        self.requeue_in_service(g, budget, now_ns);
                    } else {
                        self.deactivate(g);
                    }
                    g = self.ents[g as usize].parent;
                }
            }
            State::Active => {
                match requeue_budget {
                    Some(budget) => self.reposition(x, budget, now_ns),
                    None => self.deactivate(x),
                }
                let p = self.ents[x as usize].parent;
                self.propagate(p, now_ns);
            }
            State::Inactive | State::Idle | State::Free => {}
        }
    }

    /// Virtual start time of `e` (0 for an unknown id).
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.activate(q, 8, 0);
    /// assert_eq!(s.start(q), s.vtime(Wf2q::ROOT, Class::Be));
    /// ```
    pub fn start(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.start)
    }

    /// Virtual finish time of `e` (0 for an unknown id).
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, SERVICE_SHIFT, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 8, Class::Be).unwrap();
    /// s.activate(q, 64, 0);
    /// assert_eq!(s.finish(q) - s.start(q), (64 << SERVICE_SHIFT) / 8);
    /// ```
    pub fn finish(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.finish)
    }

    /// Virtual time of `class` among the children of `group` (0 for a leaf or unknown id).
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let s = Wf2q::new();
    /// assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 0);
    /// ```
    pub fn vtime(&self, group: EntityId, class: Class) -> u64 {
        self.tree(group, class).map_or(0, |st| st.vtime)
    }

    /// Service (sectors) received by `e` in its current turn, that is since it was last
    /// selected (0 for an unknown id).
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.activate(q, 8, 0);
    /// s.select(0);
    /// s.served(q, 3);
    /// s.served(q, 4);
    /// assert_eq!((s.service(q), s.service(Wf2q::ROOT)), (7, 0));
    /// ```
    pub fn service(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.service)
    }

    /// The budget (sectors) of `e`'s current or next turn: the one given to
    /// [`Wf2q::activate`] or [`Wf2q::expire`] for a leaf, the budget of the child it would
    /// serve next for a group (as of its last activation or requeue). 0 for an unknown id.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// let q = s.add_leaf(g, 100, Class::Be).unwrap();
    /// s.activate(q, 24, 0);
    /// assert_eq!((s.budget(q), s.budget(g)), (24, 24));
    /// ```
    pub fn budget(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.budget)
    }

    /// Number of active entities (in service included) of `class` directly under `group`.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let q = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.activate(q, 8, 0);
    /// assert_eq!(s.active_count(Wf2q::ROOT, Class::Be), 1);
    /// assert_eq!(s.active_count(Wf2q::ROOT, Class::Rt), 0);
    /// ```
    pub fn active_count(&self, group: EntityId, class: Class) -> usize {
        self.tree(group, class)
            .map_or(0, |st| st.active_count as usize)
    }

    /// Weight sum of the active entities (in service included) of `class` directly under
    /// `group`.
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let a = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// let b = s.add_leaf(Wf2q::ROOT, 250, Class::Be).unwrap();
    /// s.activate(a, 8, 0);
    /// s.activate(b, 8, 0);
    /// assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 350);
    /// ```
    pub fn weight_sum(&self, group: EntityId, class: Class) -> u64 {
        self.tree(group, class).map_or(0, |st| st.active_weight)
    }

    /// The weight sum the virtual time of `class` under `group` advances against: active
    /// entities plus idle ones still remembered (Linux's `wsum`).
    ///
    /// ```
    /// use blkmq_sched_bfq::wf2q::{Class, Wf2q};
    ///
    /// let mut s = Wf2q::new();
    /// let a = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// let b = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
    /// s.activate(a, 8, 0);
    /// s.activate(b, 8, 0);
    /// s.select(0);
    /// s.served(a, 8);
    /// s.expire(a, None, 0); // remembered: its finish is ahead of V
    /// assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 100);
    /// assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 200);
    /// ```
    pub fn vtime_weight_sum(&self, group: EntityId, class: Class) -> u64 {
        self.tree(group, class).map_or(0, |st| st.wsum)
    }

    // ---- lookups -------------------------------------------------------------------------

    fn idx(&self, e: EntityId) -> Result<u32, Wf2qError> {
        match self.ents.get(e.0 as usize) {
            Some(x) if x.state != State::Free => Ok(e.0),
            _ => Err(Wf2qError::NoSuchEntity),
        }
    }

    fn group_idx(&self, e: EntityId) -> Result<u32, Wf2qError> {
        let x = self.idx(e)?;
        if self.ents[x as usize].is_group {
            Ok(x)
        } else {
            Err(Wf2qError::NotAGroup)
        }
    }

    fn ent(&self, e: EntityId) -> Option<&Entity> {
        self.ents
            .get(e.0 as usize)
            .filter(|x| x.state != State::Free)
    }

    fn tree(&self, group: EntityId, class: Class) -> Option<&ServiceTree> {
        let g = self.group_idx(group).ok()?;
        Some(&self.scheds[g as usize].trees[class.idx()])
    }

    /// The service tree `x` belongs to (by its class in use).
    fn tree_of_mut(&mut self, x: u32) -> &mut ServiceTree {
        let ent = &self.ents[x as usize];
        &mut self.scheds[ent.parent as usize].trees[ent.class.idx()]
    }

    // ---- state transitions ---------------------------------------------------------------

    /// True activation of `x` (inactive or remembered), `x.budget` set.
    fn activate_one(&mut self, x: u32, now_ns: u64) {
        let v = self.tree_of_mut(x).vtime;
        let ent = &mut self.ents[x as usize];
        if ent.state == State::Idle {
            let finish = ent.finish;
            self.idle_extract(x);
            self.ents[x as usize].start = if ts_gt(v, finish) { v } else { finish };
        } else {
            ent.start = v;
            let w = u64::from(ent.weight);
            self.tree_of_mut(x).wsum += w;
        }
        self.apply_pending(x);
        self.enqueue(x, now_ns);
    }

    /// Requeues the in-service entity `x` after its turn, with `budget` for the next one.
    fn requeue_in_service(&mut self, x: u32, budget: u64, now_ns: u64) {
        let p = self.ents[x as usize].parent;
        self.scheds[p as usize].in_service = NIL;
        let ent = &mut self.ents[x as usize];
        ent.finish = ent
            .start
            .wrapping_add(delta(ent.service, u64::from(ent.weight)));
        ent.start = ent.finish;
        ent.budget = budget;
        self.uncount(x);
        self.apply_pending(x);
        self.enqueue(x, now_ns);
    }

    /// Gives the active (not in service) entity `x` a new budget: same start, new finish.
    fn reposition(&mut self, x: u32, budget: u64, now_ns: u64) {
        self.active_extract(x);
        self.ents[x as usize].budget = budget;
        self.uncount(x);
        self.apply_pending(x);
        self.enqueue(x, now_ns);
    }

    /// Computes the finish of `x` (start and budget set, in no tree) and inserts it into
    /// its active tree.
    fn enqueue(&mut self, x: u32, now_ns: u64) {
        let ent = &mut self.ents[x as usize];
        ent.finish = ent
            .start
            .wrapping_add(delta(ent.budget, u64::from(ent.weight)));
        ent.state = State::Active;
        self.active_insert(x);
        self.count(x, now_ns);
    }

    /// Makes the backlogged `x` idle: remembered while its finish is ahead of `V`.
    fn deactivate(&mut self, x: u32) {
        let p = self.ents[x as usize].parent;
        if self.ents[x as usize].state == State::InService {
            let ent = &mut self.ents[x as usize];
            ent.finish = ent
                .start
                .wrapping_add(delta(ent.service, u64::from(ent.weight)));
            self.scheds[p as usize].in_service = NIL;
        } else {
            self.active_extract(x);
        }
        self.uncount(x);
        let v = self.tree_of_mut(x).vtime;
        if ts_gt(self.ents[x as usize].finish, v) {
            self.ents[x as usize].state = State::Idle;
            self.idle_insert(x);
        } else {
            self.forget(x);
        }
    }

    /// `x` (in no tree) stops counting in `wsum`; pending changes apply at once.
    fn forget(&mut self, x: u32) {
        let w = u64::from(self.ents[x as usize].weight);
        self.tree_of_mut(x).wsum -= w;
        let ent = &mut self.ents[x as usize];
        ent.state = State::Inactive;
        ent.weight = ent.new_weight;
        ent.class = ent.new_class;
    }

    /// Applies a pending weight/class change to `x`, which is counted in `wsum` but in no
    /// tree and not counted as active.
    fn apply_pending(&mut self, x: u32) {
        let ent = &self.ents[x as usize];
        if ent.weight == ent.new_weight && ent.class == ent.new_class {
            return;
        }
        let old_class = ent.class;
        let old_weight = u64::from(ent.weight);
        self.tree_of_mut(x).wsum -= old_weight;
        let ent = &mut self.ents[x as usize];
        ent.weight = ent.new_weight;
        ent.class = ent.new_class;
        let changed_class = ent.class != old_class;
        let w = u64::from(ent.weight);
        let st = self.tree_of_mut(x);
        st.wsum += w;
        let v = st.vtime;
        if changed_class {
            self.ents[x as usize].start = v;
        }
    }

    fn count(&mut self, x: u32, now_ns: u64) {
        let ent = &self.ents[x as usize];
        let (p, class, w) = (ent.parent, ent.class, u64::from(ent.weight));
        let sd = &mut self.scheds[p as usize];
        let st = &mut sd.trees[class.idx()];
        if class == Class::Idle && st.active_count == 0 {
            sd.idle_class_since_ns = now_ns;
        }
        let st = &mut sd.trees[class.idx()];
        st.active_count += 1;
        st.active_weight += w;
        sd.active_children += 1;
    }

    fn uncount(&mut self, x: u32) {
        let ent = &self.ents[x as usize];
        let (p, class, w) = (ent.parent, ent.class, u64::from(ent.weight));
        let sd = &mut self.scheds[p as usize];
        let st = &mut sd.trees[class.idx()];
        st.active_count -= 1;
        st.active_weight -= w;
        sd.active_children -= 1;
    }

    /// Brings the ancestors of a changed child in line, from group `g` up: a group left
    /// without backlogged children goes idle, one gaining its first is activated, and an
    /// active one whose next child now has another budget is repositioned. Stops at the
    /// root, at a group in service (requeued when its turn ends) or where nothing changes.
    fn propagate(&mut self, mut g: u32, now_ns: u64) {
        while g != ROOT_IDX {
            let has_children = self.scheds[g as usize].active_children > 0;
            match self.ents[g as usize].state {
                State::InService | State::Free => return,
                State::Active if !has_children => self.deactivate(g),
                State::Active => {
                    let budget = self.next_child_budget(g);
                    if budget == self.ents[g as usize].budget {
                        return;
                    }
                    self.reposition(g, budget, now_ns);
                }
                State::Inactive | State::Idle if !has_children => return,
                State::Inactive | State::Idle => {
                    self.ents[g as usize].budget = self.next_child_budget(g);
                    self.activate_one(g, now_ns);
                }
            }
            g = self.ents[g as usize].parent;
        }
    }

    /// Budget of the child group `g` would serve next, ignoring the idle-class timer and
    /// without moving virtual time (all of `g`'s backlogged children are in trees).
    fn next_child_budget(&self, g: u32) -> u64 {
        let sd = &self.scheds[g as usize];
        for st in &sd.trees {
            if st.active != NIL {
                let min_start = self.ents[st.active as usize].min_start;
                let v = if ts_gt(min_start, st.vtime) {
                    min_start
                } else {
                    st.vtime
                };
                let x = self.first_eligible(st.active, v);
                return self.ents[x as usize].budget;
            }
        }
        0
    }

    /// Moves `V` of (`g`, `class`) forward to `v` if it is ahead, forgetting idle entities.
    fn raise_vtime(&mut self, g: u32, class: Class, v: u64) {
        let st = &mut self.scheds[g as usize].trees[class.idx()];
        if ts_gt(v, st.vtime) {
            st.vtime = v;
            self.forget_idle(g, class);
        }
    }

    /// Forgets the idle entities of (`g`, `class`) whose finish `V` has reached. Each
    /// entity is forgotten once per idle period, so this is O(log n) amortized.
    fn forget_idle(&mut self, g: u32, class: Class) {
        loop {
            let st = &self.scheds[g as usize].trees[class.idx()];
            let first = self.leftmost(st.idle);
            if first == NIL || ts_gt(self.ents[first as usize].finish, st.vtime) {
                return;
            }
            self.idle_extract(first);
            self.forget(first);
        }
    }

    // ---- trees ---------------------------------------------------------------------------

    fn active_insert(&mut self, x: u32) {
        let root = self.tree_of_mut(x).active;
        let root = self.avl_insert(root, x);
        self.tree_of_mut(x).active = root;
    }

    fn active_extract(&mut self, x: u32) {
        let root = self.tree_of_mut(x).active;
        let root = self.avl_remove(root, x);
        self.tree_of_mut(x).active = root;
    }

    fn idle_insert(&mut self, x: u32) {
        let root = self.tree_of_mut(x).idle;
        let root = self.avl_insert(root, x);
        self.tree_of_mut(x).idle = root;
    }

    fn idle_extract(&mut self, x: u32) {
        let root = self.tree_of_mut(x).idle;
        let root = self.avl_remove(root, x);
        self.tree_of_mut(x).idle = root;
    }

    /// The eligible entity (`S <= v`) with the smallest `(F, id)` in the tree at `root`.
    fn first_eligible(&self, root: u32, v: u64) -> u32 {
        let mut n = root;
        while n != NIL {
            let node = &self.ents[n as usize];
            // Everything on the left finishes earlier: go there if anything is eligible.
            if node.left != NIL && !ts_gt(self.ents[node.left as usize].min_start, v) {
                n = node.left;
            } else if !ts_gt(node.start, v) {
                return n;
            } else if node.right != NIL && !ts_gt(self.ents[node.right as usize].min_start, v) {
                n = node.right;
            } else {
                return NIL;
            }
        }
        NIL
    }

    fn leftmost(&self, mut n: u32) -> u32 {
        if n == NIL {
            return NIL;
        }
        while self.ents[n as usize].left != NIL {
            n = self.ents[n as usize].left;
        }
        n
    }

    /// Tree order: finish, then id (so ties are deterministic).
    fn before(&self, a: u32, b: u32) -> bool {
        let (fa, fb) = (self.ents[a as usize].finish, self.ents[b as usize].finish);
        ts_gt(fb, fa) || (fa == fb && a < b)
    }

    fn height(&self, n: u32) -> u8 {
        if n == NIL {
            0
        } else {
            self.ents[n as usize].height
        }
    }

    /// Recomputes the height and smallest start of `n` from its children.
    fn update(&mut self, n: u32) {
        let (l, r) = (self.ents[n as usize].left, self.ents[n as usize].right);
        let mut min_start = self.ents[n as usize].start;
        for c in [l, r] {
            if c != NIL {
                let m = self.ents[c as usize].min_start;
                if ts_gt(min_start, m) {
                    min_start = m;
                }
            }
        }
        let height = 1 + self.height(l).max(self.height(r));
        let node = &mut self.ents[n as usize];
        node.min_start = min_start;
        node.height = height;
    }

    fn rotate_right(&mut self, n: u32) -> u32 {
        let l = self.ents[n as usize].left;
        self.ents[n as usize].left = self.ents[l as usize].right;
        self.ents[l as usize].right = n;
        self.update(n);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, n: u32) -> u32 {
        let r = self.ents[n as usize].right;
        self.ents[n as usize].right = self.ents[r as usize].left;
        self.ents[r as usize].left = n;
        self.update(n);
        self.update(r);
        r
    }

    /// Restores the AVL balance at `n` (its subtrees balanced); returns the subtree root.
    fn rebalance(&mut self, n: u32) -> u32 {
        self.update(n);
        let (l, r) = (self.ents[n as usize].left, self.ents[n as usize].right);
        let (hl, hr) = (self.height(l), self.height(r));
        if hl > hr + 1 {
            let (ll, lr) = (self.ents[l as usize].left, self.ents[l as usize].right);
            if self.height(lr) > self.height(ll) {
                self.ents[n as usize].left = self.rotate_left(l);
            }
            self.rotate_right(n)
        } else if hr > hl + 1 {
            let (rl, rr) = (self.ents[r as usize].left, self.ents[r as usize].right);
            if self.height(rl) > self.height(rr) {
                self.ents[n as usize].right = self.rotate_right(r);
            }
            self.rotate_left(n)
        } else {
            n
        }
    }

    /// Inserts `x` (its finish set) into the tree at `root`; returns the new root.
    /// Recursion depth is the tree height, below 1.45 log2(n) + 2.
    fn avl_insert(&mut self, root: u32, x: u32) -> u32 {
        if root == NIL {
            let node = &mut self.ents[x as usize];
            node.left = NIL;
            node.right = NIL;
            self.update(x);
            return x;
        }
        if self.before(x, root) {
            let l = self.avl_insert(self.ents[root as usize].left, x);
            self.ents[root as usize].left = l;
        } else {
            let r = self.avl_insert(self.ents[root as usize].right, x);
            self.ents[root as usize].right = r;
        }
        self.rebalance(root)
    }

    /// Removes `x` (in the tree, its finish unchanged since insertion) from the tree at
    /// `root`; returns the new root.
    fn avl_remove(&mut self, root: u32, x: u32) -> u32 {
        assert_ne!(
            root, NIL,
            "wf2q: removing an entity from a tree it is not in"
        );
        let (l, r) = (
            self.ents[root as usize].left,
            self.ents[root as usize].right,
        );
        if root == x {
            if l == NIL {
                return r;
            }
            if r == NIL {
                return l;
            }
            let (r, successor) = self.avl_remove_min(r);
            self.ents[successor as usize].left = l;
            self.ents[successor as usize].right = r;
            return self.rebalance(successor);
        }
        if self.before(x, root) {
            let l = self.avl_remove(l, x);
            self.ents[root as usize].left = l;
        } else {
            let r = self.avl_remove(r, x);
            self.ents[root as usize].right = r;
        }
        self.rebalance(root)
    }

    /// Detaches the first node of the tree at `root`: (new root, detached node).
    fn avl_remove_min(&mut self, root: u32) -> (u32, u32) {
        let l = self.ents[root as usize].left;
        if l == NIL {
            return (self.ents[root as usize].right, root);
        }
        let (l, min) = self.avl_remove_min(l);
        self.ents[root as usize].left = l;
        (self.rebalance(root), min)
    }
}

fn check_weight(weight: u32) -> Result<(), Wf2qError> {
    if (MIN_WEIGHT..=MAX_WEIGHT).contains(&weight) {
        Ok(())
    } else {
        Err(Wf2qError::BadWeight(weight))
    }
}

/// The class to serve in a group: IDLE if it waited too long, else the highest backlogged.
fn pick_class(sd: &Sched, now_ns: u64) -> Option<Class> {
    let idle = &sd.trees[Class::Idle.idx()];
    if idle.active != NIL && now_ns.saturating_sub(sd.idle_class_since_ns) >= IDLE_CLASS_TIMEOUT_NS
    {
        return Some(Class::Idle);
    }
    Class::ALL
        .into_iter()
        .find(|c| sd.trees[c.idx()].active != NIL)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use alloc::vec;
    use proptest::prelude::*;

    /// One unit of service at weight 1, in virtual time.
    const U: u64 = 1 << SERVICE_SHIFT;
    const MS: u64 = 1_000_000;

    /// One full turn: select, charge `service`, expire with `requeue`.
    fn turn(s: &mut Wf2q, now: u64, service: u64, requeue: Option<u64>) -> EntityId {
        let q = s.select(now).expect("something to serve");
        s.served(q, service);
        s.expire(q, requeue, now);
        check(s);
        q
    }

    // ---- invariants ------------------------------------------------------------------------

    /// Walks the tree at `n`: checks AVL shape, order and (for active trees) `min_start`;
    /// collects the nodes in order; returns the height.
    fn walk(s: &Wf2q, n: u32, active: bool, out: &mut Vec<u32>) -> u8 {
        if n == NIL {
            return 0;
        }
        let e = &s.ents[n as usize];
        let hl = walk(s, e.left, active, out);
        out.push(n);
        let hr = walk(s, e.right, active, out);
        assert!(hl.abs_diff(hr) <= 1, "unbalanced at {n}");
        assert_eq!(e.height, 1 + hl.max(hr));
        if active {
            let mut m = e.start;
            for c in [e.left, e.right] {
                if c != NIL {
                    m = m.min(s.ents[c as usize].min_start);
                }
            }
            assert_eq!(e.min_start, m, "min_start of {n}");
        }
        hl.max(hr) + 1
    }

    fn check(s: &Wf2q) {
        let live = |i: usize| s.ents[i].state != State::Free;
        for g in 0..s.ents.len() {
            if !live(g) || !s.ents[g].is_group {
                continue;
            }
            let sd = &s.scheds[g];
            let kids: Vec<usize> = (0..s.ents.len())
                .filter(|&i| live(i) && s.ents[i].parent == g as u32)
                .collect();
            assert_eq!(sd.children as usize, kids.len());
            let backlogged = kids.iter().filter(|&&i| s.ents[i].backlogged()).count();
            assert_eq!(sd.active_children as usize, backlogged);
            let in_service: Vec<usize> = kids
                .iter()
                .copied()
                .filter(|&i| s.ents[i].state == State::InService)
                .collect();
            assert!(in_service.len() <= 1);
            assert_eq!(sd.in_service, in_service.first().map_or(NIL, |&i| i as u32));
            if g != ROOT_IDX as usize {
                assert_eq!(s.ents[g].backlogged(), backlogged > 0, "group {g}");
                if s.ents[g].state == State::InService {
                    assert_eq!(in_service.len(), 1, "in-service group {g} serves a child");
                }
            }
            for c in Class::ALL {
                let st = &sd.trees[c.idx()];
                let of = |state: &[State]| {
                    let mut v: Vec<u32> = kids
                        .iter()
                        .filter(|&&i| s.ents[i].class == c && state.contains(&s.ents[i].state))
                        .map(|&i| i as u32)
                        .collect();
                    v.sort_by_key(|&i| (s.ents[i as usize].finish, i));
                    v
                };
                let mut nodes = Vec::new();
                walk(s, st.active, true, &mut nodes);
                assert_eq!(nodes, of(&[State::Active]), "active tree {g}/{c:?}");
                nodes.clear();
                walk(s, st.idle, false, &mut nodes);
                assert_eq!(nodes, of(&[State::Idle]), "idle tree {g}/{c:?}");
                for &i in &nodes {
                    assert!(ts_gt(s.ents[i as usize].finish, st.vtime), "stale idle {i}");
                }
                let weight = |v: Vec<u32>| {
                    v.iter()
                        .map(|&i| u64::from(s.ents[i as usize].weight))
                        .sum::<u64>()
                };
                assert_eq!(
                    st.wsum,
                    weight(of(&[State::Idle, State::Active, State::InService]))
                );
                let active = of(&[State::Active, State::InService]);
                assert_eq!(st.active_count as usize, active.len());
                assert_eq!(st.active_weight, weight(active));
            }
        }
        let leaf = s.in_service_leaf;
        if leaf != NIL {
            let mut x = leaf;
            while x != ROOT_IDX {
                assert_eq!(s.ents[x as usize].state, State::InService);
                x = s.ents[x as usize].parent;
            }
        } else {
            assert!(s.ents.iter().all(|e| e.state != State::InService));
        }
    }

    // ---- hand-computed schedules ---------------------------------------------------------

    /// Leaves A, B, C with weights 1:2:4, all activated at V = 0 with budget 7 and always
    /// using their whole budget. In units of Q = U/4 (U = 1 << SERVICE_SHIFT): a turn moves
    /// F - S by 7*4/w Q: A 28, B 14, C 7; V moves by 7 sectors / wsum 7 = U = 4 Q.
    ///
    /// ```text
    /// start: A(0,28) B(0,14) C(0,7)      V=0
    /// T1 V=0:  all eligible, min F = C(7)         -> C, V=4,  C(7,14)
    /// T2 V=4:  C ineligible (7>4); B(14) < A(28)  -> B, V=8,  B(14,28)
    /// T3 V=8:  C(7,14) eligible, F 14 < A's 28    -> C, V=12, C(14,21)
    /// T4 V=12: B and C ineligible (S=14 > 12)     -> A, V=16, A(28,56)
    ///          although C's F=21 is the smallest
    /// T5 V=16: B(14,28), C(14,21) eligible        -> C, V=20, C(21,28)
    /// T6 V=20: C ineligible (21); B(14,28)        -> B, V=24, B(28,42)
    /// T7 V=24: C(21,28) only eligible             -> C, V=28, C(28,35)
    /// ```
    /// After T7 every timestamp is the start one plus 28 Q: the order C B C A C B C
    /// repeats, giving A, B and C service 1:2:4 per 7 turns.
    #[test]
    fn weights_1_2_4_serve_order_and_vtime() {
        const Q: u64 = U / 4;
        let mut s = Wf2q::new();
        let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        let b = s.add_leaf(Wf2q::ROOT, 2, Class::Be).unwrap();
        let c = s.add_leaf(Wf2q::ROOT, 4, Class::Be).unwrap();
        for q in [a, b, c] {
            s.activate(q, 7, 0);
        }
        assert_eq!(
            [a, b, c].map(|q| (s.start(q), s.finish(q))),
            [(0, 28 * Q), (0, 14 * Q), (0, 7 * Q)]
        );
        let period = [c, b, c, a, c, b, c];
        // (S, F) of the served leaf after its requeue, in Q, for the first period.
        let after = [
            (7, 14),
            (14, 28),
            (14, 21),
            (28, 56),
            (21, 28),
            (28, 42),
            (28, 35),
        ];
        for k in 0..21u64 {
            if k == 3 {
                // T4: C has the smallest finish but is not eligible.
                assert!(s.finish(c) < s.finish(a) && s.finish(c) < s.finish(b));
                assert!(s.start(c) > s.vtime(Wf2q::ROOT, Class::Be));
            }
            let q = turn(&mut s, 0, 7, Some(7));
            let i = (k % 7) as usize;
            assert_eq!(q, period[i], "turn {}", k + 1);
            assert_eq!(
                s.vtime(Wf2q::ROOT, Class::Be),
                (k + 1) * U,
                "V after turn {}",
                k + 1
            );
            let shift = (k / 7) * 28 * Q;
            assert_eq!(
                (s.start(q), s.finish(q)),
                (after[i].0 * Q + shift, after[i].1 * Q + shift)
            );
        }
    }

    /// A (w 1, budget 4) and B (w 1, budget 8) start at V = 0: A(0, 4U), B(0, 8U).
    /// A is served 4: V = 4U/2 = 2U; requeued with budget 1: A(4U, 5U).
    /// Now A's F = 5U < B's 8U, but A's S = 4U > V = 2U: B is served.
    #[test]
    fn ineligible_entity_is_skipped_despite_smallest_finish() {
        let mut s = Wf2q::new();
        let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        s.activate(a, 4, 0);
        s.activate(b, 8, 0);
        assert_eq!(turn(&mut s, 0, 4, Some(1)), a);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 2 * U);
        assert_eq!((s.start(a), s.finish(a)), (4 * U, 5 * U));
        assert!(s.finish(a) < s.finish(b));
        assert_eq!(s.select(0), Some(b));
        // Selecting did not move V: B was eligible.
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 2 * U);
    }

    /// A, B (w 1, budget 8) at V = 0: both (0, 8U); A wins the tie on id.
    /// A served 8: V = 8U/2 = 4U; requeued: A(8U, 16U).
    /// B deactivated while waiting: F = 8U > V, remembered (wsum stays 2).
    /// Select: A's S = 8U > V = 4U, nothing eligible: V jumps to 8U, which also reaches
    /// B's finish: B is forgotten (wsum 1). A is served.
    #[test]
    fn vtime_jumps_to_smallest_start() {
        let mut s = Wf2q::new();
        let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        s.activate(a, 8, 0);
        s.activate(b, 8, 0);
        assert_eq!(turn(&mut s, 0, 8, Some(8)), a);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 4 * U);
        s.expire(b, None, 0);
        check(&s);
        assert!(s.is_remembered(b));
        assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 2);
        assert_eq!(s.select(0), Some(a));
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 8 * U);
        assert!(!s.is_remembered(b));
        assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 1);
        check(&s);
    }

    /// A, B (w 1, budget 8) at V = 0; A served 8: V = 4U; A goes idle with F = 8U > V:
    /// remembered. Coming back at once, A starts at max(V, F) = 8U, not at V = 4U, and
    /// finishes at 16U; a newcomer C starts at V = 4U. B (S = 0) is served next.
    #[test]
    fn idle_entity_coming_back_at_once_starts_at_old_finish() {
        let mut s = Wf2q::new();
        let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        let c = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        s.activate(a, 8, 0);
        s.activate(b, 8, 0);
        assert_eq!(turn(&mut s, 0, 8, None), a);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 4 * U);
        assert!(!s.is_active(a) && s.is_remembered(a));
        s.activate(a, 8, 0);
        s.activate(c, 8, 0);
        check(&s);
        assert_eq!((s.start(a), s.finish(a)), (8 * U, 16 * U));
        assert_eq!((s.start(c), s.finish(c)), (4 * U, 12 * U));
        // wsum: A was still counted, C joins: 3.
        assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 3);
        assert_eq!(s.select(0), Some(b));
    }

    /// A (w 1, budget 8), B (w 1, budget 16) at V = 0: A(0, 8U), B(0, 16U).
    /// A served 8: V = 8U/2 = 4U; A goes idle, remembered (F = 8U > 4U), wsum 2.
    /// B served 4: V = 4U + 4U/2 = 6U < 8U: A still remembered.
    /// B served 4: V = 8U: A's finish reached, A forgotten, wsum 1.
    /// B served 8: V = 8U + 8U/1 = 16U (now advancing at wsum 1).
    /// A activated: starts at V = 16U.
    #[test]
    fn idle_entity_forgotten_once_vtime_passes_finish() {
        let mut s = Wf2q::new();
        let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        let b = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        s.activate(a, 8, 0);
        s.activate(b, 16, 0);
        assert_eq!(turn(&mut s, 0, 8, None), a);
        assert!(s.is_remembered(a));
        assert_eq!(s.select(0), Some(b));
        s.served(b, 4);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 6 * U);
        assert!(s.is_remembered(a));
        assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 2);
        s.served(b, 4);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 8 * U);
        assert!(!s.is_remembered(a));
        assert_eq!(s.vtime_weight_sum(Wf2q::ROOT, Class::Be), 1);
        s.served(b, 8);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 16 * U);
        s.expire(b, Some(16), 0);
        s.activate(a, 8, 0);
        check(&s);
        assert_eq!((s.start(a), s.finish(a)), (16 * U, 24 * U));
        // B: S = 0 + 16U (its service), F = 32U; A (16U, 24U) goes first.
        assert_eq!((s.start(b), s.finish(b)), (16 * U, 32 * U));
        assert_eq!(s.select(0), Some(a));
    }

    /// RT is served strictly before BE while backlogged, whatever the timestamps, but does
    /// not preempt a BE leaf in service.
    #[test]
    fn rt_strictly_before_be() {
        let mut s = Wf2q::new();
        let be = s.add_leaf(Wf2q::ROOT, 1000, Class::Be).unwrap();
        let rt = s.add_leaf(Wf2q::ROOT, 1, Class::Rt).unwrap();
        s.activate(be, 8, 0);
        assert_eq!(s.select(0), Some(be));
        s.activate(rt, 8, 0);
        assert_eq!(
            s.select(0),
            Some(be),
            "no preemption of the leaf in service"
        );
        s.served(be, 8);
        s.expire(be, Some(8), 0);
        for t in 0..50 {
            assert_eq!(turn(&mut s, t * MS, 8, Some(8)), rt);
        }
        // RT's virtual time moved, BE's did not: classes have their own clocks.
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Rt), 50 * 8 * U);
        assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 8 * U / 1000);
        assert_eq!(turn(&mut s, 60 * MS, 8, None), rt);
        assert_eq!(s.select(60 * MS), Some(be));
    }

    /// IDLE waits while BE is backlogged, but gets a turn once it has waited 200 ms since
    /// it became backlogged (at 0) or was last chosen (at 200 ms).
    #[test]
    fn idle_class_served_after_timeout_despite_be() {
        let mut s = Wf2q::new();
        let be = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
        let idle = s.add_leaf(Wf2q::ROOT, 100, Class::Idle).unwrap();
        s.activate(be, 8, 0);
        s.activate(idle, 8, 0);
        let mut order = Vec::new();
        for t in (0..=450).step_by(50) {
            order.push(turn(&mut s, t * MS, 8, Some(8)));
        }
        //         0   50  100 150 200   250 300 350 400   450
        let expected = [be, be, be, be, idle, be, be, be, idle, be];
        assert_eq!(order, expected);
        // Exactly at the limit minus one nanosecond: still BE.
        assert_eq!(turn(&mut s, 600 * MS - 1, 8, Some(8)), be);
        assert_eq!(turn(&mut s, 600 * MS, 8, Some(8)), idle);
        // With BE gone, IDLE is served at once.
        s.expire(be, None, 601 * MS);
        assert_eq!(s.select(601 * MS), Some(idle));
    }

    /// Groups G1 (w 1) and G2 (w 3) under the root, each with two leaves of weight 1,
    /// every budget 12, every turn using it all.
    ///
    /// Root level, in U: G1 moves 12/1 = 12 per turn, G2 12/3 = 4, V moves 12/4 = 3.
    /// ```text
    /// start G1(0,12) G2(0,4)    V=0
    /// T1 V=0:  G2 (F 4)                      V=3   G2(4,8)
    /// T2 V=3:  G2 ineligible (4>3) -> G1     V=6   G1(12,24)
    /// T3 V=6:  G2(4,8)                       V=9   G2(8,12)
    /// T4 V=9:  G2(8,12)                      V=12  G2(12,16)
    /// T5 V=12: G2(12,16) < G1(12,24)         V=15  G2(16,20)
    /// T6 V=15: G2 ineligible (16) -> G1      V=18  G1(24,36)
    /// T7..T9:  G2, G2, G2                    V=27
    /// ```
    /// From T2 the root serves G1, G2, G2, G2 over and over. Inside each group the two
    /// leaves (0,12) tie, the lower id goes first, then they alternate (V there moves 6 per
    /// turn of the group). Over 400 turns: G1 1 + 99, G2 300... exactly 100 : 300.
    #[test]
    fn two_level_groups_share_1_to_3() {
        let mut s = Wf2q::new();
        let g1 = s.add_group(Wf2q::ROOT, 1, Class::Be).unwrap();
        let g2 = s.add_group(Wf2q::ROOT, 3, Class::Be).unwrap();
        let a1 = s.add_leaf(g1, 1, Class::Be).unwrap();
        let a2 = s.add_leaf(g1, 1, Class::Be).unwrap();
        let b1 = s.add_leaf(g2, 1, Class::Be).unwrap();
        let b2 = s.add_leaf(g2, 1, Class::Be).unwrap();
        for q in [a1, a2, b1, b2] {
            s.activate(q, 12, 0);
        }
        check(&s);
        assert_eq!((s.start(g1), s.finish(g1)), (0, 12 * U));
        assert_eq!((s.start(g2), s.finish(g2)), (0, 4 * U));
        let first = [b1, a1, b2, b1, b2, a2, b1, b2, b1];
        let groups = [
            (4, 8),
            (12, 24),
            (8, 12),
            (12, 16),
            (16, 20),
            (24, 36),
            (20, 24),
            (24, 28),
            (28, 32),
        ];
        for (k, (&leaf, &(st, fi))) in first.iter().zip(&groups).enumerate() {
            assert_eq!(turn(&mut s, 0, 12, Some(12)), leaf, "turn {}", k + 1);
            assert_eq!(s.vtime(Wf2q::ROOT, Class::Be), 3 * (k as u64 + 1) * U);
            let g = s.parent(leaf).unwrap();
            assert_eq!(
                (s.start(g), s.finish(g)),
                (st * U, fi * U),
                "turn {}",
                k + 1
            );
        }
        let mut per_group = [0u64; 2];
        let mut s = {
            let mut t = Wf2q::new();
            let g1 = t.add_group(Wf2q::ROOT, 1, Class::Be).unwrap();
            let g2 = t.add_group(Wf2q::ROOT, 3, Class::Be).unwrap();
            for g in [g1, g2, g1, g2] {
                let q = t.add_leaf(g, 1, Class::Be).unwrap();
                t.activate(q, 12, 0);
            }
            t
        };
        for _ in 0..400 {
            let q = turn(&mut s, 0, 12, Some(12));
            per_group[usize::from(s.parent(q) == Some(EntityId(2)))] += 12;
        }
        assert_eq!(per_group, [100 * 12, 300 * 12]);
    }

    /// A group's budget follows the child it would serve next: with children of budgets 8
    /// and 32, the group's finish is computed from the eligible child with the smallest
    /// finish, and is recomputed when a child arrives or leaves.
    #[test]
    fn group_budget_follows_next_child() {
        let mut s = Wf2q::new();
        let g = s.add_group(Wf2q::ROOT, 2, Class::Be).unwrap();
        let big = s.add_leaf(g, 1, Class::Be).unwrap();
        let small = s.add_leaf(g, 1, Class::Be).unwrap();
        s.activate(big, 32, 0);
        // Only `big`: group F = 0 + 32U/2.
        assert_eq!((s.budget(g), s.finish(g)), (32, 16 * U));
        s.activate(small, 8, 0);
        check(&s);
        // `small` (0, 8U) now comes first: group repositioned, F = 0 + 8U/2.
        assert_eq!((s.budget(g), s.start(g), s.finish(g)), (8, 0, 4 * U));
        s.expire(small, None, 0);
        check(&s);
        // Gone again (remembered, as its F = 8U > V = 0): back to `big`'s budget.
        assert!(s.is_remembered(small));
        assert_eq!((s.budget(g), s.finish(g)), (32, 16 * U));
        // Serving `big` 32 sectors: the group's own V moves 32U/wsum 2 = 16U (`small` still
        // counts), root V 32U/2 = 16U. On expiry the group restarts at F = 0 + 32U/2 = 16U.
        assert_eq!(turn(&mut s, 0, 32, None), big);
        assert!(!s.is_active(g));
        assert_eq!(s.vtime(g, Class::Be), 16 * U);
        assert_eq!(s.finish(g), 16 * U);
        // 16U <= root V 16U: the group is forgotten, not remembered.
        assert!(!s.is_remembered(g));
    }

    #[test]
    fn weight_and_class_changes_apply_on_requeue() {
        let mut s = Wf2q::new();
        let a = s.add_leaf(Wf2q::ROOT, 1, Class::Be).unwrap();
        s.activate(a, 8, 0);
        s.set_weight(a, 4).unwrap();
        s.set_class(a, Class::Rt).unwrap();
        assert_eq!((s.weight(a), s.class(a)), (1, Class::Be));
        assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 1);
        assert_eq!(turn(&mut s, 0, 8, Some(8)), a);
        assert_eq!((s.weight(a), s.class(a)), (4, Class::Rt));
        assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Be), 0);
        assert_eq!(s.weight_sum(Wf2q::ROOT, Class::Rt), 4);
        // Moved to another class: starts at that class's V (0), F = 8U/4.
        assert_eq!((s.start(a), s.finish(a)), (0, 2 * U));
        // Inactive: applied at once.
        assert_eq!(turn(&mut s, 0, 8, None), a);
        s.set_weight(a, 7).unwrap();
        assert_eq!(s.weight(a), 7);
        check(&s);
    }

    #[test]
    fn errors() {
        let mut s = Wf2q::new();
        assert_eq!(
            s.add_leaf(Wf2q::ROOT, 0, Class::Be),
            Err(Wf2qError::BadWeight(0))
        );
        assert_eq!(
            s.add_group(Wf2q::ROOT, MAX_WEIGHT + 1, Class::Be),
            Err(Wf2qError::BadWeight(MAX_WEIGHT + 1))
        );
        let g = s.add_group(Wf2q::ROOT, 100, Class::Be).unwrap();
        let q = s.add_leaf(g, 100, Class::Be).unwrap();
        let other = s.add_leaf(Wf2q::ROOT, 100, Class::Be).unwrap();
        assert_eq!(s.add_leaf(q, 100, Class::Be), Err(Wf2qError::NotAGroup));
        assert_eq!(
            s.add_leaf(EntityId(99), 100, Class::Be),
            Err(Wf2qError::NoSuchEntity)
        );
        assert_eq!(s.set_parent(other, q), Err(Wf2qError::NotAGroup));
        assert_eq!(s.set_parent(g, g), Err(Wf2qError::NotAGroup));
        assert_eq!(s.set_weight(q, 0), Err(Wf2qError::BadWeight(0)));
        assert_eq!(s.remove(g), Err(Wf2qError::Busy), "group with a child");
        assert_eq!(s.remove(Wf2q::ROOT), Err(Wf2qError::Busy));
        assert_eq!(s.set_parent(Wf2q::ROOT, g), Err(Wf2qError::Busy));
        let sibling = s.add_leaf(g, 100, Class::Be).unwrap();
        s.activate(q, 8, 0);
        s.activate(sibling, 8, 0);
        assert_eq!(s.remove(q), Err(Wf2qError::Busy), "active leaf");
        assert_eq!(s.remove(g), Err(Wf2qError::Busy), "active group");
        assert_eq!(s.set_parent(q, Wf2q::ROOT), Err(Wf2qError::Busy));
        assert_eq!(s.select(0), Some(q));
        assert_eq!(s.remove(q), Err(Wf2qError::Busy), "in service");
        s.served(q, 8);
        s.expire(q, None, 0);
        // F = 8U/100 > V = 8U/200: remembered on the idle tree; removal forgets it.
        assert!(s.is_remembered(q));
        assert_eq!(s.vtime_weight_sum(g, Class::Be), 200);
        assert_eq!(s.remove(q), Ok(()));
        check(&s);
        assert_eq!(s.remove(q), Err(Wf2qError::NoSuchEntity));
        assert_eq!(s.weight(q), 0);
        assert_eq!(s.vtime_weight_sum(g, Class::Be), 100);
        assert_eq!(turn(&mut s, 0, 8, None), sibling);
        assert_eq!(s.remove(sibling), Ok(()));
        assert_eq!(s.remove(g), Ok(()));
        // Slots are reused.
        let again = s.add_leaf(Wf2q::ROOT, 5, Class::Idle).unwrap();
        assert!(again == g || again == q);
        check(&s);
    }

    // ---- randomized ----------------------------------------------------------------------

    /// Brute-force reference of `select`: the same rule by linear scans over the arena.
    fn brute_select(s: &Wf2q, now: u64) -> Option<EntityId> {
        let mut g = ROOT_IDX;
        loop {
            let kids: Vec<u32> = (0..s.ents.len() as u32)
                .filter(|&i| {
                    let e = &s.ents[i as usize];
                    e.state == State::Active && e.parent == g
                })
                .collect();
            let has = |c: Class| kids.iter().any(|&i| s.ents[i as usize].class == c);
            let sd = &s.scheds[g as usize];
            let class = if has(Class::Idle)
                && now.saturating_sub(sd.idle_class_since_ns) >= IDLE_CLASS_TIMEOUT_NS
            {
                Class::Idle
            } else {
                *Class::ALL.iter().find(|&&c| has(c))?
            };
            let cands: Vec<&u32> = kids
                .iter()
                .filter(|&&i| s.ents[i as usize].class == class)
                .collect();
            let min_start = cands
                .iter()
                .map(|&&i| s.ents[i as usize].start)
                .min()
                .unwrap();
            let v = sd.trees[class.idx()].vtime.max(min_start);
            let x = **cands
                .iter()
                .filter(|&&&i| s.ents[i as usize].start <= v)
                .min_by_key(|&&&i| (s.ents[i as usize].finish, i))
                .unwrap();
            if !s.ents[x as usize].is_group {
                return Some(EntityId(x));
            }
            g = x;
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Activate(usize, u64),
        /// Serve the selected leaf `service` sectors (capped by its budget when `cap`), then
        /// requeue with a budget or let it go idle.
        Turn {
            service: u64,
            cap: bool,
            requeue: Option<u64>,
        },
        /// Expire an active leaf that is not in service.
        Dequeue(usize, Option<u64>),
        /// Charge a leaf that is not in service (injected I/O).
        Inject(usize, u64),
        Weight(usize, u32),
        ClassOf(usize, u8),
        Move(usize, usize),
        Time(u64),
    }

    fn class_of(n: u8) -> Class {
        Class::ALL[usize::from(n % 3)]
    }

    fn op() -> impl Strategy<Value = Op> {
        let budget = 0u64..200;
        prop_oneof![
            3 => (any::<usize>(), budget.clone()).prop_map(|(l, b)| Op::Activate(l, b)),
            6 => (0u64..200, any::<bool>(), proptest::option::weighted(0.7, budget.clone()))
                .prop_map(|(service, cap, requeue)| Op::Turn { service, cap, requeue }),
            1 => (any::<usize>(), proptest::option::of(budget)).prop_map(|(l, b)| Op::Dequeue(l, b)),
            1 => (any::<usize>(), 0u64..100).prop_map(|(l, n)| Op::Inject(l, n)),
            1 => (any::<usize>(), prop_oneof![1u32..=1000, Just(MAX_WEIGHT)]).prop_map(|(e, w)| Op::Weight(e, w)),
            1 => (any::<usize>(), any::<u8>()).prop_map(|(e, c)| Op::ClassOf(e, c)),
            1 => (any::<usize>(), any::<usize>()).prop_map(|(l, g)| Op::Move(l, g)),
            1 => (0u64..150 * MS).prop_map(Op::Time),
        ]
    }

    /// (parent index, weight, class number) of an entity to build.
    type Node = (usize, u32, u8);

    /// A hierarchy: groups (each under the root or an earlier group) and leaves.
    fn shape() -> impl Strategy<Value = (Vec<Node>, Vec<Node>)> {
        let weight = prop_oneof![1u32..=1000, Just(MAX_WEIGHT), Just(1u32)];
        (
            proptest::collection::vec((any::<usize>(), weight.clone(), any::<u8>()), 0..4),
            proptest::collection::vec((any::<usize>(), weight, any::<u8>()), 1..10),
        )
    }

    fn build(
        groups: &[(usize, u32, u8)],
        leaves: &[(usize, u32, u8)],
    ) -> (Wf2q, Vec<EntityId>, Vec<EntityId>) {
        let mut s = Wf2q::new();
        let mut gs = vec![Wf2q::ROOT];
        for &(p, w, c) in groups {
            let g = s.add_group(gs[p % gs.len()], w, class_of(c)).unwrap();
            gs.push(g);
        }
        let mut ls = Vec::new();
        for &(p, w, c) in leaves {
            ls.push(s.add_leaf(gs[p % gs.len()], w, class_of(c)).unwrap());
        }
        (s, gs, ls)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Random operations keep every invariant, and `select` always picks what the
        /// brute-force scan of the same rule picks.
        #[test]
        fn select_matches_brute_force((groups, leaves) in shape(), ops in proptest::collection::vec(op(), 1..200)) {
            let (mut s, gs, ls) = build(&groups, &leaves);
            let mut now = 0u64;
            for op in ops {
                match op {
                    Op::Activate(l, b) => s.activate(ls[l % ls.len()], b, now),
                    Op::Turn { service, cap, requeue } => {
                        let expected = brute_select(&s, now);
                        let got = s.select(now);
                        prop_assert_eq!(got, expected);
                        if let Some(q) = got {
                            let service = if cap { service.min(s.budget(q)) } else { service };
                            s.served(q, service);
                            prop_assert_eq!(s.service(q), service);
                            s.expire(q, requeue, now);
                            prop_assert_eq!(s.is_active(q), requeue.is_some());
                        }
                    }
                    Op::Dequeue(l, b) => {
                        let q = ls[l % ls.len()];
                        if s.in_service() != Some(q) {
                            let was = s.is_active(q);
                            s.expire(q, b, now);
                            prop_assert_eq!(s.is_active(q), was && b.is_some());
                        }
                    }
                    Op::Inject(l, n) => {
                        let q = ls[l % ls.len()];
                        if s.in_service() != Some(q) {
                            s.served(q, n);
                        }
                    }
                    Op::Weight(e, w) => {
                        let all: Vec<EntityId> = gs.iter().chain(&ls).copied().collect();
                        s.set_weight(all[e % all.len()], w).unwrap();
                    }
                    Op::ClassOf(e, c) => {
                        let all: Vec<EntityId> = gs.iter().chain(&ls).copied().collect();
                        s.set_class(all[e % all.len()], class_of(c)).unwrap();
                    }
                    Op::Move(l, g) => {
                        let q = ls[l % ls.len()];
                        let r = s.set_parent(q, gs[g % gs.len()]);
                        prop_assert_eq!(r.is_ok(), !s.is_active(q));
                    }
                    Op::Time(dt) => now += dt,
                }
                check(&s);
            }
            // Draining: every backlogged leaf is served and nothing is lost.
            let mut turns = 0;
            while let Some(q) = s.select(now) {
                s.served(q, 1);
                s.expire(q, None, now);
                turns += 1;
                prop_assert!(turns <= ls.len());
            }
            prop_assert!(ls.iter().all(|&q| !s.is_active(q)));
            check(&s);
        }
    }

    /// The largest budget in the fairness runs (sectors).
    const BMAX: u64 = 64;

    /// Two-level shapes for the fairness runs: each leaf is (parent, weight, steady); a
    /// steady leaf stays backlogged throughout, the others (always under the root, so every
    /// group stays backlogged) come and go.
    fn fair_shape() -> impl Strategy<Value = (Vec<u32>, Vec<(usize, u32, bool)>)> {
        (
            proptest::collection::vec(1u32..=8, 0..3),
            proptest::collection::vec((any::<usize>(), 1u32..=8, any::<bool>()), 2..7),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Random budgets and partial service, with leaves going idle and coming back:
        /// - no starvation: while an entity waits, its siblings receive a bounded service;
        /// - continuously backlogged siblings (leaves, or groups of steady leaves) receive
        ///   service in the ratio of their weights, within a bound proportional to BMAX.
        #[test]
        fn service_follows_weights_without_starvation(
            (group_weights, leaves) in fair_shape(),
            seed in proptest::collection::vec((1u64..=BMAX, 1u64..=BMAX, 0u8..8), 1500),
        ) {
            let mut s = Wf2q::new();
            let groups: Vec<EntityId> = group_weights
                .iter()
                .map(|&w| s.add_group(Wf2q::ROOT, w, Class::Be).unwrap())
                .collect();
            let mut ids = Vec::new();
            let mut steady = Vec::new();
            for (k, &(p, w, st)) in leaves.iter().enumerate() {
                // At least one leaf stays backlogged: there is always something to serve.
                let st = st || k == 0;
                let parent = if st && p % (groups.len() + 1) > 0 {
                    groups[p % (groups.len() + 1) - 1]
                } else {
                    Wf2q::ROOT
                };
                let q = s.add_leaf(parent, w, Class::Be).unwrap();
                s.activate(q, BMAX, 0);
                ids.push(q);
                steady.push(st);
            }
            // Entities whose service is compared: steady leaves, and groups with children
            // (all steady).
            let mut steady_ents: Vec<EntityId> =
                ids.iter().zip(&steady).filter(|(_, st)| **st).map(|(q, _)| *q).collect();
            steady_ents.extend(groups.iter().filter(|&&g| ids.iter().any(|&q| s.parent(q) == Some(g))));
            let all: Vec<EntityId> = groups.iter().chain(&ids).copied().collect();
            let mut received = vec![0u64; s.ents.len()];
            // Service given to an entity's siblings since it last was served or became
            // backlogged, and the largest such amount seen.
            let mut waited = vec![0u64; s.ents.len()];
            let mut max_waited = vec![0u64; s.ents.len()];
            for &(budget, used, toggle) in &seed {
                let q = s.select(0).unwrap();
                let used = used.min(s.budget(q));
                s.served(q, used);
                let on_path = |e: EntityId| {
                    let mut x = q;
                    loop {
                        if x == e {
                            return true;
                        }
                        match s.parent(x) {
                            Some(p) => x = p,
                            None => return false,
                        }
                    }
                };
                for &e in &all {
                    let i = e.0 as usize;
                    if on_path(e) {
                        received[i] += used;
                        waited[i] = 0;
                    } else if s.is_active(e) && on_path(s.parent(e).unwrap()) {
                        waited[i] += used;
                        max_waited[i] = max_waited[i].max(waited[i]);
                    }
                }
                let i = ids.iter().position(|&l| l == q).unwrap();
                let requeue = (steady[i] || toggle != 0).then_some(budget);
                s.expire(q, requeue, 0);
                // An intermittent leaf: one idle one comes back now and then.
                let j = usize::from(toggle) % ids.len();
                if !steady[j] && !s.is_active(ids[j]) && toggle % 2 == 1 {
                    s.activate(ids[j], budget, 0);
                    waited[ids[j].0 as usize] = 0;
                }
            }
            check(&s);
            // No starvation, per level: while an entity waits, its start is at most
            // 2 BMAX / w ahead of its siblings' V (after a requeue, or coming back at an old
            // finish), V gains 1 / (sum of sibling weights) per sector served there, and
            // each sibling ahead of it overshoots by at most one budget.
            for &e in &all {
                let p = s.parent(e).unwrap();
                let siblings: Vec<EntityId> = all.iter().copied().filter(|&x| s.parent(x) == Some(p)).collect();
                let w_sum: u64 = siblings.iter().map(|&x| u64::from(s.weight(x))).sum();
                let limit = 2 * BMAX * w_sum / u64::from(s.weight(e)) + siblings.len() as u64 * BMAX;
                prop_assert!(
                    max_waited[e.0 as usize] <= limit,
                    "{:?} waited while {} sectors went to siblings (limit {})", e, max_waited[e.0 as usize], limit
                );
            }
            // Fairness among continuously backlogged siblings.
            for (a, &x) in steady_ents.iter().enumerate() {
                for &y in &steady_ents[a + 1..] {
                    if s.parent(x) != s.parent(y) {
                        continue;
                    }
                    let (wx, wy) = (u64::from(s.weight(x)), u64::from(s.weight(y)));
                    let (sx, sy) = (received[x.0 as usize], received[y.0 as usize]);
                    let gap = (sx * wy).abs_diff(sy * wx);
                    prop_assert!(
                        gap <= 2 * BMAX * (wx + wy),
                        "{:?} w{} got {}, {:?} w{} got {}", x, wx, sx, y, wy, sy
                    );
                }
            }
        }
    }
}
