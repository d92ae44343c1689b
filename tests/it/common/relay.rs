//! A TCP relay on loopback in front of a real server, that can cut every connection and
//! refuse new ones, or fall silent (connections held open, nothing forwarded, new ones
//! accepted and never answered), then let them through again: a network outage between the
//! app and its database or bucket, with the server itself untouched.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Relay {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    silent: Arc<AtomicBool>,
    /// Bumped at every cut: each relayed connection ends when it changes.
    cuts: watch::Sender<u64>,
}

impl Relay {
    /// Relays connections on a free loopback port to `target`.
    pub async fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
        let addr = listener.local_addr().expect("relay addr");
        let down = Arc::new(AtomicBool::new(false));
        let silent = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let (is_down, is_silent, cut) = (down.clone(), silent.clone(), cuts.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut cut = cut.subscribe();
                if is_silent.load(Ordering::SeqCst) {
                    // Accepted, never answered: held until the relay changes again.
                    tokio::spawn(async move {
                        let _held = inbound;
                        let _ = cut.changed().await;
                    });
                    continue;
                }
                if is_down.load(Ordering::SeqCst) {
                    drop(inbound); // refused: closed at once
                    continue;
                }
                let silent = is_silent.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cut.changed() => {
                            // Fallen silent: both ends held open, nothing forwarded, until
                            // the next change.
                            if silent.load(Ordering::SeqCst) {
                                let _ = cut.changed().await;
                            }
                        }
                    }
                });
            }
        });
        Relay {
            addr,
            down,
            silent,
            cuts,
        }
    }

    /// Holds every relayed connection open without forwarding a byte, and accepts new ones
    /// that are never answered: a server that is paused (SIGSTOP) or a black hole.
    pub fn silence(&self) {
        self.silent.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Ends every relayed connection and refuses new ones.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Lets connections through again (the silent ones held are closed).
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
        if self.silent.swap(false, Ordering::SeqCst) {
            self.cuts.send_modify(|n| *n += 1);
        }
    }
}
