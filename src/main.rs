//! The `imgcas` command line: `serve` runs the service on the embedded default (a local blob
//! directory and one redb file under the data dir), with no other process needed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use imgcas::app;
use imgcas::config::{Config, Flags};

mod cli;

/// The service's own heap. Under a flood of small uploads glibc's arenas kept the freed
/// pieces and RSS crept on by about 100 bytes an upload with the live heap flat (issue 50);
/// jemalloc, asked the same, stayed level (`bench/memory_uploads.py`). Its symbols are
/// prefixed, so the C codecs keep glibc's malloc, which `admission::memory` bounds and trims.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[global_allocator]
static HEAP: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once as it starts (its `malloc_conf`, under the prefix the crate
/// builds it with; a C string, which `Option<&u8>` is laid out as). `percpu_arena:percpu`:
/// one arena per core, used by whichever thread runs there, instead of four per core each
/// keeping its own freed pages for ten seconds. 64 queued runs of 24 MP sources peaked at
/// 174 MiB with jemalloc's own arenas, 127 with these, 104 on glibc's malloc
/// (`bench/memory_cold.py --queue-target 120s`, 2 cores); handing large buffers back at once
/// as well (`oversize_threshold` 1 MiB) reached 104 but cost 5 % more CPU on cold requests.
#[cfg(all(target_os = "linux", not(target_env = "musl")))]
#[export_name = "_rjem_malloc_conf"]
static JEMALLOC_OPTIONS: Option<&u8> = Some(&b"percpu_arena:percpu\0"[0]);

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

/// The server an online check runs on.
#[derive(Debug, Clone, clap::Args)]
struct OnlineCheck {
    /// The running imgcas that runs an online check (e.g. http://127.0.0.1:8080).
    #[arg(long)]
    server: Option<url::Url>,
    /// Its admin token (else IMGCAS_ADMIN_TOKEN), sent as `Authorization: Bearer`.
    #[arg(long, value_name = "TOKEN")]
    admin_token: Option<String>,
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
    /// What is stored (URLs, originals, variants, cached errors) and what deduplication
    /// saves, as the operator's page shows it (on the embedded maps, run it while the server
    /// is stopped; on PostgreSQL, while nodes serve); with --server, a running node's figures
    /// too, through `GET /admin/savings`.
    Stats(cli::maintenance::StatsOptions),
    /// Check that every map entry points at a stored blob whose SHA-256 matches (on the
    /// embedded maps, run while the server is stopped; on PostgreSQL, while nodes serve).
    /// Exit 1 when something dangles and was not repaired.
    Verify {
        /// Drop dangling entries (and corrupt blobs) so they are downloaded afresh.
        #[arg(long)]
        repair: bool,
        /// Also compute the perceptual fingerprint of every original that has none (those
        /// stored before fingerprints existed; the server does this in the background too).
        #[arg(long)]
        fingerprint: bool,
        /// Also count the store's totals afresh from every URL entry and original and
        /// compare them with the totals the maps keep (`/admin`, `imgcas stats`).
        #[arg(long)]
        totals: bool,
        /// Check the originals index against the blob store by range while the server
        /// serves: the server named by `--server` runs it (resumable, one node at a time)
        /// and this prints its report. Exit 1 when an original is missing or mismatched.
        #[arg(long, requires = "server", conflicts_with_all = ["repair", "fingerprint", "totals"])]
        online: bool,
        #[command(flatten)]
        remote: OnlineCheck,
    },
    /// Bulk-load images: files are uploaded, directories walked for image files, URLs sent
    /// in batches. Prints a summary (new / duplicate / changed / failed); exit 1 if any item
    /// failed.
    Ingest(cli::ingest::IngestOptions),
    /// Take content down everywhere (a hash, or the content a URL is served from): its
    /// bytes, variants and URL entries go, and it is refused (451) until lifted. On the local
    /// data dir (stop the server first on the embedded maps) or a server (`--server`).
    /// Exit 1 when refused (a URL with no entry, a bad token).
    Purge(cli::purge::PurgeOptions),
    /// The moderation blocklist as a file to share: `export` writes every entry (one JSON
    /// object per line), `import` lists a file's entries (taking down what they match).
    Blocklist {
        #[command(subcommand)]
        command: cli::blocklist::BlocklistCommand,
    },
    /// Find blobs and variants nothing references (on the embedded maps, run while the
    /// server is stopped; on PostgreSQL, while nodes serve).
    Gc {
        /// Remove them; without it, only report (dry run).
        #[arg(long)]
        apply: bool,
        /// Find unreferenced blobs by range while the server serves (`verify --online`'s
        /// check); with `--apply`, the server deletes those older than
        /// `maintenance.gc_grace`.
        #[arg(long, requires = "server")]
        online: bool,
        #[command(flatten)]
        remote: OnlineCheck,
    },
    /// The maps themselves.
    Maps {
        #[command(subcommand)]
        command: MapsCommand,
    },
}

#[derive(Subcommand)]
enum MapsCommand {
    /// Copy the maps this configuration names, and the bytes they name, into other maps:
    /// into PostgreSQL and the configured S3 bucket (a node joins a cluster), or into
    /// `redb://<dir>` and that directory (a cluster's or a node's maps become a node's).
    /// Idempotent and resumable; run it while the embedded maps involved are not in use.
    Copy {
        /// The target: `postgres://user:password@host:port/database`, or `redb://<dir>`.
        #[arg(long)]
        to: String,
    },
    /// Move the maps (and the blob store: `--bucket`) to others while the node serves,
    /// through the running server: writes mirrored, a backfill by hash range compared by
    /// checksums, then `--cutover`, then `--finish` (or `--rollback` at any point before).
    /// Prints where the migration stands.
    Migrate(cli::migrate::MigrateOptions),
}

/// How a command ended; [`Outcome::exit_code`] is the one place exit codes are decided.
enum Outcome {
    /// Done, nothing wrong: exit 0.
    Done,
    /// Done, but something it found or did failed (a processing error, an item that failed,
    /// a dangling entry): exit 1, after the command printed what.
    Trouble,
    /// The command ran and failed (the server could not start, storage failed): exit 1.
    Failed(String),
    /// The command was refused before any work: a bad configuration (any command), or for
    /// `ingest` no input, a server that does not answer, a data dir another process holds:
    /// exit 2.
    Refused(String),
}

impl Outcome {
    fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Done => ExitCode::SUCCESS,
            Outcome::Trouble => ExitCode::from(1),
            Outcome::Failed(message) => {
                eprintln!("imgcas: {message}");
                ExitCode::from(1)
            }
            Outcome::Refused(message) => {
                eprintln!("imgcas: {message}");
                ExitCode::from(2)
            }
        }
    }
}

