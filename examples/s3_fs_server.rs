//! A real S3 server for the benchmarks (`bench/cluster.py`'s `start_s3s_fs`): `s3s-fs` (the
//! same implementation the tests run in process) over a directory, on a loopback port, with
//! the benchmarks' keys. moto, the other S3 the benchmarks use, answers on one Python thread:
//! a bench that sends it thousands of requests a second measures moto.
//!
//! `cargo run --release --example s3_fs_server -- <root> <port>`; each directory in `root` is
//! a bucket. It prints `listening on <addr>` once it accepts connections.

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(root), Some(port)) = (args.next(), args.next()) else {
        return Err("usage: s3_fs_server <root> <port>".into());
    };
    let port: u16 = port.parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let fs =
            s3s_fs::FileSystem::new(&root).map_err(|e| format!("s3s-fs over {root}: {e:?}"))?;
        let service = {
            let mut b = s3s::service::S3ServiceBuilder::new(fs);
            b.set_auth(s3s::auth::SimpleAuth::from_single("bench", "bench-secret"));
            b.build()
        };
        // Loopback only: the benchmarks send traffic nowhere else.
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        println!("listening on {}", listener.local_addr()?);
        let http = ConnBuilder::new(TokioExecutor::new());
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                continue;
            };
            let conn = http
                .serve_connection(TokioIo::new(socket), service.clone())
                .into_owned();
            tokio::spawn(async move {
                let _ = conn.await;
            });
        }
    })
}
