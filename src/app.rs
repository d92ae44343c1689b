//! The server's lifecycle: opens the pipeline, binds the listener, serves the router (behind
//! `http::Front`), flushes the maps once a second and at shutdown.
//!
//! The accept loop is our own (not `axum::serve`) because the server must protect itself: a
//! client gets `server.header_timeout` to send its headers, at most `server.max_connections`
//! connections are served at once (the rest wait in the kernel's backlog, costing us nothing),
//! and shutdown waits at most `server.shutdown_timeout` for requests in flight.
//!
//! [`start`] is used by `imgcas serve` and by the integration tests alike, so tests run the
//! very service users run, and see it only through HTTP and [`RunningApp::pipeline`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, Semaphore};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::http::Service;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

/// A running server.
pub struct RunningApp {
    addr: SocketAddr,
    service: Service,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl RunningApp {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The pipeline behind the server (its counters, for tests and embedders).
    pub fn pipeline(&self) -> &Pipeline {
        self.service.pipeline()
    }

    /// Stops accepting, lets in-flight requests finish, and makes the maps durable.
    pub async fn stop(mut self) {
        self.stop_inner().await;
    }

    async fn stop_inner(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Waits until the server ends (after `stop`, or a fatal error).
    pub async fn wait(mut self, signal: impl std::future::Future<Output = ()>) {
        signal.await;
        self.stop_inner().await;
    }
}

/// Opens the data dir, binds `config.listen`, and serves until stopped.
pub async fn start(config: Config) -> Result<RunningApp, StartError> {
    let listen = config.listen;
    let metrics = Metrics::default();
    let pipeline = Pipeline::open(config.clone(), metrics.clone())
        .await
        .map_err(|e| StartError(e.to_string()))?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| StartError(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| StartError(e.to_string()))?;
    let server = config.server.clone();
    let fallbacks = crate::http::Fallbacks::load(&pipeline)
        .await
        .map_err(StartError)?;
    let service = Service::new(pipeline.clone(), config, metrics.clone(), fallbacks);
    let front = crate::http::Front::new(service.clone(), crate::http::router(service.clone()));
    let (tx, rx) = oneshot::channel::<()>();
    let flusher = spawn_flusher(pipeline.clone(), metrics);
    // Before the first request: a migration validated before a kill backfills again, and a
    // request must not find it validated in between.
    if let Err(e) = pipeline.resume_migration().await {
        tracing::warn!(error = %e, "cannot take up the maps' migration");
    }
    let backfill = spawn_backfill(pipeline.clone());
    let follower = spawn_purge_follower(pipeline.clone());
    let sampler = spawn_sampler(service.clone());
    let task = tokio::spawn(async move {
        serve(listener, front, &server, rx).await;
        // Requests had their time (`server.shutdown_timeout`): what still runs is stopped at
        // its next check, and background work gets a moment more, then is abandoned.
        pipeline.stop_runs();
        // Each aborted and waited for, so that none holds the pipeline (and the maps open)
        // once the app is stopped.
        for task in [follower, sampler, flusher, backfill] {
            task.abort();
            let _ = task.await;
        }
        if tokio::time::timeout(SETTLE_WITHIN, pipeline.settle())
            .await
            .is_err()
        {
            tracing::warn!(
                "background work (facts, fingerprints) abandoned at shutdown; the backfill \
                 computes it at the next start"
            );
        }
        if let Err(e) = pipeline.flush().await {
            tracing::error!(error = %e, "final flush failed");
        }
    });
    Ok(RunningApp {
        addr,
        service,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// How long shutdown waits for background work once requests are done.
const SETTLE_WITHIN: Duration = Duration::from_secs(2);

/// Accepts connections until `stop` fires, then lets requests in flight finish for up to
/// `shutdown_timeout`.
async fn serve(
    listener: TcpListener,
    front: crate::http::Front,
    settings: &crate::config::ServerConfig,
    mut stop: oneshot::Receiver<()>,
) {
    let mut connections = ConnBuilder::new(TokioExecutor::new());
    connections
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout);
    let slots = Arc::new(Semaphore::new(settings.max_connections));
    let graceful = GracefulShutdown::new();
    loop {
        // A slot first: over the cap, connections wait in the backlog, not in our memory.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = &mut stop => break,
        };
        let (socket, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let _ = socket.set_nodelay(true);
        let connection = connections
            .serve_connection_with_upgrades(TokioIo::new(socket), front.for_peer(peer))
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(slot);
        });
    }
    drop(listener);
    if tokio::time::timeout(settings.shutdown_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still in flight after the shutdown timeout of {:?}: closing them",
            settings.shutdown_timeout
        );
    }
}

/// Computes, once, in the background, the facts (placeholders, frames) and then the
/// fingerprints of originals stored before they existed (or by an older version): until it
/// gets to one, they are computed on demand.
fn spawn_backfill(pipeline: Pipeline) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = pipeline.resume_check().await {
            tracing::warn!(error = %e, "cannot read where the store check stood");
        }
        match pipeline.backfill_facts().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(originals = n, "facts backfilled"),
            Err(e) => {
                tracing::warn!(error = %e, "facts backfill stopped; it resumes at the next start")
            }
        }
        if !pipeline.near_dedup_on() {
            return;
        }
        match pipeline.backfill_fingerprints(&|_| {}).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(originals = n, "fingerprints backfilled"),
            Err(e) => {
                tracing::warn!(error = %e, "fingerprint backfill stopped; it resumes at the next start")
            }
        }
    })
}