/// The configuration every command runs with: file < environment < `flags`, validated.
fn configure(path: Option<&PathBuf>, flags: &Flags) -> Result<Config, Outcome> {
    Config::load(
        path.map(PathBuf::as_path),
        |name| std::env::var(name).ok(),
        flags,
    )
    .map_err(|e| Outcome::Refused(e.to_string()))
}

/// Logs go to stderr through a buffer that a thread of their own drains: a request formats its
/// access line and hands it over, and never waits on the write (a full buffer drops lines
/// rather than stall requests). The returned guard flushes what is buffered when dropped, at
/// the end of `main`.
fn init_logging() -> imgcas::log::Flush {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_env(imgcas::log::FILTER_VAR).unwrap_or_else(|_| EnvFilter::new("info"));
    let (writer, guard) = imgcas::log::buffered(std::io::stderr());
    // Colour codes only for a terminal: in a file they are noise, and they cost time per line.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let json = std::env::var(imgcas::log::FORMAT_VAR).is_ok_and(|v| v == "json");
    imgcas::log::install(writer.clone(), json);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
    guard
}

/// Waits for SIGTERM or SIGINT (Ctrl-C). The handlers are registered here, when called, not
/// when the future is first polled: the service prints its "listening" line after this, so
/// a SIGTERM that follows that line at once (a supervisor's, a test's) always finds the
/// handler, and the shutdown is graceful (maps flushed) rather than the default death.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (term, interrupt) = {
        use tokio::signal::unix::{signal, SignalKind};
        (
            signal(SignalKind::terminate()).ok(),
            signal(SignalKind::interrupt()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(term) => {},
                () = wait(interrupt) => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutting down: finishing in-flight requests");
    }
}

/// Panics go to the log as one line (where, and what) instead of the default hook's message and
/// backtrace on stderr: most are caught and answered (a third-party decoder's panic is its
/// file's `undecodable`, counted in `imgcas_decoder_panics_total`), and a line that the log's
/// filter and format govern is what an operator reads. With `RUST_BACKTRACE` set the default
/// hook runs too, for debugging.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    let backtrace = std::env::var_os("RUST_BACKTRACE").is_some_and(|v| v != "0");
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(%at, "panic: {what}");
        if backtrace {
            default(info);
        }
    }));
}

/// No async runtime for the offline commands: `imgcas process` is one CPU-bound call, and
/// starting worker threads would only add to its wall time.
fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs = init_logging();
    install_panic_hook();
    let code = run(cli).unwrap_or_else(|outcome| outcome).exit_code();
    drop(logs);
    code
}

