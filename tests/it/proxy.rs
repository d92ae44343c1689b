//! Proxy variables cannot carry a fetch past the address guard. With `HTTP_PROXY`,
//! `HTTPS_PROXY` and `ALL_PROXY` pointing at a loopback listener, the real binary still fetches
//! origins directly (the listener sees no connection), and a host name that resolves to
//! loopback is still refused: a proxy would resolve it where the guard cannot look.

use crate::common;

use std::net::{IpAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::binary::{self, Server};
use common::{client, jpeg, Origin};

/// A listener standing in for a proxy: it counts connections and closes them.
struct FakeProxy {
    url: String,
    connections: Arc<AtomicU64>,
}

impl FakeProxy {
    fn start() -> FakeProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicU64::new(0));
        let counted = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        FakeProxy { url, connections }
    }

    fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

/// `imgcas serve` with every proxy variable set to `proxy` (and `extra` variables).
fn serve_behind(proxy: &FakeProxy, data_dir: &std::path::Path, extra: &[(&str, &str)]) -> Server {
    let mut command = binary::serve_command(data_dir);
    command
        .env("IMGCAS_LOG", "off")
        .env_remove("NO_PROXY")
        .env_remove("no_proxy");
    for var in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        command.env(var, &proxy.url);
    }
    for (k, v) in extra {
        command.env(k, v);
    }
    binary::spawn(command)
}

/// A host name other than `localhost` (which the guard refuses by name) that this machine
/// resolves to a loopback address: one of `/etc/hosts`' names.
fn loopback_name() -> Option<String> {
    let hosts = std::fs::read_to_string("/etc/hosts").ok()?;
    hosts
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| {
            let mut fields = l.split_whitespace();
            let ip: Option<IpAddr> = fields.next().and_then(|a| a.parse().ok());
            let names: Vec<String> = fields.map(str::to_string).collect();
            names.into_iter().map(move |n| (ip, n))
        })
        .filter(|(ip, name)| {
            ip.is_some_and(|ip| ip.is_loopback())
                && name != "localhost"
                && !name.ends_with(".localhost")
                && name.parse::<IpAddr>().is_err()
        })
        .map(|(_, name)| name)
        .find(|name| {
            (name.as_str(), 80)
                .to_socket_addrs()
                .is_ok_and(|mut addrs| addrs.all(|a| a.ip().is_loopback()))
        })
}

async fn get(base: &str, source: &str) -> reqwest::Response {
    let mut url = reqwest::Url::parse(&format!("{base}/v1/image")).unwrap();
    url.query_pairs_mut()
        .append_pair("url", source)
        .append_pair("w", "10");
    client().get(url).send().await.expect("request")
}

#[tokio::test]
async fn proxy_variables_do_not_reroute_fetches() {
    let proxy = FakeProxy::start();
    let origin = Origin::start_with("/a.jpg", jpeg(64, 48, 1)).await;
    let dir = tempfile::tempdir().unwrap();
    let server = serve_behind(
        &proxy,
        dir.path(),
        &[("IMGCAS_ALLOW_PRIVATE_NETWORKS", "true")],
    );
    let r = get(
        &server.base,
        &format!("http://127.0.0.1:{}/a.jpg", origin.addr.port()),
    )
    .await;
    server.kill();
    assert_eq!(r.status(), 200);
    assert_eq!(origin.requests(), 1, "the origin is asked directly");
    assert_eq!(proxy.connections(), 0, "the proxy sees nothing");
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_even_with_a_proxy_configured() {
    let Some(name) = loopback_name() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no /etc/hosts name resolves to loopback here: the test cannot run"
        );
        eprintln!("skipped: no /etc/hosts name resolves to loopback");
        return;
    };
    let proxy = FakeProxy::start();
    let origin = Origin::start_with("/a.jpg", jpeg(64, 48, 1)).await;
    let dir = tempfile::tempdir().unwrap();
    let server = serve_behind(&proxy, dir.path(), &[]);
    let r = get(
        &server.base,
        &format!("http://{name}:{}/a.jpg", origin.addr.port()),
    )
    .await;
    server.kill();
    assert_eq!(r.status(), 403, "{name}");
    let body: serde_json::Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "source_not_allowed");
    assert_eq!(origin.requests(), 0);
    assert_eq!(proxy.connections(), 0, "the proxy sees nothing");
}
