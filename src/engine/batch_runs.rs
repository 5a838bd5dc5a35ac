//! The engine's side of batched runs: the scheduler (`schedule.rs`) asks
//! for one to start, with its group of jobs, and to end once `rkllm_run`
//! returned; `batch.rs` holds a run's parts, `batched.rs` what its slots'
//! conversations hold.
use super::batch::{BatchJob, BatchRun, Shared, Slot, SlotControl};
use super::halt::ABORT_GRACE;
use super::outcome::EndReason;
use super::queue::{Permit, Queue};
use super::saved_dir;
use super::schedule::Runs;
use super::slots::{Kept, Member, SlotJob};
use super::state::Engine;
use rkllm_sys::{BatchEnd, BatchInput, BatchRequest, RunInput};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The text of a slot no job fills: one token, so it adds next to nothing to
/// the prefill (its reply is decoded by the runtime and never read).
const FILLER: &str = " ";

impl Runs for Engine {
    fn queue(&self) -> &Queue {
        &self.queue
    }

    fn is_warm(&self, ids: Option<&[i32]>, lora: Option<&str>) -> bool {
        Engine::is_warm(self, ids, lora)
    }

    fn slots_left(&self, left: &[(usize, Instant)]) {
        Engine::slots_left(self, left);
    }

    /// Starts one batched run for `group`: each job's slot, in the group's
    /// order, and the run to be ended with [`Runs::end_batch`] once the
    /// slots are handed out.
    async fn start_batch(
        &self,
        permit: Permit,
        group: Vec<BatchJob>,
        size: usize,
    ) -> Result<(Vec<Slot>, BatchRun), EndReason> {
        if self.is_closing() {
            return Err(EndReason::ShuttingDown);
        }
        // The group shares sampling and adapter (`schedule.rs`); the run goes
        // on to the longest limit, each slot ending its reply at its own.
        let first = group[0].plan.clone();
        let max_new_tokens = group.iter().filter_map(|job| job.plan.max_new_tokens).max();
        let jobs = group.len();
        let members: Vec<Member> = group
            .iter()
            .map(|job| Member {
                ids: job.plan.prompt.ids(),
                hints: &job.hints,
                lora: job.plan.lora.as_deref(),
                max_new: job.plan.limit,
            })
            .collect();
        let layout = self.lay_out_batch(&members).await;
        let mut inputs = vec![None; size];
        let mut channels = vec![None; size];
        let mut receivers = Vec::with_capacity(jobs);
        let mut places = Vec::with_capacity(jobs);
        let mut plans = Vec::with_capacity(jobs);
        let mut used: Vec<Option<SlotJob>> = (0..size).map(|_| None).collect();
        let mut homes = Vec::with_capacity(jobs);
        let mut slot_of = Vec::with_capacity(jobs);
        for (index, job) in group.into_iter().enumerate() {
            let (slot, plan, home) = match &layout {
                Some(layout) => (layout.jobs[index].0, layout.jobs[index].1.clone(), layout.home[index]),
                None => (index, None, None),
            };
            homes.push(home);
            slot_of.push(slot);
            let input = match &plan {
                Some(plan) => BatchInput { input: plan.input(), enable_thinking: job.plan.enable_thinking },
                None => job.plan.batch_input(),
            };
            let (tx, rx) = mpsc::unbounded_channel();
            inputs[slot] = Some(input);
            channels[slot] = Some(tx);
            receivers.push(rx);
            places.push(job.place);
            if let Some(plan) = &plan {
                used[slot] = Some(SlotJob { id: job.id, plan: plan.clone() });
            }
            plans.push(plan);
        }
        // A filler slot's input: one id of the prompts when the slots keep
        // history, so that every slot's prefill is known (the runtime's
        // count is checked against it); else a one-token text.
        // The prompt's last id (its generation prompt's end), which no prompt
        // starts with: a batched run's file holds a filler slot's input, and
        // a loaded one must spare no fresh prompt placed in that slot
        // (`batch_files.rs` checks every restoring run's prefill).
        let filler_id = plans.iter().flatten().find_map(|plan| plan.prompt.last().copied());
        let filler = match filler_id.filter(|_| layout.is_some()) {
            Some(id) => BatchInput { input: RunInput::Tokens(vec![id]), enable_thinking: false },
            None => BatchInput { input: RunInput::Prompt(FILLER.into()), enable_thinking: false },
        };
        // Where the runtime takes short batches, a slot without a job gets
        // no input and keeps what it holds (`short_batch.rs`).
        let short = self.short_batches();
        // A filler in a slot that holds a conversation costs the slot that
        // conversation (the filler's input and reply stay in it): counted, so
        // that a gathering window shorter than the clients' return is seen.
        if let Some(batched) = self.batched.as_ref().filter(|_| !short && layout.as_ref().is_some_and(|l| !l.clear)) {
            let lost = batched.holding((0..size).filter(|&s| inputs[s].is_none()));
            crate::metrics::observer().metrics.batch_fillers_in_live_slots(lost);
        }
        let absent: Vec<bool> = inputs.iter().map(|i| short && i.is_none()).collect();
        let absent_any = absent.contains(&true);
        let inputs: Vec<Option<BatchInput>> =
            inputs.into_iter().map(|i| i.or_else(|| (!short).then(|| filler.clone()))).collect();
        // The run saves its slots' prompts when the next run will likely
        // clear them: this one did, other jobs wait, or newcomers have been
        // taking the clean slots faster than this run leaves them
        // (`batch_files.rs`).
        let others_wait = self.queue.state().waiting > jobs;
        let save = match (&layout, &self.batched) {
            (Some(layout), Some(batched)) if layout.clear || others_wait || batched.likely_cleared(layout) => {
                batched.next_file()
            }
            _ => None,
        };
        let kept = layout.map(|_| Kept {
            sent: inputs
                .iter()
                .map(|i| match i.as_ref().map(|i| &i.input) {
                    Some(RunInput::Tokens(ids)) => Some(ids.len()),
                    Some(RunInput::Prompt(_)) => None,
                    None => Some(0),
                })
                .sum(),
            absent,
            used,
            lora: first.lora.clone(),
            save: save.clone(),
        });
        let turn = self.queue.start(permit, places);
        let request = BatchRequest {
            slots: inputs,
            max_new_tokens,
            sampling: first.sampling,
            lora: first.lora.clone(),
            keep_history: kept.is_some(),
            save_prompt_cache: save.map(|path| path.to_string_lossy().into_owned()),
        };
        let (control, done) =
            self.handle.model.submit_batch(request, channels).map_err(|e| EndReason::RuntimeError(e.to_string()))?;
        let shared = Arc::new(Shared { wanted: AtomicUsize::new(jobs), ..Shared::default() });
        let slots = receivers
            .into_iter()
            .zip(plans)
            .zip(&slot_of)
            .map(|((events, plan), &index)| {
                let batch = shared.clone();
                let control = SlotControl::in_batch(control.clone(), batch, index);
                Slot { control, events, jobs: jobs as u32, plan }
            })
            .collect();
        Ok((slots, BatchRun { done, shared, turn, jobs, size, kept, short: absent_any, homes }))
    }

