//! The host side of serving: which requests wait and which run, how many tokens each computes
//! in a step, and who gives up its pages when the cache runs out.
//!
//! The policy follows vLLM's: a step has a budget of tokens. Running requests come first,
//! oldest first, each with what it still has to compute (one token when it decodes, a chunk of
//! its prompt when it prefills), so a long prompt is split over several steps and never stalls
//! the decode of the others. When a request's next chunk needs more pages than are free, the
//! newest running requests are preempted: their pages are freed and they go back to the front
//! of the queue to be recomputed (prompt and the tokens they already produced), which keeps
//! every token they generated. Waiting requests are admitted, oldest first, with what budget is
//! left, and only when their whole prefill fits the free pages and nothing was preempted in the
//! step.

use std::collections::VecDeque;

use super::cache::PagePool;
use super::serve::Sampling;

/// A request's handle, in submission order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(pub u64);

/// A request the scheduler holds.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its handle.
    pub id: RequestId,
    /// The prompt, then every token generated so far.
    pub tokens: Vec<u32>,
    /// Tokens of the prompt.
    pub prompt: usize,
    /// Tokens to generate at most.
    pub new_tokens: usize,
    /// How its tokens are chosen.
    pub sampling: Sampling,
    /// Tokens that end it when generated.
    pub stop: Vec<u32>,
    /// Leading tokens whose keys and values are in the cache.
    pub computed: usize,
    /// Cache pages it holds, in position order.
    pub pages: Vec<u32>,
    /// The logits each generated token was chosen from, if recorded.
    pub logits: Vec<Vec<f32>>,
    /// Times it was preempted.
    pub preemptions: usize,
}

impl Entry {
    /// A request not yet started.
    pub fn new(id: RequestId, prompt: Vec<u32>, new_tokens: usize, sampling: Sampling) -> Self {
        Self {
            id,
            prompt: prompt.len(),
            tokens: prompt,
            new_tokens,
            sampling,
            stop: Vec::new(),
            computed: 0,
            pages: Vec::new(),
            logits: Vec::new(),
            preemptions: 0,
        }
    }

    /// The tokens generated so far.
    pub fn generated(&self) -> &[u32] {
        &self.tokens[self.prompt..]
    }

    /// Its last generated token is a stop token.
    pub fn stopped(&self) -> bool {
        self.generated()
            .last()
            .is_some_and(|t| self.stop.contains(t))
    }

    fn finished(&self) -> bool {
        self.generated().len() == self.new_tokens || self.stopped()
    }
}

/// A sampled token and, when recorded, the logits it was chosen from.
pub type Sampled = (u32, Option<Vec<f32>>);

/// One request's share of a step: its tokens `from..to` are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// The request's index among the running ones.
    pub index: usize,
    /// First token computed.
    pub from: usize,
    /// One past the last token computed.
    pub to: usize,
    /// `to` is the request's end, so its next token is sampled from the last one's logits.
    pub samples: bool,
}

/// What one step computes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Running requests' shares, in the step's row order.
    pub work: Vec<Work>,
    /// The free pages before this step's were taken, in the order `alloc_extend` takes them.
    pub free_list: Vec<i32>,
    /// Requests preempted to make room.
    pub preempted: Vec<RequestId>,
}

impl Plan {
    /// Tokens the step computes.
    pub fn tokens(&self) -> usize {
        self.work.iter().map(|w| w.to - w.from).sum()
    }
}

/// Waiting and running requests over a page pool.
#[derive(Debug, Clone)]
pub struct Scheduler {
    pool: PagePool,
    step_tokens: usize,
    waiting: VecDeque<Entry>,
    running: Vec<Entry>,
    preemptions: usize,
}

impl Scheduler {
    /// No request yet; steps compute at most `step_tokens` tokens.
    pub fn new(pool: PagePool, step_tokens: usize) -> Self {
        Self {
            pool,
            step_tokens,
            waiting: VecDeque::new(),
            running: Vec::new(),
            preemptions: 0,
        }
    }

    /// The page pool.
    pub fn pool(&self) -> &PagePool {
        &self.pool
    }

    /// The running requests, oldest first.
    pub fn running(&self) -> &[Entry] {
        &self.running
    }

    /// Requests waiting to run (new or preempted).
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Preemptions so far.
    pub fn preemptions(&self) -> usize {
        self.preemptions
    }

    /// Nothing waits and nothing runs.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Queues a new request behind the waiting ones.
    pub fn push(&mut self, entry: Entry) {
        self.waiting.push_back(entry);
    }