fn run(cli: Cli) -> Result<Outcome, Outcome> {
    let config_path = cli.config.as_ref();
    match cli.command {
        Command::Process {
            input,
            spec,
            output,
            accept,
        } => {
            let config = configure(config_path, &Flags::default())?;
            let limits = config.limits.processing();
            let targets = config.quality.targets();
            let accept = accept.as_deref().map(|header| imgcas_processors::Accept {
                header,
                order: &config.formats.auto,
            });
            let run = cli::process::run(&input, &spec, &output, accept, &limits, &targets);
            match run {
                Ok(done) => {
                    let chosen = match done.chosen {
                        Some(c) => match c.score() {
                            Some(score) => format!(" (q={}, SSIMULACRA2 {score:.1})", c.quality),
                            None => format!(" (q={})", c.quality),
                        },
                        None => String::new(),
                    };
                    eprintln!(
                        "{}x{} {} {} bytes{chosen}",
                        done.width, done.height, done.format, done.bytes
                    );
                    Ok(Outcome::Done)
                }
                Err(e) => {
                    eprintln!("{}", cli::process::describe_error(&e));
                    Ok(Outcome::Trouble)
                }
            }
        }
        Command::Serve {
            listen,
            data_dir,
            allow_private_networks,
        } => {
            let flags = Flags {
                listen,
                data_dir,
                allow_private_networks,
            };
            let config = configure(config_path, &flags)?;
            imgcas::admission::bound_arenas(config.limits.allocator_arenas);
            let runtime = runtime(&mut tokio::runtime::Builder::new_multi_thread())?;
            let served = runtime.block_on(serve(config));
            // A run the shutdown told to stop may be inside one codec call still: it is
            // abandoned with the process rather than waited for (dropping the runtime would
            // wait for every blocking thread, however long).
            runtime.shutdown_timeout(std::time::Duration::from_millis(500));
            served
        }
        Command::Ingest(options) => {
            let flags = Flags {
                listen: None,
                data_dir: options.data_dir.clone(),
                allow_private_networks: options.allow_private_networks,
            };
            let config = configure(config_path, &flags)?;
            let runtime = runtime(&mut tokio::runtime::Builder::new_multi_thread())?;
            let report = runtime
                .block_on(cli::ingest::run(config, &options))
                .map_err(Outcome::Refused)?;
            if options.json {
                let text = serde_json::to_string_pretty(&report)
                    .map_err(|e| Outcome::Failed(e.to_string()))?;
                println!("{text}");
            } else {
                print!("{}", cli::ingest::describe(&report));
            }
            Ok(if report.summary.failed == 0 {
                Outcome::Done
            } else {
                Outcome::Trouble
            })
        }
        Command::Purge(options) => {
            let flags = Flags {
                listen: None,
                data_dir: options.at.data_dir.clone(),
                allow_private_networks: false,
            };
            let config = configure(config_path, &flags)?;
            let runtime = runtime(&mut tokio::runtime::Builder::new_current_thread())?;
            match runtime
                .block_on(cli::purge::run(config, &options))
                .map_err(Outcome::Refused)?
            {
                Ok(done) => {
                    println!("{}", done.describe(options.json));
                    Ok(Outcome::Done)
                }
                Err(e) => {
                    eprintln!("{}: {}", e.code, e.message);
                    Ok(Outcome::Trouble)
                }
            }
        }
        Command::Stats(options) => {
            let flags = Flags {
                listen: None,
                data_dir: options.at.data_dir.clone(),
                allow_private_networks: false,
            };
            let config = configure(config_path, &flags)?;
            let (stored, savings) = maintenance(cli::maintenance::stats(config, &options))?;
            if options.json {
                let text = serde_json::to_string_pretty(&savings)
                    .map_err(|e| Outcome::Failed(e.to_string()))?;
                println!("{text}");
            } else {
                if let Some(stored) = &stored {
                    print!("{}", cli::maintenance::describe_stats(stored));
                }
                print!("{}", cli::maintenance::describe_savings(&savings));
            }
            Ok(Outcome::Done)
        }
        Command::Verify {
            repair,
            fingerprint,
            totals,
            online,
            remote,
        } => {
            let config = configure(config_path, &Flags::default())?;
            if online {
                let state = online_check(&config, &remote, false)?;
                println!("{}", cli::check::describe(&state));
                let r = &state.report;
                return Ok(if r.missing == 0 && r.mismatched == 0 {
                    Outcome::Done
                } else {
                    Outcome::Trouble
                });
            }
            if fingerprint {
                let done = maintenance(cli::maintenance::fingerprint(config.clone()))?;
                println!("{done} originals fingerprinted");
            }
            if totals {
                let (kept, counted) = maintenance(cli::maintenance::totals(config.clone()))?;
                println!("{}", cli::maintenance::describe_totals(&kept, &counted));
                if kept != counted {
                    return Ok(Outcome::Trouble);
                }
            }
            let report = maintenance(cli::maintenance::verify(config, repair))?;
            println!("{}", cli::maintenance::describe_verify(&report));
            Ok(if report.is_clean() || report.repaired {
                Outcome::Done
            } else {
                Outcome::Trouble
            })
        }
        Command::Blocklist { command } => {
            let flags = Flags {
                listen: None,
                data_dir: command.data_dir(),
                allow_private_networks: false,
            };
            let config = configure(config_path, &flags)?;
            let runtime = runtime(&mut tokio::runtime::Builder::new_current_thread())?;
            match runtime.block_on(cli::blocklist::run(config, &command)) {
                Ok(line) => {
                    if !line.is_empty() {
                        println!("{line}");
                    }
                    Ok(Outcome::Done)
                }
                Err(e) => {
                    eprintln!("{e}");
                    Ok(Outcome::Trouble)
                }
            }
        }
        Command::Gc {
            apply,
            online,
            remote,
        } => {
            let config = configure(config_path, &Flags::default())?;
            if online {
                let state = online_check(&config, &remote, apply)?;
                println!("{}", cli::check::describe(&state));
                return Ok(Outcome::Done);
            }
            let report = maintenance(cli::maintenance::gc(config, apply))?;
            println!("{}", cli::maintenance::describe_gc(&report));
            Ok(Outcome::Done)
        }
        Command::Maps {
            command: MapsCommand::Migrate(options),
        } => {
            let config = configure(config_path, &Flags::default())?;
            let token = options
                .admin_token
                .clone()
                .or(config.security.admin_token.clone());
            let runtime = runtime(&mut tokio::runtime::Builder::new_current_thread())?;
            let state = runtime
                .block_on(cli::migrate::run(&options, token.as_deref()))
                .map_err(Outcome::Failed)?;
            println!("{}", cli::migrate::describe(state.as_ref()));
            Ok(Outcome::Done)
        }
        Command::Maps {
            command: MapsCommand::Copy { to },
        } => {
            let config = configure(config_path, &Flags::default())?;
            if let Some(why) = cli::maps::refusal(&config, &to) {
                return Err(Outcome::Refused(why));
            }
            let report = maintenance(cli::maps::copy(config, &to))?;
            println!("{}", cli::maps::describe(&report));
            Ok(if report.originals_missing > 0 {
                Outcome::Trouble
            } else {
                Outcome::Done
            })
        }
    }
}

