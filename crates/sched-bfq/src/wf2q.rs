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
//! This file holds the types and the operations; the state transitions they make, and
//! their walk up the groups, are in `transitions`, the trees in `tree`. Each operation's
//! example is a test of `tests/examples.rs`.

use alloc::vec::Vec;
use core::fmt;

mod transitions;
mod tree;

#[cfg(test)]
mod tests;

/// Fixed-point shift of virtual time: a timestamp advances by `(service << SERVICE_SHIFT) /
/// weight`.
const SERVICE_SHIFT: u32 = 22;

/// The smallest weight an entity may have.
pub(crate) const MIN_WEIGHT: u32 = 1;

/// The largest weight an entity may have: the largest group weight times the largest
/// weight-raising factors, so that raised weights fit.
pub(crate) const MAX_WEIGHT: u32 = 1000 * 30 * 100;

/// How long the IDLE class may go unserved while backlogged (200 ms).
const IDLE_CLASS_TIMEOUT_NS: u64 = 200_000_000;

/// Scheduling class of an entity: strict priority between classes, real time first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Class {
    /// Real time: served before anything else.
    Rt,
    /// Best effort: the default.
    Be,
    /// Idle: served when nothing else is backlogged, or after [`IDLE_CLASS_TIMEOUT_NS`].
    Idle,
}

impl Class {
    /// All classes, highest priority first.
    const ALL: [Class; 3] = [Class::Rt, Class::Be, Class::Idle];

    fn idx(self) -> usize {
        match self {
            Class::Rt => 0,
            Class::Be => 1,
            Class::Idle => 2,
        }
    }
}

/// A queue (leaf) or a group (inner node); index into the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct EntityId(pub(crate) u32);

/// Errors of the configuration operations of [`Wf2q`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wf2qError {
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
#[derive(Clone, Debug)]
pub(crate) struct Wf2q {
    ents: Vec<Entity>,
    /// Indexed like `ents`; used by groups only.
    scheds: Vec<Sched>,
    free: Vec<u32>,
    in_service_leaf: u32,
}

impl Default for Wf2q {
    /// Same as [`Wf2q::new`].
    fn default() -> Self {
        Self::new()
    }
}

impl Wf2q {
    /// The root group: always present, never active itself, never removed.
    pub(crate) const ROOT: EntityId = EntityId(ROOT_IDX);