/// How often a node sharing its maps looks at their purge generation: a takedown or a
/// forgotten URL on another node holds here at most about this late (the issue allows 2 s).
const PURGE_POLL: Duration = Duration::from_millis(250);

/// Follows removals made on other nodes (`Pipeline::follow_purges`: one small read per poll,
/// and nothing at all on maps no other node shares).
fn spawn_purge_follower(pipeline: Pipeline) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PURGE_POLL);
        loop {
            tick.tick().await;
            if let Err(e) = pipeline.follow_purges().await {
                tracing::warn!(error = %e, "reading the purge generation failed");
            }
        }
    })
}

/// Every `server.admin_sample_every`: a sample of this node for the operator's page and the
/// readiness gauge, and now and then the store's totals (`http/console/`). The first at once.
fn spawn_sampler(service: Service) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(service.config().server.admin_sample_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            service.sample().await;
        }
    })
}

/// Once a second: the pipeline's upkeep (use records, the variants' budget, the sweep of
/// unused URLs, and making non-durable map commits durable, so a crash loses at most about
/// a second of recomputable entries), and folds recorded latency samples into their histogram
/// buckets (the recorder queues every sample until then: without it, memory would grow with
/// each request between scrapes). Every [`GIVE_BACK_EVERY`] ticks, the allocator's free
/// memory goes back to the system.
fn spawn_flusher(pipeline: Pipeline, metrics: Metrics) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut ticks = 0u64;
        loop {
            tick.tick().await;
            metrics.upkeep();
            if let Err(e) = pipeline.upkeep().await {
                tracing::warn!(error = %e, "periodic upkeep failed");
            }
            ticks += 1;
            if ticks.is_multiple_of(GIVE_BACK_EVERY) {
                tokio::task::spawn_blocking(crate::admission::give_memory_back);
            }
        }
    })
}

/// Seconds between two returns of the allocators' free memory to the system. glibc keeps
/// what a thread frees in that thread's arena (under heaptrack, 60,000 uploads held 25 MB of
/// heap while RSS crept past 90 MB, before the service's heap moved to jemalloc), and
/// jemalloc purges what it kept dirty only when an arena is next used, so an idle node would
/// keep it. A return costs a walk of the free lists: milliseconds.
const GIVE_BACK_EVERY: u64 = 10;
