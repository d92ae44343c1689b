//! Builds the one shared state (`Arc<Shared>`) and runs the HTTP server on it.
//!
//! `start` is used by `imgcas serve` and by the integration tests alike, so tests run the
//! very service users run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::admission::Admission;
use crate::blob::BlobStore;
use crate::coalesce::SingleFlight;
use crate::config::Config;
use crate::error::Error;
use crate::fetch::Fetcher;
use crate::hot::HotVariants;
use crate::maps::{Maps, StoredVariant};
use crate::metrics::Metrics;
use crate::negative::OriginFailures;
use crate::pipeline::{Failure, Resolved};
use crate::stats::Stats;

/// Everything a request may touch.
pub struct Shared {
    /// The effective configuration (defaults < file < environment < flags).
    pub config: Config,
    /// URL map, originals index and variants (one redb file).
    pub maps: Maps,
    /// Original bytes by hash.
    pub blobs: Arc<dyn BlobStore>,
    /// Recent variants in memory, in front of `maps.variants`.
    pub hot: HotVariants,
    /// The guarded origin client, with its download slots per origin.
    pub fetcher: Fetcher,
    /// Origin failures per URL, held for their class's lifetime (with backoff).
    pub origin_failures: OriginFailures,
    /// One origin request per URL at a time; latecomers share its answer.
    pub url_flights: SingleFlight<String, Result<Resolved, Failure>>,
    /// One processing run per variant key at a time.
    pub variant_flights: SingleFlight<Vec<u8>, Result<(StoredVariant, bool), Error>>,
    /// Processing admission: at most `limits.process_concurrency` runs use the CPU at once,
    /// on the blocking pool, and work that would wait past `limits.queue_target` is refused.
    pub admission: Admission,
    /// Signing keys (`security.signing_key`); empty: URLs need no `sig`.
    pub signing_keys: Vec<Vec<u8>>,
    /// Work counters.
    pub stats: Stats,
    /// The recorder behind `/metrics`.
    pub metrics: Metrics,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartError(pub String);

impl Shared {
    pub async fn open(config: Config) -> Result<Arc<Shared>, StartError> {
        config.validate().map_err(|e| StartError(e.to_string()))?;
        let maps = Maps::open(&config.data_dir).map_err(|e| {
            StartError(format!(
                "cannot open the maps in {}: {e}",
                config.data_dir.display()
            ))
        })?;
        let blobs = crate::blob::open(&config)
            .await
            .map_err(|e| StartError(e.to_string()))?;
        let fetcher = Fetcher::new(&config.fetch).map_err(StartError)?;
        let admission = Admission::new(
            config.limits.process_concurrency,
            config.limits.queue_target,
        );
        Ok(Arc::new(Shared {
            hot: HotVariants::new(config.limits.hot_cache_bytes),
            signing_keys: config.security.signing_keys(),
            config,
            maps,
            blobs,
            fetcher,
            origin_failures: OriginFailures::default(),
            url_flights: SingleFlight::default(),
            variant_flights: SingleFlight::default(),
            admission,
            stats: Stats::default(),
            metrics: Metrics::default(),
        }))
    }
}

/// A running server.
pub struct RunningApp {
    pub addr: SocketAddr,
    pub shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl RunningApp {
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
    let shared = Shared::open(config).await?;
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|e| StartError(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| StartError(e.to_string()))?;
    let router = crate::http::router(shared.clone());
    let (tx, rx) = oneshot::channel::<()>();
    let flusher = spawn_flusher(shared.clone());
    let s = shared.clone();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, "server stopped");
        }
        flusher.abort();
        let maps = s.maps.clone();
        match tokio::task::spawn_blocking(move || maps.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "final flush failed"),
            Err(e) => tracing::error!(error = %e, "final flush task failed"),
        }
    });
    Ok(RunningApp {
        addr,
        shared,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// Once a second: makes non-durable map commits durable, so a crash loses at most about a
/// second of recomputable entries, and folds recorded latency samples into their histogram
/// buckets (the recorder queues every sample until then: without it, memory would grow with
/// each request between scrapes).
fn spawn_flusher(shared: Arc<Shared>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            shared.metrics.upkeep();
            let maps = shared.maps.clone();
            if let Ok(Err(e)) = tokio::task::spawn_blocking(move || maps.flush()).await {
                tracing::warn!(error = %e, "periodic flush failed");
            }
        }
    })
}
