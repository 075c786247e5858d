//! Where the state lives ([`Target`]) and the connection to it: one multiplexed connection
//! to a server, or a cluster connection, with `TCP_NODELAY` and keepalive.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Value};

/// Where the limiter's state lives: one Redis server or a Redis Cluster.
///
/// ```
/// use tollgate_redis::Target;
/// let single: Target = "redis://127.0.0.1:6379".into();
/// let cluster = Target::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]);
/// # let _ = (single, cluster);
/// ```
#[derive(Clone)]
#[non_exhaustive]
// With TLS a client carries its certificates (hundreds of bytes): a target is made once per
// limiter, so its size does not matter, and the variant stays a plain `redis::Client`.
#[allow(clippy::large_enum_variant)]
pub enum Target {
    /// One server (or a primary behind a proxy), through an auto-reconnecting multiplexed
    /// connection.
    Server(redis::Client),
    /// A Redis Cluster: keys hash-tagged so that each limiter's keys share a slot.
    Cluster(Box<ClusterClient>),
    /// A URL that could not be parsed; `build` reports it.
    Invalid(String),
}

impl Target {
    /// A cluster reached through any of `nodes` (URLs such as `redis://127.0.0.1:7000`).
    ///
    /// ```
    /// let t = tollgate_redis::Target::cluster(["redis://127.0.0.1:7000"]);
    /// # let _ = t;
    /// ```
    pub fn cluster<S: AsRef<str>>(nodes: impl IntoIterator<Item = S>) -> Target {
        let nodes: Vec<String> = nodes.into_iter().map(|s| s.as_ref().to_owned()).collect();
        match ClusterClient::new(nodes.clone()) {
            Ok(c) => Target::Cluster(Box::new(c)),
            Err(e) => Target::Invalid(format!("{nodes:?}: {e}")),
        }
    }
}

impl From<redis::Client> for Target {
    fn from(c: redis::Client) -> Self {
        Target::Server(c)
    }
}

impl From<ClusterClient> for Target {
    fn from(c: ClusterClient) -> Self {
        Target::Cluster(Box::new(c))
    }
}

impl From<&str> for Target {
    fn from(url: &str) -> Self {
        match redis::Client::open(url) {
            Ok(c) => Target::Server(c),
            Err(e) => Target::Invalid(format!("{url}: {e}")),
        }
    }
}

impl From<String> for Target {
    fn from(url: String) -> Self {
        Target::from(url.as_str())
    }
}

#[derive(Clone)]
pub(crate) enum Conn {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    pub(crate) async fn query(&self, cmd: &Cmd) -> redis::RedisResult<Value> {
        match self.clone() {
            Conn::Server(mut c) => cmd.query_async(&mut c).await,
            Conn::Cluster(mut c) => cmd.query_async(&mut c).await,
        }
    }
}

/// `TCP_NODELAY` (a check is one small write: never held back for the next one) and keepalive
/// probes after 30 s idle (a peer gone without a FIN is found), unless the client's own
/// settings already ask for keepalive.
pub(crate) fn with_tcp_settings(client: redis::Client) -> redis::RedisResult<redis::Client> {
    let info = client.get_connection_info().clone();
    let mut tcp = info.tcp_settings().clone().set_nodelay(true);
    if tcp.keepalive().is_none() {
        tcp = tcp.set_keepalive(
            redis::io::tcp::socket2::TcpKeepalive::new().with_time(Duration::from_secs(30)),
        );
    }
    redis::Client::open(info.set_tcp_settings(tcp))
}
