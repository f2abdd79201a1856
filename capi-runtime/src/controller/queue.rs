//! The work queue of a controller, with client-go's workqueue semantics: due keys are served
//! oldest first, a key is queued at most once, a key is never handed out while a reconcile of it
//! runs (a trigger that comes meanwhile queues it again when that reconcile ends), and a key due
//! later waits on a timer until its time comes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;

use tokio::time::Instant;

/// A controller's work queue of keys `T`, each with why it was queued (`R`; the first reason
/// stands until the key is handed out).
pub(crate) struct WorkQueue<T, R> {
    /// Keys due now, oldest first.
    due: VecDeque<T>,
    /// Keys in `due`, or waiting for their running reconcile to end, and why they were queued.
    dirty: HashMap<T, R>,
    /// Keys whose reconcile runs.
    processing: HashSet<T>,
    /// Keys due later: when, and the timer that brings them.
    waiting: HashMap<T, (Instant, u64, R)>,
    /// Timers by deadline; a timer whose key is no longer in `waiting` under its number is spent.
    timers: BinaryHeap<Reverse<(Instant, u64)>>,
    /// The key of each live timer.
    timer_keys: HashMap<u64, T>,
    next_timer: u64,
}

impl<T: Clone + Eq + Hash, R> Default for WorkQueue<T, R> {
    fn default() -> Self {
        Self {
            due: VecDeque::new(),
            dirty: HashMap::new(),
            processing: HashSet::new(),
            waiting: HashMap::new(),
            timers: BinaryHeap::new(),
            timer_keys: HashMap::new(),
            next_timer: 0,
        }
    }
}

impl<T: Clone + Eq + Hash, R> WorkQueue<T, R> {
    /// Queues `key` now, behind every key already due. A key already queued keeps its place
    /// (and its reason); a timer of the key is dropped (the reconcile about to run decides
    /// what comes after it).
    pub(crate) fn add(&mut self, key: T, reason: R) {
        if let Some((_, timer, _)) = self.waiting.remove(&key) {
            self.timer_keys.remove(&timer);
        }
        if self.dirty.contains_key(&key) {
            return;
        }
        if !self.processing.contains(&key) {
            self.due.push_back(key.clone());
        }
        self.dirty.insert(key, reason);
    }

    /// Queues `key` at `at`, unless it is queued already or due sooner.
    pub(crate) fn add_at(&mut self, key: T, at: Instant, reason: R) {
        if self.dirty.contains_key(&key) {
            return;
        }
        if at <= Instant::now() {
            return self.add(key, reason);
        }
        if let Some((when, _, _)) = self.waiting.get(&key)
            && *when <= at
        {
            return;
        }
        let timer = self.next_timer;
        self.next_timer += 1;
        if let Some((_, old, _)) = self.waiting.insert(key.clone(), (at, timer, reason)) {
            self.timer_keys.remove(&old);
        }
        self.timer_keys.insert(timer, key);
        self.timers.push(Reverse((at, timer)));
    }

    /// Queues the keys whose time has come by `now`, in the order of their times.
    pub(crate) fn promote(&mut self, now: Instant) {
        while let Some(Reverse((at, timer))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            if let Some(key) = self.timer_keys.remove(&timer)
                && let Some((_, _, reason)) = self.waiting.remove(&key)
            {
                self.add(key, reason);
            }
        }
    }

    /// When the next waiting key comes due.
    pub(crate) fn next_due(&mut self) -> Option<Instant> {
        while let Some(Reverse((at, timer))) = self.timers.peek().copied() {
            if self.timer_keys.contains_key(&timer) {
                return Some(at);
            }
            self.timers.pop();
        }
        None
    }

    /// The oldest due key, now handed out (not handed out again until [`done`](Self::done)).
    pub(crate) fn pop(&mut self) -> Option<(T, R)> {
        let key = self.due.pop_front()?;
        let reason = self.dirty.remove(&key)?;
        self.processing.insert(key.clone());
        Some((key, reason))
    }

    /// The reconcile of `key` ended: queued again at the back if a trigger came meanwhile.
    pub(crate) fn done(&mut self, key: &T) {
        self.processing.remove(key);
        if self.dirty.contains_key(key) {
            self.due.push_back(key.clone());
        }
    }

    /// Keys due now (not counting those whose reconcile runs).
    pub(crate) fn len(&self) -> usize {
        self.due.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn drain(queue: &mut WorkQueue<&'static str, u8>) -> Vec<(&'static str, u8)> {
        let mut out = Vec::new();
        while let Some((key, reason)) = queue.pop() {
            queue.done(&key);
            out.push((key, reason));
        }
        out
    }

    #[test]
    fn due_keys_come_oldest_first_once_each_with_their_first_reason() {
        let mut queue = WorkQueue::default();
        for (key, reason) in [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", 3)] {
            queue.add(key, reason);
        }
        assert_eq!(drain(&mut queue), [("a", 1), ("b", 1), ("c", 1)]);
    }

    #[test]
    fn a_running_key_is_not_handed_out_and_runs_again_after_if_triggered() {
        let mut queue = WorkQueue::default();
        queue.add("a", 1);
        queue.add("b", 1);
        assert_eq!(queue.pop(), Some(("a", 1)));
        queue.add("a", 2);
        assert_eq!(queue.pop(), Some(("b", 1)));
        assert_eq!(queue.pop(), None, "a runs: not handed out twice");
        queue.add("c", 1);
        queue.done(&"a");
        assert_eq!(drain(&mut queue), [("c", 1), ("a", 2)]);
        queue.done(&"b");
        assert_eq!(queue.pop(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_key_comes_at_its_time_the_sooner_wins_and_a_trigger_replaces_it() {
        let mut queue = WorkQueue::default();
        let now = Instant::now();
        queue.add_at("a", now + Duration::from_secs(10), 1);
        queue.add_at("a", now + Duration::from_secs(5), 2);
        queue.add_at("a", now + Duration::from_secs(8), 3);
        queue.add_at("b", now + Duration::from_secs(3), 1);
        queue.add_at("c", now + Duration::from_secs(20), 1);
        assert_eq!(queue.next_due(), Some(now + Duration::from_secs(3)));
        queue.promote(now + Duration::from_secs(6));
        assert_eq!(drain(&mut queue), [("b", 1), ("a", 2)]);
        queue.promote(now + Duration::from_secs(15));
        assert_eq!(queue.pop(), None, "a's later timers are spent");

        queue.add("c", 4);
        assert_eq!(queue.next_due(), None, "the trigger took c's timer");
        assert_eq!(drain(&mut queue), [("c", 4)]);

        queue.add("d", 1);
        queue.add_at("d", now + Duration::from_secs(1), 2);
        assert_eq!(queue.next_due(), None, "a due key is not put on a timer");
        assert_eq!(queue.len(), 1);
    }
}