/// An async runtime from `builder`.
fn runtime(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, Outcome> {
    builder
        .enable_all()
        .build()
        .map_err(|e| Outcome::Failed(format!("cannot start the async runtime: {e}")))
}

/// Runs an offline maintenance command on a small runtime.
/// `verify --online` and `gc --online`: the check run by the server, followed to its end.
fn online_check(
    config: &Config,
    remote: &OnlineCheck,
    apply: bool,
) -> Result<imgcas::pipeline::CheckState, Outcome> {
    let Some(server) = &remote.server else {
        return Err(Outcome::Refused("--online needs --server".into()));
    };
    let token = remote
        .admin_token
        .as_deref()
        .or(config.security.admin_token.as_deref());
    let runtime = runtime(&mut tokio::runtime::Builder::new_current_thread())?;
    runtime
        .block_on(cli::check::run(server, token, apply))
        .map_err(Outcome::Failed)
}

fn maintenance<T>(
    work: impl std::future::Future<Output = Result<T, imgcas::error::Error>>,
) -> Result<T, Outcome> {
    let runtime = runtime(&mut tokio::runtime::Builder::new_current_thread())?;
    runtime
        .block_on(work)
        .map_err(|e| Outcome::Failed(e.to_string()))
}

async fn serve(config: Config) -> Result<Outcome, Outcome> {
    let running = app::start(config)
        .await
        .map_err(|e| Outcome::Failed(e.to_string()))?;
    let shutdown = shutdown_signal();
    // The one line on stdout: scripts and tests read the bound address from it.
    println!("imgcas listening on http://{}", running.addr());
    tracing::info!(
        node_id = running.pipeline().node_id(),
        addr = %running.addr(),
        "serving"
    );
    running.wait(shutdown).await;
    Ok(Outcome::Done)
}
