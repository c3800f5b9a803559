//! A TCP proxy on loopback whose connections a test can cut: a worker (or
//! a client) dials the proxy, the proxy forwards to the real address, and
//! [`Proxy::cut`] drops every open connection at once, both sides, as a
//! network failure would; new connections are accepted as before.
//! [`Proxy::freeze`] instead stops forwarding while keeping every socket
//! open, as a partitioned network or a powered-off machine would: nothing
//! is closed, nothing arrives.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

/// A running proxy; stops (and drops its connections) on drop.
#[derive(Debug)]
pub struct Proxy {
    pub addr: SocketAddr,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    frozen: watch::Sender<bool>,
    acceptor: JoinHandle<()>,
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards to `target`. Must be called
    /// inside a tokio runtime.
    pub async fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let list = connections.clone();
        let frozen = watch::Sender::new(false);
        let watcher = frozen.subscribe();
        let acceptor = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut frozen = watcher.clone();
                let task = tokio::spawn(async move {
                    if *frozen.borrow() {
                        // Hold the socket, answer nothing.
                        std::future::pending::<()>().await;
                    }
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return; // dropping `inbound` refuses the caller
                    };
                    let froze = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => false,
                        _ = frozen.wait_for(|f| *f) => true,
                    };
                    if froze {
                        // Both sockets stay open and silent until a cut or
                        // the proxy's end.
                        std::future::pending::<()>().await;
                    }
                });
                let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
                list.retain(|h| !h.is_finished());
                list.push(task.abort_handle());
            }
        });
        Ok(Proxy {
            addr,
            connections,
            frozen,
            acceptor,
        })
    }

    /// The URL to dial instead of the target's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops forwarding on every connection, open or future, keeping the
    /// sockets open.
    pub fn freeze(&self) {
        self.frozen.send_replace(true);
    }

    /// Drops every open connection (both sockets close); returns how many
    /// were open.
    pub fn cut(&self) -> usize {
        let mut list = self.connections.lock().unwrap_or_else(|e| e.into_inner());
        let open = list.iter().filter(|h| !h.is_finished()).count();
        for h in list.drain(..) {
            h.abort();
        }
        open
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.cut();
    }
}