    /// Chooses the next step's work, preempting and admitting requests, and takes its pages
    /// from the pool. An empty plan means there is nothing to do.
    pub fn schedule(&mut self) -> Plan {
        let mut budget = self.step_tokens;
        let mut free = self.pool.free_pages();
        let mut plan = Plan::default();
        let mut i = 0;
        'running: while i < self.running.len() && budget > 0 {
            let (from, end) = (self.running[i].computed, self.running[i].tokens.len());
            let to = end.min(from + budget);
            let need = self.pool.pages_needed(from, to);
            while need > free {
                let victim = self.running.len() - 1;
                free += self.running[victim].pages.len();
                plan.preempted.push(self.running[victim].id);
                self.preempt_last();
                if victim == i {
                    break 'running;
                }
            }
            free -= need;
            budget -= to - from;
            plan.work.push(Work {
                index: i,
                from,
                to,
                samples: to == end,
            });
            i += 1;
        }
        if plan.preempted.is_empty() {
            while let Some(next) = self.waiting.front() {
                let end = next.tokens.len();
                if budget == 0 || self.pool.pages_needed(0, end) > free {
                    break;
                }
                let to = end.min(budget);
                free -= self.pool.pages_needed(0, to);
                budget -= to;
                let entry = self.waiting.pop_front().expect("peeked");
                self.running.push(entry);
                plan.work.push(Work {
                    index: self.running.len() - 1,
                    from: 0,
                    to,
                    samples: to == end,
                });
            }
        }
        plan.free_list = self.pool.free_list();
        let growth: Vec<(usize, usize)> = plan.work.iter().map(|w| (w.from, w.to)).collect();
        let taken = self
            .pool
            .take(&growth)
            .expect("the schedule counted the free pages");
        for (w, pages) in plan.work.iter().zip(taken) {
            self.running[w.index].pages.extend(pages);
        }
        plan
    }

    /// Removes request `id`, waiting or running, its pages back in the pool at once.
    pub fn cancel(&mut self, id: RequestId) -> Option<Entry> {
        let entry = match self.waiting.iter().position(|e| e.id == id) {
            Some(i) => self.waiting.remove(i),
            None => {
                let i = self.running.iter().position(|e| e.id == id)?;
                Some(self.running.remove(i))
            }
        }?;
        self.release(vec![entry]).pop()
    }

    /// Frees the newest running request's pages and queues it first, to be recomputed.
    fn preempt_last(&mut self) {
        let mut entry = self.running.pop().expect("a running request");
        self.pool.release(&entry.pages);
        entry.pages.clear();
        entry.computed = 0;
        entry.preemptions += 1;
        self.preemptions += 1;
        self.waiting.push_front(entry);
    }

    /// Records a step that ran: `sampled` holds the token (and, if recorded, the logits) of
    /// each sampling share of `plan`, in order. Returns the requests that finished, their pages
    /// back in the pool.
    pub fn complete(&mut self, plan: &Plan, sampled: Vec<Sampled>) -> Vec<Entry> {
        let mut sampled = sampled.into_iter();
        for w in &plan.work {
            let entry = &mut self.running[w.index];
            entry.computed = w.to;
            if w.samples {
                let (token, logits) = sampled.next().expect("a token per sampling share");
                entry.tokens.push(token);
                entry.logits.extend(logits);
            }
        }
        let (finished, running) = std::mem::take(&mut self.running)
            .into_iter()
            .partition(Entry::finished);
        self.running = running;
        self.release(finished)
    }

    /// Records a step that failed: its requests leave (returned, their pages back in the pool);
    /// the other running requests lost their cache with it and are queued to be recomputed.
    pub fn fail(&mut self, plan: &Plan) -> Vec<Entry> {
        let mut in_step = vec![false; self.running.len()];
        for w in &plan.work {
            in_step[w.index] = true;
        }
        let mut failed = Vec::new();
        let mut requeued = Vec::new();
        for (entry, failed_here) in std::mem::take(&mut self.running).into_iter().zip(in_step) {
            if failed_here {
                failed.push(entry);
            } else {
                requeued.push(entry);
            }
        }
        for mut entry in self.release(requeued).into_iter().rev() {
            entry.computed = 0;
            entry.preemptions += 1;
            self.preemptions += 1;
            self.waiting.push_front(entry);
        }
        self.release(failed)
    }

    /// Removes every request, running and waiting, their pages back in the pool (a server that
    /// can no longer serve fails them all).
    pub fn drain(&mut self) -> Vec<Entry> {
        let mut all = std::mem::take(&mut self.running);
        all.extend(std::mem::take(&mut self.waiting));
        self.release(all)
    }

    fn release(&mut self, entries: Vec<Entry>) -> Vec<Entry> {
        entries
            .into_iter()
            .map(|mut e| {
                self.pool.release(&e.pages);
                e.pages.clear();
                e
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: u64, prompt: usize, new: usize) -> Entry {
        Entry::new(RequestId(id), vec![1; prompt], new, Sampling::Greedy)
    }

    /// Runs steps that sample token 7 until every request finished; returns the plans.
    fn run(s: &mut Scheduler) -> Vec<Plan> {
        let mut plans = Vec::new();
        while !s.is_idle() {
            let plan = s.schedule();
            assert!(!plan.work.is_empty(), "a step makes progress");
            let sampled = plan.work.iter().filter(|w| w.samples).map(|_| (7, None));
            s.complete(&plan, sampled.collect());
            plans.push(plan);
            assert!(plans.len() < 1000, "the schedule ends");
        }
        plans
    }

    #[test]
    fn long_prompts_are_split_into_chunks_beside_the_decodes() {
        let mut s = Scheduler::new(PagePool::new(64, 4), 8);
        s.push(request(0, 3, 4));
        s.schedule_and_complete();
        s.push(request(1, 20, 2));
        let plan = s.schedule();
        // The running request decodes one token, the new one prefills 7 of its 20.
        assert_eq!(
            plan.work,
            vec![
                Work {
                    index: 0,
                    from: 3,
                    to: 4,
                    samples: true
                },
                Work {
                    index: 1,
                    from: 0,
                    to: 7,
                    samples: false
                },
            ]
        );
    }

    #[test]
    fn the_newest_request_is_preempted_and_recomputed_with_its_tokens() {
        // 4 pages of 2 slots: two requests of 3 + 4 tokens cannot both hold their 6 positions.
        let mut s = Scheduler::new(PagePool::new(4, 2), 16);
        s.push(request(0, 3, 4));
        s.push(request(1, 3, 4));
        let plans = run(&mut s);
        let preempted: Vec<RequestId> = plans.iter().flat_map(|p| p.preempted.clone()).collect();
        assert_eq!(
            preempted.first(),
            Some(&RequestId(1)),
            "the newer one gives way"
        );
        assert_eq!(s.preemptions(), preempted.len());
        // Its recompute covers the prompt and the tokens it had produced.
        let resumed = plans
            .iter()
            .flat_map(|p| p.work.iter())
            .filter(|w| w.from == 0)
            .map(|w| w.to)
            .collect::<Vec<_>>();
        assert!(resumed.iter().any(|&to| to > 3), "{resumed:?}");
        assert_eq!(s.pool().free_pages(), 4, "every page came back");
    }

    #[test]
    fn a_failed_step_fails_its_requests_and_requeues_the_others() {
        let mut s = Scheduler::new(PagePool::new(16, 2), 2);
        s.push(request(0, 1, 3));
        s.push(request(1, 1, 3));
        s.schedule_and_complete();
        assert_eq!(s.running().len(), 2);
        // A budget of one token: request 0 decodes, request 1 waits its turn.
        s.step_tokens = 1;
        let plan = s.schedule();
        assert_eq!(plan.work.len(), 1);
        let failed: Vec<RequestId> = s.fail(&plan).iter().map(|e| e.id).collect();
        assert_eq!(failed, vec![RequestId(0)]);
        assert_eq!(s.pool().free_pages(), 16, "every page came back");
        assert!(s.running().is_empty());
        // Request 1 lost its cache: it is recomputed, keeping the token it had.
        let plan = s.schedule();
        assert_eq!(
            plan.work,
            vec![Work {
                index: 0,
                from: 0,
                to: 1,
                samples: false
            }]
        );
        assert_eq!(s.running()[0].generated(), &[7]);
        assert_eq!(s.preemptions(), 1);
    }

    #[test]
    fn preempted_requests_keep_their_place_by_arrival() {
        // 6 pages of 2 slots for five requests of 3 + 4 tokens: they preempt one another.
        let mut s = Scheduler::new(PagePool::new(6, 2), 4);
        for id in 0..5 {
            s.push(request(id, 3, 4));
        }
        let mut preempted = 0;
        while !s.is_idle() {
            let plan = s.schedule();
            preempted += plan.preempted.len();
            // Running then waiting is arrival order: a preempted request goes back ahead of
            // every newer one, is readmitted before them, and only the newest runs give way.
            let order: Vec<RequestId> = s
                .running()
                .iter()
                .chain(s.waiting.iter())
                .map(|e| e.id)
                .collect();
            assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
            let sampled = plan.work.iter().filter(|w| w.samples).map(|_| (7, None));
            s.complete(&plan, sampled.collect());
        }
        assert!(preempted > 0, "the cache was oversubscribed");
    }

    impl Scheduler {
        fn schedule_and_complete(&mut self) {
            let plan = self.schedule();
            let sampled = plan.work.iter().filter(|w| w.samples).map(|_| (7, None));
            self.complete(&plan, sampled.collect());
        }
    }
}
