//! Shared subscriptions (queue groups): subscribers naming the same group on the
//! same pattern share its messages, each message going to one member.
//!
//! A shared subscription is a SUBSCRIBE whose pattern is `$share/GROUP/PATTERN`
//! (MQTT 5's syntax). Members are served **round robin** in the order they joined,
//! skipping members that cannot take messages (still in handshake or closing, or, for
//! a request, unable to take its reply: the caller's `eligible`); a
//! request passes over at most [`MAX_PASSED_OVER`] members that cannot take its
//! reply (and skips at most [`MAX_SKIPPED`] leaving ones), over all its groups,
//! visited from a pseudo-random group each time; a group
//! whose look ends there gets no copy, and its turn moves past the members looked at
//! (the requester, handed to nobody, gets BUSY and may retry). A
//! member that stops reading is still chosen in its turn, so the slow-consumer policy
//! (discard its oldest messages, or disconnect it) applies to it alone and the other
//! members are unaffected. Members join and leave at any time; a group disappears with
//! its last member.
//!
//! Pure: no IO, no clock. No allocation per message: matching fills a reused vector.

// A pure core: time is a parameter. `clippy.toml` lists the clock reads this refuses.
#![deny(clippy::disallowed_methods)]

use std::collections::HashMap;

use crate::index::{Slot, SubscriptionIndex};

/// The first level of a shared subscription's pattern.
pub const SHARE_PREFIX: &str = "$share/";

/// A shared subscription pattern split into its group and its pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared<'a> {
    /// The group name (one level, no wildcard).
    pub group: &'a str,
    /// The pattern the group subscribes to.
    pub pattern: &'a str,
}

/// Whether `p` (a validated pattern) is a shared subscription, well formed or not:
/// `$share` or `$share/...`; `$shared/x` or `$sharex` are ordinary patterns
/// (hostile-input pass: images of those were refused as shared).
pub fn is_shared(p: &str) -> bool {
    p == "$share" || p.starts_with(SHARE_PREFIX)
}

/// Splits `$share/GROUP/PATTERN`; `Ok(None)` for an ordinary pattern, `Err` with the
/// reason for a malformed shared one. `full` is an already validated pattern.
pub fn parse(full: &str) -> Result<Option<Shared<'_>>, &'static str> {
    let Some(rest) = full.strip_prefix(SHARE_PREFIX) else {
        if full == "$share" {
            return Err("a shared subscription is $share/GROUP/PATTERN");
        }
        return Ok(None);
    };
    let Some((group, pattern)) = rest.split_once('/') else {
        return Err("a shared subscription is $share/GROUP/PATTERN (no pattern given)");
    };
    if group.contains(['*', '>']) {
        return Err("a shared subscription's group name cannot contain '*' or '>'");
    }
    Ok(Some(Shared { group, pattern }))
}

#[derive(Debug)]
struct Group {
    /// `$share/GROUP/PATTERN` as subscribed.
    key: Box<str>,
    members: Vec<Slot>,
    /// The member whose turn is next, modulo the number of members.
    next: usize,
}

/// Every group, and an index from topics to groups.
#[derive(Default)]
pub struct Groups {
    /// Values are group numbers (as `Slot`s), not clients.
    index: SubscriptionIndex,
    by_key: HashMap<Box<str>, u32>,
    groups: Vec<Option<Group>>,
    free: Vec<u32>,
    /// Group numbers matched by the last topic (reused).
    matched: Vec<Slot>,
    /// Per client slot: the `pick` call that last put it in `out` (so that a client in
    /// many matching groups is found there in one step, not by a scan of `out`).
    picked: Vec<u32>,
    /// The current `pick` call's mark (never 0 while picking).
    pick_mark: u32,
    /// The state of the bounded picks' start (xorshift).
    first_group: u64,
    /// Members of every group together, kept in step by `join` and `leave`: the router
    /// asks at every subscription it releases, and a walk of up to `max_shared_groups`
    /// groups there made a closing client's teardown cost that much per pattern.
    members_total: usize,
}

/// The most members one message's [`Groups::pick`] may pass over as unable to take
/// it (a request whose reply they cannot take), across all its groups.
pub const MAX_PASSED_OVER: usize = 64;

/// With a `passed_over` bound, the most members one [`Groups::pick`] may skip as
/// unable to take anything (leaving, their subscriptions not yet torn down), across
/// all its groups: past it a group's look ends as at the `passed_over` bound (review: a
/// mass disconnect left 100 groups of 1,000 leaving members walked whole by every
/// request while teardown ran). Plain messages skip without bound, as a group's
/// members must all be looked at before it gets no copy.
pub const MAX_SKIPPED: usize = 1024;

