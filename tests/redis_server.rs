//! Real `redis-server` processes for the Redis tests: each on a free loopback port with its own
//! temporary directory, stopped (and the directory removed) when the guard drops.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const INSTALL: &str = "the Redis tests need `redis-server` and `redis-cli` on the PATH: \
                       install them with `apt-get install -y redis-server`";

/// A fresh key prefix, different for every call in every process.
pub fn prefix(name: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "t-{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A port on 127.0.0.1 that was free a moment ago (and, for cluster nodes, whose bus port
/// `port + 10000` was too).
fn free_port(with_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("local address").port();
        if !with_bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// One `redis-server` process. Killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
}

/// Redis' clock (`TIME`), in microseconds: what a test of a script's time reads.
pub fn redis_time(c: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(c).unwrap();
    s * 1_000_000 + us
}

/// Polls Redis' `TIME` (bounded: 5 s of it) until it reaches `at` (microseconds): a wait on
/// the server's own clock, for scripts that read it.
pub fn until_redis_time(c: &mut redis::Connection, at: u64) {
    let from = redis_time(c);
    assert!(at < from + 5_000_000, "too far ahead");
    while redis_time(c) < at {}
}

/// Waits while Redis' `TIME` lies within `margin` before a multiple of `window` (polling it,
/// a few milliseconds apart): for a test that compares histories run one after the other on
/// Redis' clock, whose fixed windows of `window` (or a divisor of it) must not turn over
/// between them. At most `margin`, about once in `window / margin` runs.
pub fn clear_of_boundary(c: &mut redis::Connection, window: Duration, margin: Duration) {
    let (window, margin) = (window.as_micros() as u64, margin.as_micros() as u64);
    while window - redis_time(c) % window <= margin {
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl RedisServer {
    /// A standalone server without persistence.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A standalone server with extra `redis-server` arguments (`["--requirepass", "x"]`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::spawn(free_port(false), extra)
    }

    /// A cluster-enabled node (not yet part of a cluster) that considers a peer failed after
    /// `node_timeout_ms` without an answer.
    fn cluster_node(node_timeout_ms: u32) -> Self {
        Self::spawn(
            free_port(true),
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &node_timeout_ms.to_string(),
            ],
        )
    }

    /// Whether the server is running (not [`stop`](Self::stop)ped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `INFO replication`'s `role:` line: `master` or `slave`.
    pub fn role(&self) -> String {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut self.connection())
            .expect("INFO replication");
        info.lines()
            .find_map(|l| l.strip_prefix("role:"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    fn spawn(port: u16, extra: &[&str]) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "ratelimit-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the server's temporary directory");
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        // A port found free may be taken by someone else before the server binds it: then
        // try another.
        let with_bus = extra.contains(&"--cluster-enabled");
        let mut attempts = 0;
        while let Err(why) = server.launch() {
            attempts += 1;
            assert!(attempts < 5, "{why}");
            server.port = free_port(with_bus);
        }
        server
    }

    /// Starts the server again (same port, same directory) after [`stop`](Self::stop).
    pub fn restart(&mut self) {
        if let Err(why) = self.launch() {
            panic!("{why}");
        }
    }

    fn launch(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the server is running");
        let log = self.dir.join("redis.log");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start redis-server ({e}); {INSTALL}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        // Polls until the server answers (it takes a few milliseconds to open its port).
        while !self.answers() {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                self.stop();
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(5).collect();
                return Err(format!(
                    "redis-server on port {} did not start ({exited:?}); its log ends with: {tail:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    fn answers(&self) -> bool {
        let Ok(client) = redis::Client::open(self.url_with_password()) else {
            return false;
        };
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
            return false;
        };
        redis::cmd("PING").query::<String>(&mut c).is_ok()
    }

    fn url_with_password(&self) -> String {
        match self.extra.iter().position(|a| a == "--requirepass") {
            Some(i) => format!("redis://:{}@127.0.0.1:{}", self.extra[i + 1], self.port),
            None => self.url(),
        }
    }

    /// Kills the server (SIGKILL, like a crash) and waits for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing answers.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a [`pause`](Self::pause)d server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("the server is running").id();
        let status = Command::new("kill")
            .args([signal, &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A plain synchronous connection, for looking at what the store wrote.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url_with_password())
            .and_then(|c| c.get_connection())
            .expect("connect to the test server")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `CLIENT PAUSE WRITE` on `c`'s server for up to 30 s: every script sent to it waits, in the
/// order it came (a script Redis cannot tell writes nothing), while other servers run theirs:
/// how a test orders requests between two round trips of one call, without sleeps.
pub fn pause_writes(c: &mut redis::Connection) {
    (redis::cmd("CLIENT").arg("PAUSE").arg(30_000).arg("WRITE"))
        .query::<()>(c)
        .unwrap();
}

/// Ends [`pause_writes`].
pub fn unpause(c: &mut redis::Connection) {
    redis::cmd("CLIENT").arg("UNPAUSE").query::<()>(c).unwrap();
}

/// The clients `c`'s server holds waiting ([`pause_writes`]' among them).
pub fn waiting(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("clients").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("blocked_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO clients")
}

/// Until `c`'s server holds `n` clients waiting (20 s at most, else the test fails).
pub fn until_waiting(c: &mut redis::Connection, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while waiting(c) != n {
        if Instant::now() > deadline {
            let list: String = redis::cmd("CLIENT").arg("LIST").query(c).unwrap();
            panic!("never {n} waiting: {}\n{list}", waiting(c));
        }
        std::thread::yield_now();
    }
}

/// A local Redis Cluster on loopback ports, built with `redis-cli --cluster create`: three
/// masters, and one replica each with [`start_with_replicas`](Self::start_with_replicas).
/// Stopped on drop.
pub struct RedisCluster {
    /// The nodes: the three masters first, then any replicas (as `redis-cli` assigns them).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three masters, joins them and waits until every slot is served.
    pub fn start() -> Self {
        Self::build(0, 2_000)
    }

    /// Starts three masters with a replica each, and waits until every slot is served and
    /// every replica is in sync. A master that stops answering is replaced by its replica
    /// after about a second (`cluster-node-timeout` 1000 ms, plus the election).
    pub fn start_with_replicas() -> Self {
        let cluster = Self::build(1, 1_000);
        // Polls until every replica has synchronised with its master.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.nodes.iter().all(|n| {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut n.connection())
                .unwrap_or_default();
            info.contains("role:master") || info.contains("master_link_status:up")
        }) {
            assert!(
                Instant::now() < deadline,
                "the replicas did not synchronise"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    fn build(replicas: usize, node_timeout_ms: u32) -> Self {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| RedisServer::cluster_node(node_timeout_ms))
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("could not run redis-cli ({e}); {INSTALL}"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes };
        // Polls until every node agrees the cluster is up (gossip takes a moment).
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cluster.nodes.iter().all(|n| {
            redis::cmd("CLUSTER")
                .arg("INFO")
                .query::<String>(&mut n.connection())
                .is_ok_and(|info| info.contains("cluster_state:ok"))
        }) {
            assert!(Instant::now() < deadline, "the cluster did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The index of the running master serving `slot`.
    pub fn master_of(&self, slot: u16) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| {
            let node = &self.nodes[i];
            if !node.is_running() || node.role() != "master" {
                return false;
            }
            let slots: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query(&mut node.connection())
                .unwrap_or_default();
            slots.iter().any(|range| {
                let n = |i: usize| match range.get(i) {
                    Some(redis::Value::Int(n)) => *n,
                    _ => -1,
                };
                let port = match range.get(2) {
                    Some(redis::Value::Array(a)) => match a.get(1) {
                        Some(redis::Value::Int(p)) => *p,
                        _ => -1,
                    },
                    _ => -1,
                };
                n(0) <= i64::from(slot) && i64::from(slot) <= n(1) && port == i64::from(node.port)
            })
        })
    }
}

/// Runs 4 `redis-worker` processes (`worker` is its path) at once, each with 64 tasks making
/// 6 calls on one key with a limit of 1 000 and a 20-day window; returns the total admitted.
pub fn four_processes(
    worker: &str,
    urls: &[String],
    cluster: bool,
    prefix: &str,
    strategy: &str,
) -> u64 {
    four_processes_in(worker, urls, cluster, prefix, strategy, None)
}

/// [`four_processes`], the workers in `mode` (`refund`: each task gives back every other spend
/// it was admitted; the total is then of the spends kept).
pub fn four_processes_in(
    worker: &str,
    urls: &[String],
    cluster: bool,
    prefix: &str,
    strategy: &str,
    mode: Option<&str>,
) -> u64 {
    four_workers(
        worker,
        urls,
        cluster,
        prefix,
        strategy,
        ["1000", "64", "6"],
        mode,
    )
}

/// 4 `redis-worker` processes at once on one key, a 20-day window, with `[limit, tasks,
/// calls per task]` and the workers' `mode`; the total each says it admitted (or kept).
pub fn four_workers(
    worker: &str,
    urls: &[String],
    cluster: bool,
    prefix: &str,
    strategy: &str,
    [limit, tasks, calls]: [&str; 3],
    mode: Option<&str>,
) -> u64 {
    let window_ms = (20 * 24 * 3_600 * 1_000u64).to_string();
    let children: Vec<Child> = (0..4)
        .map(|_| {
            Command::new(worker)
                .args([
                    urls.join(",").as_str(),
                    if cluster { "1" } else { "0" },
                    prefix,
                    strategy,
                    limit,
                    window_ms.as_str(),
                    tasks,
                    calls,
                ])
                .args(mode)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start redis-worker")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("redis-worker ran");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            text.trim()
                .strip_prefix("allowed ")
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("redis-worker said {text:?}"))
        })
        .sum()
}

/// Script calls the server has run (`EVALSHA`, and `EVAL` after a `NOSCRIPT`), by its own
/// count (`INFO commandstats`).
/// Whether `key` is a prefix's reload horizon (`<prefix>:horizon`, ratelimit-core's
/// `store/redis/horizon.rs`), which a call with a quota or a window of its own raises beside
/// the states it writes.
pub fn is_horizon(key: &str) -> bool {
    key.ends_with(":horizon") && !key.contains('{')
}

/// The key of prefix `prefix`'s reload horizon (see [`is_horizon`]).
pub fn horizon_key(prefix: &str) -> String {
    format!("{prefix}:horizon")
}

/// Deletes prefix `prefix`'s reload horizon record on `server` (as an eviction would).
pub fn delete_horizon(server: &RedisServer, prefix: &str) {
    redis::cmd("DEL")
        .arg(horizon_key(prefix))
        .exec(&mut server.connection())
        .unwrap();
}

/// What `server` holds under prefix `prefix`'s reload horizon (`None`: no key).
pub fn horizon_record(server: &RedisServer, prefix: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(horizon_key(prefix))
        .query(&mut server.connection())
        .unwrap()
}

/// The composed store key of the one state under prefix `p` (KEYS: a test server holding no
/// other state under it; stamps, lease ledgers and the prefix's reload horizon left out).
pub fn state_key(c: &mut redis::Connection, p: &str) -> String {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{p}*")).query(c).unwrap();
    let states: Vec<&String> = keys
        .iter()
        .filter(|k| !k.ends_with(":stamp") && !k.contains(":lease") && !is_horizon(k))
        .collect();
    let [state] = &states[..] else {
        panic!("{keys:?}")
    };
    state.to_string()
}

pub fn script_calls(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .expect("INFO commandstats");
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}
