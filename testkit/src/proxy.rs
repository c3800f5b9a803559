//! A TCP proxy on loopback whose connections a test can cut: a worker (or
//! a client) dials the proxy, the proxy forwards to the real address, and
//! [`Proxy::cut`] drops every open connection at once, both sides, as a
//! network failure would; new connections are accepted as before, unless
//! [`Proxy::refuse`] has it close each one as it comes (a network that
//! stays down).
//! [`Proxy::freeze`] instead stops forwarding while keeping every socket
//! open, as a partitioned network or a powered-off machine would: nothing
//! is closed, nothing arrives.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

/// A running proxy; stops (and drops its connections) on drop.
#[derive(Debug)]
pub struct Proxy {
    pub addr: SocketAddr,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
    /// The local port of each connection open to the target, by number.
    outbound: Arc<Mutex<HashMap<u64, u16>>>,
    refusing: Arc<AtomicBool>,
    frozen: watch::Sender<bool>,
    acceptor: JoinHandle<()>,
}

/// Forgets a connection's outbound port when its task ends or is aborted.
struct Forget(Arc<Mutex<HashMap<u64, u16>>>, u64);

impl Drop for Forget {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.1);
    }
}

impl Proxy {
    /// Listens on `127.0.0.1:0` and forwards to `target`. Must be called
    /// inside a tokio runtime.
    pub async fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let list = connections.clone();
        let outbound_ports: Arc<Mutex<HashMap<u64, u16>>> = Arc::default();
        let ports = outbound_ports.clone();
        let refusing = Arc::new(AtomicBool::new(false));
        let refuse = refusing.clone();
        let frozen = watch::Sender::new(false);
        let watcher = frozen.subscribe();
        let acceptor = tokio::spawn(async move {
            let numbers = AtomicU64::new(0);
            while let Ok((mut inbound, _)) = listener.accept().await {
                if refuse.load(Ordering::Relaxed) {
                    continue; // dropping `inbound` closes it
                }
                let mut frozen = watcher.clone();
                let number = numbers.fetch_add(1, Ordering::Relaxed);
                let ports = ports.clone();
                let task = tokio::spawn(async move {
                    if *frozen.borrow() {
                        // Hold the socket, answer nothing.
                        std::future::pending::<()>().await;
                    }
                    let Ok(mut outbound) = TcpStream::connect(target).await else {
                        return; // dropping `inbound` refuses the caller
                    };
                    let _forget = Forget(ports.clone(), number);
                    if let Ok(local) = outbound.local_addr() {
                        ports
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(number, local.port());
                    }
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
            outbound: outbound_ports,
            refusing,
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

    /// With `true`, cuts every open connection and closes each new one as
    /// it comes, until called with `false`.
    pub fn refuse(&self, refusing: bool) {
        self.refusing.store(refusing, Ordering::Relaxed);
        if refusing {
            self.cut();
        }
    }

    /// The local ports of the connections open to the target now: how the
    /// target (a database server, say) knows them.
    pub fn outbound_ports(&self) -> Vec<u16> {
        self.outbound
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .copied()
            .collect()
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
