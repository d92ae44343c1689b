//! A TCP relay on loopback in front of a real server, that can cut every connection and
//! refuse new ones, then let them through again: a network outage between the app and its
//! database, with the database itself untouched.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Relay {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    /// Bumped at every cut: each relayed connection ends when it changes.
    cuts: watch::Sender<u64>,
}

impl Relay {
    /// Relays connections on a free loopback port to `target`.
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay addr");
        let down = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let (is_down, cut) = (down.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if is_down.load(Ordering::SeqCst) {
                    drop(inbound); // refused: closed at once
                    continue;
                }
                let mut cut = cut.subscribe();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay { addr, down, cuts }
    }

    /// Ends every relayed connection and refuses new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}
