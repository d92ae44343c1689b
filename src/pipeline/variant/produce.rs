//! Producing a row of the variants map: one processing run per key however many ask,
//! claimed across nodes, admitted by its cost, its result or permanent error stored.

use std::time::Instant;

use bytes::Bytes;

use imgcas_processors::{self as processors, mezzanine, SourceFormat};

use super::route::Route;
use super::stored::key_digest;
use super::Job;
use crate::admission::{Asker, Overloaded};
use crate::error::Error;
use crate::hash::ContentHash;
use crate::maps::{VariantBody, VariantRow};
use crate::pipeline::claims::{Backoff, Turn};
use crate::pipeline::deadline::{self, Bound, Stop};
use crate::pipeline::Pipeline;
use crate::stats::Stats;

/// [`Pipeline::produce`]'s future, boxed.
pub(super) type Producing =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(VariantRow, bool), Error>> + Send>>;

/// Runs of at least this cost (pixel-equivalents: a 12 MP decode is about this) give the
/// memory their buffers took back to the system when they end.
const GIVE_BACK_AFTER: u64 = 12_000_000;

impl Pipeline {
    /// Makes one job's row and stores it (an image, or the permanent error). Returns the
    /// row and whether this call did the processing.
    pub(super) async fn produce(&self, job: Job) -> Result<(VariantRow, bool), Error> {
        let key = job.key();
        let is_mezzanine = matches!(job, Job::Mezzanine { .. });
        // A flight that landed between our miss and our joining has stored the answer. (On
        // shared maps the claim below looks again once it is ours, which covers this too.)
        if !self.shared.maps.shared() {
            if let Some(v) = self.stored_variant(&key).await? {
                return Ok((v, false));
            }
        }
        // One run in the cluster: the node that claims the key processes; the others wait
        // for its row (or for its claim to expire).
        let claim_key = format!("variant:{}", hex::encode(key_digest(&key)));
        let mut backoff = Backoff::new();
        // Past a published result's mark once that result is found gone (evicted, taken
        // down and lifted) right after it was published.
        let mut past_published = false;
        let mut lease = loop {
            match self.claim(claim_key.clone(), past_published).await? {
                // A grant means no run published in the last seconds (its claim would stand
                // as a tombstone, see `maps/postgres/claims.rs`), so the miss that brought us
                // here still holds: the row is not read again.
                Turn::Ours(lease) => break lease,
                Turn::Theirs(owner) => {
                    past_published = false;
                    tracing::debug!(claim = %claim_key, %owner, "waiting for another node's run");
                    Stats::bump(&self.shared.stats.claim_waits);
                    backoff.wait().await;
                    if let Some(v) = self.stored_variant(&key).await? {
                        return Ok((v, false));
                    }
                }
                Turn::Published => {
                    if let Some(v) = self.stored_variant(&key).await? {
                        return Ok((v, false));
                    }
                    past_published = true;
                }
            }
        };
        let row = match self.run(job).await {
            Ok(row) => row,
            Err(e) => {
                lease.release().await;
                return Err(e);
            }
        };
        // Taken down while it ran: nothing of it may be stored (the takedown has removed
        // what was, and would not see this).
        if let Err(refused) = self.may_serve(&[key.hash]) {
            lease.release().await;
            return Err(refused.error);
        }
        self.shared.variants.hot.insert(key.clone(), row.clone());
        let this = self.clone();
        let publish = {
            let row = row.clone();
            async move {
                match lease.settle().await {
                    Ok(claim) => match this.store_variant(&key, &row, claim.as_ref()).await {
                        Ok(seen) => {
                            // The write under the claim gave it up.
                            lease.given_up();
                            match this.after_write(&key.hash, seen).await {
                                Ok(false) => this.variant_stored(&key, &row).await,
                                Ok(true) => {}
                                Err(e) => tracing::warn!(error = %e, "takedown list not read"),
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "variant not stored; serving it anyway")
                        }
                    },
                    Err(why) => tracing::warn!(%why, "variant not published; serving it anyway"),
                }
                lease.release().await;
            }
        };
        if is_mezzanine {
            // The variants waiting for a mezzanine go on with it at once (it is in the hot
            // cache); storing it, under its claim, finishes behind them.
            self.in_background(publish);
        } else {
            publish.await;
        }
        Ok((row, true))
    }

