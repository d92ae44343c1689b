//! The server's lifecycle: opens the pipeline, binds the listener, serves the router, flushes
//! the maps once a second and at shutdown.
//!
//! [`start`] is used by `imgcas serve` and by the integration tests alike, so tests run the
//! very service users run, and see it only through HTTP and [`RunningApp::pipeline`].

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::oneshot;
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
    let service = Service::new(pipeline.clone(), config, metrics.clone());
    let router = crate::http::router(service.clone());
    let (tx, rx) = oneshot::channel::<()>();
    let flusher = spawn_flusher(pipeline.clone(), metrics);
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

/// Once a second: makes non-durable map commits durable, so a crash loses at most about a
/// second of recomputable entries, and folds recorded latency samples into their histogram
/// buckets (the recorder queues every sample until then: without it, memory would grow with
/// each request between scrapes).
fn spawn_flusher(pipeline: Pipeline, metrics: Metrics) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            metrics.upkeep();
            if let Err(e) = pipeline.flush().await {
                tracing::warn!(error = %e, "periodic flush failed");
            }
        }
    })
}