    /// Waits until the batched run's `rkllm_run` returned, then frees its
    /// turn. Once every slot was left (the run aborted), the runtime gets
    /// [`ABORT_GRACE`] to return, as a single run does (`halt.rs`).
    /// Returns which slots were left so far, and when.
    async fn end_batch(&self, run: BatchRun) -> Vec<(usize, Instant)> {
        let BatchRun { mut done, shared, turn, jobs, size, kept, short, .. } = run;
        let finished = tokio::select! {
            finished = &mut done => finished,
            () = shared.aborted.notified() => {
                let grace_end = tokio::time::Instant::now() + ABORT_GRACE;
                self.handle.halt.aborted_run(grace_end, done).await
            }
        };
        match finished {
            Ok(BatchEnd { finish, slot_tokens }) => {
                for surprise in &finish.surprises {
                    tracing::error!(
                        surprise,
                        "the runtime's batched run contradicts rkllmd's reading of the manual (rkllm-sys/src/batch.rs)"
                    );
                    crate::metrics::observer().metrics.runtime_surprise();
                }
                tracing::debug!(jobs, size, code = finish.code, perf = ?finish.perf, "batched run ended");
                if short && finish.is_error() {
                    // The probe at load ran one shape of short batch; a runtime
                    // that fails another (token ids from slot 0, an adapter) is
                    // not given one again.
                    self.short_batch_broken(&format!(
                        "a batched run with slots given no input failed ({})",
                        finish.code
                    ));
                }
                match kept {
                    Some(kept) => self.settle_batch(kept, &finish, &slot_tokens).await,
                    None => self.sample_kv_cache(),
                }
            }
            // Not returned: what the slots hold is not known.
            Err(_) => {
                self.forget_kv();
                if let Some(save) = kept.and_then(|k| k.save) {
                    saved_dir::remove(&save, "a batched run's file");
                }
            }
        }
        drop(turn);
        let left_at = std::mem::take(&mut *shared.left_at.lock().unwrap_or_else(|e| e.into_inner()));
        left_at
    }
}
