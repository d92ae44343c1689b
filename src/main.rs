//! The `imgcas` command line: `serve` runs the service on the embedded default (a local blob
//! directory and one redb file under the data dir), with no other process needed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use imgcas::app;
use imgcas::config::Config;

#[derive(Parser)]
#[command(
    name = "imgcas",
    version,
    about = "Content-addressable image dedup and processing"
)]
struct Cli {
    /// TOML configuration file (overridden by IMGCAS_* variables, then by flags).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP service.
    Serve {
        /// Address to listen on (IMGCAS_LISTEN).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Data directory for the maps and the local blob store (IMGCAS_DATA_DIR).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Allow origins on loopback and private networks (IMGCAS_ALLOW_PRIVATE_NETWORKS).
        #[arg(long)]
        allow_private_networks: bool,
    },
    /// Process one file offline, on the same code path as the server.
    Process {
        /// Source image file.
        input: PathBuf,
        /// Processing options as in a URL query, e.g. 'w=400&format=webp'.
        #[arg(long, default_value = "")]
        spec: String,
        /// Output file (`-` for stdout).
        #[arg(short = 'o', long)]
        output: PathBuf,
        /// Accept header to negotiate `format=auto` against.
        #[arg(long)]
        accept: Option<String>,
    },
    /// Count what is stored: URLs, originals, variants, cached errors (run while the server
    /// is stopped).
    Stats,
    /// Check that every map entry points at a stored blob whose SHA-256 matches (run while
    /// the server is stopped). Exit 1 when something dangles and was not repaired.
    Verify {
        /// Drop dangling entries (and corrupt blobs) so they are downloaded afresh.
        #[arg(long)]
        repair: bool,
    },
    /// Bulk-load images: files are uploaded, directories walked for image files, URLs sent
    /// in batches. Prints a summary (new / duplicate / changed / failed); exit 1 if any item
    /// failed.
    Ingest(imgcas::cli::ingest::IngestOptions),
    /// Find blobs and variants nothing references (run while the server is stopped).
    Gc {
        /// Remove them; without it, only report (dry run).
        #[arg(long)]
        apply: bool,
    },
}

fn load_config(path: Option<&PathBuf>) -> Result<Config, String> {
    let mut config = match path {
        Some(p) => Config::from_file(p).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    config
        .apply_env(|name| std::env::var(name).ok())
        .map_err(|e| e.to_string())?;
    Ok(config)
}

/// The configuration with the flags `serve` and `ingest` share applied; exit code 2 when it
/// does not load.
fn configure(
    path: Option<&PathBuf>,
    data_dir: Option<PathBuf>,
    allow_private_networks: bool,
) -> Result<Config, ExitCode> {
    let mut config = load_config(path).map_err(|e| {
        eprintln!("imgcas: {e}");
        ExitCode::from(2)
    })?;
    if let Some(d) = data_dir {
        config.data_dir = d;
    }
    if allow_private_networks {
        config.fetch.allow_private_networks = true;
    }
    Ok(config)
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("IMGCAS_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("IMGCAS_LOG_FORMAT").is_ok_and(|v| v == "json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down: finishing in-flight requests");
}

/// No async runtime for the offline commands: `imgcas process` is one CPU-bound call, and
/// starting worker threads would only add to its wall time.
fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    match cli.command {
        Command::Process {
            input,
            spec,
            output,
            accept,
        } => {
            let config = match load_config(cli.config.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("imgcas: {e}");
                    return ExitCode::from(2);
                }
            };
            let limits = imgcas_processors::Limits {
                max_pixels: config.limits.max_pixels,
            };
            match imgcas::cli::process::run(&input, &spec, &output, accept.as_deref(), &limits) {
                Ok(done) => {
                    eprintln!(
                        "{}x{} {} {} bytes",
                        done.width, done.height, done.format, done.bytes
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{}", imgcas::cli::process::describe_error(&e));
                    ExitCode::from(1)
                }
            }
        }
        Command::Serve {
            listen,
            data_dir,
            allow_private_networks,
        } => {
            let mut config = match configure(cli.config.as_ref(), data_dir, allow_private_networks)
            {
                Ok(c) => c,
                Err(code) => return code,
            };
            if let Some(l) = listen {
                config.listen = l;
            }
            match runtime(&mut tokio::runtime::Builder::new_multi_thread()) {
                Ok(runtime) => runtime.block_on(serve(config)),
                Err(code) => code,
            }
        }
        Command::Ingest(options) => {
            let config = match configure(
                cli.config.as_ref(),
                options.data_dir.clone(),
                options.allow_private_networks,
            ) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let runtime = match runtime(&mut tokio::runtime::Builder::new_multi_thread()) {
                Ok(r) => r,
                Err(code) => return code,
            };
            match runtime.block_on(imgcas::cli::ingest::run(config, &options)) {
                Ok(report) => {
                    if options.json {
                        match serde_json::to_string_pretty(&report) {
                            Ok(text) => println!("{text}"),
                            Err(e) => eprintln!("imgcas: {e}"),
                        }
                    } else {
                        print!("{}", imgcas::cli::ingest::describe(&report));
                    }
                    if report.summary.failed == 0 {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("imgcas: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Stats => maintenance(cli.config.as_ref(), |config| async move {
            let report = imgcas::cli::maintenance::stats(&config).await?;
            print!("{}", imgcas::cli::maintenance::describe_stats(&report));
            Ok(true)
        }),
        Command::Verify { repair } => maintenance(cli.config.as_ref(), |config| async move {
            let report = imgcas::cli::maintenance::verify(&config, repair).await?;
            println!("{}", imgcas::cli::maintenance::describe_verify(&report));
            Ok(report.is_clean() || report.repaired)
        }),
        Command::Gc { apply } => maintenance(cli.config.as_ref(), |config| async move {
            let report = imgcas::cli::maintenance::gc(&config, apply).await?;
            println!("{}", imgcas::cli::maintenance::describe_gc(&report));
            Ok(true)
        }),
    }
}

/// An async runtime from `builder`, or the exit code for failing to start one.
fn runtime(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("imgcas: cannot start the async runtime: {e}");
        ExitCode::from(1)
    })
}

/// Runs an offline maintenance command on a small runtime: exit 0 when it reports success,
/// 1 when it found trouble, 2 for a bad configuration.
fn maintenance<F, Fut>(config_path: Option<&PathBuf>, run: F) -> ExitCode
where
    F: FnOnce(Config) -> Fut,
    Fut: std::future::Future<Output = Result<bool, imgcas::error::Error>>,
{
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("imgcas: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match runtime(&mut tokio::runtime::Builder::new_current_thread()) {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(run(config)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("imgcas: {e}");
            ExitCode::from(1)
        }
    }
}

async fn serve(config: Config) -> ExitCode {
    let running = match app::start(config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("imgcas: {e}");
            return ExitCode::from(1);
        }
    };
    // The one line on stdout: scripts and tests read the bound address from it.
    println!("imgcas listening on http://{}", running.addr);
    running.wait(shutdown_signal()).await;
    ExitCode::SUCCESS
}