    /// [`Pipeline::produce`] behind a pointer: a variant's run may produce its mezzanine,
    /// and a future cannot contain itself.
    pub(super) fn produce_boxed(self, job: Job) -> Producing {
        Box::pin(async move { self.produce(job).await })
    }

    /// One processing run, admitted by its cost: the row it makes. A variant the mezzanine
    /// serves waits for the mezzanine first (stored, or built by its own run), holding no
    /// CPU slot meanwhile.
    pub(super) async fn run(&self, job: Job) -> Result<VariantRow, Error> {
        let s = &self.shared;
        // From here to the end (the wait for a mezzanine included), decodes of this original
        // are kept for the other runs of it.
        let _interest = s.decodes.interest(match &job {
            Job::Variant(t, _) => t.key.hash,
            Job::Mezzanine { hash, .. } => *hash,
        });
        let limits = self.limits();
        // What the run reads: the mezzanine's bytes, or the original's (read now when
        // deciding took them, else once admitted). Its cost is the plan's.
        let (hash, mezzanine_bytes, read, cost, memory) = match &job {
            Job::Variant(t, asker) => {
                if t.spec.animated {
                    // Refused from the headers' frame count, before admission (its cost
                    // would be all the frames') and before any frame is decoded. (Unknown
                    // sizes, bytes no probe could read, are taken at the pixel limit.)
                    let side = (limits.max_pixels as f64).sqrt() as u32;
                    let size = t.plan.header.size.unwrap_or((side, side));
                    processors::animation::check(t.source_frames, size, &limits)?;
                }
                // A spec implying more work than `limits.max_cost` is refused before
                // admission and before any decode, a mezzanine's included (issue 28). Only
                // for a known size: bytes no probe could read get their own error.
                t.plan.check_cost(&limits)?;
                match self.route(t).await? {
                    Route::Mezzanine => match self.mezzanine(&t.key.hash, asker).await? {
                        Ok(bytes) => {
                            let cost = t.plan.mezzanine_cost.unwrap_or(t.plan.cost);
                            let memory = t.plan.mezzanine_memory.unwrap_or(t.plan.memory);
                            (t.key.hash, Some(bytes), None, cost, memory)
                        }
                        // The mezzanine's failure (the original does not decode) is this
                        // variant's too: the same bytes fail the same way.
                        Err(failed) => return Ok(failed),
                    },
                    Route::Original(read) => (t.key.hash, None, read, t.plan.cost, t.plan.memory),
                }
            }
            Job::Mezzanine { hash, info, .. } => (
                *hash,
                None,
                None,
                mezzanine::build_cost(info),
                mezzanine::build_memory(info),
            ),
        };
        // A run that needs more memory than all this node's runs may hold never starts
        // (audit #4): refused as too costly, before admission and before any decode.
        if !s.admission.memory_fits(memory) {
            return Err(Error::Process {
                kind: processors::ProcessFailure::TooCostly,
                message: format!(
                    "this run needs about {} MiB, more than limits.max_memory ({} MiB)",
                    memory >> 20,
                    s.admission.memory_limit() >> 20
                ),
            });
        }
        // A drawing's work is in its content, not its size: read from its bytes and charged
        // at the size it will be drawn, or refused, before admission (audit #3: 400 KB of
        // text drawn at 50 px was charged as a 50 px output and took 53 s).
        let (read, cost) = match &job {
            Job::Variant(t, _) if t.plan.header.format.is_some_and(SourceFormat::is_vector) => {
                let bytes = match read {
                    Some(bytes) => bytes,
                    None => self.original_bytes(&hash).await?,
                };
                let (plan, spec, drawn) = (t.plan.clone(), t.spec.clone(), bytes.clone());
                // Bytes that do not open fail the same way in the run, which keeps the
                // failure like any other; a drawing over the limit is refused here.
                let work = super::super::blocking(move || {
                    match plan.drawing_cost(&drawn, &spec, &limits) {
                        Ok(work) => Ok(work),
                        Err(e) if e.kind() == Some(processors::ProcessFailure::TooCostly) => {
                            Err(Error::from(e))
                        }
                        Err(_) => Ok(0),
                    }
                })
                .await?;
                let cost = cost.saturating_add(work);
                processors::check_cost(cost, &limits)?;
                (Some(bytes), cost)
            }
            _ => (read, cost),
        };
        let asker = match &job {
            Job::Variant(_, asker) | Job::Mezzanine { asker, .. } => asker,
        };
        let class = cost_class(&job);
        let mut ticket = s
            .admission
            .admit_run(cost, memory, &class, asker)
            .map_err(|o| self.overloaded(o))?;
        // Admitted: the payer's budget pays for the run and for the download that located
        // it (a run admission refuses costs nothing), settled below to what the run spent.
        let fetched = match &job {
            Job::Variant(t, _) => t.fetched_bytes,
            Job::Mezzanine { .. } => 0,
        };
        let charge = self
            .charge_budget(asker, cost.saturating_add(fetched))
            .await?;
        let running = match ticket.start().await {
            Ok(running) => running,
            Err(o) => {
                // Never run: only the download is paid for.
                self.settle_budget(charge, fetched).await;
                return Err(self.overloaded(o));
            }
        };
        // The input is read only now, holding a CPU slot: runs waiting in the queue hold
        // no bytes, so memory is bounded by the slots, not by the queue (up to 1,024 waiters
        // of 32 MiB each otherwise).
        let from_mezzanine = mezzanine_bytes.is_some();
        let reading = Instant::now();
        let inputs = async {
            let bytes = match mezzanine_bytes.or(read) {
                Some(bytes) => bytes,
                None => self.original_bytes(&hash).await?,
            };
            // A watermark's overlay is read with the input, as the run starts.
            let spec = match &job {
                Job::Variant(t, _) => self.with_overlay(&t.spec).await?,
                Job::Mezzanine { .. } => None,
            };
            Ok::<_, Error>((bytes, spec))
        };
        let (bytes, spec) = match inputs.await {
            Ok(inputs) => inputs,
            Err(e) => {
                self.settle_budget(charge, fetched).await;
                return Err(e);
            }
        };
        let storage = reading.elapsed();
        Stats::bump(&s.stats.queue_waits);
        Stats::add(
            &s.stats.queue_wait_micros,
            u64::try_from(running.waited.as_micros()).unwrap_or(u64::MAX),
        );
        let waited = running.waited.as_secs_f64();
        s.metrics.with(|| {
            metrics::histogram!("imgcas_queue_wait_seconds").record(waited);
        });
        let started = Instant::now();
        let this = self.clone();
        let tier = match &job {
            Job::Variant(_, asker) | Job::Mezzanine { asker, .. } => asker.tier,
        };
        // Bounded by what it was charged (`deadline.rs`): past it, told to stop and answered.
        let stop = Stop::under(&s.shutdown);
        let bound = Bound::of(
            ticket.scaled_cost(),
            s.admission.secs_per_pixel(),
            s.config.server.request_timeout,
        );
        let run_stop = stop.clone();
        // A batch's run gives its core up to a request's (`admission/niced.rs`).
        let run = s.admission.run_as(tier, move || {
            // The slot is the thread's: held until the run really ends, deadline or not.
            let (_permit, _memory) = (running.permit, running.memory);
            run_stop.running_here();
            // A codec call under way (a JPEG XL render, a drawing) stops at the deadline too,
            // not only the stages between them (`interrupt.rs`).
            let signal = run_stop.clone();
            let _signal =
                processors::interrupt::stop_this_thread_when(std::sync::Arc::new(move || {
                    signal.check().is_err()
                }));
            let decodes = this
                .shared
                .decodes
                .of(hash, &this.shared.stats)
                .stopping(run_stop);
            match &job {
                Job::Variant(t, _) => {
                    let input = match from_mezzanine {
                        true => processors::Input::Mezzanine(&bytes),
                        false => processors::Input::Original(&bytes),
                    };
                    let spec = spec.as_ref().unwrap_or(&t.spec);
                    processors::process_planned(input, spec, &t.plan, &limits, &decodes)
                }
                Job::Mezzanine { .. } => mezzanine::build(&bytes, &limits, &decodes),
            }
        });
        let result = deadline::bounded(&stop, bound, &s.stats, run).await;
        let ran = started.elapsed();
        // What the run spent, at the average rate of all runs: a failure or a stop in a few
        // milliseconds is charged those milliseconds (audit #4).
        let spent = ticket.spent(ran).min(cost);
        self.settle_budget(charge, fetched.saturating_add(spent))
            .await;
        let result = result?;
        if cost >= GIVE_BACK_AFTER {
            // What the run's buffers took, back to the system (`give_memory_back`).
            tokio::task::spawn_blocking(crate::admission::give_memory_back);
        }
        // Only a run that made its output teaches the cost model what its class costs.
        ticket.record_with_storage(ran, storage, result.is_ok());
        tracing::debug!(target: "imgcas::cost", class = %class, cost, secs = ran.as_secs_f64(), "run measured");
        drop(ticket);
        s.metrics.with(|| {
            metrics::histogram!("imgcas_processing_seconds").record(ran.as_secs_f64());
        });
        Stats::bump(&s.stats.processing_runs);
        match result {
            Ok(p) if p.search_encodes > 0 => {
                s.metrics.with(|| {
                    metrics::counter!("imgcas_quality_searches_total").increment(1);
                    metrics::counter!("imgcas_quality_search_encodes_total")
                        .increment(u64::from(p.search_encodes));
                });
                Ok(row_of(p))
            }
            Ok(p) => Ok(row_of(p)),
            // A failure the configured limits decided is answered, not stored: under other
            // limits the same bytes and spec succeed. Its check reads only the header, so
            // answering it again costs little.
            Err(e) => match e.kind() {
                Some(kind) if !kind.depends_on_limits() => Ok(VariantRow::Failed {
                    kind,
                    message: e.to_string(),
                }),
                _ => Err(e.into()),
            },
        }
    }