/// What a [`Groups::pick`]'s `eligible` says of a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// It takes the message.
    Take,
    /// It cannot take messages at all (still in handshake, or leaving): passed by
    /// without counting against `passed_over` (a bounded pick skips at most
    /// [`MAX_SKIPPED`]; teardown removes such members a few at a time).
    Skip,
    /// It could take messages but not this one (a request whose reply it cannot take):
    /// counts against the call's `passed_over` bound.
    PassOver,
}

/// What one [`Groups::pick`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Picked {
    /// Groups matched.
    pub groups: usize,
    /// A group's look ended at a bound (`passed_over` or [`MAX_SKIPPED`]): it got no
    /// member.
    pub cut: bool,
    /// A group's look ended at [`MAX_SKIPPED`] (members leaving).
    pub cut_by_leaving: bool,
}

/// Marks client slot `m` with `mark`, growing the table to the highest slot seen (client
/// slots are bounded by `max_clients`: after the first messages no growth).
fn set_mark(picked: &mut Vec<u32>, m: u32, mark: u32) {
    let i = m as usize;
    if i >= picked.len() {
        picked.resize(i + 1, 0);
    }
    picked[i] = mark;
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups")
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl Groups {
    /// Whether no group exists (routing then skips groups entirely).
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Nodes of the groups' own subscription index (its root included).
    pub fn node_count(&self) -> usize {
        self.index.node_count()
    }

    /// The most steps one match of the groups' index can take
    /// ([`SubscriptionIndex::match_work`]).
    pub fn match_work(&self) -> u64 {
        self.index.match_work()
    }

    /// Whether the group of `full` (`$share/GROUP/PATTERN`) exists.
    pub fn exists(&self, full: &str) -> bool {
        self.by_key.contains_key(full)
    }

    /// Adds `member` to the group of `full` (`shared` is its parse); a member already in
    /// it is not added twice.
    pub fn join(&mut self, member: Slot, full: &str, shared: Shared<'_>) {
        let gid = match self.by_key.get(full) {
            Some(&g) => g,
            None => {
                let g = self.free.pop().unwrap_or(self.groups.len() as u32);
                let group = Group {
                    key: full.into(),
                    members: Vec::new(),
                    next: 0,
                };
                match self.groups.get_mut(g as usize) {
                    Some(slot) => *slot = Some(group),
                    None => self.groups.push(Some(group)),
                }
                self.by_key.insert(full.into(), g);
                self.index.subscribe(Slot(g), shared.pattern);
                g
            }
        };
        if let Some(Some(g)) = self.groups.get_mut(gid as usize) {
            if !g.members.contains(&member) {
                g.members.push(member);
                self.members_total += 1;
            }
        }
    }

    /// Removes `member` from the group of `full`; the group goes with its last member.
    pub fn leave(&mut self, member: Slot, full: &str, shared: Shared<'_>) {
        let Some(&gid) = self.by_key.get(full) else {
            return;
        };
        let Some(Some(g)) = self.groups.get_mut(gid as usize) else {
            return;
        };
        if let Some(i) = g.members.iter().position(|&m| m == member) {
            g.members.remove(i);
            self.members_total -= 1;
            // Keep the rotation where it was for the remaining members.
            if i < g.next {
                g.next -= 1;
            }
        }
        if g.members.is_empty() {
            self.index.unsubscribe(Slot(gid), shared.pattern);
            self.by_key.remove(full);
            self.groups[gid as usize] = None;
            self.free.push(gid);
        }
    }

    /// Matches `topic` against the groups (into `self.matched`) and starts a new pick
    /// mark with `out`'s clients marked. False when no group matches.
    fn start_pick(&mut self, topic: &str, out: &[Slot]) -> bool {
        self.matched.clear();
        self.index.match_topic(topic, &mut self.matched);
        if self.matched.is_empty() {
            return false;
        }
        self.pick_mark = self.pick_mark.wrapping_add(1);
        if self.pick_mark == 0 {
            self.picked.fill(0);
            self.pick_mark = 1;
        }
        for &Slot(m) in out {
            set_mark(&mut self.picked, m, self.pick_mark);
        }
        true
    }

    /// Appends `m` to `out` unless this pick already put it there.
    fn push_picked(&mut self, m: Slot, out: &mut Vec<Slot>) {
        if self.picked.get(m.0 as usize) != Some(&self.pick_mark) {
            set_mark(&mut self.picked, m.0, self.pick_mark);
            out.push(m);
        }
    }

    /// For every group matching `topic`, picks the member whose turn it is among those
    /// `eligible` says [`Look::Take`] of and appends it to `out` unless already there
    /// (a client that also matches directly gets one copy).
    ///
    /// At most `passed_over` members are passed over ([`Look::PassOver`]) in the whole
    /// call, each group still having one look: a group whose look ends there gets no
    /// member (`Picked::cut`), and its turn moves past the members looked at, so the
    /// next message starts where this one stopped; a bounded call also skips at most
    /// [`MAX_SKIPPED`] members ([`Look::Skip`]) and visits the groups from a start of
    /// its own, so no group spends every call's bound before another (review). The
    /// work of a bounded call is one look per group plus `passed_over` plus
    /// [`MAX_SKIPPED`], never the number of members.
    pub fn pick(
        &mut self,
        topic: &str,
        out: &mut Vec<Slot>,
        mut passed_over: usize,
        mut eligible: impl FnMut(Slot) -> Look,
    ) -> Picked {
        let mut picked = Picked::default();
        if !self.start_pick(topic, out) {
            return picked;
        }
        let groups = self.matched.len();
        picked.groups = groups;
        let bounded = passed_over != usize::MAX;
        let mut skips = if bounded { MAX_SKIPPED } else { usize::MAX };
        // A bounded pick starts at a group of its own (xorshift: a counter was pinned
        // to the same start by plain picks of one group in between; review), so no
        // group spends every request's bound before another.
        let first = if bounded {
            let mut x = self.first_group.max(1);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.first_group = x;
            (x % groups as u64) as usize
        } else {
            0
        };
        for j in 0..groups {
            let gid = self.matched[(first + j) % groups].0 as usize;
            let Some(Some(g)) = self.groups.get_mut(gid) else {
                continue;
            };
            let n = g.members.len();
            let start = g.next.checked_rem(n).unwrap_or(0);
            let mut chosen = None;
            for k in 0..n {
                let i = (start + k) % n;
                let m = g.members[i];
                match eligible(m) {
                    Look::Take => {
                        // Not wrapped: a member joining at the end is next in turn.
                        g.next = i + 1;
                        chosen = Some(m);
                        break;
                    }
                    Look::Skip if skips == 0 => {
                        g.next = i + 1;
                        picked.cut = true;
                        picked.cut_by_leaving = true;
                        break;
                    }
                    Look::Skip => skips -= 1,
                    Look::PassOver if passed_over == 0 => {
                        g.next = i + 1;
                        picked.cut = true;
                        break;
                    }
                    Look::PassOver => passed_over -= 1,
                }
            }
            if let Some(m) = chosen {
                self.push_picked(m, out);
            }
        }
        picked
    }

    /// For every group matching `topic`, picks the first of `candidates` that
    /// `is_member` says belongs to it (asked with the group's `$share/GROUP/PATTERN`)
    /// and appends it to `out` unless already there: a reply owed to a few requesters
    /// goes to those of them reading it through a group, found by asking about each of
    /// them, not by walking the members. Returns the number of groups matched.
    pub fn pick_from(
        &mut self,
        topic: &str,
        out: &mut Vec<Slot>,
        candidates: &[Slot],
        mut is_member: impl FnMut(Slot, &str) -> bool,
    ) -> usize {
        if candidates.is_empty() || !self.start_pick(topic, out) {
            return 0;
        }
        for j in 0..self.matched.len() {
            let gid = self.matched[j].0 as usize;
            let Some(Some(g)) = self.groups.get(gid) else {
                continue;
            };
            if let Some(&m) = candidates.iter().find(|&&c| is_member(c, &g.key)) {
                self.push_picked(m, out);
            }
        }
        self.matched.len()
    }

    /// Members of the group `$share/GROUP/PATTERN`, in turn order from the next one.
    pub fn members(&self, full: &str) -> Vec<Slot> {
        let Some(Some(g)) = self
            .by_key
            .get(full)
            .and_then(|&gid| self.groups.get(gid as usize))
        else {
            return Vec::new();
        };
        let n = g.members.len();
        let start = g.next.checked_rem(n).unwrap_or(0);
        (0..n).map(|k| g.members[(start + k) % n]).collect()
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Members of every group together (each member of each group once).
    pub fn members_total(&self) -> usize {
        self.members_total
    }

    /// The keys of every group (for stats), unordered.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.groups.iter().flatten().map(|g| &*g.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(g: &mut Groups, m: u32, full: &str) {
        let s = parse(full).unwrap().unwrap();
        g.join(Slot(m), full, s);
    }

    fn leave(g: &mut Groups, m: u32, full: &str) {
        let s = parse(full).unwrap().unwrap();
        g.leave(Slot(m), full, s);
    }

    fn take_unless(s: Slot, not: Slot) -> Look {
        if s == not {
            Look::Skip
        } else {
            Look::Take
        }
    }

    /// 100 groups on `svc/>`, each of the same 1,000 members (slots 0..1,000).
    fn hundred_groups_of_a_thousand() -> Groups {
        let mut g = Groups::default();
        for gi in 0..100 {
            for m in 0..1_000 {
                join(&mut g, m, &format!("$share/g{gi}/svc/>"));
            }
        }
        g
    }

    fn pick(g: &mut Groups, topic: &str) -> Vec<u32> {
        let mut out = Vec::new();
        g.pick(topic, &mut out, usize::MAX, |_| Look::Take);
        out.into_iter().map(|s| s.0).collect()
    }

    #[test]
    fn only_the_share_level_makes_a_pattern_shared() {
        for shared in ["$share", "$share/g/md/>", "$share/g"] {
            assert!(is_shared(shared), "{shared}");
        }
        for ordinary in ["$shared/x", "$sharex", "md/$share/x", "share/x"] {
            assert!(!is_shared(ordinary), "{ordinary}");
        }
    }

    #[test]
    fn parse_splits_group_and_pattern() {
        assert_eq!(parse("md/>"), Ok(None));
        assert_eq!(
            parse("$share/workers/jobs/>"),
            Ok(Some(Shared {
                group: "workers",
                pattern: "jobs/>"
            }))
        );
        assert!(parse("$share/workers").is_err());
        assert!(parse("$share").is_err());
        assert!(parse("$share/w*/jobs").is_err());
        assert!(parse("$share/>").is_err());
        // `$shared/...` is an ordinary pattern.
        assert_eq!(parse("$shared/x"), Ok(None));
    }

    #[test]
    fn round_robin_among_members_in_join_order() {
        let mut g = Groups::default();
        for m in [1, 2, 3] {
            join(&mut g, m, "$share/w/jobs/>");
        }
        assert_eq!((g.len(), g.members_total()), (1, 3));
        let got: Vec<u32> = (0..7).flat_map(|_| pick(&mut g, "jobs/a")).collect();
        assert_eq!(got, [1, 2, 3, 1, 2, 3, 1]);
        assert_eq!(pick(&mut g, "other"), Vec::<u32>::new());
    }

    /// A client in many matching groups, and one already in `out` (a direct match), is
    /// picked once: one copy per client however many groups name it.
    #[test]
    fn a_client_in_many_matching_groups_is_picked_once() {
        let mut g = Groups::default();
        for i in 0..500 {
            join(&mut g, 7, &format!("$share/g{i}/t"));
        }
        join(&mut g, 8, "$share/other/t");
        join(&mut g, 9, "$share/third/*");
        let mut got = pick(&mut g, "t");
        got.sort();
        assert_eq!(got, [7, 8, 9]);
        // Already in out (subscribed directly too): not added again.
        let mut out = vec![Slot(8), Slot(7)];
        assert_eq!(
            g.pick("t", &mut out, usize::MAX, |_| Look::Take).groups,
            502
        );
        assert_eq!(out, [Slot(8), Slot(7), Slot(9)]);
        // The marks of one call do not leak into the next.
        let mut out = Vec::new();
        g.pick("t", &mut out, usize::MAX, |s| take_unless(s, Slot(9)));
        out.sort();
        assert_eq!(out, [Slot(7), Slot(8)]);
        // Nor across the mark's wrap.
        g.pick_mark = u32::MAX;
        let mut got = pick(&mut g, "t");
        got.sort();
        assert_eq!(got, [7, 8, 9]);
        assert_eq!(g.pick_mark, 1);
    }

    #[test]
    fn two_groups_on_one_pattern_each_get_every_message() {
        let mut g = Groups::default();
        join(&mut g, 1, "$share/a/t");
        join(&mut g, 2, "$share/a/t");
        join(&mut g, 3, "$share/b/t");
        let mut a = pick(&mut g, "t");
        a.sort();
        assert_eq!(a, [1, 3]);
        let mut b = pick(&mut g, "t");
        b.sort();
        assert_eq!(b, [2, 3]);
    }

    #[test]
    fn members_join_and_leave_at_any_time() {
        let mut g = Groups::default();
        join(&mut g, 1, "$share/w/t");
        join(&mut g, 2, "$share/w/t");
        assert_eq!(pick(&mut g, "t"), [1]);
        leave(&mut g, 1, "$share/w/t");
        assert_eq!(pick(&mut g, "t"), [2]);
        join(&mut g, 3, "$share/w/t");
        assert_eq!(pick(&mut g, "t"), [3]);
        assert_eq!(pick(&mut g, "t"), [2]);
        leave(&mut g, 2, "$share/w/t");
        leave(&mut g, 3, "$share/w/t");
        assert!(g.is_empty());
        assert_eq!(pick(&mut g, "t"), Vec::<u32>::new());
        // The freed group number is reused.
        join(&mut g, 9, "$share/z/u");
        assert_eq!(pick(&mut g, "u"), [9]);
        assert_eq!(g.len(), 1);
    }

    /// Hostile-input pass: 100 groups of 1,000 members none of which could take a
    /// request were all asked about every request (~1.9 ms of routing each).
    #[test]
    fn a_pick_passes_over_a_bounded_number_of_members_and_moves_the_turn_on() {
        let mut g = hundred_groups_of_a_thousand();
        let mut looks = 0;
        let mut out = Vec::new();
        let picked = g.pick("svc/x", &mut out, MAX_PASSED_OVER, |_| {
            looks += 1;
            Look::PassOver
        });
        assert_eq!(
            picked,
            Picked {
                groups: 100,
                cut: true,
                cut_by_leaving: false
            }
        );
        assert!(out.is_empty());
        // Every group has its first member looked at, the passed-over bound aside.
        assert_eq!(looks, MAX_PASSED_OVER + 100);
        // One member (of every group) can take it: the turns moved on past the members
        // already looked at, so some messages later it is found. The bound is shared
        // fairly: the first group visited (a pseudo-random one) passes over 64
        // members, each other group one, so ~700 / 1.6 messages.
        let able = Slot(700);
        let mut tries = 0;
        let got = loop {
            tries += 1;
            let mut out = Vec::new();
            g.pick("svc/x", &mut out, MAX_PASSED_OVER, |s| {
                if s == able {
                    Look::Take
                } else {
                    Look::PassOver
                }
            });
            if !out.is_empty() {
                break out;
            }
            assert!(tries < 1_000, "the able member was never reached");
        };
        assert_eq!(got, [able]);
        // Without a bound (a plain message), a group's every member may be looked at.
        let mut looks = 0;
        let picked = g.pick("svc/x", &mut Vec::new(), usize::MAX, |_| {
            looks += 1;
            Look::PassOver
        });
        assert_eq!((picked.cut, looks), (false, 100 * 1_000));
        // Members that cannot take anything (leaving) are skipped without counting
        // against the passed-over bound (they have their own, MAX_SKIPPED).
        let mut looks = 0;
        let mut out = Vec::new();
        let picked = g.pick("svc/x", &mut out, MAX_PASSED_OVER, |s| {
            looks += 1;
            if s.0 < 5 || (100..105).contains(&s.0) || (700..705).contains(&s.0) {
                Look::Skip
            } else {
                Look::Take
            }
        });
        assert!(!picked.cut);
        assert!(!out.is_empty());
        assert!(
            looks <= 100 * 6,
            "at most 5 leaving in a row, then a take: {looks}"
        );
    }

    #[test]
    fn pick_from_asks_about_the_candidates_not_the_members() {
        let mut g = Groups::default();
        for m in 0..1_000 {
            join(&mut g, m, "$share/a/r/>");
            join(&mut g, m, "$share/b/r/>");
        }
        join(&mut g, 5_000, "$share/c/r/x");
        let mut asked = Vec::new();
        let mut out = vec![Slot(3)];
        let n = g.pick_from("r/x", &mut out, &[Slot(3), Slot(5_000)], |s, key| {
            asked.push((s.0, key.to_owned()));
            match s.0 {
                3 => key != "$share/c/r/x",
                _ => key == "$share/c/r/x",
            }
        });
        assert_eq!(n, 3);
        assert!(asked.len() <= 6, "at most candidates x groups: {asked:?}");
        // 3 was already in `out` (a direct match): one copy; 5,000 through group c.
        assert_eq!(out, [Slot(3), Slot(5_000)]);
        let mut out = Vec::new();
        assert_eq!(g.pick_from("r/x", &mut out, &[], |_, _| true), 0);
        assert!(out.is_empty());
        assert_eq!(g.pick_from("r/x", &mut out, &[Slot(9)], |_, _| false), 3);
        assert!(out.is_empty(), "a candidate in no group gets nothing");
    }

    #[test]
    fn ineligible_members_are_skipped_and_duplicates_not_added() {
        let mut g = Groups::default();
        for m in [1, 2, 3] {
            join(&mut g, m, "$share/w/t");
        }
        let mut out = vec![Slot(1)];
        g.pick("t", &mut out, usize::MAX, |s| take_unless(s, Slot(1)));
        assert_eq!(out, [Slot(1), Slot(2)]);
        let mut out = vec![Slot(3)];
        g.pick("t", &mut out, usize::MAX, |_| Look::Take);
        // Member 3's turn, and it already has the message directly: one copy.
        assert_eq!(out, [Slot(3)]);
        assert_eq!(g.members("$share/w/t"), [Slot(1), Slot(2), Slot(3)]);
        // Nobody eligible: nothing picked, no panic.
        let mut out = Vec::new();
        g.pick("t", &mut out, usize::MAX, |_| Look::Skip);
        assert!(out.is_empty());
    }

    #[test]
    fn joining_twice_and_leaving_an_unknown_group_are_harmless() {
        let mut g = Groups::default();
        join(&mut g, 1, "$share/w/t");
        join(&mut g, 1, "$share/w/t");
        assert_eq!(g.members("$share/w/t"), [Slot(1)]);
        assert_eq!(g.members_total(), 1);
        leave(&mut g, 5, "$share/w/t");
        leave(&mut g, 1, "$share/x/t");
        assert_eq!(pick(&mut g, "t"), [1]);
        assert_eq!(g.members_total(), 1, "kept in step, not recounted");
        join(&mut g, 2, "$share/y/t");
        leave(&mut g, 1, "$share/w/t");
        assert_eq!((g.len(), g.members_total()), (1, 1));
        leave(&mut g, 2, "$share/y/t");
        assert_eq!((g.len(), g.members_total()), (0, 0));
    }

    /// Review: the bounded picks' start was one counter every pick moved, so a plain
    /// pick on a one-group topic between requests reset it and every request began at
    /// the same group: a member able to take the request, 150th in the other group,
    /// was reached after 151 requests instead of a few.
    #[test]
    fn the_bounded_picks_start_is_not_pinned_by_picks_in_between() {
        fn tries(able: Slot, interleave: bool) -> usize {
            let mut g = Groups::default();
            for m in 0..200 {
                join(&mut g, m, "$share/a/svc/>");
                join(&mut g, 1_000 + m, "$share/b/svc/>");
            }
            join(&mut g, 5_000, "$share/p/feed/x");
            let mut n = 0;
            loop {
                n += 1;
                if interleave {
                    g.pick("feed/x", &mut Vec::new(), usize::MAX, |_| Look::Take);
                }
                let mut out = Vec::new();
                g.pick("svc/x", &mut out, MAX_PASSED_OVER, |s| {
                    if s == able {
                        Look::Take
                    } else {
                        Look::PassOver
                    }
                });
                if !out.is_empty() || n >= 1_000 {
                    return n;
                }
            }
        }
        for interleave in [false, true] {
            for able in [Slot(150), Slot(1_150)] {
                let n = tries(able, interleave);
                assert!(n < 20, "{able:?} interleaved {interleave}: {n} tries");
            }
        }
    }

    /// Review: members skipped as leaving were walked without bound by every request
    /// (100 groups of 1,000: 100,000 looks a request while teardown ran).
    #[test]
    fn a_bounded_pick_skips_a_bounded_number_of_leaving_members() {
        let mut g = hundred_groups_of_a_thousand();
        for _ in 0..3 {
            let mut looks = 0;
            let p = g.pick("svc/x", &mut Vec::new(), MAX_PASSED_OVER, |_| {
                looks += 1;
                Look::Skip
            });
            assert!(p.cut && p.cut_by_leaving);
            assert!(looks <= MAX_SKIPPED + 100, "{looks} looks");
        }
        // A plain message still looks at every member before a group gets no copy.
        let mut looks = 0;
        let p = g.pick("svc/x", &mut Vec::new(), usize::MAX, |_| {
            looks += 1;
            Look::Skip
        });
        assert_eq!((p.cut, looks), (false, 100 * 1_000));
    }
}
