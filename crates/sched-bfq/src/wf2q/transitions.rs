//! State transitions of entities: activation, requeue, going idle and being forgotten,
//! pending weight and class changes, and their propagation up the group hierarchy.

use super::{Class, NIL, ROOT_IDX, State, Wf2q, delta, ts_gt};

impl Wf2q {
    /// True activation of `x` (inactive or remembered), `x.budget` set.
    pub(super) fn activate_one(&mut self, x: u32, now_ns: u64) {
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
    pub(super) fn requeue_in_service(&mut self, x: u32, budget: u64, now_ns: u64) {
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
    pub(super) fn reposition(&mut self, x: u32, budget: u64, now_ns: u64) {
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
    pub(super) fn deactivate(&mut self, x: u32) {
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
    pub(super) fn forget(&mut self, x: u32) {
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
    pub(super) fn propagate(&mut self, mut g: u32, now_ns: u64) {
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
    pub(super) fn next_child_budget(&self, g: u32) -> u64 {
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
    pub(super) fn raise_vtime(&mut self, g: u32, class: Class, v: u64) {
        let st = &mut self.scheds[g as usize].trees[class.idx()];
        if ts_gt(v, st.vtime) {
            st.vtime = v;
            self.forget_idle(g, class);
        }
    }

    /// Forgets the idle entities of (`g`, `class`) whose finish `V` has reached. Each
    /// entity is forgotten once per idle period, so this is O(log n) amortized.
    pub(super) fn forget_idle(&mut self, g: u32, class: Class) {
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
}