    /// A scheduler with only the root group.
    pub(crate) fn new() -> Self {
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
    pub(crate) fn add_group(
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
    pub(crate) fn add_leaf(
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
    pub(crate) fn remove(&mut self, e: EntityId) -> Result<(), Wf2qError> {
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
    pub(crate) fn set_parent(&mut self, e: EntityId, parent: EntityId) -> Result<(), Wf2qError> {
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
    pub(crate) fn set_weight(&mut self, e: EntityId, weight: u32) -> Result<(), Wf2qError> {
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
    pub(crate) fn set_class(&mut self, e: EntityId, class: Class) -> Result<(), Wf2qError> {
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
    #[cfg(test)]
    fn weight(&self, e: EntityId) -> u32 {
        self.ent(e).map_or(0, |x| x.weight)
    }

    /// The class in use; [`Class::Be`] for an unknown id.
    #[cfg(test)]
    fn class(&self, e: EntityId) -> Class {
        self.ent(e).map_or(Class::Be, |x| x.class)
    }

    /// The parent group; `None` for the root and unknown ids.
    #[cfg(test)]
    fn parent(&self, e: EntityId) -> Option<EntityId> {
        self.ent(e)
            .filter(|x| x.parent != NIL)
            .map(|x| EntityId(x.parent))
    }

    /// Whether `e` is a group (the root included).
    #[cfg(test)]
    fn is_group(&self, e: EntityId) -> bool {
        self.ent(e).is_some_and(|x| x.is_group)
    }

    /// Backlogged: in an active tree or in service. For the root: whether anything is.
    pub(crate) fn is_active(&self, e: EntityId) -> bool {
        if e == Self::ROOT {
            return self.scheds[ROOT_IDX as usize].active_children > 0;
        }
        self.ent(e).is_some_and(Entity::backlogged)
    }

    /// Whether `e` is idle but still remembered on its idle tree (its finish is ahead of
    /// the virtual time): activated again, it starts at its old finish.
    #[cfg(test)]
    fn is_remembered(&self, e: EntityId) -> bool {
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
    pub(crate) fn activate(&mut self, leaf: EntityId, budget: u64, now_ns: u64) {
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
    pub(crate) fn select(&mut self, now_ns: u64) -> Option<EntityId> {
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
    #[cfg(test)]
    fn in_service(&self) -> Option<EntityId> {
        (self.in_service_leaf != NIL).then_some(EntityId(self.in_service_leaf))
    }

    /// Charges `service` (sectors, already multiplied by any charge factor) to `leaf` and
    /// its ancestors: each one's turn service grows by `service`, and the virtual time of
    /// the tree each is in by `(service << SERVICE_SHIFT) / wsum` (see
    /// [`Wf2q::vtime_weight_sum`]); idle entities whose finish the virtual time reaches are
    /// forgotten. Meant for the leaf in service; charging another one (I/O injected while
    /// idling) advances the virtual times alike, but its turn service is reset when it is
    /// next selected. No-op for a group or an unknown id.
    pub(crate) fn served(&mut self, leaf: EntityId, service: u64) {
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
                // Nothing remembered idle (the common case): nothing to forget.
                if st.idle != NIL {
                    self.forget_idle(p, class);
                }
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
    pub(crate) fn expire(&mut self, leaf: EntityId, requeue_budget: Option<u64>, now_ns: u64) {
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
    #[cfg(test)]
    fn start(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.start)
    }

    /// Virtual finish time of `e` (0 for an unknown id).
    #[cfg(test)]
    fn finish(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.finish)
    }

    /// Virtual time of `class` among the children of `group` (0 for a leaf or unknown id).
    #[cfg(test)]
    fn vtime(&self, group: EntityId, class: Class) -> u64 {
        self.tree(group, class).map_or(0, |st| st.vtime)
    }

    /// Service (sectors) received by `e` in its current turn, that is since it was last
    /// selected (0 for an unknown id).
    #[cfg(test)]
    fn service(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.service)
    }

    /// The budget (sectors) of `e`'s current or next turn: the one given to
    /// [`Wf2q::activate`] or [`Wf2q::expire`] for a leaf, the budget of the child it would
    /// serve next for a group (as of its last activation or requeue). 0 for an unknown id.
    #[cfg(test)]
    fn budget(&self, e: EntityId) -> u64 {
        self.ent(e).map_or(0, |x| x.budget)
    }

    /// Number of active entities (in service included) of `class` directly under `group`.
    #[cfg(test)]
    fn active_count(&self, group: EntityId, class: Class) -> usize {
        self.tree(group, class)
            .map_or(0, |st| st.active_count as usize)
    }

    /// Weight sum of the active entities (in service included) of `class` directly under
    /// `group`.
    #[cfg(test)]
    fn weight_sum(&self, group: EntityId, class: Class) -> u64 {
        self.tree(group, class).map_or(0, |st| st.active_weight)
    }

    /// The weight sum the virtual time of `class` under `group` advances against: active
    /// entities plus idle ones still remembered (Linux's `wsum`).
    #[cfg(test)]
    fn vtime_weight_sum(&self, group: EntityId, class: Class) -> u64 {
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

    #[cfg(test)]
    fn tree(&self, group: EntityId, class: Class) -> Option<&ServiceTree> {
        let g = self.group_idx(group).ok()?;
        Some(&self.scheds[g as usize].trees[class.idx()])
    }

    /// The service tree `x` belongs to (by its class in use).
    fn tree_of_mut(&mut self, x: u32) -> &mut ServiceTree {
        let ent = &self.ents[x as usize];
        &mut self.scheds[ent.parent as usize].trees[ent.class.idx()]
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