    /// `spec` with its watermark's overlay bytes attached; `None` when it has no watermark.
    async fn with_overlay(
        &self,
        spec: &processors::ResolvedSpec,
    ) -> Result<Option<processors::ResolvedSpec>, Error> {
        let Some(overlay) = spec
            .shape
            .watermark
            .as_ref()
            .and_then(|mark| mark.overlay.as_deref())
        else {
            return Ok(None);
        };
        let hash: ContentHash = overlay
            .parse()
            .map_err(|_| Error::Internal(format!("watermark overlay `{overlay}` is no hash")))?;
        let bytes = self.original_bytes(&hash).await?;
        let mut spec = spec.clone();
        if let Some(mark) = spec.shape.watermark.as_mut() {
            mark.source.bytes = Some(std::sync::Arc::new(bytes.to_vec()));
        }
        Ok(Some(spec))
    }

    /// Refuses a batch of `asker`'s before it starts, while admission sheds bulk work.
    pub fn admit_bulk(&self, asker: &Asker) -> Result<(), Error> {
        self.shared
            .admission
            .admit_batch(asker)
            .map_err(|o| self.overloaded(o))
    }

    /// A refusal from admission control, counted by reason and tier.
    pub(super) fn overloaded(&self, o: Overloaded) -> Error {
        self.shared.metrics.with(|| {
            metrics::counter!("imgcas_admission_rejections_total", "reason" => o.reason, "tier" => o.tier.name())
                .increment(1);
        });
        Error::Overloaded {
            message: format!(
                "processing is at capacity ({}); retry in {} s",
                o.reason.replace('_', " "),
                o.retry_after.as_secs().max(1)
            ),
            retry_after_secs: o.retry_after.as_secs().max(1),
        }
    }
}

/// The class a run's cost is learned under (`admission/learned.rs`): its output format and
/// what the run does beyond one encode (every frame, a quality search), or a mezzanine.
fn cost_class(job: &Job) -> String {
    match job {
        Job::Variant(t, _) => {
            let op = match (&t.spec.animated, &t.spec.quality) {
                (true, _) => "animated",
                (false, Some(processors::Quality::Auto { .. })) => "auto_quality",
                _ if t.spec.lossless => "lossless",
                _ => "still",
            };
            // The source's format too: a decoder no honest tenant uses (audit #4's crafted
            // JPEG XL) is a class of its own, and cannot make PNG sources dearer.
            let source = t.plan.header.format.map_or("unknown", |f| f.name());
            format!("{source}>{}:{op}", t.spec.format.name())
        }
        Job::Mezzanine { .. } => "mezzanine".to_string(),
    }
}

/// The variants row of a finished run.
fn row_of(p: processors::Processed) -> VariantRow {
    VariantRow::Image {
        format: p.format,
        width: p.width,
        height: p.height,
        chosen: p.chosen,
        body: VariantBody::Inline(Bytes::from(p.bytes)),
    }
}
